"""Scale-out on Temporal across real processes: the API process A (this test) streams and runs
no tool; workers B and C are ``runstream worker`` processes. They share a real Temporal dev
server (started by the session fixture), PostgreSQL (memory and task records) and Redis
(events)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis
from temporal_app import build_runtime
from temporal_cluster import Cluster, WorkerProcess

from runstream.agent import Agent
from runstream.chunks import AnyChunk
from runstream.memory import Memory
from runstream.models.base import PromptMessage
from runstream.runtime import Runstream
from runstream.storage import PostgresStorage
from runstream.tasks.config import TaskRequest
from runstream.tasks.manager import STALE_TASK_MESSAGE
from runstream.tasks.temporal import TemporalTaskManager
from runstream.tasks.temporal.devserver import TemporalDevServer
from runstream.tasks.temporal.slots import SlotsWorkflow, slots_workflow_id
from runstream.testing import ScriptedModel
from tests.conftest import POSTGRES_URL, REDIS_URL
from tests.storage.postgres_testkit import drop_schema, require_postgres, unreachable_reason

MEMORY = {"thread": "t1", "resource": "u1"}
USAGE = {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2}
STREAM_TIMEOUT_S = 60

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


def require_redis() -> None:
    import redis

    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2).ping()
    except Exception as exc:
        require_postgres(f"Redis unreachable at {REDIS_URL}: {exc}")  # fails under CI, else skips


@pytest.fixture(scope="module")
def postgres_problem() -> str | None:
    return unreachable_reason()


@pytest.fixture
async def cluster(
    postgres_problem: str | None,
    temporal_server: TemporalDevServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[Cluster]:
    require_postgres(postgres_problem)
    require_redis()
    env = Cluster.environment(temporal_server.address)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    storage = PostgresStorage(POSTGRES_URL, schema=env["TEMPORAL_TEST_SCHEMA"])
    await storage.init()  # the schema exists before the workers start
    gates = Redis.from_url(REDIS_URL)
    cluster = Cluster(env, tmp_path, Memory(storage=storage), gates)
    try:
        yield cluster
    finally:
        await cluster.close()
        await gates.aclose()
        await storage.close()
        await drop_schema(env["TEMPORAL_TEST_SCHEMA"])


def api(model: ScriptedModel) -> tuple[Runstream, Agent, TemporalTaskManager]:
    """Process A: the agent on a Temporal manager without a local worker (it runs no tool)."""
    runtime = build_runtime(model)
    manager = runtime.task_manager
    assert isinstance(manager, TemporalTaskManager) and not manager.run_worker
    return runtime, runtime.get_agent("bg"), manager


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


async def test_a_killed_workers_task_completes_on_another_and_the_stream_continues(cluster: Cluster) -> None:
    """A streams until idle; B runs the task and is killed (-9) mid-task; Temporal gives the
    attempt to C once B's heartbeats stop; C completes it, the result is in memory once, and A's
    stream gets the continuation turn."""
    b = await cluster.start_worker()
    model = ScriptedModel(calls=[call("c1", "research", '{"topic":"sol"}'), say("Started."), say("Done.")])
    runtime, agent, manager = api(model)
    workers: dict[str, WorkerProcess] = {}

    async def kill_b_mid_task(chunk: AnyChunk) -> None:
        progress = (
            chunk.payload["payload"]["payload"]["output"] if chunk.type == "background-task-output" else {}
        )
        if progress.get("attempt") == 1:
            assert progress["pid"] == b.pid  # B's progress, over Redis
            await b.kill()
            workers["c"] = c = await cluster.start_worker()
            started = await c.expect(lambda line: line["event"] == "started")
            assert started["attempt"] == 2
            await cluster.open_gate("sol")

    async with runtime:
        out = await agent.stream("Research sol", memory=MEMORY, until_idle=True)
        chunks = await collect(out.full_stream, kill_b_mid_task)
        task_id = next(c for c in chunks if c.type == "background-task-started").payload["taskId"]
        record = await manager.get_task(task_id)
    types = kinds(chunks)
    assert types.count("start") == 2 and types[-1] == "finish"
    assert types.count("background-task-completed") == 1
    assert types.index("background-task-completed") < types.index("start", 1)
    result = {"topic": "sol", "summary": "sol is fast", "attempt": 2}
    assert next(c for c in chunks if c.type == "background-task-completed").payload["result"] == result
    assert record is not None and (record.status, record.retry_count) == ("completed", 1)
    assert record.metadata["worker"].endswith(f":{workers['c'].pid}")
    # the tool's output chunks reached A's stream from both workers, over Redis
    outputs = [
        c.payload["payload"]["payload"]["output"] for c in chunks if c.type == "background-task-output"
    ]
    progress = [(o["attempt"], o["pid"]) for o in outputs]
    assert progress == [(1, b.pid), (2, workers["c"].pid)]
    # exactly once in memory, and the continuation turn read it from there
    assert await cluster.tool_results() == [{"type": "json", "value": result}]
    assert tool_outputs(model.recorded[2].prompt) == [{"type": "json", "value": result}]
    assert "".join(c.payload["text"] for c in chunks if c.type == "text-delta").endswith("Done.")


async def test_cancel_from_the_api_process_stops_the_tool_on_the_worker(cluster: Cluster) -> None:
    b = await cluster.start_worker()
    model = ScriptedModel(calls=[call("c1", "hang", '{"label":"h"}'), say("Working."), say("Cancelled.")])
    runtime, agent, manager = api(model)

    async def cancel_once_running(chunk: AnyChunk) -> None:
        if chunk.type == "background-task-running":
            await b.expect(lambda line: line["event"] == "started")
            await manager.cancel(chunk.payload["taskId"])

    async with runtime:
        out = await agent.stream("Hang", memory=MEMORY, until_idle=True)
        chunks = await collect(out.full_stream, cancel_once_running)
    types = kinds(chunks)
    assert types.count("background-task-cancelled") == 1 and types.count("start") == 2
    aborted = await b.expect(lambda line: line["event"] == "aborted")
    assert aborted["reason"] == "Task cancelled"
    results = await cluster.tool_results()
    assert results == [{"type": "error-text", "value": "Background task cancelled by the user: no result."}]


async def test_resume_from_the_api_process_reruns_the_tool_on_the_worker(cluster: Cluster) -> None:
    b = await cluster.start_worker()
    model = ScriptedModel(
        calls=[call("c1", "ask", '{"question":"name?"}'), say("Asking."), say("Waiting."), say("Hi Ada.")]
    )
    runtime, agent, manager = api(model)
    seen: list[AnyChunk] = []

    async def answer_the_suspension(chunk: AnyChunk) -> None:
        if chunk.type == "finish" and "background-task-suspended" not in kinds(seen):
            await cluster.open_gate("name?")
        seen.append(chunk)
        if chunk.type == "background-task-suspended":
            assert chunk.payload["suspendPayload"] == {"question": "name?"}
            await manager.resume(chunk.payload["taskId"], {"name": "Ada"})

    async with runtime:
        out = await agent.stream("Ask", memory=MEMORY, until_idle={"resume_window_ms": 20_000})
        chunks = await collect(out.full_stream, answer_the_suspension)
    types = kinds(chunks)
    assert types.count("background-task-resumed") == 1 and types.count("start") == 3
    assert types.index("background-task-suspended") < types.index("background-task-completed")
    result = {"type": "json", "value": {"answer": {"name": "Ada"}}}
    assert tool_outputs(model.recorded[3].prompt) == [result]
    assert await cluster.tool_results() == [result]
    first = await b.expect(lambda line: line["event"] == "started" and line["resume_data"] is None)
    again = await b.expect(lambda line: line["event"] == "started" and line["resume_data"] is not None)
    assert (first["tool"], again["resume_data"]) == ("ask", {"name": "Ada"})


async def test_a_worker_stopped_gracefully_hands_its_running_task_on(cluster: Cluster) -> None:
    """SIGTERM: B stops taking tasks, gives the running attempt ``graceful_shutdown_ms`` to
    finish, then cancels it (the tool sees its abort signal) and exits cleanly; Temporal retries
    the attempt on C."""
    b = await cluster.start_worker()
    model = ScriptedModel(calls=[call("c1", "research", '{"topic":"moon"}'), say("Started.")])
    runtime, agent, manager = api(model)
    async with runtime:
        chunks = await collect((await agent.stream("Research moon", memory=MEMORY)).full_stream)
        task_id = next(c for c in chunks if c.type == "background-task-started").payload["taskId"]
        await b.expect(lambda line: line["event"] == "started")
        assert await b.stop() == 0
        c = await cluster.start_worker()
        assert (await c.expect(lambda line: line["event"] == "started"))["attempt"] == 2
        await cluster.open_gate("moon")
        record = await manager.wait_for(task_id, timeout_ms=STREAM_TIMEOUT_S * 1000)
    assert (record.status, record.retry_count) == ("completed", 1)
    assert await cluster.tool_results() == [
        {"type": "json", "value": {"topic": "moon", "summary": "moon is fast", "attempt": 2}}
    ]


async def test_two_workers_run_each_of_ten_tasks_exactly_once(cluster: Cluster) -> None:
    workers = [await cluster.start_worker(), await cluster.start_worker()]
    runtime, agent, manager = api(ScriptedModel(calls=[say("unused")]))
    work = agent.tools["work"]
    async with runtime:
        records = await asyncio.gather(
            *(
                manager.enqueue(TaskRequest(work, f"c{n}", {"label": f"w{n}"}, "bg", "run-1"))
                for n in range(10)
            )
        )
        finals = [await manager.wait_for(r.id, timeout_ms=STREAM_TIMEOUT_S * 1000) for r in records if r]
    assert sorted(f.result for f in finals) == sorted(f"w{n}" for n in range(10))
    await asyncio.gather(*(worker.stop() for worker in workers))
    ran = [line["label"] for worker in workers for line in worker.lines if line["event"] == "ran"]
    assert sorted(ran) == sorted(f"w{n}" for n in range(10))  # each once, whichever worker


async def test_a_killed_workers_task_without_retries_fails_and_its_enqueuer_hears_it(
    cluster: Cluster,
) -> None:
    b = await cluster.start_worker()
    runtime, agent, manager = api(ScriptedModel(calls=[say("unused")]))
    async with runtime:
        record = await manager.enqueue(TaskRequest(agent.tools["hang"], "c1", {"label": "h"}, "bg", "run-1"))
        assert record is not None
        events = manager.subscribe(task_id=record.id)
        await b.expect(lambda line: line["event"] == "started")
        await b.kill()
        await cluster.start_worker()  # the lost attempt is settled by any worker
        async with asyncio.timeout(STREAM_TIMEOUT_S):
            async for chunk in events:
                if chunk.type == "background-task-failed":
                    break
        await events.close()
        final = await manager.get_task(record.id)
    assert chunk.payload["error"] == {"message": STALE_TASK_MESSAGE}
    assert final is not None and (final.status, final.retry_count) == ("failed", 0)


async def test_a_suspended_task_is_resumed_after_every_process_restarted(cluster: Cluster) -> None:
    """The enqueuing API process and the worker both go away while the task waits for its
    resume; a new API process resumes it and a new worker finishes it. Temporal kept the
    workflow waiting; the result reaches memory without the original request."""
    b = await cluster.start_worker()
    first_api, agent, _ = api(
        ScriptedModel(calls=[call("c1", "ask", '{"question":"name?"}'), say("Asking.")])
    )
    async with first_api:
        chunks = await collect((await agent.stream("Ask", memory=MEMORY)).full_stream)
        task_id = next(c for c in chunks if c.type == "background-task-started").payload["taskId"]
        await cluster.open_gate("name?")
        suspended = await first_api.task_manager.wait_for(task_id, timeout_ms=STREAM_TIMEOUT_S * 1000)  # type: ignore[union-attr]
        assert suspended.status == "suspended"
    assert await b.stop() == 0
    c = await cluster.start_worker()
    second_api, _, manager = api(ScriptedModel(calls=[say("unused")]))
    async with second_api:
        resumed = await manager.resume(task_id, {"name": "Ada"})
        assert resumed.status == "running"
        final = await manager.wait_for(task_id, timeout_ms=STREAM_TIMEOUT_S * 1000)
    assert (final.status, final.result) == ("completed", {"answer": {"name": "Ada"}})
    again = await c.expect(lambda line: line["event"] == "started")
    assert again["resume_data"] == {"name": "Ada"}
    assert await cluster.tool_results() == [{"type": "json", "value": {"answer": {"name": "Ada"}}}]


async def test_the_global_limit_holds_across_two_workers(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """global_concurrency=2 with two workers, each of which would run 2 on its own: at most 2
    ``hold`` tools run at once in the whole cluster; the others wait for a slot of the slots
    workflow, and start as slots free."""
    cluster.env["TEMPORAL_TEST_GLOBAL_CONCURRENCY"] = "2"
    monkeypatch.setenv("TEMPORAL_TEST_GLOBAL_CONCURRENCY", "2")
    await cluster.start_worker()
    await cluster.start_worker()
    runtime, agent, manager = api(ScriptedModel(calls=[say("unused")]))
    hold = agent.tools["hold"]
    starts_key = f"{cluster.env['TEMPORAL_TEST_PREFIX']}:starts"

    async def next_start() -> dict[str, Any]:
        popped = await cluster.gates.blpop([starts_key], timeout=STREAM_TIMEOUT_S)  # type: ignore[misc]
        assert popped is not None, "no hold tool started"
        return dict(json.loads(popped[1]))

    async with runtime:
        records = [
            await manager.enqueue(TaskRequest(hold, f"c{n}", {"label": f"h{n}"}, "bg", "run-1"))
            for n in range(5)
        ]
        started = [await next_start(), await next_start()]
        slots = manager.client.get_workflow_handle(slots_workflow_id(manager.temporal.task_queue))
        async with asyncio.timeout(STREAM_TIMEOUT_S):  # Temporal's state is read by polling
            while len((state := await slots.query(SlotsWorkflow.state)).waiting) < 3:  # noqa: ASYNC110
                await asyncio.sleep(0.05)
        assert len(state.holders) == 2
        while len(started) < 5:
            await cluster.open_gate(started[len(started) - 2]["label"])
            started.append(await next_start())
        for start in started[-2:]:
            await cluster.open_gate(start["label"])
        finals = [await manager.wait_for(r.id, timeout_ms=STREAM_TIMEOUT_S * 1000) for r in records if r]
    assert sorted(f.result for f in finals) == [f"h{n}" for n in range(5)]
    assert sorted(s["label"] for s in started) == [f"h{n}" for n in range(5)]
    assert max(s["running"] for s in started) == 2
