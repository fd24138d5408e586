"""Background tasks through the agent: dispatch, memory rewrites and until-idle streams."""

from __future__ import annotations

import asyncio
import json
import tracemalloc
import warnings
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from runstream import AbortController, Agent, ToolContext, tool
from runstream.agent.until_idle import RELAY_AHEAD, IdleDriver, IdleOptions, read_snapshot
from runstream.chunks import AnyChunk, chunk_from_wire, dumps
from runstream.errors import InvalidInputError
from runstream.memory import Memory, MemoryScope
from runstream.runtime import Runstream
from runstream.storage import InMemoryStorage, SqliteStorage, TaskFilter
from runstream.tasks import TaskNotFoundError, TaskStateError
from runstream.testing import ScriptedModel

USAGE = {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2}
MEMORY = {"thread": "t1", "resource": "u1"}


def call(*tool_calls: tuple[str, str, str]) -> list[dict[str, Any]]:
    return [
        {"type": "stream-start", "warnings": []},
        *(
            {"type": "tool-call", "toolCallId": cid, "toolName": name, "input": args}
            for cid, name, args in tool_calls
        ),
        {"type": "finish", "finishReason": "tool-calls", "usage": USAGE},
    ]


def say(text: str) -> list[dict[str, Any]]:
    return [
        {"type": "stream-start", "warnings": []},
        {"type": "text-start", "id": text[:8]},
        {"type": "text-delta", "id": text[:8], "delta": text},
        {"type": "text-end", "id": text[:8]},
        {"type": "finish", "finishReason": "stop", "usage": USAGE},
    ]


class Gate:
    """Lets a test decide when each background task finishes."""

    def __init__(self) -> None:
        self.events: dict[str, asyncio.Event] = {}
        self.started: dict[str, asyncio.Event] = {}

    def get(self, name: str) -> asyncio.Event:
        return self.events.setdefault(name, asyncio.Event())

    def started_event(self, name: str) -> asyncio.Event:
        return self.started.setdefault(name, asyncio.Event())


def research_tool(gate: Gate) -> Any:
    @tool(background=True)
    async def research(topic: str, ctx: ToolContext) -> dict[str, str]:
        """Research a topic (slow)."""
        gate.started_event(topic).set()
        await ctx.writer.write({"status": "halfway", "topic": topic})
        await gate.get(topic).wait()
        if topic == "boom":
            raise RuntimeError("research exploded")
        return {"topic": topic, "summary": f"{topic} is fast"}

    return research


def build(model: ScriptedModel, gate: Gate, **config: Any) -> tuple[Runstream, Agent]:
    agent = Agent("bg", instructions="Research.", model=model, tools=[research_tool(gate)], memory=Memory())
    runtime = Runstream(
        agents=[agent], storage=InMemoryStorage(), background_tasks={"enabled": True, **config}
    )
    return runtime, agent


async def collect(stream: AsyncIterator[AnyChunk], on_chunk: Any = None) -> list[AnyChunk]:
    chunks = []
    async with asyncio.timeout(10):
        async for chunk in stream:
            chunks.append(chunk)
            if on_chunk is not None:
                await on_chunk(chunk)
    return chunks


def types(chunks: list[AnyChunk]) -> list[str]:
    return [c.type for c in chunks]


async def release_on(gate: Gate, trigger: str, *topics: str) -> Any:
    async def on_chunk(chunk: AnyChunk) -> None:
        if chunk.type == trigger:
            for topic in topics:
                gate.get(topic).set()

    return on_chunk


async def test_until_idle_streams_the_task_and_a_continuation_turn() -> None:
    gate = Gate()
    model = ScriptedModel(
        calls=[call(("c1", "research", '{"topic":"sol"}')), say("Started."), say("Done: sol.")]
    )
    runtime, agent = build(model, gate)
    async with runtime:
        out = await agent.stream("Research sol", memory=MEMORY, until_idle=True)
        chunks = await collect(out.full_stream, await release_on(gate, "finish", "sol"))
        kinds = types(chunks)
        assert kinds.count("start") == 2 and kinds.count("finish") == 2
        first_finish = kinds.index("finish")
        assert kinds.index("background-task-started") < kinds.index("tool-result") < first_finish
        completed = kinds.index("background-task-completed")
        assert first_finish < completed < kinds.index("start", 1)
        assert chunks[completed].payload["result"] == {"topic": "sol", "summary": "sol is fast"}
        assert "background-task-output" in kinds
        placeholder = next(c for c in chunks if c.type == "tool-result").payload
        assert placeholder["result"].startswith("Background task started. Task ID: ")
        assert placeholder["providerMetadata"]["mastra"]["backgroundTask"]["status"] == "running"
        # The first turn's step-finish says a task was still running.
        assert next(c for c in chunks if c.type == "step-finish").payload["backgroundTaskPending"] is True
        # Aggregates describe the first turn.
        assert await out.text == "Started."
        # The continuation saw the real result (from memory), and a directive naming the call.
        prompt = model.recorded[2].prompt
        assert any("c1 (research)" in m["content"] for m in prompt if m["role"] == "system")
        results = [p for m in prompt if m["role"] == "tool" for p in m["content"]]
        assert results[0]["output"] == {"type": "json", "value": {"topic": "sol", "summary": "sol is fast"}}
        # The directive is not saved to memory; the continuation's text is.
        history = await agent.memory.load_prompt(agent.memory and _scope())  # type: ignore[union-attr]
        texts = [p.get("text") for m in history for p in m["content"] if isinstance(p, dict)]
        assert "Done: sol." in texts
        assert all("background tasks" not in (t or "") for t in texts)


