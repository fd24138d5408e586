"""Lease fencing of DistributedTaskManager on PostgreSQL: exactly one process owns a task.

The races are made deterministic: many reclaims of one lapsed lease run at once through
separate connection pools (``asyncio.gather``), and a lease is made to lapse by writing its
``lease_until`` into the past, as a paused owner would see it happen.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from typing import Any

import pytest
from scaleout_worker import REDIS_URL, require_redis

from runstream.chunks import iso_datetime
from runstream.storage import PostgresStorage, TaskRecord
from runstream.storage.records import utc_now
from runstream.tasks.config import BackgroundTaskConfig, RetryConfig, TaskRequest
from runstream.tasks.distributed import DistributedTaskManager, ScaleOutConfig
from runstream.tools import Tool, ToolContext
from tests.conftest import POSTGRES_URL
from tests.storage.postgres_testkit import drop_schema, fresh_schema, require_postgres, unreachable_reason

AGENT = "lease-agent"
QUIET = ScaleOutConfig(lease_ms=60_000, renew_interval_ms=60_000, poll_interval_ms=60_000)
"""No renewal or sweep happens by itself during a test: each race is driven explicitly."""

MakeManager = Callable[..., DistributedTaskManager]


@pytest.fixture(scope="module")
def postgres_problem() -> str | None:
    return unreachable_reason()


@pytest.fixture
async def make_manager(postgres_problem: str | None) -> AsyncIterator[MakeManager]:
    """Managers on one fresh PostgreSQL schema, each with its own connection pool."""
    require_postgres(postgres_problem)
    require_redis()
    schema, prefix = fresh_schema(), f"lease-{fresh_schema()[-12:]}"
    managers: list[DistributedTaskManager] = []

    def make(*tools: Tool, on_task_complete: Any = None) -> DistributedTaskManager:
        manager = DistributedTaskManager(
            PostgresStorage(POSTGRES_URL, schema=schema, max_size=4),
            BackgroundTaskConfig(default_retries=RetryConfig(retry_delay_ms=0)),
            redis_url=REDIS_URL,
            channel_prefix=prefix,
            scale_out=QUIET,
            on_task_complete=on_task_complete,
        )
        for tool in tools:
            manager.register_tool(AGENT, tool)
        managers.append(manager)
        return manager

    yield make
    for manager in managers:
        await manager.shutdown()
        await manager.storage.close()
    await drop_schema(schema)


def lapsed_task(task_id: str, max_retries: int) -> TaskRecord:
    past = utc_now() - timedelta(seconds=5)
    return TaskRecord(
        id=task_id,
        status="running",
        tool_name="work",
        tool_call_id=f"call-{task_id}",
        args={},
        agent_id=AGENT,
        run_id="run-1",
        started_at=past - timedelta(seconds=60),
        max_retries=max_retries,
        metadata={"owner": "dead-worker", "lease": "dead-lease", "lease_until": iso_datetime(past)},
    )


def request(tool: Tool, max_retries: int = 1) -> TaskRequest:
    return TaskRequest(
        tool=tool, tool_call_id="call-1", args={}, agent_id=AGENT, run_id="run-1", max_retries=max_retries
    )


def gated_tool(name: str, started: asyncio.Event, release: asyncio.Event, result: Any) -> Tool:
    async def execute(args: dict[str, Any], ctx: ToolContext) -> Any:
        started.set()
        await release.wait()
        return result

    return Tool("work", execute, input_schema={"type": "object"})


def counting_tool(runs: list[str], name: str) -> Tool:
    async def execute(args: dict[str, Any], ctx: ToolContext) -> Any:
        runs.append(name)
        return {"by": name}

    return Tool("work", execute, input_schema={"type": "object"})


async def expire_lease(manager: DistributedTaskManager, task_id: str) -> TaskRecord:
    """Write the lease's end into the past (what a paused owner finds when it wakes up)."""
    current = await manager.storage.get_task(task_id)
    assert current is not None
    past = iso_datetime(utc_now() - timedelta(seconds=1))
    expired = await manager.storage.update_task(task_id, metadata={**current.metadata, "lease_until": past})
    assert expired is not None
    return expired


@pytest.mark.parametrize(("max_retries", "outcome"), [(1, "pending"), (0, "failed")])
async def test_racing_reclaims_of_a_lapsed_lease_have_exactly_one_winner(
    make_manager: MakeManager, max_retries: int, outcome: str
) -> None:
    managers = [make_manager() for _ in range(5)]
    await managers[0].storage.save_task(lapsed_task("t1", max_retries))
    lapsed = await managers[0].storage.get_task("t1")
    assert lapsed is not None

    won = await asyncio.gather(*(m._reclaim(lapsed) for m in managers for _ in range(4)))

    assert won.count(True) == 1
    stored = await managers[0].storage.get_task("t1")
    assert stored is not None and stored.status == outcome and stored.retry_count == max_retries
    assert not {"owner", "lease", "lease_until"} & set(stored.metadata)


