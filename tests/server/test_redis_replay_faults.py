"""The Redis replay log across Redis disconnects: a reader whose connection is killed
(``CLIENT KILL``) mid-stream resubscribes and continues after the last event it delivered,
and a writer's append retried on a fresh connection is applied once."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator

import httpx2 as httpx
import pytest
import redis
from redis.asyncio import Redis

from runstream.server import create_app
from runstream.server.auth import open_access
from runstream.server.redis_replay import ABANDONED, RedisReplayLog
from runstream.server.resumable import RunInfo
from tests.conftest import REDIS_URL
from tests.server.agents import Gates, build_runstream
from tests.server.conftest import blocks, parse_block, serve
from tests.server.test_redis_replay import URL, drain
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


async def test_a_run_whose_writer_is_gone_ends_with_an_error_for_its_readers(name: str) -> None:
    writer = RedisReplayLog(REDIS_URL, prefix=name, ttl_s=30, lease_ttl_s=0.6)
    reader = RedisReplayLog(REDIS_URL, prefix=name, ttl_s=30, lease_ttl_s=0.6)
    try:
        await writer.create(RunInfo("r", "a", None))
        await writer.append("r", '{"type":"start"}')
        quiet = asyncio.create_task(drain(reader, "r", 0))
        await asyncio.sleep(1.5)  # (a real interval) the writer lives, idle: its lease holds
        assert not quiet.done()
        await writer.append("r", '{"type":"text-delta"}')
        await writer.close()  # its process is gone: nobody holds the lease any more
        got = await asyncio.wait_for(quiet, 10)
        assert [seq for seq, _ in got] == [1, 2, 3, 4]
        assert [json.loads(data)["type"] for _, data in got] == ["start", "text-delta", "error", "finish"]
        assert ABANDONED in json.loads(got[2][1])["payload"]["error"]["message"]
        assert await drain(reader, "r", 2) == got[2:]  # ended once, for every reader
    finally:
        await reader.close()


def test_a_client_reconnecting_elsewhere_after_its_server_died_gets_an_error_and_the_end(name: str) -> None:
    async def dead_server() -> str:
        """A replica that streamed a run's first chunks, then died (never ended the run)."""
        log = RedisReplayLog(REDIS_URL, prefix=name, lease_ttl_s=0.6)
        await log.create(RunInfo("run-1", "assistant", None))
        await log.append(
            "run-1", json.dumps({"type": "start", "runId": "run-1", "from": "AGENT", "payload": {}})
        )
        await log.close()
        return "run-1:1"

    last_id = asyncio.run(dead_server())
    app = create_app(
        build_runstream(Gates()), auth=open_access, replay_log=RedisReplayLog(REDIS_URL, prefix=name)
    )
    with serve(app) as url, httpx.Client(base_url=url, timeout=20) as client:
        body = {"messages": "hello"}
        with client.stream("POST", URL, json=body, headers={"Last-Event-ID": last_id}) as response:
            assert response.status_code == 200
            got = [parse_block(block) for block in blocks(response)]
    frames = [(event_id, data) for event_id, data in got if data is not None]
    assert frames[-1] == (None, "[DONE]")
    assert [event_id for event_id, _ in frames[:-1]] == ["run-1:2", "run-1:3"]
    assert [json.loads(data)["type"] for _, data in frames[:-1]] == ["error", "finish"]
