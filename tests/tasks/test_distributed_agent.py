"""An agent across processes: A (this process) streams with a producer manager, B (a real
``agent_worker.py`` subprocess) runs the background tools; memory is shared in PostgreSQL and
events and control travel over Redis."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from agent_worker import build_agent, gate_key
from redis.asyncio import Redis
from scaleout_worker import REDIS_URL, ScriptProcess, require_redis

from runstream.agent import Agent
from runstream.chunks import AnyChunk
from runstream.memory import Memory, MemoryScope
from runstream.models.base import PromptMessage
from runstream.runtime import Runstream
from runstream.storage import PostgresStorage
from runstream.tasks.bus import TaskEventFilter
from runstream.tasks.config import BackgroundTaskConfig
from runstream.tasks.distributed import DistributedTaskManager, ScaleOutConfig
from runstream.tasks.redis_bus import RedisEventBus
from runstream.testing import Delay, ScriptedModel, Text, ToolCall
from tests.conftest import POSTGRES_URL
from tests.storage.postgres_testkit import drop_schema, fresh_schema, require_postgres, unreachable_reason

AGENT_WORKER = Path(__file__).with_name("agent_worker.py")
MEMORY = {"thread": "t1", "resource": "u1"}
SCOPE = MemoryScope("t1", "u1")
USAGE = {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2}
STREAM_TIMEOUT_S = 20

OnChunk = Callable[[AnyChunk], Awaitable[None]]


def call(tool_call_id: str, name: str, args: str) -> list[dict[str, Any]]:
    return [
        {"type": "stream-start", "warnings": []},
        {"type": "tool-call", "toolCallId": tool_call_id, "toolName": name, "input": args},
        {"type": "finish", "finishReason": "tool-calls", "usage": USAGE},
    ]


def say(text: str) -> list[dict[str, Any]]:
    return [
        {"type": "stream-start", "warnings": []},
        {"type": "text-start", "id": "t"},
        {"type": "text-delta", "id": "t", "delta": text},
        {"type": "text-end", "id": "t"},
        {"type": "finish", "finishReason": "stop", "usage": USAGE},
    ]


async def never_opened(name: str) -> None:
    raise AssertionError("process A runs no tool")


@dataclass
class Cluster:
    schema: str
    prefix: str
    worker: ScriptProcess
    gates: Redis
    memory: Memory

    def api(self, model: ScriptedModel) -> tuple[Runstream, Agent, DistributedTaskManager]:
        """Process A: the agent, on a producer manager (it runs no tool)."""
        storage = PostgresStorage(POSTGRES_URL, schema=self.schema)
        manager = DistributedTaskManager(
            storage,
            BackgroundTaskConfig(),
            redis_url=REDIS_URL,
            worker=False,
            channel_prefix=self.prefix,
            scale_out=ScaleOutConfig(recheck_interval_ms=1000, control_timeout_ms=10_000),
        )
        agent = build_agent(model, never_opened)
        return Runstream(agents=[agent], storage=storage, task_manager=manager), agent, manager

    async def open_gate(self, name: str) -> None:
        await self.gates.rpush(gate_key(self.prefix, name), "go")  # type: ignore[misc]

    async def research_sol_until_idle(self, model: ScriptedModel) -> list[AnyChunk]:
        """An until-idle stream in A whose task B runs once A's first turn has finished."""
        runtime, agent, _ = self.api(model)

        async def release_after_first_turn(chunk: AnyChunk) -> None:
            if chunk.type == "finish":
                await self.open_gate("sol")

        async with runtime:
            out = await agent.stream("Research sol", memory=MEMORY, until_idle=True)
            return await collect(out.full_stream, release_after_first_turn)

    async def tool_results(self) -> list[Any]:
        history = await self.memory.load_prompt(SCOPE)
        return [part["output"] for m in history if m["role"] == "tool" for part in m["content"]]


@pytest.fixture(scope="module")
def postgres_problem() -> str | None:
    return unreachable_reason()


