"""The cluster-wide cap on durable runs (``runstream.durable.slots``): a counting semaphore in
Redis whose holders keep leases. At most ``limit`` hold at once, waiters are served in arrival
order, a holder's later attempt takes its slot over, and a killed holder's slot comes back once
its lease runs out."""

from __future__ import annotations

import asyncio
import sys
import textwrap
import time
import uuid
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment
from test_temporal_cluster import require_redis

from runstream import Agent
from runstream.abort import AbortController
from runstream.durable.activities import RunActivities
from runstream.durable.log import RunLog
from runstream.durable.slots import RunSlots, RunSlotsBusyError, SlotsState
from runstream.durable.workflow import Action, StepInput
from runstream.testing import FunctionModel, Text
from tests.conftest import REDIS_URL


@pytest.fixture
async def redis() -> AsyncIterator[Redis]:
    require_redis()
    client = Redis.from_url(REDIS_URL, decode_responses=True)
    yield client
    await client.aclose()


def slots(client: Redis, prefix: str, **options: int) -> RunSlots:
    settings = {"limit": 2, "lease_ms": 10_000, "wait_ms": 30_000, "poll_ms": 5, **options}
    return RunSlots(client, prefix, **settings)


async def test_a_cap_of_two_runs_five_two_at_a_time_in_arrival_order(redis: Redis) -> None:
    cap = slots(redis, f"test-slots-{uuid.uuid4().hex[:12]}")
    running: set[str] = set()
    most = 0
    order: list[str] = []
    entered = {f"run-{n}": asyncio.Event() for n in range(5)}
    finish = {f"run-{n}": asyncio.Event() for n in range(5)}

    async def run(run_id: str) -> None:
        nonlocal most
        async with cap.held(run_id, "attempt-1"):
            running.add(run_id)
            most = max(most, len(running))
            order.append(run_id)
            entered[run_id].set()
            await finish[run_id].wait()
            running.discard(run_id)

    tasks = [asyncio.create_task(run("run-0")), asyncio.create_task(run("run-1"))]
    await entered["run-0"].wait()
    await entered["run-1"].wait()
    for n in range(2, 5):  # they queue in this order (a first try queues), then wait
        assert not await cap.try_acquire(f"run-{n}", "attempt-1")
        tasks.append(asyncio.create_task(run(f"run-{n}")))
    state = await cap.state()
    assert sorted(state.holders) == ["run-0", "run-1"] and state.waiting == ["run-2", "run-3", "run-4"]
    for n in range(5):  # one ends: the first in the queue takes its slot
        finish[f"run-{n}"].set()
        if n + 2 < 5:
            await entered[f"run-{n + 2}"].wait()
    await asyncio.gather(*tasks)
    assert most == 2 and order[2:] == ["run-2", "run-3", "run-4"]
    assert await cap.state() == SlotsState([], [])


async def test_a_later_attempt_takes_its_runs_slot_over_and_the_earlier_cannot_release_it(
    redis: Redis,
) -> None:
    cap = slots(redis, f"test-slots-{uuid.uuid4().hex[:12]}", limit=1)
    assert await cap.try_acquire("run-a", "attempt-1")
    assert await cap.try_acquire("run-a", "attempt-2")  # the same run again after a lost worker
    assert not await cap.try_acquire("run-b", "attempt-1")
    await cap.release("run-a", "attempt-1")  # the lost attempt, not dead after all
    assert not await cap.refresh("run-a", "attempt-1")
    assert (await cap.state()).holders == ["run-a"]
    await cap.release("run-a", "attempt-2")
    assert await cap.try_acquire("run-b", "attempt-1")


async def test_a_wait_past_its_bound_is_refused_and_an_aborted_waiter_leaves_the_queue(
    redis: Redis,
) -> None:
    cap = slots(redis, f"test-slots-{uuid.uuid4().hex[:12]}", limit=1, wait_ms=0)
    assert await cap.try_acquire("run-a", "t")
    with pytest.raises(RunSlotsBusyError, match="waited 0 ms for one of the 1 durable-run slots"):
        await cap.acquire("run-b", "t")
    assert (await cap.state()).waiting == []
    patient = slots(redis, cap.keys[0].rsplit(":", 2)[0], limit=1)
    controller = AbortController()
    assert not await patient.try_acquire("run-c", "t")
    waiter = asyncio.create_task(patient.acquire("run-c", "t", controller.signal))
    assert (await cap.state()).waiting == ["run-c"]
    controller.abort("the client went away")
    assert await waiter is False
    assert await cap.state() == SlotsState(["run-a"], [])


HOLDER = textwrap.dedent(
    """
    import asyncio, sys
    from redis.asyncio import Redis
    from runstream.durable.slots import RunSlots

    async def main() -> None:
        cap = RunSlots(Redis.from_url(sys.argv[1], decode_responses=True), sys.argv[2],
                       limit=1, lease_ms=int(sys.argv[3]), wait_ms=0)
        assert await cap.try_acquire("holder", "t")
        while True:
            assert await cap.refresh("holder", "t")
            print("refreshed", flush=True)
            await asyncio.sleep(int(sys.argv[3]) / 4000)

    asyncio.run(main())
    """
)


async def test_a_killed_holders_slot_comes_back_when_its_lease_runs_out(redis: Redis) -> None:
    prefix = f"test-slots-{uuid.uuid4().hex[:12]}"
    lease_ms = 600
    holder = await asyncio.create_subprocess_exec(
        sys.executable, "-c", HOLDER, REDIS_URL, prefix, str(lease_ms), stdout=asyncio.subprocess.PIPE
    )
    assert holder.stdout is not None
    cap = slots(redis, prefix, limit=1, lease_ms=lease_ms)
    try:
        for _ in range(6):  # longer than a lease: the holder keeps its slot while it lives
            assert await holder.stdout.readline() == b"refreshed\n"
        assert not await cap.try_acquire("waiter", "t")
    finally:
        holder.kill()
        await holder.wait()
    killed = time.monotonic()
    assert await cap.acquire("waiter", "t")
    assert time.monotonic() - killed < lease_ms / 1000 + 1.0
    assert (await cap.state()).holders == ["waiter"]


async def test_a_run_that_waits_past_the_bound_ends_its_activity_for_good(redis: Redis) -> None:
    """On a worker: ``run_step`` of a run that finds every slot held past ``slot_wait_ms``
    fails without a retry (``RunSlotsBusy``), which the run's workflow turns into the run's
    ``error`` and ``finish`` chunks."""
    prefix = f"test-slots-{uuid.uuid4().hex[:12]}"
    log = RunLog(REDIS_URL, prefix=prefix)
    cap = slots(redis, prefix, limit=1, wait_ms=0)
    assert await cap.try_acquire("other-run", "t")
    agent = Agent("a", instructions="-", model=FunctionModel(lambda call: Text("never called")))
    activities = RunActivities({"a": agent}, log, 10_000, cap)
    step = StepInput("run-1", "a", {}, "run-1:s", 0, 10, Action("start"))
    try:
        with pytest.raises(ApplicationError, match="waited 0 ms for one of the 1 durable-run slots") as info:
            await ActivityEnvironment().run(activities.run_step, step)
    finally:
        await log.close()
    assert info.value.type == "RunSlotsBusy" and info.value.non_retryable
    assert (await cap.state()).holders == ["other-run"]