async def test_a_reclaim_that_read_the_old_lease_cannot_take_the_next_run(make_manager: MakeManager) -> None:
    """The window a status-only compare-and-set left open: reclaim, a new claim, then a late
    reclaim of the same lapsed read (which sees ``running`` again)."""
    first, late = make_manager(), make_manager()
    await first.storage.save_task(lapsed_task("t1", max_retries=5))
    lapsed = await first.storage.get_task("t1")
    assert lapsed is not None and await first._reclaim(lapsed)
    requeued = await first.storage.get_task("t1")
    assert requeued is not None
    claimed = await first.storage.update_task(
        "t1", expected_status="pending", status="running", metadata=first._claim_metadata(requeued)
    )
    assert claimed is not None

    won = await asyncio.gather(*(late._reclaim(lapsed) for _ in range(10)))

    assert won == [False] * 10
    assert await first.storage.get_task("t1") == claimed


async def test_workers_starting_together_run_a_lapsed_task_exactly_once(make_manager: MakeManager) -> None:
    runs: list[str] = []
    managers = [make_manager(counting_tool(runs, f"w{i}")) for i in range(6)]
    await managers[0].storage.save_task(lapsed_task("t1", max_retries=1))

    await asyncio.gather(*(m.start() for m in managers))  # each one's recovery reclaims, at once
    done = await managers[0].wait_for("t1", timeout_ms=10_000)

    assert done.status == "completed" and done.retry_count == 1
    assert len(runs) == 1 and done.result == {"by": runs[0]}
    assert done.metadata["owner"] in {m.worker_id for m in managers}


async def test_an_owner_that_lost_its_lease_cannot_settle_over_the_new_owner(
    make_manager: MakeManager,
) -> None:
    stale_started, stale_release = asyncio.Event(), asyncio.Event()
    stale_tool = gated_tool("stale", stale_started, stale_release, {"by": "stale"})
    stale_completions: list[TaskRecord] = []
    stale = make_manager(stale_tool, on_task_complete=stale_completions.append)
    await stale.start()
    record = await stale.enqueue(request(stale_tool))
    assert record is not None
    async with asyncio.timeout(10):
        await stale_started.wait()
    await expire_lease(stale, record.id)

    fresh_started, fresh_release = asyncio.Event(), asyncio.Event()
    fresh = make_manager(gated_tool("fresh", fresh_started, fresh_release, {"by": "fresh"}))
    await fresh.start()  # its recovery reclaims the lapsed lease, then it claims the task
    async with asyncio.timeout(10):
        await fresh_started.wait()
    stale_runner = stale._executions[record.id].runner
    assert stale_runner is not None
    stale_release.set()  # the stale owner's tool returns while the new owner's still runs
    done_here, _ = await asyncio.wait({stale_runner}, timeout=10)
    assert done_here and record.id not in stale._executions

    current = await fresh.storage.get_task(record.id)
    assert current is not None and current.status == "running" and current.result is None
    assert current.metadata["owner"] == fresh.worker_id and current.retry_count == 1
    assert stale_completions == []  # the stale owner's compare-and-set failed: nothing announced
    fresh_release.set()
    done = await fresh.wait_for(record.id, timeout_ms=10_000)
    assert done.status == "completed" and done.result == {"by": "fresh"}


async def test_a_renewal_landing_before_a_reclaim_keeps_the_lease(make_manager: MakeManager) -> None:
    started, release = asyncio.Event(), asyncio.Event()
    owner = make_manager(gated_tool("owner", started, release, {"by": "owner"}))
    await owner.start()
    record = await owner.enqueue(request(gated_tool("owner", started, release, {"by": "owner"})))
    assert record is not None
    async with asyncio.timeout(10):
        await started.wait()
    lapsed = await expire_lease(owner, record.id)  # what a reclaiming worker has just read

    assert await owner._renew(owner._executions[record.id])  # the late heartbeat lands first
    assert not await make_manager()._reclaim(lapsed)

    current = await owner.storage.get_task(record.id)
    assert current is not None and current.status == "running" and current.retry_count == 0
    assert current.metadata["lease"] == lapsed.metadata["lease"]
    release.set()
    assert (await owner.wait_for(record.id, timeout_ms=10_000)).result == {"by": "owner"}