def _scope() -> Any:
    from runstream.memory import MemoryScope

    return MemoryScope("t1", "u1")


async def test_two_tasks_finishing_apart_get_one_continuation() -> None:
    gate = Gate()
    model = ScriptedModel(
        calls=[
            call(("ca", "research", '{"topic":"a"}'), ("cb", "research", '{"topic":"b"}')),
            say("Started both."),
            say("Both done."),
        ]
    )
    runtime, agent = build(model, gate)

    async def on_chunk(chunk: AnyChunk) -> None:
        if chunk.type == "finish" and chunk.payload["messageId"] == out.message_id:
            gate.get("a").set()
        if chunk.type == "background-task-completed" and chunk.payload["toolCallId"] == "ca":
            gate.get("b").set()

    async with runtime:
        out = await agent.stream("Research a and b", memory=MEMORY, until_idle=True)
        kinds = types(await collect(out.full_stream, on_chunk))
    assert kinds.count("background-task-completed") == 2
    assert kinds.count("start") == 2  # one continuation for both
    assert model.call_count == 3


async def test_failed_task_is_written_into_memory_before_its_event() -> None:
    gate = Gate()
    model = ScriptedModel(
        calls=[call(("c1", "research", '{"topic":"boom"}')), say("Started."), say("It failed.")]
    )
    runtime, agent = build(model, gate)
    seen_in_memory: list[Any] = []

    async def on_chunk(chunk: AnyChunk) -> None:
        if chunk.type == "finish" and chunk.payload["messageId"] == out.message_id:
            gate.get("boom").set()
        if chunk.type == "background-task-failed":
            history = await agent.memory.load_prompt(_scope())  # type: ignore[union-attr]
            seen_in_memory.extend(p["output"] for m in history if m["role"] == "tool" for p in m["content"])

    async with runtime:
        out = await agent.stream("Research boom", memory=MEMORY, until_idle=True)
        chunks = await collect(out.full_stream, on_chunk)
    failed = next(c for c in chunks if c.type == "background-task-failed")
    assert failed.payload["error"]["message"] == "research exploded"
    # In process the event keeps the exception's text (Mastra's shape); memory does not (issue 25).
    assert seen_in_memory == [{"type": "error-text", "value": "Background task failed: Tool research failed"}]
    assert types(chunks).count("start") == 2


async def test_idle_timeout_closes_the_stream_but_not_the_task() -> None:
    gate = Gate()
    model = ScriptedModel(calls=[call(("c1", "research", '{"topic":"slow"}')), say("Started.")])
    runtime, agent = build(model, gate)
    async with runtime:
        out = await agent.stream("Research slow", memory=MEMORY, until_idle={"max_idle_ms": 50})
        chunks = await collect(out.full_stream)
        assert types(chunks).count("finish") == 1 and types(chunks).count("start") == 1
        assert "background-task-completed" not in types(chunks)
        page = await runtime.task_manager.list_tasks(TaskFilter(tool_call_id="c1"))  # type: ignore[union-attr]
        assert page.items[0].status == "running"
        gate.get("slow").set()
        final = await runtime.task_manager.wait_for(page.items[0].id)  # type: ignore[union-attr]
        assert final.status == "completed"