@pytest.fixture
async def cluster(postgres_problem: str | None, tmp_path: Path) -> AsyncIterator[Cluster]:
    require_postgres(postgres_problem)
    require_redis()
    schema, prefix = fresh_schema(), f"agent-{uuid.uuid4().hex[:12]}"
    storage = PostgresStorage(POSTGRES_URL, schema=schema)
    await storage.init()  # the schema exists before B starts
    gates = Redis.from_url(REDIS_URL)
    worker = await ScriptProcess.start(tmp_path, POSTGRES_URL, schema, prefix, script=AGENT_WORKER)
    try:
        yield Cluster(schema, prefix, worker, gates, Memory(storage=storage))
    finally:
        await worker.stop()
        await gates.aclose()
        await storage.close()
        await drop_schema(schema)


async def collect(stream: AsyncIterator[AnyChunk], on_chunk: OnChunk | None = None) -> list[AnyChunk]:
    chunks = []
    async with asyncio.timeout(STREAM_TIMEOUT_S):
        async for chunk in stream:
            chunks.append(chunk)
            if on_chunk is not None:
                await on_chunk(chunk)
    return chunks


def kinds(chunks: list[AnyChunk]) -> list[str]:
    return [c.type for c in chunks]


def tool_outputs(prompt: list[PromptMessage]) -> list[Any]:
    return [part["output"] for m in prompt if m["role"] == "tool" for part in m["content"]]


async def test_an_until_idle_stream_follows_a_task_another_process_runs(cluster: Cluster) -> None:
    model = ScriptedModel(calls=[call("c1", "research", '{"topic":"sol"}'), say("Started."), say("Done.")])
    chunks = await cluster.research_sol_until_idle(model)
    types = kinds(chunks)
    assert types.count("start") == 2 and types[-1] == "finish"
    assert types.index("background-task-started") < types.index("finish")
    assert types.index("finish") < types.index("background-task-completed") < types.index("start", 1)
    assert "background-task-running" in types  # B's event, over Redis
    first_step = next(c for c in chunks if c.type == "step-finish")
    assert first_step.payload["backgroundTaskPending"] is True  # A knows B is still on it
    completed = next(c for c in chunks if c.type == "background-task-completed")
    result = {"topic": "sol", "summary": "sol is fast"}
    assert completed.payload["result"] == result
    started = await cluster.worker.expect(lambda line: line["event"] == "started")
    assert started["topic"] == "sol"
    # The continuation turn saw the real result, read back from the shared memory.
    assert tool_outputs(model.recorded[2].prompt) == [{"type": "json", "value": result}]
    assert await cluster.tool_results() == [{"type": "json", "value": result}]


async def test_whoever_sees_the_completion_finds_the_result_in_memory(cluster: Cluster) -> None:
    """A third process (a bare Redis subscriber) and A's own subscribers read memory the moment
    they see ``background-task-completed``: B wrote the result before publishing it."""
    model = ScriptedModel(calls=[call("c1", "research", '{"topic":"sol"}'), say("Started.")])
    runtime, agent, manager = cluster.api(model)
    elsewhere = RedisEventBus(REDIS_URL, channel_prefix=cluster.prefix)
    async with runtime:
        await collect((await agent.stream("Research sol", memory=MEMORY)).full_stream)
        placeholder = await cluster.tool_results()
        assert placeholder[0]["value"].startswith("Background task started.")
        remote_events = elsewhere.subscribe(TaskEventFilter(thread_id="t1"))
        assert await elsewhere.connect()
        local_events = manager.subscribe(thread_id="t1")
        await cluster.open_gate("sol")
        seen: list[list[Any]] = []
        async with asyncio.timeout(STREAM_TIMEOUT_S):
            async for event in remote_events:
                if event.chunk.type == "background-task-completed":
                    seen.append(await cluster.tool_results())
                    break
            async for chunk in local_events:
                if chunk.type == "background-task-completed":
                    seen.append(await cluster.tool_results())
                    break
        await local_events.close()
    await elsewhere.close()
    result = {"type": "json", "value": {"topic": "sol", "summary": "sol is fast"}}
    assert seen == [[result], [result]]


