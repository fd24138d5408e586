"""DistributedTaskManager across real processes sharing a SQLite file and a Redis.

The test process is a producer (``worker=False``) unless a test says otherwise; the workers are
``scaleout_worker.py`` subprocesses, whose tools print what they do.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from scaleout_worker import AGENT, REDIS_URL, ScriptProcess, require_redis

from runstream.chunks import iso_datetime
from runstream.storage import SqliteStorage, TaskRecord
from runstream.storage.records import utc_now
from runstream.tasks.config import BackgroundTaskConfig, TaskRequest
from runstream.tasks.distributed import DistributedTaskManager, ScaleOutConfig
from runstream.tasks.manager import STALE_TASK_MESSAGE
from runstream.tools import Tool, ToolContext

SHORT = ("1500", "250", "200")
"""Lease, renewal and sweep intervals (ms) for the lease tests (a renewal may come 1.25 s late
on a loaded machine before the lease is lost)."""
LONG = ("60000", "20000", "200")
"""A lease that never lapses within a test: what happens comes from control messages."""

StartWorker = Callable[..., Awaitable[ScriptProcess]]


async def _never(args: dict[str, Any], ctx: ToolContext) -> Any:
    raise AssertionError("a producer runs no tool")


def request(tool: str, label: str, **args: Any) -> TaskRequest:
    max_retries = args.pop("max_retries", None)
    return TaskRequest(
        tool=Tool(tool, _never, input_schema={"type": "object"}),
        tool_call_id=f"call-{label}",
        args={"label": label, **args},
        agent_id=AGENT,
        run_id="run-1",
        max_retries=max_retries,
    )


@pytest.fixture
def prefix() -> str:
    require_redis()
    return f"test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[str]:
    path = str(tmp_path / "tasks.db")
    storage = SqliteStorage(path)
    await storage.init()  # create the schema before several processes open the file
    await storage.close()
    yield path


@pytest.fixture
async def producer(db: str, prefix: str) -> AsyncIterator[DistributedTaskManager]:
    manager = DistributedTaskManager(
        SqliteStorage(db),
        BackgroundTaskConfig(per_agent_concurrency=10),
        redis_url=REDIS_URL,
        worker=False,
        channel_prefix=prefix,
        scale_out=ScaleOutConfig(recheck_interval_ms=500, control_timeout_ms=10_000),
    )
    await manager.start()
    yield manager
    await manager.shutdown()
    await manager.storage.close()


@pytest.fixture
async def start_worker(db: str, prefix: str, tmp_path: Path) -> AsyncIterator[StartWorker]:
    workers: list[ScriptProcess] = []

    async def start(timings: tuple[str, str, str] = LONG) -> ScriptProcess:
        worker = await ScriptProcess.start(tmp_path, "worker", db, prefix, *timings)
        workers.append(worker)
        return worker

    yield start
    for worker in workers:
        await worker.stop()


async def first_start(workers: list[ScriptProcess]) -> tuple[ScriptProcess, ScriptProcess]:
    """The worker whose tool started first, and the other one."""
    waits = [asyncio.ensure_future(w.expect(lambda line: line["event"] == "started")) for w in workers]
    done, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    for wait in pending:
        wait.cancel()
    first = next(w for w, wait in zip(workers, waits, strict=True) if wait in done)
    return first, next(w for w in workers if w is not first)


async def enqueue(producer: DistributedTaskManager, tool: str, label: str, **args: Any) -> TaskRecord:
    record = await producer.enqueue(request(tool, label, **args))
    assert record is not None
    return record


async def test_a_producer_hands_tasks_to_a_worker_and_sees_their_events(
    producer: DistributedTaskManager, start_worker: StartWorker
) -> None:
    settled: list[TaskRecord] = []
    hook_ran = asyncio.Event()

    async def on_terminal(record: TaskRecord) -> None:
        settled.append(record)
        hook_ran.set()

    worker = await start_worker()
    events = producer.subscribe(agent_id=AGENT)
    record = await producer.enqueue(
        TaskRequest(
            tool=Tool("work", _never, input_schema={"type": "object"}),
            tool_call_id="call-1",
            args={"label": "one"},
            agent_id=AGENT,
            run_id="run-1",
            on_terminal=on_terminal,
        )
    )
    assert record is not None
    done = await producer.wait_for(record.id, timeout_ms=20_000)
    assert done.status == "completed" and done.result == {"label": "one", "worker": worker.worker_id}
    assert done.metadata["owner"] == worker.worker_id
    async with asyncio.timeout(10):
        types = [(await anext(events)).type for _ in range(2)]
    assert types == ["background-task-running", "background-task-completed"]
    async with asyncio.timeout(10):
        await hook_ran.wait()  # here, on the settled event
    assert [r.status for r in settled] == ["completed"]
    assert not producer.is_active(record.id) and producer.running_task_ids() == []


async def test_cancel_from_another_process_aborts_the_running_tool(
    producer: DistributedTaskManager, start_worker: StartWorker
) -> None:
    worker = await start_worker(LONG)
    record = await enqueue(producer, "hang", "h")
    await worker.expect(lambda line: line["event"] == "started")
    await producer.cancel(record.id)
    aborted = await worker.expect(lambda line: line["event"] == "aborted")
    assert aborted["reason"] == "Task cancelled"
    assert (await producer.wait_for(record.id, timeout_ms=5000)).status == "cancelled"


async def test_resume_from_another_process_reruns_the_tool_where_it_suspended(
    producer: DistributedTaskManager, start_worker: StartWorker
) -> None:
    worker = await start_worker(LONG)
    record = await enqueue(producer, "ask", "a")
    suspended = await producer.wait_for(record.id, timeout_ms=20_000)
    assert suspended.status == "suspended" and suspended.suspend_payload == {"question": "name?"}
    resumed = await producer.resume(record.id, {"name": "Ada"})
    assert resumed.status == "running" and resumed.resume_data == {"name": "Ada"}
    done = await producer.wait_for(record.id, timeout_ms=20_000)
    assert done.result == {"answer": {"name": "Ada"}, "worker": worker.worker_id}
    await worker.stop()
    assert [line["event"] for line in await worker.drain()] == ["ready", "started", "started"]


async def test_two_workers_run_each_of_ten_tasks_exactly_once(
    producer: DistributedTaskManager, start_worker: StartWorker
) -> None:
    workers = [await start_worker(SHORT), await start_worker(SHORT)]
    records = [await enqueue(producer, "work", f"t{i}", ms=50) for i in range(10)]
    finished = [await producer.wait_for(r.id, timeout_ms=30_000) for r in records]
    assert {r.status for r in finished} == {"completed"}
    for worker in workers:
        await worker.stop()
    ran = [line["label"] for w in workers for line in await w.drain() if line["event"] == "ran"]
    assert sorted(ran) == sorted(f"t{i}" for i in range(10))
    by_worker = {r.result["label"]: r.result["worker"] for r in finished}
    assert set(by_worker.values()) <= {w.worker_id for w in workers}


async def test_a_killed_workers_task_is_reclaimed_once_its_lease_lapses(
    producer: DistributedTaskManager, start_worker: StartWorker
) -> None:
    workers = [await start_worker(SHORT), await start_worker(SHORT)]
    record = await enqueue(producer, "flaky", "f", max_retries=1)
    victim, survivor = await first_start(workers)
    leased = await producer.get_task(record.id)
    assert leased is not None and leased.metadata["owner"] == victim.worker_id
    await victim.kill()  # a renewal after that read only pushes the lapse further out
    done = await producer.wait_for(record.id, timeout_ms=20_000)
    assert done.status == "completed"
    assert done.result == {"worker": survivor.worker_id, "attempt": 2}
    assert done.retry_count == 1
    assert done.started_at is not None
    assert done.started_at > datetime.fromisoformat(leased.metadata["lease_until"])


async def test_a_live_workers_task_is_not_taken_by_another_worker(
    producer: DistributedTaskManager, start_worker: StartWorker
) -> None:
    workers = [await start_worker(SHORT), await start_worker(SHORT)]
    record = await enqueue(producer, "hang", "h")
    owner, _ = await first_start(workers)
    await asyncio.sleep(3.0)  # two leases: a lease that was not renewed would have lapsed
    current = await producer.get_task(record.id)
    assert current is not None and current.status == "running" and current.retry_count == 0
    assert current.metadata["owner"] == owner.worker_id
    await producer.cancel(record.id)
    for worker in workers:
        await worker.stop()
    starts = [line for w in workers for line in w.lines if line["event"] == "started"]
    assert len(starts) == 1


async def test_wait_for_rereads_storage_when_the_settling_event_is_lost(
    producer: DistributedTaskManager,
) -> None:
    record = await enqueue(producer, "work", "w")  # no worker runs it
    waiting = asyncio.ensure_future(producer.wait_for(record.id, timeout_ms=10_000))
    await asyncio.sleep(0.05)
    await producer.storage.update_task(record.id, status="completed", result=1, completed_at=utc_now())
    assert (await waiting).status == "completed"  # no event was published: found on a re-read


async def test_a_worker_shutting_down_releases_its_lease_at_once(
    producer: DistributedTaskManager, start_worker: StartWorker
) -> None:
    workers = [await start_worker(LONG), await start_worker(LONG)]
    record = await enqueue(producer, "flaky", "f", max_retries=1)
    leaving, staying = await first_start(workers)
    await leaving.stop()  # graceful: the task stays running, its lease ends now, not in 60 s
    done = await producer.wait_for(record.id, timeout_ms=10_000)
    assert done.result == {"worker": staying.worker_id, "attempt": 2}


async def test_resume_goes_to_another_worker_once_the_owner_is_gone(
    producer: DistributedTaskManager, start_worker: StartWorker, prefix: str
) -> None:
    import redis.asyncio

    workers = [await start_worker(SHORT), await start_worker(SHORT)]
    record = await enqueue(producer, "ask", "a")
    owner, other = await first_start(workers)
    assert (await producer.wait_for(record.id, timeout_ms=20_000)).status == "suspended"
    await owner.kill()
    live = redis.asyncio.Redis.from_url(REDIS_URL, decode_responses=True)
    try:
        async with asyncio.timeout(10):  # its presence expires one lease after its last beat
            while await live.zscore(f"{prefix}:workers", owner.worker_id) is not None:
                await live.zremrangebyscore(f"{prefix}:workers", "-inf", utc_now().timestamp() * 1000)
                await asyncio.sleep(0.05)
    finally:
        await live.aclose()
    await producer.resume(record.id, "Ada")
    done = await producer.wait_for(record.id, timeout_ms=20_000)
    assert done.result == {"answer": "Ada", "worker": other.worker_id}


def hooked_request(tool: str, label: str, hooked: list[str], **args: Any) -> TaskRequest:
    async def on_terminal(record: TaskRecord) -> None:
        hooked.append(record.status)

    return dataclasses.replace(request(tool, label, **args), on_terminal=on_terminal)


async def test_a_settled_state_whose_event_was_lost_reaches_the_enqueuer_on_a_re_read(
    producer: DistributedTaskManager,
) -> None:
    hooked: list[str] = []
    record = await producer.enqueue(hooked_request("work", "w", hooked))  # no worker runs it
    assert record is not None
    assert producer.is_active(record.id)  # waited for here, though it would run elsewhere
    assert producer.running_task_ids(agent_id=AGENT) == [record.id]
    events = producer.subscribe(agent_id=AGENT)
    await producer.storage.update_task(record.id, status="completed", result=1, completed_at=utc_now())
    async with asyncio.timeout(10):  # no event was published: the periodic re-read finds it
        chunk = await anext(events)
    assert chunk.type == "background-task-completed" and chunk.payload["result"] == 1
    assert hooked == ["completed"]  # the request's hook ran before the event was delivered
    assert not producer.is_active(record.id) and producer.running_task_ids() == []


async def test_a_killed_workers_task_without_retries_fails_and_its_enqueuer_hears_it(
    producer: DistributedTaskManager, start_worker: StartWorker
) -> None:
    workers = [await start_worker(SHORT), await start_worker(SHORT)]
    hooked: list[str] = []
    events = producer.subscribe(agent_id=AGENT)
    record = await producer.enqueue(hooked_request("flaky", "f", hooked, max_retries=0))
    assert record is not None
    victim, _ = await first_start(workers)
    await victim.kill()
    async with asyncio.timeout(20):
        chunk = await anext(c async for c in events if c.type == "background-task-failed")
    assert chunk.payload["error"]["message"] == STALE_TASK_MESSAGE
    assert hooked == ["failed"]
    failed = await producer.get_task(record.id)
    assert failed is not None and failed.status == "failed" and failed.retry_count == 0


async def test_a_producer_fails_a_lapsed_task_without_retries_when_no_worker_is_left(
    producer: DistributedTaskManager,
) -> None:
    past = utc_now() - timedelta(seconds=5)
    lost = TaskRecord(
        id="lost-1",
        status="running",
        tool_name="work",
        tool_call_id="call-lost",
        args={},
        agent_id=AGENT,
        run_id="run-1",
        started_at=past,
        metadata={"owner": "dead-worker", "lease": "dead", "lease_until": iso_datetime(past)},
    )
    events = producer.subscribe(agent_id=AGENT)
    await producer.storage.save_task(lost)
    async with asyncio.timeout(10):  # found by the producer's periodic re-read
        chunk = await anext(events)
    assert chunk.type == "background-task-failed"
    assert chunk.payload["error"]["message"] == STALE_TASK_MESSAGE
