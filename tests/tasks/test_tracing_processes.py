"""Tracing across processes: A (this process) streams an until-idle run with a producer manager,
B (``traced_agent_worker.py``) runs the background task. B's task span links to A's run span
(through the traceparent stored with the task), and A's continuation turn links to B's task span
(through the span context stored with the task's outcome)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from redis.asyncio import Redis
from scaleout_worker import ScriptProcess, require_redis
from test_distributed_agent import MEMORY, Cluster, call, collect, postgres_problem, say

from runstream.chunks import AnyChunk
from runstream.memory import Memory
from runstream.storage import PostgresStorage
from runstream.testing import ScriptedModel
from tests.conftest import POSTGRES_URL
from tests.otel_testkit import named, spans
from tests.storage.postgres_testkit import drop_schema, fresh_schema, require_postgres

__all__ = ["postgres_problem", "spans"]

TRACED_WORKER = Path(__file__).with_name("traced_agent_worker.py")


@pytest.fixture
async def traced_cluster(postgres_problem: str | None, tmp_path: Path) -> AsyncIterator[Cluster]:
    require_postgres(postgres_problem)
    require_redis()
    from scaleout_worker import REDIS_URL

    schema, prefix = fresh_schema(), f"traced-{uuid.uuid4().hex[:12]}"
    storage = PostgresStorage(POSTGRES_URL, schema=schema)
    await storage.init()
    gates = Redis.from_url(REDIS_URL)
    worker = await ScriptProcess.start(tmp_path, POSTGRES_URL, schema, prefix, script=TRACED_WORKER)
    try:
        yield Cluster(schema, prefix, worker, gates, Memory(storage=storage))
    finally:
        await worker.stop()
        await gates.aclose()
        await storage.close()
        await drop_schema(schema)


def hex_ids(trace_id: int, span_id: int) -> tuple[str, str]:
    return format(trace_id, "032x"), format(span_id, "016x")


async def test_task_and_continuation_spans_link_across_processes(
    traced_cluster: Cluster, spans: InMemorySpanExporter
) -> None:
    model = ScriptedModel(calls=[call("c1", "research", '{"topic":"sol"}'), say("Started."), say("Done.")])
    runtime, agent, _ = traced_cluster.api(model)

    async def release_after_first_turn(chunk: AnyChunk) -> None:
        if chunk.type == "finish":
            await traced_cluster.open_gate("sol")

    async with runtime:
        out = await agent.stream("Research sol", memory=MEMORY, until_idle=True)
        await collect(out.full_stream, release_after_first_turn)
    task = await traced_cluster.worker.expect(lambda line: line["event"] == "span")
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