async def test_progress_snapshots_while_waiting_between_turns() -> None:
    gate = Gate()
    model = ScriptedModel(calls=[call(("c1", "research", '{"topic":"p"}')), say("Started."), say("Done.")])
    runtime, agent = build(model, gate, progressIntervalMs=20)

    snapshots = 0

    async def on_chunk(chunk: AnyChunk) -> None:
        nonlocal snapshots
        if chunk.type == "background-task-progress":
            snapshots += 1
            if snapshots == 2:
                gate.get("p").set()

    async with runtime:
        out = await agent.stream("Research p", memory=MEMORY, until_idle=True)
        chunks = await collect(out.full_stream, on_chunk)
    progress = [c for c in chunks if c.type == "background-task-progress"]
    assert len(progress) >= 2
    assert 0 < progress[0].payload["elapsedMs"] <= progress[1].payload["elapsedMs"]
    task_id = next(c for c in chunks if c.type == "background-task-started").payload["taskId"]
    assert progress[0].payload["taskIds"] == [task_id] and progress[0].payload["runningCount"] == 1
    assert types(chunks).count("start") == 2


async def test_abort_between_turns_stops_pending_continuations() -> None:
    gate = Gate()
    model = ScriptedModel(calls=[call(("c1", "research", '{"topic":"x"}')), say("Started."), say("Never.")])
    runtime, agent = build(model, gate)
    controller = AbortController()

    async def on_chunk(chunk: AnyChunk) -> None:
        if chunk.type == "finish":
            controller.abort("user left")
            gate.get("x").set()

    async with runtime:
        out = await agent.stream("Research x", memory=MEMORY, until_idle=True, abort_signal=controller.signal)
        chunks = await collect(out.full_stream, on_chunk)
    assert types(chunks).count("start") == 1
    assert model.call_count == 2


async def test_a_newer_until_idle_stream_on_the_thread_replaces_the_older() -> None:
    gate = Gate()
    model = ScriptedModel(
        calls=[call(("c1", "research", '{"topic":"one"}')), say("Started."), say("Hello again."), say("x")]
    )
    runtime, agent = build(model, gate)
    async with runtime:
        older = await agent.stream("Research one", memory=MEMORY, until_idle=True)
        older_chunks: list[AnyChunk] = []

        async def read_older() -> None:
            async for chunk in older.full_stream:
                older_chunks.append(chunk)

        reader = asyncio.create_task(read_older())
        await gate.started_event("one").wait()
        newer = await agent.stream("Something else", memory=MEMORY, until_idle=True)
        async with asyncio.timeout(5):
            await reader  # the older stream closes once superseded
        assert types(older_chunks).count("start") == 1
        gate.get("one").set()
        newer_chunks = await collect(newer.full_stream)
    assert "background-task-completed" in types(newer_chunks)


async def test_until_idle_without_memory_is_a_plain_stream() -> None:
    gate = Gate()
    model = ScriptedModel(calls=[call(("c1", "research", '{"topic":"m"}')), say("Started."), say("Never.")])
    runtime, agent = build(model, gate)
    async with runtime:
        out = await agent.stream("Research m", until_idle=True)
        chunks = await collect(out.full_stream)
        assert types(chunks)[-1] == "finish" and "background-task-completed" not in types(chunks)
        gate.get("m").set()
    assert model.call_count == 2


async def test_stream_until_idle_is_deprecated_but_works() -> None:
    gate = Gate()
    model = ScriptedModel(calls=[call(("c1", "research", '{"topic":"d"}')), say("Started."), say("Done.")])
    runtime, agent = build(model, gate)
    async with runtime:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = await agent.stream_until_idle("Research d", memory=MEMORY)
        assert any(issubclass(w.category, DeprecationWarning) for w in caught)
        chunks = await collect(out.full_stream, await release_on(gate, "finish", "d"))
    assert types(chunks).count("start") == 2


async def test_streams_only_see_their_own_threads_tasks() -> None:
    gate = Gate()
    model = ScriptedModel(calls=[call(("c1", "research", '{"topic":"mine"}')), say("Started."), say("Done.")])
    other_model = ScriptedModel(calls=[call(("c9", "research", '{"topic":"theirs"}')), say("Started.")])
    runtime, agent = build(model, gate)
    other = Agent("bg", instructions="x", model=other_model, tools=agent.tools, memory=Memory())
    assert agent.services is not None
    other.bind(agent.services)  # the same runtime's services, without registering it
    async with runtime:
        theirs = await other.stream("Research theirs", memory={"thread": "t2", "resource": "u2"})
        await theirs.consume()

        async def on_chunk(chunk: AnyChunk) -> None:
            if chunk.type == "finish":
                gate.get("theirs").set()
                gate.get("mine").set()

        out = await agent.stream("Research mine", memory=MEMORY, until_idle=True)
        chunks = await collect(out.full_stream, on_chunk)
    task_events = [c for c in chunks if c.type.startswith("background-task-")]
    assert task_events and all(c.payload["toolCallId"] == "c1" for c in task_events)


