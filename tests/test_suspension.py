"""Runs that stop for a human survive a restart: approve, decline or resume from a new process."""

from __future__ import annotations

import asyncio
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from runstream import Agent, RunNotFoundError, ToolContext, tool
from runstream.chunks import AnyChunk
from runstream.memory import Memory
from runstream.runtime import Runstream
from runstream.storage import SqliteStorage
from runstream.testing import ScriptedModel

USAGE = {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2}
MEMORY = {"thread": "t1", "resource": "u1"}


def call(name: str, args: str) -> list[dict[str, Any]]:
    return [
        {"type": "tool-call", "toolCallId": "c1", "toolName": name, "input": args},
        {"type": "finish", "finishReason": "tool-calls", "usage": USAGE},
    ]


def say(text: str) -> list[dict[str, Any]]:
    return [
        {"type": "text-start", "id": "a"},
        {"type": "text-delta", "id": "a", "delta": text},
        {"type": "text-end", "id": "a"},
        {"type": "finish", "finishReason": "stop", "usage": USAGE},
    ]


@tool(require_approval=True)
async def delete_file(path: str) -> dict[str, str]:
    """Delete a file."""
    return {"deleted": path}


@tool(resume_schema={"type": "object", "properties": {"confirmed": {"type": "boolean"}}})
async def pay(amount: int, ctx: ToolContext) -> dict[str, Any]:
    """Pay an amount after the user confirms."""
    if ctx.resume_data is None:
        await ctx.suspend({"question": f"Pay {amount} EUR?"})
    return {"paid": bool(ctx.resume_data["confirmed"]), "amount": amount}


def build(db: Path, calls: list[Any]) -> tuple[Runstream, Agent, ScriptedModel]:
    model = ScriptedModel(calls=calls)
    agent = Agent("ops", instructions="Be careful.", model=model, tools=[delete_file, pay], memory=Memory())
    return Runstream(agents=[agent], storage=SqliteStorage(db)), agent, model


async def drain(chunks: Any) -> list[AnyChunk]:
    return [chunk async for chunk in chunks]


async def start(db: Path, calls: list[Any], message: str) -> str:
    runtime, agent, _ = build(db, calls)
    async with runtime:
        out = await agent.stream(message, memory=MEMORY)
        chunks = await drain(out.full_stream)
        assert chunks[-1].type in ("tool-call-approval", "tool-call-suspended")
        return out.run_id


async def test_approve_after_a_restart(tmp_path: Path) -> None:
    db = tmp_path / "rs.db"
    run_id = await start(db, [call("delete_file", '{"path":"/tmp/x"}')], "Delete /tmp/x")
    runtime, agent, model = build(db, [say("Deleted.")])  # a new process: nothing shared in memory
    async with runtime:
        waiting = await agent.suspended_run(run_id)
        assert waiting is not None and waiting.awaiting_approval == ["c1"]
        assert (waiting.thread_id, waiting.resource_id) == ("t1", "u1")
        chunks = await drain((await agent.approve_tool_call(run_id=run_id, tool_call_id="c1")).full_stream)
        assert [c.type for c in chunks if c.type in ("tool-result", "finish")] == ["tool-result", "finish"]
        assert next(c for c in chunks if c.type == "tool-result").payload["result"] == {"deleted": "/tmp/x"}
        # The model saw the conversation restored from the snapshot.
        prompt = model.recorded[0].prompt
        assert [m["role"] for m in prompt] == ["system", "user", "assistant", "tool"]
        assert await agent.suspended_run(run_id) is None  # done: the snapshot is gone
        history = await agent.memory.load_prompt(_scope())  # type: ignore[union-attr]
        assert [m["role"] for m in history] == ["user", "assistant", "tool", "assistant"]
        with pytest.raises(RunNotFoundError):
            await agent.approve_tool_call(run_id=run_id)


async def test_decline_after_a_restart(tmp_path: Path) -> None:
    db = tmp_path / "rs.db"
    run_id = await start(db, [call("delete_file", '{"path":"/etc"}')], "Delete /etc")
    runtime, agent, model = build(db, [say("Understood, not deleting.")])
    async with runtime:
        out = await agent.decline_tool_call(run_id=run_id, reason="Too dangerous")
        chunks = await drain(out.full_stream)
    denied = next(c for c in chunks if c.type == "tool-output-denied")
    assert denied.payload["approval"] == {"id": "c1", "approved": False, "reason": "Too dangerous"}
    tool_message = model.recorded[0].prompt[-1]
    assert tool_message["content"][0]["output"] == {"type": "text", "value": "Too dangerous"}  # as Mastra


async def test_resume_a_suspended_tool_from_another_process(tmp_path: Path) -> None:
    db = tmp_path / "rs.db"
    script = textwrap.dedent(
        f"""
        import asyncio, sys
        sys.path.insert(0, {str(Path(__file__).parent.parent)!r})
        from tests.test_suspension import call, start
        print(asyncio.run(start(__import__("pathlib").Path({str(db)!r}), [call("pay", '{{"amount":30}}')], "Pay")))
        """
    )
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, stdout=asyncio.subprocess.PIPE
    )
    stdout, _ = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0
    run_id = stdout.decode().strip()
    runtime, agent, _ = build(db, [say("Paid.")])
    async with runtime:
        waiting = await agent.suspended_run(run_id)
        assert waiting is not None and waiting.suspended == {"c1": {"question": "Pay 30 EUR?"}}
        with pytest.raises(ValueError, match="not suspended"):
            await agent.resume_stream({"confirmed": True}, run_id=run_id, tool_call_id="nope")
        chunks = await drain((await agent.resume_stream({"confirmed": True}, run_id=run_id)).full_stream)
    result = next(c for c in chunks if c.type == "tool-result")
    assert result.payload["result"] == {"paid": True, "amount": 30}
    assert chunks[-1].type == "finish"


def _scope() -> Any:
    from runstream.memory import MemoryScope

    return MemoryScope("t1", "u1")
