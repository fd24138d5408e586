"""Mastra's durable-agent API: ``listActiveRuns`` with its filters, ``recover`` with callbacks,
``recoverActiveRuns``, recovery at start (``recovery: {durableAgents: "auto"}``) and
``observe``. A run "cut off" here is one whose first process stopped driving it after its first
step was saved; a second agent over the same database (another process, as far as the run's
bookkeeping goes) finds and finishes it."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from runstream import Agent, RunNotFoundError, tool
from runstream.chunks import AnyChunk
from runstream.memory import Memory
from runstream.runtime import Runstream
from runstream.storage import SqliteStorage
from runstream.testing import ScriptedModel

USAGE = {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2}
LOOKUP = [
    {"type": "tool-call", "toolCallId": "c1", "toolName": "lookup", "input": '{"topic":"sol"}'},
    {"type": "finish", "finishReason": "tool-calls", "usage": USAGE},
]
ANSWER = [
    {"type": "text-start", "id": "a"},
    {"type": "text-delta", "id": "a", "delta": "Sol is fast."},
    {"type": "text-end", "id": "a"},
    {"type": "finish", "finishReason": "stop", "usage": USAGE},
]


@tool
async def lookup(topic: str) -> dict[str, str]:
    """Look a topic up."""
    return {"topic": topic, "summary": f"{topic} is fast"}


class Saved(SqliteStorage):
    """Tells when a durable step was saved."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.saved = asyncio.Event()

    async def save_snapshot(self, namespace: str, snapshot_id: str, data: Any) -> None:
        await super().save_snapshot(namespace, snapshot_id, data)
        if namespace == "durable-runs":
            self.saved.set()


def durable(calls: list[Any]) -> tuple[Agent, ScriptedModel]:
    model = ScriptedModel(calls=calls)
    return Agent("researcher", model=model, tools=[lookup], memory=Memory(), durable=True), model


async def cut_off(db: Path, thread: str = "t1", resource: str = "u1") -> str:
    """A durable run whose driver stops after its first step is saved; its id."""
    storage = Saved(db)
    agent, _ = durable([LOOKUP, ANSWER])
    async with Runstream(agents=[agent], storage=storage):
        out = await agent.stream("Research sol", memory={"thread": thread, "resource": resource})
        stream = out.full_stream.__aiter__()
        async with asyncio.timeout(10):
            while not storage.saved.is_set():  # the step is saved as the next one begins
                await anext(stream)
        return out.run_id


async def drain(stream: Any) -> list[AnyChunk]:
    async with asyncio.timeout(10):
        return [chunk async for chunk in stream]