async def test_malformed_background_override_is_a_tool_error() -> None:
    gate = Gate()
    model = ScriptedModel(
        calls=[
            call(("c1", "research", '{"topic":"q","_background":{"disposition":"sideways"}}')),
            say("Oops."),
        ]
    )
    runtime, agent = build(model, gate)
    async with runtime:
        out = await agent.stream("Research q")
        chunks = await collect(out.full_stream)
    error = next(c for c in chunks if c.type == "tool-error")
    assert "disposition" in str(error.payload["error"])
    assert "background-task-started" not in types(chunks)


async def test_foreground_override_runs_inline_without_the_argument() -> None:
    gate = Gate()
    gate.get("inline").set()
    model = ScriptedModel(
        calls=[call(("c1", "research", '{"topic":"inline","_background":{"enabled":false}}')), say("Done.")]
    )
    runtime, agent = build(model, gate)
    async with runtime:
        chunks = await collect((await agent.stream("Research inline")).full_stream)
    result = next(c for c in chunks if c.type == "tool-result").payload
    assert result["result"] == {"topic": "inline", "summary": "inline is fast"}
    assert result["args"] == {"topic": "inline"}
    assert not any(c.type.startswith("background-task-") for c in chunks)


async def test_bad_task_operations_raise_clear_errors() -> None:
    gate = Gate()
    gate.get("done").set()
    model = ScriptedModel(calls=[call(("c1", "research", '{"topic":"done"}')), say("Started.")])
    runtime, agent = build(model, gate)
    async with runtime:
        await (await agent.stream("Research done")).consume()
        manager = runtime.task_manager
        assert manager is not None
        task = (await manager.list_tasks(TaskFilter(tool_call_id="c1"))).items[0]
        task = await manager.wait_for(task.id)
        with pytest.raises(TaskNotFoundError, match="Task not found: nope"):
            await manager.cancel("nope")
        with pytest.raises(TaskStateError, match="Cannot resume task in status 'completed'"):
            await manager.resume(task.id, {"x": 1})


async def test_durable_agent_waits_for_its_task_in_the_loop() -> None:
    gate = Gate()
    model = ScriptedModel(
        calls=[call(("c1", "research", '{"topic":"dur"}')), say("Research done: dur is fast.")]
    )
    agent = Agent("durable", model=model, tools=[research_tool(gate)], memory=Memory(), durable=True)
    runtime = Runstream(agents=[agent], background_tasks={"enabled": True, "progressIntervalMs": 20})

    async def on_chunk(chunk: AnyChunk) -> None:
        if chunk.type == "background-task-progress" and chunk.payload["elapsedMs"] >= 20:
            gate.get("dur").set()

    async with runtime:
        chunks = await collect((await agent.stream("Research dur", memory=MEMORY)).full_stream, on_chunk)
    kinds = types(chunks)
    assert kinds.count("start") == 1 and kinds.count("finish") == 1
    assert kinds.count("tool-result") == 1  # no placeholder result, only the real one
    assert kinds.index("step-finish") < kinds.index("background-task-progress") < kinds.index("tool-result")
    assert next(c for c in chunks if c.type == "tool-result").payload["result"] == {
        "topic": "dur",
        "summary": "dur is fast",
    }
    # The answer step saw the real result.
    results = [p for m in model.recorded[1].prompt if m["role"] == "tool" for p in m["content"]]
    assert results[0]["output"]["value"] == {"topic": "dur", "summary": "dur is fast"}


async def test_a_reader_that_stops_stops_continuations_but_not_the_task() -> None:
    gate = Gate()
    model = ScriptedModel(calls=[call(("c1", "research", '{"topic":"r"}')), say("Started."), say("Never.")])
    runtime, agent = build(model, gate)
    async with runtime:
        out = await agent.stream("Research r", memory=MEMORY, until_idle=True)
        async for chunk in out.full_stream:
            if chunk.type == "background-task-started":
                break
        manager = runtime.task_manager
        assert manager is not None
        task = (await manager.list_tasks(TaskFilter(tool_call_id="c1"))).items[0]
        gate.get("r").set()
        assert (await manager.wait_for(task.id)).status == "completed"
        for _ in range(50):  # give a (wrongly) started continuation every chance to run
            await asyncio.sleep(0)
    assert out.state.status == "success"  # the first turn still ran to its end
    assert model.call_count == 2  # but no continuation turn started for a reader that left


def deploy_tool() -> Any:
    @tool(background=True)
    async def deploy(env: str, ctx: ToolContext) -> dict[str, Any]:
        """Deploy; asks for approval first, and a second time when told "again"."""
        if ctx.resume_data is None or ctx.resume_data == "again":
            await ctx.suspend({"question": f"Deploy to {env}?"})
        return {"env": env, "deployed": ctx.resume_data}

    return deploy


