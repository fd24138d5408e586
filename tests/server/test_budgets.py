"""Budgets in bytes for what ended runs keep (issue 25, finding 2): the replay log holds a run's
large strings once, however many events carry them, and stays within its per-run and total
byte budgets, forgetting the oldest first; in memory and in Redis."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import httpx2 as httpx
import pytest
import redis
from starlette.applications import Starlette

from runstream import Agent
from runstream.runtime import Runstream
from runstream.server import create_app
from runstream.server.auth import open_access
from runstream.server.redis_replay import RedisReplayLog
from runstream.server.resumable import MIB, InMemoryReplayLog, ReplayGapError, RunInfo, split_large
from runstream.testing import ScriptedModel
from tests.conftest import REDIS_URL
from tests.server.agents import Gates, build_runstream
from tests.server.conftest import BACKENDS, backend_storage, serve
from tests.server.security_kit import by_token
from tests.storage.postgres_testkit import IN_CI

BIG = "x" * 200_000


def event(kind: str, text: str = BIG) -> str:
    return json.dumps({"type": kind, "payload": {"messages": [{"role": "user", "content": text}], "n": 1}})


def test_large_strings_are_cut_out_and_joined_back() -> None:
    data = event("finish", BIG + '\\"quoted\\" é')
    pieces = split_large(data)
    assert len(pieces) == 3 and pieces[1].startswith('"xxx') and "".join(pieces) == data
    assert split_large('{"a":"small"}') == ['{"a":"small"}']


async def drain(log: InMemoryReplayLog | RedisReplayLog, run_id: str, after: int = 0) -> list[str]:
    return [data async for _, data in log.read(run_id, after)]


async def test_an_ended_run_keeps_its_conversation_once() -> None:
    log = InMemoryReplayLog()
    await log.create(RunInfo("r", "a", None))
    sent = [event("start", "hi"), event("step-finish"), event("finish")]
    for data in sent:
        await log.append("r", data)
    await log.end("r")
    assert len(BIG) < log.size < len(BIG) + 1_000  # three events, one copy of the prompt
    assert await drain(log, "r") == sent


async def test_a_run_beyond_its_byte_budget_forgets_its_oldest_events() -> None:
    log = InMemoryReplayLog(max_run_bytes=100_000)
    await log.create(RunInfo("r", "a", None))
    for index in range(30):
        await log.append("r", json.dumps({"i": index, "text": "y" * 10_000}))
    await log.end("r")
    assert log.size <= 100_000
    with pytest.raises(ReplayGapError):
        await drain(log, "r")
    kept = [json.loads(data)["i"] async for _, data in log.read("r", 21)]
    assert kept == list(range(21, 30))


async def test_the_total_budget_forgets_the_oldest_ended_runs_first() -> None:
    log = InMemoryReplayLog(max_total_bytes=1 * MIB)
    await log.create(RunInfo("live", "a", None))
    await log.append("live", event("start", "z" * 300_000))
    for index in range(10):
        await log.create(RunInfo(f"ended-{index}", "a", None))
        await log.append(f"ended-{index}", event("finish", str(index) * 200_000))
        await log.end(f"ended-{index}")
    assert log.size <= 1 * MIB
    assert await log.info("live") is not None  # a live run is not dropped
    assert await log.info("ended-0") is None and await log.info("ended-9") is not None


@pytest.fixture
def redis_log() -> RedisReplayLog:
    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2).ping()
    except Exception as exc:
        if IN_CI:
            pytest.fail(f"CI=true requires Redis ({REDIS_URL}): {exc}")
        pytest.skip(f"Redis unreachable at {REDIS_URL}: {exc}")
    return RedisReplayLog(
        REDIS_URL, prefix=f"test-budget-{uuid.uuid4().hex[:12]}", ttl_s=30, max_run_bytes=600_000
    )


async def test_redis_keeps_large_strings_once_and_within_the_run_budget(redis_log: RedisReplayLog) -> None:
    log = redis_log
    try:
        await log.create(RunInfo("r", "a", None))
        sent = [event("start", "hi"), event("step-finish"), event("finish")]
        for data in sent:
            await log.append("r", data)
        await log.end("r")
        size = int(await log.client.get(log._keys("r")[3]) or 0)
        assert len(BIG) < size < len(BIG) + 1_000
        assert await drain(log, "r", 0) == sent
        await log.create(RunInfo("s", "a", None))
        for index in range(10):
            await log.append("s", json.dumps({"i": index, "text": str(index) * 100_000}))
        await log.end("s")
        assert int(await log.client.get(log._keys("s")[3]) or 0) <= 600_000
        with pytest.raises(ReplayGapError):
            await drain(log, "s", 0)
    finally:
        await log.client.delete(*log._keys("r"), *log._keys("s"))
        await log.close()


async def forget_prefix(log: RedisReplayLog) -> None:
    keys = [key async for key in log.client.scan_iter(match=f"{log.prefix}:*")]
    if keys:
        await log.client.delete(*keys)
    await log.close()


async def test_redis_keeps_all_runs_within_a_total_budget(redis_log: RedisReplayLog) -> None:
    """Before, Redis had no total: every ended run was kept for its TTL whatever they added up
    to (the Redis server's ``maxmemory`` was the only bound). Now the oldest ended runs go first,
    then the oldest events of the largest live run, and the total is counted in Redis."""
    log = redis_log
    log.max_total_bytes, log.max_run_bytes = 1 * MIB, 16 * MIB
    try:
        await log.create(RunInfo("live", "a", None))
        await log.append("live", event("start", "z" * 300_000))
        for index in range(10):
            await log.create(RunInfo(f"ended-{index}", "a", None))
            await log.append(f"ended-{index}", event("finish", str(index) * 200_000))
            await log.end(f"ended-{index}")
            assert await log.total_bytes() <= 1 * MIB
        assert await log.info("live") is not None  # a live run is not dropped
        kept = [index for index in range(10) if await log.info(f"ended-{index}") is not None]
        assert kept == [7, 8, 9]  # the oldest went first
        assert json.loads((await drain(log, "ended-9"))[0])["payload"]["messages"][0]["content"][:3] == "999"
        runs = ("live", *(f"ended-{index}" for index in kept))
        sizes = [int(await log.client.get(log._keys(run)[3]) or 0) for run in runs]
        assert await log.total_bytes() == sum(sizes)  # the count is exact, not an estimate

        for index in range(10):  # no ended run left to forget: the largest live run's oldest events go
            await log.append("live", json.dumps({"i": index, "text": chr(97 + index) * 150_000}))
            assert await log.total_bytes() <= 1 * MIB
        assert [await log.info(f"ended-{index}") for index in kept] == [None] * 3
        with pytest.raises(ReplayGapError):
            await drain(log, "live")
        await log.end("live")
        assert [json.loads(data)["i"] async for _, data in log.read("live", 5)] == list(range(4, 10))

        await log.create(RunInfo("live", "a", None))  # a reused run id starts from nothing
        assert await log.total_bytes() == 0
    finally:
        await forget_prefix(log)


async def test_redis_runs_whose_keys_expired_leave_the_total() -> None:
    """A run's keys expire on their own (its TTL after it ends, or its process died); the next
    append takes its bytes out of the total, so expired runs never count against live ones."""
    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2).ping()
    except Exception as exc:
        if IN_CI:
            pytest.fail(f"CI=true requires Redis ({REDIS_URL}): {exc}")
        pytest.skip(f"Redis unreachable at {REDIS_URL}: {exc}")
    log = RedisReplayLog(REDIS_URL, prefix=f"test-budget-{uuid.uuid4().hex[:12]}", ttl_s=1, live_ttl_s=1)
    try:
        for run in ("ended", "dead"):
            await log.create(RunInfo(run, "a", None))
            await log.append(run, event("finish", "q" * 100_000))
        await log.end("ended")
        assert await log.total_bytes() > 200_000
        deadline = asyncio.get_running_loop().time() + 5  # the keys' own expiry, in Redis
        while await log.client.exists(log._keys("ended")[2], log._keys("dead")[2]):
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.05)
        await log.create(RunInfo("next", "a", None))
        await log.append("next", "{}")
        assert await log.total_bytes() == 2
        assert await log.client.zcard(log._totals[1]) == await log.client.zcard(log._totals[2]) - 1 == 0
    finally:
        await forget_prefix(log)


def test_a_resumable_run_with_a_large_prompt_keeps_it_about_once() -> None:
    """Before: the prompt was kept in step-finish and finish (about 4x, 14 MB for a 3.5 MB prompt)."""
    prompt = "p" * 1_000_000
    agent = Agent("a", model=ScriptedModel.text("ok"))
    app = create_app(Runstream(agents=[agent]), auth=open_access, heartbeat_s=None)
    log = app.state.context.registry.log

    async def run() -> str:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            response = await client.post("/api/agents/a/stream?resumable=true", json={"messages": prompt})
            assert response.status_code == 200, response.text
            return response.text

    text = asyncio.run(run())
    assert text.count(prompt) >= 2  # the events carry it more than once ...
    assert len(prompt) < log.size < 1.2 * len(prompt)  # ... the log keeps it once


@pytest.mark.parametrize("backend", BACKENDS)
def test_workflow_runs_count_with_the_live_run_caps(backend: str, tmp_path: Path) -> None:
    """Finding 3: one tenant started 1,030 long workflow runs, then another tenant got 429."""
    gates = Gates()
    gate = f"g-{uuid.uuid4().hex[:8]}"
    with backend_storage(backend, tmp_path) as storage:
        _workflow_caps(
            create_app(
                build_runstream(gates, storage),
                auth=by_token,
                heartbeat_s=None,
                max_live_runs=3,
                max_live_runs_per_resource=2,
            ),
            gates,
            gate,
        )


def _workflow_caps(app: Starlette, gates: Gates, gate: str) -> None:
    with serve(app) as url:
        a = httpx.Client(base_url=url, headers={"Authorization": "Bearer user-a"}, timeout=20)
        b = httpx.Client(base_url=url, headers={"Authorization": "Bearer user-b"}, timeout=20)
        try:

            def start() -> str:
                return f"/api/workflows/gated/start?runId={uuid.uuid4()}"

            for _ in range(2):
                assert a.post(start(), json={"inputData": {"gate": gate}}).status_code == 200
            refused = a.post(start(), json={"inputData": {"gate": gate}})
            assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
            stream = a.post("/api/agents/assistant/stream?resumable=true", json={"messages": "hi"})
            assert stream.status_code == 429  # agent and workflow runs count together
            assert b.post(start(), json={"inputData": {"gate": gate}}).status_code == 200  # B has room
            assert (
                b.post(start(), json={"inputData": {"gate": gate}}).status_code == 429
            )  # the process is full
        finally:
            gates.open(gate)
            a.close()
            b.close()


def test_a_principal_beyond_its_rate_gets_429_with_retry_after() -> None:
    runtime = Runstream(agents=[Agent("a", model=ScriptedModel.text("ok"))])
    app = create_app(runtime, auth=by_token, heartbeat_s=None, rate_limit="5/minute")

    async def run() -> None:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            a, b = {"Authorization": "Bearer user-a"}, {"Authorization": "Bearer user-b"}
            answers = [(await client.get("/api/agents", headers=a)).status_code for _ in range(6)]
            assert answers == [200] * 5 + [429]
            refused = await client.get("/api/agents", headers=a)
            assert 1 <= int(refused.headers["retry-after"]) <= 60
            assert (await client.get("/api/agents", headers=b)).status_code == 200  # per principal
            assert (await client.get("/health")).status_code == 200

    asyncio.run(run())