async def test_list_active_runs_filters_and_pages(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    first = await cut_off(db, "t1", "u1")
    second = await cut_off(db, "t2", "u2")
    agent, _ = durable([ANSWER])
    async with Runstream(agents=[agent], storage=SqliteStorage(db)):
        listed = await agent.list_active_runs()
        assert listed["total"] == 2 and {r["runId"] for r in listed["runs"]} == {first, second}
        (run,) = (await agent.list_active_runs(thread_id="t1"))["runs"]
        assert run["runId"] == first and run["status"] == "running" and run["resourceId"] == "u1"
        assert (await agent.list_active_runs(resource_id="u2"))["runs"][0]["runId"] == second
        later = datetime.now(UTC) + timedelta(minutes=1)
        assert (await agent.list_active_runs(from_date=later))["total"] == 0
        assert (await agent.list_active_runs(to_date=later.isoformat()))["total"] == 2
        paged = await agent.list_active_runs(per_page=1, page=1)
        assert paged["total"] == 2 and len(paged["runs"]) == 1
        with pytest.raises(ValueError, match="per_page"):
            await agent.list_active_runs(per_page=0, page=0)


async def test_recover_with_callbacks_and_observe(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    run_id = await cut_off(db)
    agent, model = durable([ANSWER])
    finished: list[dict[str, Any]] = []
    seen: list[str] = []
    async with Runstream(agents=[agent], storage=SqliteStorage(db)):
        out = await agent.recover(run_id, on_finish=finished.append, on_chunk=lambda c: seen.append(c.type))
        watcher = asyncio.ensure_future(drain(await agent.observe(run_id)))  # live, from the start
        chunks = await drain(out.full_stream)
        observed = await watcher
        assert [c.type for c in observed] == [c.type for c in chunks]
        assert chunks[-1].type == "finish" and finished[0]["text"] == "Sol is fast."
        assert "text-delta" in seen
        late = await drain(await agent.observe(run_id, offset=len(chunks) - 1))  # a finished run stays
        assert [c.type for c in late] == ["finish"]
        assert (await agent.list_active_runs())["total"] == 0
        with pytest.raises(TypeError, match="unknown options: max_steps"):
            await agent.recover(run_id, max_steps=2)
        with pytest.raises(RunNotFoundError):
            await agent.observe("no-such-run")
        with pytest.raises(RunNotFoundError):
            await agent.recover("no-such-run", on_suspended=print)
        with pytest.raises(RunNotFoundError):  # the failed recover left nothing to observe
            await agent.observe("no-such-run")
    assert model.call_count == 1


async def test_recovery_at_start(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    run_id = await cut_off(db)
    agent, _ = durable([ANSWER])
    storage = SqliteStorage(db)
    async with Runstream(agents=[agent], storage=storage, recovery={"durableAgents": "auto"}) as runtime:
        (recovery,) = runtime.recoveries
        report = await asyncio.wait_for(recovery, 10)
        assert report["succeeded"] == 1 and report["recovered"] == [{"runId": run_id, "status": "success"}]
        page = await storage.list_messages("t1")
        assert "Sol is fast." in str(page.items[-1].content)
    with pytest.raises(ValueError, match="recovery: unknown option 'durableAgent'"):
        Runstream(recovery={"durableAgent": "auto"})
    with pytest.raises(ValueError, match="must be one of 'auto', 'off'"):
        Runstream(recovery={"durableAgents": "on"})


async def test_recover_active_runs_reports_a_failure_and_goes_on(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    run_id = await cut_off(db)
    agent, _ = durable([ANSWER])
    async with Runstream(agents=[agent], storage=SqliteStorage(db)):
        report = await agent.recover_active_runs(run_id="gone")
        assert report["failed"] == 1 and isinstance(report["recovered"][0]["error"], RunNotFoundError)
        assert (await agent.recover_active_runs(thread_id="t1"))["succeeded"] == 1
        assert (await agent.list_active_runs())["runs"] == []
        assert run_id not in [r["runId"] for r in (await agent.list_active_runs())["runs"]]


async def test_observe_gives_up_on_a_silent_run() -> None:
    from runstream.agent._durable_api import RunLog, observe

    log = RunLog()
    alive = [True, False]
    chunks = await drain(observe(log, "r1", idle_timeout_ms=20, is_alive=lambda: alive.pop(0)))
    assert [c.type for c in chunks] == ["error"] and "idle" in str(chunks[0].payload["error"])


@tool(require_approval=True)
async def publish(summary: str) -> dict[str, str]:
    """Publish a summary (needs approval)."""
    return {"published": summary}


async def test_recover_calls_on_suspended_when_the_run_stops_again(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    run_id = await cut_off(db)
    ask = [
        {"type": "tool-call", "toolCallId": "p1", "toolName": "publish", "input": '{"summary":"sol"}'},
        {"type": "finish", "finishReason": "tool-calls", "usage": USAGE},
    ]
    model = ScriptedModel(calls=[ask])
    agent = Agent("researcher", model=model, tools=[lookup, publish], memory=Memory(), durable=True)
    stopped: list[dict[str, Any]] = []
    async with Runstream(agents=[agent], storage=SqliteStorage(db)):
        chunks = await drain((await agent.recover(run_id, on_suspended=stopped.append)).full_stream)
    assert chunks[-1].type == "tool-call-approval"
    assert stopped == [
        {
            "toolCallId": "p1",
            "toolName": "publish",
            "args": {"summary": "sol"},
            "resumeSchema": stopped[0]["resumeSchema"],
            "type": "approval",
        }
    ]