def build_deploy(model: ScriptedModel) -> tuple[Runstream, Agent]:
    agent = Agent("ops", model=model, tools=[deploy_tool()], memory=Memory())
    return Runstream(agents=[agent], background_tasks={"enabled": True}), agent


def resume_after(runtime: Runstream, trigger: str, *answers: Any) -> Any:
    """Resumes the suspended task with the next answer each time ``trigger`` follows a suspension."""
    pending = list(answers)
    suspended: list[str] = []

    async def on_chunk(chunk: AnyChunk) -> None:
        if chunk.type == "background-task-suspended":
            suspended.append(chunk.payload["taskId"])
        elif chunk.type == trigger and suspended and pending:
            assert runtime.task_manager is not None
            await runtime.task_manager.resume(suspended.pop(), pending.pop(0))

    return on_chunk


async def test_a_resume_inside_the_window_is_followed_in_the_same_stream() -> None:
    model = ScriptedModel(
        calls=[
            call(("c1", "deploy", '{"env":"prod"}')),
            say("Deploying."),
            say("Waiting for approval."),
            say("Waiting again."),
            say("Deployed."),
        ]
    )
    runtime, agent = build_deploy(model)
    async with runtime:
        out = await agent.stream("Deploy", memory=MEMORY, until_idle={"resume_window_ms": 5000})
        # Resumed only once the suspension's continuation turn has finished: the stream would
        # have closed there without the window. The first resume makes the tool suspend again.
        chunks = await collect(out.full_stream, resume_after(runtime, "finish", "again", True))
    kinds = types(chunks)
    assert kinds.count("background-task-suspended") == 2 and kinds.count("background-task-resumed") == 2
    assert kinds.count("start") == 4  # first turn, a continuation per suspension, one for the result
    completed = next(c for c in chunks if c.type == "background-task-completed")
    assert completed.payload["result"] == {"env": "prod", "deployed": True}
    assert kinds.index("background-task-completed") < len(kinds) - 1 - kinds[::-1].index("start")
    directives = [m["content"] for m in model.recorded[4].prompt if m["role"] == "system"]
    assert any("c1 (deploy)" in d and "Completed" in d for d in directives)


async def test_without_a_window_the_stream_closes_after_the_suspension_turn() -> None:
    model = ScriptedModel(
        calls=[call(("c1", "deploy", '{"env":"prod"}')), say("Deploying."), say("Waiting for approval.")]
    )
    runtime, agent = build_deploy(model)
    async with runtime:
        out = await agent.stream("Deploy", memory=MEMORY, until_idle={"resume_window_ms": 0})
        chunks = await collect(out.full_stream)
        kinds = types(chunks)
        assert kinds.count("start") == 2 and kinds[-1] == "finish"
        assert "background-task-resumed" not in kinds
        manager = runtime.task_manager
        assert manager is not None
        task_id = next(c for c in chunks if c.type == "background-task-suspended").payload["taskId"]
        await manager.resume(task_id, True)
        assert (await manager.wait_for(task_id)).status == "completed"
        history = await agent.memory.load_prompt(_scope())  # type: ignore[union-attr]
    results = [p["output"] for m in history if m["role"] == "tool" for p in m["content"]]
    assert results == [{"type": "json", "value": {"env": "prod", "deployed": True}}]
    assert model.call_count == 3  # the late result reaches memory, not a closed stream


@pytest.mark.parametrize(
    ("until_idle", "message"),
    [
        ({"resume_window_ms": -1}, "resume_window_ms must be a finite number >= 0"),
        ({"resume_window_ms": float("inf")}, "resume_window_ms must be a finite number >= 0"),
        ({"max_idle_ms": 0}, "max_idle_ms must be a positive finite number"),
        ({"max_idle_ms": float("nan")}, "max_idle_ms must be a positive finite number"),
        ({"max_continuations": -1}, "max_continuations must be an integer >= 0"),
        ({"max_idle": 10}, "until_idle: unknown option 'max_idle'; did you mean 'max_idle_ms'"),
    ],
)
async def test_bad_until_idle_options_are_clear_errors(until_idle: dict[str, Any], message: str) -> None:
    runtime, agent = build_deploy(ScriptedModel(calls=[say("Hi.")]))
    async with runtime:
        with pytest.raises(ValueError, match=message):
            await agent.stream("Hi", memory=MEMORY, until_idle=until_idle)
        assert model_calls(agent) == 0
        assert await agent.memory.load_prompt(_scope()) == []  # type: ignore[union-attr]


def model_calls(agent: Agent) -> int:
    assert isinstance(agent.model, ScriptedModel)
    return agent.model.call_count


