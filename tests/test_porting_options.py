"""Mastra's background-task options that used to be accepted and ignored: each one now acts (or
is an error naming it). Waiting behaviour of durable loops is pinned by the recorded scenarios
``x-pt01``/``x-pt02``/``x-pt04`` in ``conformance_extra``."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from runstream import Agent, ToolContext, tool
from runstream.chunks import AnyChunk
from runstream.memory import Memory, MemoryScope
from runstream.runtime import Runstream
from runstream.scoring import TaskCompletion
from runstream.storage import InMemoryStorage, TaskRecord
from runstream.structured import StructuredOutput
from runstream.tasks.config import BackgroundTaskConfig, RetryConfig
from runstream.tasks.policy import AgentBackgroundConfig
from runstream.tasks.temporal import TemporalTaskManager
from runstream.testing import ScriptedModel
from runstream.tools import BackgroundToolConfig

USAGE = {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2}
MEMORY = {"thread": "t1", "resource": "u1"}


def calls(*tool_calls: tuple[str, str, str]) -> list[dict[str, Any]]:
    return [
        *(
            {"type": "tool-call", "toolCallId": cid, "toolName": name, "input": args}
            for cid, name, args in tool_calls
        ),
        {"type": "finish", "finishReason": "tool-calls", "usage": USAGE},
    ]


def say(text: str) -> list[dict[str, Any]]:
    return [
        {"type": "text-start", "id": "t"},
        {"type": "text-delta", "id": "t", "delta": text},
        {"type": "text-end", "id": "t"},
        {"type": "finish", "finishReason": "stop", "usage": USAGE},
    ]


async def drain(out: Any) -> list[AnyChunk]:
    async with asyncio.timeout(10):
        return [chunk async for chunk in out.full_stream]


# -- unknown keys and bad values are errors that name them -----------------------------------


@pytest.mark.parametrize(
    ("config", "named"),
    [
        ({"enabled": True, "waitTimeoutMS": 5}, "'waitTimeoutMS'; did you mean 'waitTimeoutMs'?"),
        ({"enabled": True, "defaultRetries": {"maxRetry": 1}}, "background_tasks.defaultRetries"),
        ({"enabled": True, "cleanup": {"ttl": 1}}, "background_tasks.cleanup: unknown option 'ttl'"),
        ({"enabled": True, "globalConcurrency": 0}, "background_tasks.globalConcurrency must be at least 1"),
        ({"enabled": True, "backpressure": "drop"}, "background_tasks.backpressure must be one of"),
        ({"enabled": True, "defaultTimeoutMs": float("inf")}, "defaultTimeoutMs must be a number >= 0"),
        ({"enabled": True, "onTaskComplete": "log"}, "onTaskComplete must be a function"),
        ({"enabled": True, "waitTimeoutMs": 1, "wait_timeout_ms": 2}, "is given twice"),
    ],
)
def test_manager_config_errors_name_the_key(config: dict[str, Any], named: str) -> None:
    with pytest.raises((ValueError, TypeError)) as info:
        Runstream(background_tasks=config)
    assert named in str(info.value)


def test_snake_case_and_camel_case_keys_mean_the_same() -> None:
    camel = BackgroundTaskConfig.coerce({"perAgentConcurrency": 2, "defaultRetries": {"maxRetries": 3}})
    snake = BackgroundTaskConfig.coerce({"per_agent_concurrency": 2, "default_retries": {"max_retries": 3}})
    assert camel == snake
    assert camel is not None and camel.per_agent_concurrency == 2 and camel.default_retries.max_retries == 3
    assert BackgroundTaskConfig.coerce({"enabled": False}) is None


def test_agent_and_tool_background_configs_reject_unknown_keys() -> None:
    with pytest.raises(ValueError, match=r"background_tasks.tools.research: unknown option 'enabeld'"):
        AgentBackgroundConfig.coerce({"tools": {"research": {"enabeld": True}}})
    with pytest.raises(ValueError, match=r"background_tasks: unknown option 'tool'; did you mean 'tools'"):
        AgentBackgroundConfig.coerce({"tool": "all"})
    with pytest.raises(ValueError, match=r"background: unknown option 'timeout'"):
        BackgroundToolConfig.coerce({"enabled": True, "timeout": 5})
    with pytest.raises(ValueError, match=r"defaultDisposition must be one of"):
        BackgroundToolConfig.coerce({"enabled": True, "defaultDisposition": "awaited"})


def test_tool_wait_timeout_warns_that_it_has_no_effect() -> None:
    with pytest.warns(UserWarning, match="wait_timeout_ms has no effect"):
        BackgroundToolConfig.coerce({"enabled": True, "waitTimeoutMs": 100})


# -- eligibility: enabled defaults to false, as in Mastra ------------------------------------


def research_tool(background: Any, finished: asyncio.Event | None = None) -> Any:
    @tool(background=background)
    async def research(topic: str) -> dict[str, str]:
        """Research a topic."""
        if finished is not None:
            await finished.wait()
        return {"topic": topic}

    return research


async def run_research(tool_: Any, agent_background: Any = None) -> list[str]:
    model = ScriptedModel(calls=[calls(("c1", "research", '{"topic":"sol"}')), say("ok")])
    agent = Agent("a", model=model, tools=[tool_], memory=Memory(), background_tasks=agent_background)
    async with Runstream(agents=[agent], background_tasks={"enabled": True}):
        return [c.type for c in await drain(await agent.stream("go", memory=MEMORY))]


async def test_a_tool_background_config_without_enabled_is_not_eligible() -> None:
    kinds = await run_research(research_tool({"timeoutMs": 500}))
    assert "background-task-started" not in kinds and "tool-result" in kinds


async def test_an_agent_entry_without_enabled_falls_back_to_the_tool() -> None:
    entry = {"tools": {"research": {"timeoutMs": 100}}}
    assert "background-task-started" not in await run_research(research_tool({"timeoutMs": 500}), entry)
    eligible = await run_research(research_tool({"enabled": True}), entry)
    assert "background-task-started" in eligible
    enabled_by_agent = {"tools": {"research": {"enabled": True}}}
    assert "background-task-started" in await run_research(research_tool(None), enabled_by_agent)


# -- callbacks: manager, agent and tool ------------------------------------------------------


async def test_task_callbacks_from_every_level() -> None:
    seen: list[tuple[str, str, str]] = []
    gate = asyncio.Event()

    def note(who: str) -> Any:
        async def hook(record: TaskRecord) -> None:
            seen.append((who, record.tool_name, record.status))

        return hook

    @tool(background={"enabled": True, "onComplete": note("tool")})
    async def research(topic: str) -> str:
        """Research a topic."""
        return topic

    @tool(background={"enabled": True})
    async def fetch(url: str) -> str:
        """Fetch a page."""
        raise RuntimeError("404")

    @tool(background={"enabled": True})
    async def crawl(site: str) -> str:
        """Crawl a site (until cancelled)."""
        await gate.wait()
        return site

    model = ScriptedModel(
        calls=[
            calls(
                ("c1", "research", '{"topic":"sol"}'),
                ("c2", "fetch", '{"url":"x"}'),
                ("c3", "crawl", '{"site":"y"}'),
            ),
            say("ok"),
        ]
    )
    agent = Agent(
        "a",
        model=model,
        tools=[research, fetch, crawl],
        memory=Memory(),
        background_tasks={"onTaskComplete": note("agent"), "onTaskFailed": note("agent")},
    )
    runtime = Runstream(
        agents=[agent],
        background_tasks={
            "enabled": True,
            "onTaskComplete": note("manager"),
            "onTaskFailed": note("manager"),
            "onTaskCancelled": note("manager"),
        },
    )
    async with runtime:
        await drain(await agent.stream("go", memory=MEMORY))
        manager = runtime.task_manager
        assert manager is not None
        ids = {t.tool_name: t.id for t in (await manager.list_tasks()).items}
        await manager.wait_for(ids["research"])
        await manager.wait_for(ids["fetch"])
        await manager.cancel(ids["crawl"])
    assert sorted(seen) == sorted(
        [
            ("tool", "research", "completed"),  # the tool's own hook wins over the agent's
            ("manager", "research", "completed"),
            ("agent", "fetch", "failed"),
            ("manager", "fetch", "failed"),
            ("manager", "crawl", "cancelled"),
        ]
    )


async def test_a_failing_callback_does_not_fail_the_task() -> None:
    def broken(record: TaskRecord) -> None:
        raise RuntimeError("callback bug")

    runtime = Runstream(background_tasks={"enabled": True, "onTaskComplete": broken})
    agent = runtime.add_agent(
        Agent(
            "a",
            model=ScriptedModel(calls=[calls(("c1", "research", '{"topic":"sol"}')), say("ok")]),
            tools=[research_tool({"enabled": True})],
            memory=Memory(),
        )
    )
    async with runtime:
        await drain(await agent.stream("go", memory=MEMORY))
        assert runtime.task_manager is not None
        (task,) = (await runtime.task_manager.list_tasks()).items
        assert (await runtime.task_manager.wait_for(task.id)).status == "completed"


# -- progress throttle, agent concurrency, retryable errors, mode ----------------------------


async def test_progress_throttle_drops_outputs_inside_the_window() -> None:
    async def published(throttle: int | None) -> list[Any]:
        @tool(background={"enabled": True})
        async def research(topic: str, ctx: ToolContext) -> str:
            """Research a topic."""
            for step in range(3):
                await ctx.writer.write({"step": step})
            return topic

        model = ScriptedModel(calls=[calls(("c1", "research", '{"topic":"sol"}')), say("ok")])
        agent = Agent("a", model=model, tools=[research], memory=Memory())
        runtime = Runstream(
            agents=[agent], background_tasks={"enabled": True, "progressThrottleMs": throttle}
        )
        async with runtime:
            assert runtime.task_manager is not None
            events = runtime.task_manager.subscribe(agent_id="a")
            await drain(await agent.stream("go", memory=MEMORY))
            outputs = []
            async with asyncio.timeout(5):
                async for chunk in events:
                    if chunk.type == "background-task-output":
                        outputs.append(chunk.payload["payload"]["payload"]["output"])
                    if chunk.type == "background-task-completed":
                        break
            await events.close()
            return outputs

    assert await published(None) == [{"step": 0}, {"step": 1}, {"step": 2}]
    assert await published(60_000) == [{"step": 0}]


async def test_agent_concurrency_caps_its_running_tasks() -> None:
    running = 0
    peak = 0
    release = asyncio.Event()

    @tool(background={"enabled": True})
    async def research(topic: str) -> str:
        """Research a topic."""
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await release.wait()
        running -= 1
        return topic

    model = ScriptedModel(
        calls=[calls(*((f"c{i}", "research", f'{{"topic":"t{i}"}}') for i in range(3))), say("ok")]
    )
    agent = Agent("a", model=model, tools=[research], memory=Memory(), background_tasks={"concurrency": 1})
    runtime = Runstream(agents=[agent], background_tasks={"enabled": True, "perAgentConcurrency": 5})
    async with runtime:
        await drain(await agent.stream("go", memory=MEMORY))
        manager = runtime.task_manager
        assert manager is not None
        tasks = (await manager.list_tasks()).items
        assert sorted(t.status for t in tasks) == ["pending", "pending", "running"]
        release.set()
        for task in tasks:
            assert (await manager.wait_for(task.id)).status == "completed"
    assert peak == 1


async def test_retryable_errors_decides_which_failures_are_retried() -> None:
    attempts: list[str] = []

    @tool(background={"enabled": True, "maxRetries": 3})
    async def fetch(url: str) -> str:
        """Fetch a page."""
        attempts.append(url)
        raise (ConnectionError if url == "flaky" else ValueError)(url)

    retries = RetryConfig(retry_delay_ms=0, retryable_errors=lambda exc: isinstance(exc, ConnectionError))
    model = ScriptedModel(
        calls=[calls(("c1", "fetch", '{"url":"flaky"}'), ("c2", "fetch", '{"url":"bad"}')), say("ok")]
    )
    agent = Agent("a", model=model, tools=[fetch], memory=Memory())
    runtime = Runstream(agents=[agent], background_tasks={"enabled": True, "defaultRetries": retries})
    async with runtime:
        await drain(await agent.stream("go", memory=MEMORY))
        assert runtime.task_manager is not None
        for task in (await runtime.task_manager.list_tasks()).items:
            assert (await runtime.task_manager.wait_for(task.id)).status == "failed"
    assert attempts.count("flaky") == 4 and attempts.count("bad") == 1


def test_producer_mode_needs_a_manager_whose_tasks_run_elsewhere() -> None:
    with pytest.raises(ValueError, match=r"producer.*TemporalTaskManager"):
        Runstream(background_tasks={"enabled": True, "mode": "producer"})
    assert Runstream(background_tasks={"enabled": True, "mode": "worker"}).task_manager is not None
    config = BackgroundTaskConfig(mode="producer")
    producer = TemporalTaskManager(InMemoryStorage(), config)
    assert producer.run_worker is False
    with pytest.raises(ValueError, match="contradicts"):
        TemporalTaskManager(InMemoryStorage(), config, run_worker=True)


# -- the other configuration mappings --------------------------------------------------------


def test_memory_options_name_unknown_and_unsupported_keys() -> None:
    assert Memory.coerce({"lastMessages": 7}) == Memory(last_messages=7)
    assert Memory.coerce({"lastMessages": False}) == Memory(last_messages=0)
    with pytest.raises(
        ValueError, match=r"memory: Mastra's 'observationalMemory' is not supported by runstream"
    ):
        Memory.coerce({"lastMessages": 7, "observationalMemory": True})
    with pytest.raises(ValueError, match="semantic recall needs an embedder"):
        Memory.coerce({"lastMessages": 7, "semanticRecall": True})
    with pytest.raises(
        ValueError, match=r"memory: unknown option 'lastMessage'; did you mean 'lastMessages'"
    ):
        Memory.coerce({"lastMessage": 7})


def test_run_memory_scope_names_unknown_keys() -> None:
    assert MemoryScope.coerce({"thread": {"id": "t"}, "resource": "u"}) == MemoryScope("t", "u")
    with pytest.raises(ValueError, match=r"memory: unknown option 'thred'"):
        MemoryScope.coerce({"thred": "t", "resource": "u"})
    titled = MemoryScope.coerce({"thread": {"id": "t", "title": "Hi"}, "resource": "u"})
    assert titled == MemoryScope("t", "u", title="Hi")
    with pytest.raises(ValueError, match=r"memory.thread: unknown option 'titel'"):
        MemoryScope.coerce({"thread": {"id": "t", "titel": "Hi"}, "resource": "u"})
    with pytest.raises(ValueError, match=r"memory.options: Mastra's 'observationalMemory' is not supported"):
        MemoryScope.coerce({"thread": "t", "resource": "u", "options": {"observationalMemory": True}})


def test_task_completion_and_structured_output_name_unknown_keys() -> None:
    with pytest.raises(ValueError, match=r"is_task_complete: unknown option 'stratgy'"):
        TaskCompletion.coerce({"scorers": [], "stratgy": "all"})
    with pytest.raises(ValueError, match=r"is_task_complete.strategy must be one of"):
        TaskCompletion.coerce({"scorers": [], "strategy": "most"})
    with pytest.raises(ValueError, match=r"structured_output: Mastra's 'useAgent' is not supported"):
        StructuredOutput.coerce({"schema": {"type": "object"}, "useAgent": True})
    plain = StructuredOutput.coerce({"type": "object", "properties": {"schema": {"type": "string"}}})
    assert plain is not None and "schema" in plain.schema["properties"]
