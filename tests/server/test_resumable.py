"""Resumable until-idle streams: a dropped connection loses nothing and stops nothing."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import httpx2 as httpx
import pytest

from runstream.server.resumable import InMemoryReplayLog, ReplayGapError, RunInfo
from tests.server.conftest import Live, blocks, parse_block

URL = "/api/agents/assistant/stream-until-idle?resumable=true"


def _events(response: httpx.Response, stop_at: str | None = None) -> list[tuple[str | None, str]]:
    """``(id, data)`` of each data event (through ``[DONE]``, or the first chunk of type ``stop_at``)."""
    out: list[tuple[str | None, str]] = []
    for block in blocks(response):
        event_id, data = parse_block(block)
        if data is None:
            continue  # a heartbeat
        out.append((event_id, data))
        if data == "[DONE]" or (stop_at is not None and json.loads(data)["type"] == stop_at):
            break
    return out


def _research(live: Live) -> tuple[str, dict[str, Any]]:
    topic = f"gated-{uuid.uuid4().hex[:8]}"
    memory = {"thread": f"t-{topic}", "resource": "resumer"}
    return topic, {"messages": f"research {topic}", "memory": memory}


def test_reconnect_with_last_event_id_gets_every_chunk_exactly_once(live: Live) -> None:
    topic, body = _research(live)
    with httpx.Client(base_url=live.url, timeout=20) as client:
        with client.stream("POST", URL, json=body) as response:
            before = _events(response, stop_at="finish")  # the first turn; the task now waits on the gate
        # The connection is gone. The run goes on without it:
        live.gates.open(topic)
        last_id = before[-1][0]
        assert last_id is not None
        run_id = last_id.rpartition(":")[0]
        with client.stream("POST", URL, json=body, headers={"Last-Event-ID": last_id}) as response:
            after = _events(response)
        with client.stream("GET", f"/api/runs/{run_id}/stream") as response:
            everything = _events(response)
    assert after[-1] == (None, "[DONE]")
    ids = [event_id for event_id, _ in before + after[:-1]]
    assert ids == [f"{run_id}:{n}" for n in range(1, len(ids) + 1)]  # in order, none twice, none missing
    assert before + after == everything
    kinds = [json.loads(data)["type"] for _, data in everything[:-1]]
    assert kinds.count("finish") == 2 and "background-task-completed" in kinds
    assert json.loads(everything[-2][1])["type"] == "finish"


def test_dropping_a_plain_until_idle_stream_cancels_nothing(live: Live, client: httpx.Client) -> None:
    topic, body = _research(live)
    with client.stream("POST", "/api/agents/assistant/stream-until-idle", json=body) as response:
        first = _events(response, stop_at="background-task-started")
    assert all(event_id is None for event_id, _ in first)  # Mastra framing: no ids without opting in
    run_id = json.loads(first[0][1])["runId"]
    live.gates.open(topic)
    with client.stream(
        "POST", "/api/agents/assistant/observe", json={"runId": run_id, "offset": 0}
    ) as response:
        replay = _events(response)
    assert replay[: len(first)] == first
    kinds = [json.loads(data)["type"] for _, data in replay[:-1]]
    assert kinds[-1] == "finish" and kinds.count("start") == 2  # the continuation ran with nobody watching
    tasks = client.get("/api/background-tasks", params={"runId": run_id}).json()
    assert [t["status"] for t in tasks["tasks"]] == ["completed"]


def test_observe_offset_and_after(live: Live, client: httpx.Client) -> None:
    body = {"messages": "research quick", "memory": {"thread": f"t-{uuid.uuid4()}", "resource": "resumer"}}
    with client.stream("POST", URL, json=body) as response:
        full = [d for _, d in _events(response)]
    run_id = json.loads(full[0])["runId"]
    with client.stream(
        "POST", "/api/agents/assistant/observe", json={"runId": run_id, "offset": 3}
    ) as response:
        assert [d for _, d in _events(response)] == full[3:]
    with client.stream("GET", f"/api/runs/{run_id}/stream", params={"after": "5"}) as response:
        tail = _events(response)
    assert [d for _, d in tail] == full[5:] and tail[0][0] == f"{run_id}:6"
    with client.stream("GET", f"/api/runs/{run_id}/stream", headers={"Last-Event-ID": "7"}) as response:
        assert [d for _, d in _events(response)] == full[7:]


def test_unknown_runs(client: httpx.Client) -> None:
    assert client.get("/api/runs/nope/stream").status_code == 404
    observed = client.post("/api/agents/assistant/observe", json={"runId": "nope"})
    assert observed.status_code == 404 and "not found" in observed.json()["error"]
    reconnect = client.post(URL, json={"messages": "hi"}, headers={"Last-Event-ID": "nope:3"})
    assert reconnect.status_code == 404
    assert client.post(URL, json={"messages": "hi"}, headers={"Last-Event-ID": "x"}).status_code == 400
    assert client.post("/api/agents/assistant/observe", json={"offset": 1}).status_code == 400


# -- the replay log itself -------------------------------------------------------------------------


async def _drain(log: InMemoryReplayLog, run_id: str, after: int) -> list[int]:
    return [seq async for seq, _ in log.read(run_id, after)]


async def test_readers_follow_live_events() -> None:
    log = InMemoryReplayLog()
    await log.create(RunInfo("r", "a", None))
    await log.append("r", "1")
    reader = asyncio.ensure_future(_drain(log, "r", 0))
    await asyncio.sleep(0)
    await log.append("r", "2")
    await log.end("r")
    assert await reader == [1, 2]


async def test_trimmed_events_are_a_gap() -> None:
    log = InMemoryReplayLog(max_events=3)
    await log.create(RunInfo("r", "a", None))
    for n in range(5):
        await log.append("r", str(n))
    await log.end("r")
    with pytest.raises(ReplayGapError):
        await _drain(log, "r", 1)
    assert await _drain(log, "r", 2) == [3, 4, 5]


async def test_logs_expire_after_their_run_ends_and_are_bounded() -> None:
    now = [0.0]
    log = InMemoryReplayLog(ttl_s=10, max_runs=2, clock=lambda: now[0])
    for run_id in ("a", "b", "c"):
        await log.create(RunInfo(run_id, "agent", None))
    assert await log.info("a") is not None  # live runs are never evicted
    await log.end("a")
    await log.end("b")
    await log.create(RunInfo("d", "agent", None))
    assert await log.info("a") is None and await log.info("b") is None  # oldest ended first
    await log.end("c")
    now[0] = 9.9
    assert await log.info("c") is not None
    now[0] = 10
    assert await log.info("c") is None
    with pytest.raises(ValueError, match="already streaming"):
        await log.create(RunInfo("d", "agent", None))
