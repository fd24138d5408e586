"""What a process sees of a task another process runs on Temporal: the result (or the
suspension) is in memory before anyone sees its event, the task is announced before its events,
and the task's span and the continuation turn's link across processes. A is this test (an API
process running no tool), B a ``runstream worker``; PostgreSQL, Redis and Temporal are shared."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporal_cluster import Cluster
from test_temporal_cluster import MEMORY, STREAM_TIMEOUT_S, api, call, cluster, collect, postgres_problem, say

from runstream.chunks import AnyChunk
from runstream.tasks.bus import TaskEventFilter
from runstream.tasks.redis_bus import RedisEventBus
from runstream.testing import Delay, ScriptedModel, Text, ToolCall
from tests.conftest import REDIS_URL
from tests.otel_testkit import named, spans

__all__ = ["cluster", "postgres_problem", "spans"]


async def test_whoever_sees_the_completion_finds_the_result_in_memory(cluster: Cluster) -> None:
    """A third process (a bare Redis subscriber) and A's own subscribers read memory the moment
    they see ``background-task-completed``: B wrote the result before publishing it."""
    await cluster.start_worker()
    model = ScriptedModel(calls=[call("c1", "research", '{"topic":"sol"}'), say("Started.")])
    runtime, agent, manager = api(model)
    elsewhere = RedisEventBus(REDIS_URL, channel_prefix=cluster.env["TEMPORAL_TEST_PREFIX"])
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
    result = {"type": "json", "value": {"topic": "sol", "summary": "sol is fast", "attempt": 1}}
    assert seen == [[result], [result]]


async def test_whoever_sees_the_suspension_finds_it_in_memory(cluster: Cluster) -> None:
    await cluster.start_worker()
    model = ScriptedModel(calls=[call("c1", "ask", '{"question":"name?"}'), say("Asking.")])
    runtime, agent, _ = api(model)
    elsewhere = RedisEventBus(REDIS_URL, channel_prefix=cluster.env["TEMPORAL_TEST_PREFIX"])
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


async def test_a_task_run_elsewhere_is_announced_before_its_events(cluster: Cluster) -> None:
    """B claims and runs the task (its events cross Redis) while the model's next part is still
    on its way: A's stream still shows ``background-task-started`` first."""
    await cluster.start_worker()
    model = ScriptedModel.turns(
        [ToolCall("research", {"topic": "sol"}, id="c1"), Delay(1500)], Text("Started."), Text("Done.")
    )
    runtime, agent, _ = api(model)

    async def open_once_started(chunk: AnyChunk) -> None:
        if chunk.type == "background-task-output":
            await cluster.open_gate("sol")

    async with runtime:
        out = await agent.stream("Research sol", memory=MEMORY, until_idle=True)
        chunks = await collect(out.full_stream, open_once_started)
    task_events = [c.type for c in chunks if c.type.startswith("background-task-") and "taskId" in c.payload]
    assert task_events[0] == "background-task-started"
    assert {"background-task-running", "background-task-output", "background-task-completed"} <= set(
        task_events
    )


def hex_ids(trace_id: int, span_id: int) -> tuple[str, str]:
    return format(trace_id, "032x"), format(span_id, "016x")


async def test_task_and_continuation_spans_link_across_processes(
    cluster: Cluster, spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """B's task span links to A's run span (the traceparent stored with the task), and A's
    continuation turn links to B's task span (the span context stored with the outcome)."""
    cluster.env["TEMPORAL_TEST_PRINT_SPANS"] = "1"
    worker = await cluster.start_worker()
    model = ScriptedModel(calls=[call("c1", "research", '{"topic":"sol"}'), say("Started."), say("Done.")])
    runtime, agent, _ = api(model)

    async def release_after_first_turn(chunk: AnyChunk) -> None:
        if chunk.type == "finish":
            await cluster.open_gate("sol")

    async with runtime:
        out = await agent.stream("Research sol", memory=MEMORY, until_idle=True)
        await collect(out.full_stream, release_after_first_turn)
    task = await worker.expect(
        lambda line: line["event"] == "span" and line["name"].startswith("execute_tool")
    )
    first, second = sorted(named(spans, "invoke_agent"), key=lambda s: s.start_time or 0)
    # B's span of the task: its own trace, linked to A's run.
    assert task["name"] == "execute_tool research" and task["parent"] is False
    assert task["attributes"]["gen_ai.operation.name"] == "execute_tool"
    (started_by,) = task["links"]
    assert (started_by["trace_id"], started_by["span_id"]) == hex_ids(
        first.context.trace_id, first.context.span_id
    )
    # A's continuation turn: linked to B's task span.
    (triggered_by,) = second.links
    assert hex_ids(triggered_by.context.trace_id, triggered_by.context.span_id) == (
        task["trace_id"],
        task["span_id"],
    )
    assert triggered_by.attributes is not None
    assert (
        triggered_by.attributes["runstream.background_task.id"]
        == task["attributes"]["runstream.background_task.id"]
    )
