"""Durable agents: a run cut off by a process crash is resumed by the next process from its
last finished step, waiting for (and reporting) the background task that was recovered."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from runstream import Agent, RunNotFoundError, ToolContext, tool
from runstream.memory import Memory
from runstream.runtime import Runstream
from runstream.storage import SqliteStorage
from runstream.testing import ScriptedModel

USAGE = {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2}
FIRST_STEP = [
    {"type": "tool-call", "toolCallId": "c1", "toolName": "research", "input": '{"topic":"sol"}'},
    {"type": "finish", "finishReason": "tool-calls", "usage": USAGE},
]
ANSWER = [
    {"type": "text-start", "id": "a"},
    {"type": "text-delta", "id": "a", "delta": "Sol is fast."},
    {"type": "text-end", "id": "a"},
    {"type": "finish", "finishReason": "stop", "usage": USAGE},
]


class SnapshotWatch(SqliteStorage):
    """Tells when the durable run's first step has been saved."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.saved = asyncio.Event()

    async def save_snapshot(self, namespace: str, snapshot_id: str, data: Any) -> None:
        await super().save_snapshot(namespace, snapshot_id, data)
        if namespace == "durable-runs":
            self.saved.set()


def build(db: Path, calls: list[Any], *, crash: bool) -> tuple[Runstream, Agent, ScriptedModel]:
    storage = SnapshotWatch(db)

    @tool(background={"enabled": True, "maxRetries": 1})
    async def research(topic: str, ctx: ToolContext) -> dict[str, str]:
        """Research a topic (slow)."""
        if crash:  # the first process dies while the task runs, after its step was saved
            await storage.saved.wait()
            os._exit(9)
        return {"topic": topic, "summary": f"{topic} is fast"}

    model = ScriptedModel(calls=calls)
    agent = Agent("durable", model=model, tools=[research], memory=Memory(), durable=True)
    runtime = Runstream(agents=[agent], storage=storage, background_tasks={"enabled": True})
    return runtime, agent, model


async def crashing_process(db: Path) -> None:
    runtime, agent, _ = build(db, [FIRST_STEP, ANSWER], crash=True)
    async with runtime:
        out = await agent.stream("Research sol", memory={"thread": "t1", "resource": "u1"})
        async for _ in out.full_stream:
            pass


async def test_a_durable_run_cut_off_by_a_crash_resumes_in_a_new_process(tmp_path: Path) -> None:
    db = tmp_path / "rs.db"
    script = (
        f"import asyncio, sys, pathlib; sys.path.insert(0, {str(Path(__file__).parent.parent)!r}); "
        f"from tests.test_durable import crashing_process; asyncio.run(crashing_process(pathlib.Path({str(db)!r})))"
    )
    process = await asyncio.create_subprocess_exec(sys.executable, "-c", script)
    assert await asyncio.wait_for(process.wait(), 60) == 9  # it died mid-task

    runtime, agent, model = build(db, [ANSWER], crash=False)
    async with runtime:  # recovery re-dispatches the task (it has a retry left)
        assert await agent.durable_runs() != []
        (run_id,) = await agent.durable_runs()
        out = await agent.resume_durable_run(run_id)
        async with asyncio.timeout(10):
            chunks = [chunk async for chunk in out.full_stream]
        kinds = [c.type for c in chunks]
        assert kinds[-1] == "finish" and "start" not in kinds
        result = next(c for c in chunks if c.type == "tool-result")
        assert result.payload["result"] == {"topic": "sol", "summary": "sol is fast"}
        assert kinds.index("tool-result") < kinds.index("step-start")
        # The answer step saw the real result, and the run is no longer listed.
        outputs = [p["output"] for m in model.recorded[0].prompt if m["role"] == "tool" for p in m["content"]]
        assert outputs == [{"type": "json", "value": {"topic": "sol", "summary": "sol is fast"}}]
        assert await agent.durable_runs() == []
        with pytest.raises(RunNotFoundError):
            await agent.resume_durable_run(run_id)
