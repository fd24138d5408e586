"""The replay log in Redis: resumable streams and observe across API processes.

Two servers (replicas) share one Redis replay log; a client whose stream ran on replica A
reconnects to replica B and gets the rest of the chunks, each exactly once."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator

import httpx2 as httpx
import pytest
import redis
from starlette.applications import Starlette

from runstream.server import create_app
from runstream.server.auth import open_access
from runstream.server.redis_replay import RedisReplayLog
from runstream.server.resumable import ReplayGapError, RunInfo
from tests.conftest import REDIS_URL
from tests.server.agents import Gates, build_runstream
from tests.server.conftest import blocks, parse_block, serve
from tests.storage.postgres_testkit import IN_CI

URL = "/api/agents/assistant/stream-until-idle?resumable=true"


@pytest.fixture
def prefix() -> str:
    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2).ping()
    except Exception as exc:
        if IN_CI:
            pytest.fail(f"CI=true requires Redis ({REDIS_URL}): {exc}")
        pytest.skip(f"Redis unreachable at {REDIS_URL}: {exc}")
    return f"test-replay-{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def log(prefix: str) -> AsyncIterator[RedisReplayLog]:
    replay = RedisReplayLog(REDIS_URL, prefix=prefix, ttl_s=30)
    yield replay
    await replay.close()


async def drain(log: RedisReplayLog, run_id: str, after: int) -> list[tuple[int, str]]:
    return [event async for event in log.read(run_id, after)]


async def test_readers_follow_live_events_and_stop_at_the_end(log: RedisReplayLog) -> None:
    await log.create(RunInfo("r", "a", "owner-1"))
    assert await log.info("r") == RunInfo("r", "a", "owner-1")
    assert await log.append("r", "one") == 1
    reader = asyncio.ensure_future(drain(log, "r", 0))
    late = asyncio.ensure_future(drain(log, "r", 1))
    assert await log.append("r", "two") == 2
    await log.end("r")
    assert await reader == [(1, "one"), (2, "two")]
    assert await late == [(2, "two")]
    assert await drain(log, "r", 2) == []
    await log.create(RunInfo("live", "a", None))
    with pytest.raises(ValueError, match="already streaming"):
        await log.create(RunInfo("live", "a", None))
    await log.create(RunInfo("r", "a", None))  # an ended run's id may start again, empty
    assert await log.append("r", "again") == 1


async def test_trimmed_events_are_a_gap(log: RedisReplayLog, prefix: str) -> None:
    small = RedisReplayLog(REDIS_URL, prefix=prefix, max_events=3)
    await small.create(RunInfo("r", "a", None))
    for n in range(5):
        await small.append("r", str(n))
    await small.end("r")
    with pytest.raises(ReplayGapError):
        await drain(small, "r", 1)
    assert [seq for seq, _ in await drain(small, "r", 2)] == [3, 4, 5]
    await small.close()


async def test_unknown_logs_and_expiry(log: RedisReplayLog) -> None:
    assert await log.info("nope") is None
    with pytest.raises(KeyError):
        await drain(log, "nope", 0)
    await log.create(RunInfo("r", "a", None))
    await log.append("r", "x")
    keys = log._keys("r")[:4]  # (":shared" exists once an event holds a large string)
    live_ttls = [await log.client.ttl(key) for key in keys]
    assert all(0 < ttl <= log.live_ttl_s for ttl in live_ttls), live_ttls
    await log.end("r")
    ended_ttls = [await log.client.ttl(key) for key in keys]
    assert all(0 < ttl <= log.ttl_s for ttl in ended_ttls), ended_ttls


def test_a_client_reconnects_to_another_replica_and_gets_the_rest_once(prefix: str) -> None:
    gates = Gates()
    topic = f"gated-{uuid.uuid4().hex[:8]}"
    body = {"messages": f"research {topic}", "memory": {"thread": f"t-{topic}", "resource": "resumer"}}

    def replica(runstream_gates: Gates) -> Starlette:
        return create_app(
            build_runstream(runstream_gates),
            auth=open_access,
            replay_log=RedisReplayLog(REDIS_URL, prefix=prefix),
        )

    with serve(replica(gates)) as url_a, serve(replica(Gates())) as url_b:
        with httpx.Client(base_url=url_a, timeout=20) as a, a.stream("POST", URL, json=body) as response:
            before = events(response, stop_at="finish")
        gates.open(topic)  # the run goes on in A, with nobody connected
        last_id = before[-1][0]
        assert last_id is not None
        run_id = last_id.rpartition(":")[0]
        with httpx.Client(base_url=url_b, timeout=20) as b:
            with b.stream("POST", URL, json=body, headers={"Last-Event-ID": last_id}) as response:
                after = events(response)
            with b.stream("GET", f"/api/runs/{run_id}/stream") as response:
                everything = events(response)
    assert after[-1] == (None, "[DONE]")
    ids = [event_id for event_id, _ in before + after[:-1]]
    assert ids == [f"{run_id}:{n}" for n in range(1, len(ids) + 1)]  # in order, none twice, none missing
    assert before + after == everything
    kinds = [json.loads(data)["type"] for _, data in everything[:-1]]
    assert kinds.count("finish") == 2 and "background-task-completed" in kinds


def events(response: httpx.Response, stop_at: str | None = None) -> list[tuple[str | None, str]]:
    out: list[tuple[str | None, str]] = []
    for block in blocks(response):
        event_id, data = parse_block(block)
        if data is None:
            continue
        out.append((event_id, data))
        if data == "[DONE]" or (stop_at is not None and json.loads(data)["type"] == stop_at):
            break
    return out