async def test_a_task_never_finishes_before_its_tool_result() -> None:
    """A background call that completes while a slow foreground call of the same step still runs:
    its completion is held back until the step's tool results are out."""
    gate = Gate()
    gate.get("quick").set()
    slow_done = asyncio.Event()

    @tool
    async def lookup(q: str) -> dict[str, str]:
        """A slow foreground lookup."""
        await slow_done.wait()
        return {"q": q}

    model = ScriptedModel(
        calls=[
            call(("c-bg", "research", '{"topic":"quick"}'), ("c-fg", "lookup", '{"q":"x"}')),
            say("Both started."),
            say("Research done."),
        ]
    )
    agent = Agent("bg", model=model, tools=[research_tool(gate), lookup], memory=Memory())
    runtime = Runstream(agents=[agent], background_tasks={"enabled": True})

    async def on_chunk(chunk: AnyChunk) -> None:
        if chunk.type == "background-task-running":
            assert runtime.task_manager is not None
            task_id = chunk.payload["taskId"]
            # Only let the foreground call finish once the task has really completed.
            assert (await runtime.task_manager.wait_for(task_id)).status == "completed"
            slow_done.set()

    async with runtime:
        out = await agent.stream("Go", memory=MEMORY, until_idle=True)
        kinds = [
            (c.type, c.payload.get("toolCallId")) if isinstance(c.payload, dict) else (c.type, None)
            for c in await collect(out.full_stream, on_chunk)
        ]
    result = kinds.index(("tool-result", "c-bg"))
    assert result < kinds.index(("background-task-completed", "c-bg")) < kinds.index(("step-finish", None))
    assert [k for k, _ in kinds].count("start") == 2


async def test_an_abort_stops_waiting_for_an_awaited_task_but_not_the_task() -> None:
    gate = Gate()
    model = ScriptedModel(
        calls=[
            call(("c1", "research", '{"topic":"slow","_background":{"disposition":"awaited"}}')),
            say("Never."),
        ]
    )
    runtime, agent = build(model, gate)
    controller = AbortController()

    async def on_chunk(chunk: AnyChunk) -> None:
        if chunk.type == "background-task-started":
            controller.abort("user left")

    async with runtime:
        out = await agent.stream("Research slow", memory=MEMORY, abort_signal=controller.signal)
        kinds = types(await collect(out.full_stream, on_chunk))
        assert kinds[-2:] == ["abort", "finish"] and model.call_count == 1
        manager = runtime.task_manager
        assert manager is not None
        task = (await manager.list_tasks(TaskFilter(tool_call_id="c1"))).items[0]
        assert task.status == "running"  # the task is the user's; only the run stopped waiting
        gate.get("slow").set()
        assert (await manager.wait_for(task.id)).status == "completed"


async def test_an_abort_stops_a_durable_agent_waiting_in_its_loop() -> None:
    gate = Gate()
    model = ScriptedModel(calls=[call(("c1", "research", '{"topic":"dur"}')), say("Never.")])
    agent = Agent("durable", model=model, tools=[research_tool(gate)], memory=Memory(), durable=True)
    runtime = Runstream(agents=[agent], background_tasks={"enabled": True, "progressIntervalMs": 20})
    controller = AbortController()

    async def on_chunk(chunk: AnyChunk) -> None:
        if chunk.type == "background-task-progress":
            controller.abort("user left")

    async with runtime:
        out = await agent.stream("Research dur", memory=MEMORY, abort_signal=controller.signal)
        kinds = types(await collect(out.full_stream, on_chunk))
        assert kinds[-2:] == ["abort", "finish"] and model.call_count == 1
        assert "tool-result" not in kinds[kinds.index("background-task-progress") :]
        gate.get("dur").set()  # the task itself goes on
        manager = runtime.task_manager
        assert manager is not None
        task = (await manager.list_tasks(TaskFilter(tool_call_id="c1"))).items[0]
        assert (await manager.wait_for(task.id)).status == "completed"


async def test_continuation_turns_are_bounded() -> None:
    """A model that starts a background task in every turn cannot keep the stream open forever:
    after ``max_continuations`` continuation turns it ends with an error chunk saying why, and
    the last task's result is still in memory."""
    gate = Gate()
    gate.get("loop").set()  # every task finishes at once
    turns = [[call((f"c{i}", "research", '{"topic":"loop"}')), say(f"Turn {i}.")] for i in range(5)]
    model = ScriptedModel(calls=[step for turn in turns for step in turn])
    runtime, agent = build(model, gate)
    async with runtime:
        out = await agent.stream("Loop", memory=MEMORY, until_idle={"max_continuations": 2})
        chunks = await collect(out.full_stream)
        kinds = types(chunks)
        assert kinds.count("start") == 3  # the first turn and two continuations
        assert kinds[-1] == "error"
        assert "2 continuation turn(s)" in str(chunks[-1].to_json())
        assert model_calls(agent) == 6
        tasks = await runtime.task_manager.list_tasks(TaskFilter(thread_id="t1"))  # type: ignore[union-attr]
        assert sorted(t.status for t in tasks.items) == ["completed"] * 3
        history = await agent.memory.load_prompt(_scope())  # type: ignore[union-attr]
        results = [p["output"]["value"] for m in history if m["role"] == "tool" for p in m["content"]]
        assert results[-1] == {"topic": "loop", "summary": "loop is fast"}