async def test_whoever_sees_the_suspension_finds_it_in_memory(cluster: Cluster) -> None:
    model = ScriptedModel(calls=[call("c1", "ask", '{"question":"name?"}'), say("Asking.")])
    runtime, agent, _ = cluster.api(model)
    elsewhere = RedisEventBus(REDIS_URL, channel_prefix=cluster.prefix)
    async with runtime:
        await collect((await agent.stream("Ask", memory=MEMORY)).full_stream)  # saved, then:
        events = elsewhere.subscribe(TaskEventFilter(thread_id="t1"))
        assert await elsewhere.connect()
        await cluster.open_gate("name?")
        async with asyncio.timeout(STREAM_TIMEOUT_S):
            async for event in events:
                if event.chunk.type == "background-task-suspended":
                    stored = await cluster.memory.storage.list_messages("t1")  # type: ignore[union-attr]
                    break
    await elsewhere.close()
    suspended = [m.content["metadata"]["suspendedTools"] for m in stored.items if "metadata" in m.content]
    assert suspended and suspended[0]["c1"]["suspendPayload"] == {"question": "name?"}


async def test_cancel_from_the_api_process_stops_the_tool_in_the_worker(cluster: Cluster) -> None:
    model = ScriptedModel(calls=[call("c1", "hang", '{"label":"h"}'), say("Working."), say("Cancelled.")])
    runtime, agent, manager = cluster.api(model)

    async def cancel_once_running(chunk: AnyChunk) -> None:
        if chunk.type == "background-task-running":
            await cluster.worker.expect(lambda line: line["event"] == "started")
            await manager.cancel(chunk.payload["taskId"])

    async with runtime:
        out = await agent.stream("Hang", memory=MEMORY, until_idle=True)
        chunks = await collect(out.full_stream, cancel_once_running)
    types = kinds(chunks)
    assert types.count("background-task-cancelled") == 1 and types.count("start") == 2
    aborted = await cluster.worker.expect(lambda line: line["event"] == "aborted")
    assert aborted["reason"] == "Task cancelled"
    results = await cluster.tool_results()
    assert results == [{"type": "error-text", "value": "Background task cancelled by the user: no result."}]
    directives = [m["content"] for m in model.recorded[2].prompt if m["role"] == "system"]
    assert any("c1 (hang)" in d and "Cancelled" in d for d in directives)


async def test_resume_from_the_api_process_reruns_the_tool_in_the_worker(cluster: Cluster) -> None:
    model = ScriptedModel(
        calls=[call("c1", "ask", '{"question":"name?"}'), say("Asking."), say("Waiting."), say("Hi Ada.")]
    )
    runtime, agent, manager = cluster.api(model)
    seen: list[AnyChunk] = []

    async def answer_the_suspension(chunk: AnyChunk) -> None:
        if chunk.type == "finish" and "background-task-suspended" not in kinds(seen):
            await cluster.open_gate("name?")
        seen.append(chunk)
        if chunk.type == "background-task-suspended":
            assert chunk.payload["suspendPayload"] == {"question": "name?"}
            await manager.resume(chunk.payload["taskId"], {"name": "Ada"})

    async with runtime:
        out = await agent.stream("Ask", memory=MEMORY, until_idle={"resume_window_ms": 10_000})
        chunks = await collect(out.full_stream, answer_the_suspension)
    types = kinds(chunks)
    assert types.count("background-task-resumed") == 1 and types.count("start") == 3
    assert types.index("background-task-suspended") < types.index("background-task-completed")
    result = {"type": "json", "value": {"answer": {"name": "Ada"}}}
    assert tool_outputs(model.recorded[3].prompt) == [result]
    assert await cluster.tool_results() == [result]
    await cluster.worker.stop()
    runs = [line for line in await cluster.worker.drain() if line["event"] == "started"]
    assert [line["resume_data"] for line in runs] == [None, {"name": "Ada"}]


async def test_a_task_run_elsewhere_is_announced_before_its_events(cluster: Cluster) -> None:
    """B claims and runs the task (its ``running`` event crosses Redis) while the model's next
    part is still on its way: A's stream still shows ``background-task-started`` first."""
    model = ScriptedModel.turns(
        [ToolCall("research", {"topic": "sol"}, id="c1"), Delay(1500)], Text("Started."), Text("Done.")
    )
    chunks = await cluster.research_sol_until_idle(model)
    task_events = [c.type for c in chunks if c.type.startswith("background-task-") and "taskId" in c.payload]
    assert task_events[0] == "background-task-started"
    assert {"background-task-running", "background-task-completed"} <= set(task_events)
    assert await cluster.worker.expect(lambda line: line["event"] == "started")
