"""The chunk log of durable runs (Redis): idempotent by sequence number, fenced by attempt, and
read live until its segment ends."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis
from test_temporal_cluster import require_redis

from runstream.durable.log import FencedOffError, RunLog
from tests.conftest import REDIS_URL
from tests.server.test_redis_replay_faults import kill_connections, named


@pytest.fixture
async def log() -> AsyncIterator[RunLog]:
    require_redis()
    run_log = RunLog(REDIS_URL, prefix=f"test-durable-{uuid.uuid4().hex[:12]}", ttl_s=30)
    yield run_log
    await run_log.close()


async def drain(log: RunLog, segment: str, after: int = 0) -> list[tuple[int, str]]:
    return [event async for event in log.read(segment, after)]


async def test_a_step_run_again_adds_only_the_chunks_not_there_yet(log: RunLog) -> None:
    await log.open("r:1")
    reader = asyncio.ensure_future(drain(log, "r:1"))
    assert await log.append_at("r:1", 1, ["first-1", "first-2"], fence=11) == 2
    # The worker died; the step's second attempt publishes the step from its start again.
    assert await log.append_at("r:1", 1, ["second-1", "second-2"], fence=12) == 0
    assert await log.append_at("r:1", 3, ["second-3"], fence=12) == 1
    with pytest.raises(FencedOffError):  # the first attempt, not dead after all, can no longer write
        await log.append_at("r:1", 3, ["first-3", "first-4"], fence=11)
    assert await log.append_at("r:1", 2, ["second-2", "second-3", "second-4"], fence=12) == 1  # overlap
    await log.end("r:1", {"status": "success"})
    assert await reader == [(1, "first-1"), (2, "first-2"), (3, "second-3"), (4, "second-4")]
    assert await drain(log, "r:1", 2) == [(3, "second-3"), (4, "second-4")]
    assert await log.final_state("r:1") == {"status": "success"}
    await log.end("r:1", {"status": "other"})  # once
    assert await log.final_state("r:1") == {"status": "success"}
    with pytest.raises(FencedOffError):  # an ended segment takes nothing more
        await log.append_at("r:1", 5, ["late"], fence=13)


async def test_a_gap_in_the_sequence_is_refused_and_unknown_segments_are_errors(log: RunLog) -> None:
    await log.open("r:2")
    await log.append_at("r:2", 1, ["one"], fence=1)
    with pytest.raises(Exception, match="chunk 3 after 1"):
        await log.append_at("r:2", 3, ["three"], fence=1)
    assert await log.append_at("r:2", 2, [], fence=1) == 0
    with pytest.raises(KeyError):
        await drain(log, "nope")


async def test_an_abort_request_reaches_the_worker_until_cleared(log: RunLog) -> None:
    assert await log.abort_requested("run") is None
    await log.request_abort("run", "client disconnected")
    assert await log.abort_requested("run") == "client disconnected"
    await log.clear_abort("run")
    assert await log.abort_requested("run") is None


async def test_a_reader_whose_connection_is_killed_gets_every_chunk_once() -> None:
    require_redis()
    name = f"test-durable-kill-{uuid.uuid4().hex[:12]}"
    writer = RunLog(REDIS_URL, prefix=name, ttl_s=30)
    reader = RunLog(named(REDIS_URL, f"{name}-r"), prefix=name, ttl_s=30)
    admin: Redis = Redis.from_url(REDIS_URL, decode_responses=True)
    try:
        await writer.open("r:k")
        got: list[tuple[int, str]] = []
        progress = asyncio.Event()

        async def read() -> None:
            async for event in reader.read("r:k"):
                got.append(event)
                progress.set()

        reading = asyncio.create_task(read())
        kills = 0
        for seq in range(1, 41):
            await writer.append_at("r:k", seq, [f"c{seq}"], fence=1)
            if seq % 8 == 0:  # the reader waits in XREAD BLOCK: CLIENT KILL its connection
                while len(got) < seq:
                    progress.clear()
                    await asyncio.wait_for(progress.wait(), 10)
                kills += await kill_connections(admin, f"{name}-r")
        await writer.end("r:k", {"status": "success"})
        await asyncio.wait_for(reading, 20)
        assert kills >= 5
        assert got == [(seq, f"c{seq}") for seq in range(1, 41)]
    finally:
        await writer.close()
        await reader.close()
        await admin.aclose()