async def test_a_task_resumed_by_a_new_process_writes_its_result_into_memory(tmp_path: Path) -> None:
    """The process that enqueued the task is gone (its request with it): the manager that
    settles the task writes the outcome into the thread itself (``Memory.apply_task_outcome``,
    as every manager does), so the next turn reads the answer, not the suspension."""

    @tool(background=True)
    async def ask(question: str, ctx: ToolContext) -> dict[str, Any]:
        """Ask the user."""
        if ctx.resume_data is None:
            await ctx.suspend({"question": question})
        return {"answer": ctx.resume_data}

    db = tmp_path / "app.db"
    first = Agent("a", model=ScriptedModel(calls=[call(("c1", "ask", '{"question":"name?"}')), say("Asking.")]),
                  tools=[ask], memory=Memory())  # fmt: skip
    async with Runstream(agents=[first], storage=SqliteStorage(db), background_tasks=True) as runtime:
        out = await first.stream("Ask", memory=MEMORY)
        async for _ in out.full_stream:
            pass
        assert runtime.task_manager is not None
        (task,) = (await runtime.task_manager.list_tasks()).items
        assert (await runtime.task_manager.wait_for(task.id)).status == "suspended"
    second = Agent("a", model=ScriptedModel(calls=[say("unused")]), tools=[ask], memory=Memory())
    async with Runstream(agents=[second], storage=SqliteStorage(db), background_tasks=True) as runtime:
        assert runtime.task_manager is not None
        await runtime.task_manager.resume(task.id, {"name": "Ada"})
        done = await runtime.task_manager.wait_for(task.id)
        assert done.status == "completed"
        prompt = await Memory(storage=runtime.storage).load_prompt(MemoryScope("t1", "u1"))
    outputs = [part["output"] for m in prompt if m["role"] == "tool" for part in m["content"]]
    assert outputs == [{"type": "json", "value": {"answer": {"name": "Ada"}}}]


async def test_a_result_landing_in_a_live_run_leaves_streamed_payloads_as_they_were() -> None:
    """A task that ends while its run is still live writes its result into the run's messages
    (copy on write): the step-finish streamed before keeps its placeholder."""
    gate = Gate()
    model = ScriptedModel(calls=[call(("c1", "research", '{"topic":"sol"}')), say("Started.")])
    runtime, agent = build(model, gate)
    async with runtime:
        manager = runtime.task_manager
        assert manager is not None
        out = await agent.stream("Research sol", memory=MEMORY)
        before: dict[str, Any] = {}

        async def land_result_after_step_finish(chunk: AnyChunk) -> None:
            if chunk.type == "step-finish" and not before:
                before["chunk"], before["wire"] = chunk, chunk.to_json()
                gate.get("sol").set()
                page = await manager.list_tasks(TaskFilter(tool_call_id="c1"))
                assert (await manager.wait_for(page.items[0].id)).status == "completed"

        await collect(out.full_stream, land_result_after_step_finish)
        tool_parts = [p for m in out.state.messages if m["role"] == "tool" for p in m["content"]]
        assert tool_parts[0]["output"] == {
            "type": "json",
            "value": {"topic": "sol", "summary": "sol is fast"},
        }
        assert before["chunk"].to_json() == before["wire"]
        assert "Background task started" in before["wire"]


