"""The Redis replay log across Redis disconnects: a reader whose connection is killed
(``CLIENT KILL``) mid-stream resubscribes and continues after the last event it delivered,
and a writer's append retried on a fresh connection is applied once."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
import redis
from redis.asyncio import Redis

from runstream.server.redis_replay import RedisReplayLog
from runstream.server.resumable import RunInfo
from tests.conftest import REDIS_URL
from tests.storage.postgres_testkit import IN_CI

EVENTS = 60


@pytest.fixture
def name() -> str:
    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2).ping()
    except Exception as exc:
        if IN_CI:
            pytest.fail(f"CI=true requires Redis ({REDIS_URL}): {exc}")
        pytest.skip(f"Redis unreachable at {REDIS_URL}: {exc}")
    return f"replay-faults-{uuid.uuid4().hex[:12]}"


def named(url: str, name: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}client_name={name}"


async def kill_connections(admin: Redis, name: str) -> int:
    """``CLIENT KILL ID`` every connection named ``name`` (only this test's)."""
    killed = 0
    for client in await admin.client_list():
        if client.get("name") == name:
            killed += int(await admin.client_kill_filter(_id=client["id"]))
    return killed


@pytest.fixture
async def admin() -> AsyncIterator[Redis]:
    client: Redis = Redis.from_url(REDIS_URL, decode_responses=True)
    yield client
    await client.aclose()


async def test_a_killed_reader_resubscribes_and_gets_every_event_once(name: str, admin: Redis) -> None:
    writer = RedisReplayLog(named(REDIS_URL, f"{name}-w"), prefix=name, ttl_s=30)
    reader = RedisReplayLog(named(REDIS_URL, f"{name}-r"), prefix=name, ttl_s=30)
    try:
        await writer.create(RunInfo("r", "a", None))
        got: list[tuple[int, str]] = []
        progress = asyncio.Event()

        async def read() -> None:
            async for event in reader.read("r", 0):
                got.append(event)
                progress.set()

        reading = asyncio.create_task(read())
        kills = 0
        for index in range(1, EVENTS + 1):
            assert await writer.append("r", f"e{index}") == index
            if index % 10 == 0:  # the reader is blocked in XREAD (or reading): kill it
                while len(got) < index:
                    progress.clear()
                    await asyncio.wait_for(progress.wait(), 10)
                kills += await kill_connections(admin, f"{name}-r")
            if index % 15 == 0:
                kills += await kill_connections(admin, f"{name}-w")
        await writer.end("r")
        await asyncio.wait_for(reading, 20)
        assert kills >= 6
        assert got == [(index, f"e{index}") for index in range(1, EVENTS + 1)]
    finally:
        await writer.close()
        await reader.close()