async def test_a_long_continuation_turn_is_held_once() -> None:
    """A turn's chunks are kept once, by the until-idle stream: the turn is relayed (it keeps
    none itself) and read at most a few dozen chunks ahead of the reader, so reading a long
    continuation costs what reading the same turn as a plain stream does. (Kept twice, by the
    turn and by the stream, with the turn run ahead in between: 2.4 times as much.)"""
    tokens = [f"token-{i:05d}-of-a-long-continuation " for i in range(3000)]
    long_turn = [
        {"type": "stream-start", "warnings": []},
        {"type": "text-start", "id": "long"},
        *({"type": "text-delta", "id": "long", "delta": token} for token in tokens),
        {"type": "text-end", "id": "long"},
        {"type": "finish", "finishReason": "stop", "usage": USAGE},
    ]

    async def peak_bytes(calls: list[list[dict[str, Any]]], **options: Any) -> tuple[int, str]:
        gate = Gate()
        gate.get("r").set()
        runtime, agent = build(ScriptedModel(calls=calls), gate)
        async with runtime:
            tracemalloc.start()
            try:
                out = await agent.stream("Research r", memory=MEMORY, **options)
                text = "".join([c.payload["text"] async for c in out.full_stream if c.type == "text-delta"])
                return tracemalloc.get_traced_memory()[1], text
            finally:
                tracemalloc.stop()

    plain, plain_text = await peak_bytes([long_turn])
    idle, idle_text = await peak_bytes(
        [call(("c1", "research", '{"topic":"r"}')), say("Started."), long_turn], until_idle=True
    )
    assert plain_text == "".join(tokens)
    assert idle_text == "Started." + "".join(tokens)
    assert idle < 1.5 * plain, (idle, plain)


async def test_a_driver_snapshot_goes_through_json_and_a_malformed_one_is_refused() -> None:
    """A durable flow stores :meth:`IdleDriver.snapshot` as JSON and a later attempt restores
    it (``read_snapshot`` checks it): the restored driver's snapshot is the stored one."""
    runtime, _ = build(ScriptedModel(calls=[say("Hi.")]), Gate())
    completed = chunk_from_wire(
        {
            "type": "background-task-completed",
            "runId": "run-1",
            "payload": {
                "taskId": "task-2",
                "toolName": "research",
                "toolCallId": "c2",
                "agentId": "bg",
                "runId": "run-1",
                "completedAt": "2026-12-06T16:00:00.000Z",
                "result": "done",
            },
        }
    )

    async def no_turn(_: list[Any]) -> Any:
        raise AssertionError("no continuation here")

    async with runtime:
        manager = runtime.task_manager
        assert manager is not None

        def driver() -> IdleDriver:
            subscription = manager.subscribe(thread_id="t1", resource_id="u1", include_existing=False)
            return IdleDriver(
                no_turn, subscription, options=IdleOptions(), controller=AbortController(), running={"task-1"}
            )

        first, second = driver(), driver()
        try:
            first.ledger.task_event(completed)
            stored = json.loads(dumps(first.snapshot()))
            second.restore(read_snapshot(stored))
            again = json.loads(dumps(second.snapshot()))
            assert again["ledger"] == stored["ledger"]
            assert again["ledger"]["queued"][0]["payload"]["taskId"] == "task-2"
            assert again["ledger"]["processed"] == [["task-2", "background-task-completed"]]
            assert {k: v for k, v in again.items() if k != "ledger"} == pytest.approx(
                {k: v for k, v in stored.items() if k != "ledger"}
            )
            with pytest.raises(InvalidInputError, match="not an until-idle driver snapshot"):
                read_snapshot({**stored, "turnChunks": "many"})
        finally:
            await first.close()
            await second.close()


async def test_a_turn_runs_a_bounded_way_ahead_and_a_closed_stream_aborts_it() -> None:
    """A turn's chunks wait for the reader at most ``RELAY_AHEAD`` deep (a fast model's long
    turn is not held a second time in flight); a stream closed while the turn waits there
    ends the turn as a reader that went away does: aborted, its aggregates answered."""
    deltas = [{"type": "text-delta", "id": "long", "delta": f"t{i} "} for i in range(500)]
    long_turn = [{"type": "text-start", "id": "long"}, *deltas, {"type": "text-end", "id": "long"}]
    runtime, agent = build(ScriptedModel(calls=[[*long_turn, *say("")[-1:]]]), Gate())

    async def no_turn(_: list[Any]) -> Any:
        raise AssertionError("no continuation here")

    async with runtime:
        manager = runtime.task_manager
        assert manager is not None
        subscription = manager.subscribe(thread_id="t1", resource_id="u1", include_existing=False)
        controller = AbortController()
        driver = IdleDriver(
            no_turn, subscription, options=IdleOptions(), controller=controller, running=set()
        )
        out = await agent.stream("Say a lot", memory=MEMORY)
        controller.signal.add_listener(out.abort)
        driver.start(out)
        async with asyncio.timeout(5):
            while len(driver.inbox.items) < RELAY_AHEAD:  # the turn's pump fills the inbox ...
                await driver.inbox.wait(None)  # (woken by each item put)
            for _ in range(20):  # ... and goes no further while nobody reads
                await asyncio.sleep(0)
            assert len(driver.inbox.items) == RELAY_AHEAD
            assert out.status == "running"
            await driver.close()
            assert out.status == "aborted"
            assert len(await out.text) < len("".join(d["delta"] for d in deltas))
