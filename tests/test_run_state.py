"""A run's state saves and restores itself: ``to_json`` -> ``from_json`` -> continue streams the
same chunks as continuing the live state; older snapshots load, unknown versions fail clearly."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runstream import Agent, ToolContext, tool
from runstream._loop import agent_loop
from runstream._run_state import (
    STATE_VERSION,
    LoopConfig,
    ResumeAction,
    RunState,
    UnsupportedRunStateError,
)
from runstream.abort import AbortSignal
from runstream.agent import client_tool
from runstream.chunks import AnyChunk
from runstream.memory import Memory
from runstream.runtime import Runstream
from runstream.storage import SqliteStorage
from runstream.structured import StructuredOutput
from runstream.testing import ScriptedModel

USAGE = {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2}


@tool
async def echo(text: str) -> dict[str, str]:
    """Echo a text."""
    return {"echo": text}


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


ASK_USER = client_tool("ask_user", input_schema={"type": "object", "properties": {"q": {"type": "string"}}})
ARGS = {
    "echo": {"text": "hi"},
    "delete_file": {"path": "/tmp/x"},
    "pay": {"amount": 3},
    "ask_user": {"q": "?"},
}
ANSWER_SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}


def tool_step(number: int, names: list[str]) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = [{"type": "text-start", "id": f"t{number}"}]
    parts.append({"type": "text-delta", "id": f"t{number}", "delta": f"step {number}"})
    parts.append({"type": "text-end", "id": f"t{number}"})
    for index, name in enumerate(names):
        call_id = f"c{number}_{index}"
        parts.append(
            {"type": "tool-call", "toolCallId": call_id, "toolName": name, "input": json.dumps(ARGS[name])}
        )
    parts.append({"type": "finish", "finishReason": "tool-calls", "usage": USAGE})
    return parts


def final_step(text: str) -> list[dict[str, Any]]:
    return [
        {"type": "reasoning-start", "id": "r"},
        {"type": "reasoning-delta", "id": "r", "delta": "thinking"},
        {"type": "reasoning-end", "id": "r"},
        {"type": "text-start", "id": "f"},
        {"type": "text-delta", "id": "f", "delta": text},
        {"type": "text-end", "id": "f"},
        {"type": "source", "sourceType": "url", "id": "s1", "url": "https://example.com", "title": "Ex"},
        {"type": "finish", "finishReason": "stop", "usage": USAGE},
    ]


_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z?")
_CLOCK_KEYS = {"startedAt", "createdAt", "timestamp", "completedAt", "suspendedAt"}


def masked(value: Any) -> Any:
    """``value`` without what differs between two equal runs: generated ids and clock times."""
    if isinstance(value, dict):
        return {k: "<clock>" if k in _CLOCK_KEYS else masked(v) for k, v in value.items()}
    if isinstance(value, list):
        return [masked(v) for v in value]
    if isinstance(value, str):
        return _TIME.sub("<time>", _UUID.sub("<id>", value))
    return value


def wire(chunks: list[AnyChunk]) -> list[Any]:
    return [masked(json.loads(chunk.to_json())) for chunk in chunks]


def answer(state: RunState, approve: bool) -> ResumeAction:
    pending = state.pending
    assert pending is not None
    if pending.awaiting_approval:
        return ResumeAction("approve" if approve else "decline", reason=None if approve else "no")
    return ResumeAction("resume", data={"confirmed": approve})


async def play(
    script: list[Any], approvals: list[bool], *, structured: bool, round_trip: bool
) -> tuple[list[Any], dict[str, Any]]:
    """Run ``script`` to its end, answering every stop for a human; with ``round_trip`` the state
    goes through JSON text at every stop, as a restart does."""
    model = ScriptedModel(calls=script)
    cfg = LoopConfig(
        agent_id="a",
        model=model,
        tools={t.name: t for t in (echo, delete_file, pay, ASK_USER)},
        client_tools=frozenset({"ask_user"}),
        max_steps=20,
        structured_output=StructuredOutput.coerce(ANSWER_SCHEMA) if structured else None,
    )
    state = RunState(
        run_id="run-1",
        message_id="msg-1",
        messages=[{"role": "user", "content": [{"type": "text", "text": "go"}]}],
        input_count=1,
    )
    chunks = [chunk async for chunk in agent_loop(cfg, state)]
    answers = iter(approvals)
    while state.status == "suspended":
        if round_trip:
            saved = json.loads(json.dumps(state.to_json()))
            state = RunState.from_json(saved)
            assert masked(state.to_json()) == masked(saved)  # nothing lost on the way
        action = answer(state, next(answers, True))
        state.status = "running"
        cfg.abort_signal = AbortSignal()
        chunks += [chunk async for chunk in agent_loop(cfg, state, action)]
    return wire(chunks), masked(state.to_json())


TOOL_NAMES = st.sampled_from(["echo", "delete_file", "pay", "ask_user"])
SCRIPTS = st.lists(st.lists(TOOL_NAMES, min_size=1, max_size=2, unique=True), max_size=4)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=SCRIPTS, approvals=st.lists(st.booleans(), max_size=8), structured=st.booleans())
def test_a_restored_state_continues_with_the_same_chunks(
    steps: list[list[str]], approvals: list[bool], structured: bool
) -> None:
    text = json.dumps({"answer": "done"}) if structured else "done"
    script = [tool_step(number, names) for number, names in enumerate(steps)] + [final_step(text)]
    live = asyncio.run(play(script, approvals, structured=structured, round_trip=False))
    restored = asyncio.run(play(script, approvals, structured=structured, round_trip=True))
    assert restored == live


def _say(text: str) -> list[dict[str, Any]]:
    return [
        {"type": "text-start", "id": "a"},
        {"type": "text-delta", "id": "a", "delta": text},
        {"type": "text-end", "id": "a"},
        {"type": "finish", "finishReason": "stop", "usage": USAGE},
    ]


def _build(db: Path, calls: list[Any]) -> tuple[Runstream, Agent]:
    model = ScriptedModel(calls=calls)
    agent = Agent("ops", model=model, tools=[delete_file], memory=Memory())
    return Runstream(agents=[agent], storage=SqliteStorage(db)), agent


async def _two_approvals(db: Path, *, restart: bool) -> list[dict[str, Any]]:
    """Two approval-gated steps; the second approval comes from a new process when ``restart``."""
    calls = [tool_step(1, ["delete_file"]), tool_step(2, ["delete_file"]), _say("Both deleted.")]
    runtime, agent = _build(db, calls)
    async with runtime:
        out = await agent.stream("Delete two files", memory={"thread": "t1", "resource": "u1"})
        assert [c async for c in out.full_stream][-1].type == "tool-call-approval"
        out = await agent.approve_tool_call(run_id=out.run_id)
        assert [c async for c in out.full_stream][-1].type == "tool-call-approval"
        run_id = out.run_id
        if not restart:
            out = await agent.approve_tool_call(run_id=run_id)
            return [c async for c in out.full_stream][-1].payload["response"]["uiMessages"]  # type: ignore[no-any-return]
    runtime, agent = _build(db, calls[2:])  # a new process: its model goes on where the run is
    async with runtime:
        out = await agent.approve_tool_call(run_id=run_id)
        finish = [c async for c in out.full_stream][-1]
    assert finish.type == "finish"
    return finish.payload["response"]["uiMessages"]  # type: ignore[no-any-return]


async def test_two_approvals_then_a_restart_keep_three_ui_messages(tmp_path: Path) -> None:
    """Each answered pause starts a new response message; a restart used to forget the first
    two (the snapshot dropped ``message_segments``), so the finish showed 2 messages, not 3."""
    live = await _two_approvals(tmp_path / "live.db", restart=False)
    restored = await _two_approvals(tmp_path / "restart.db", restart=True)
    assert len(live) == 3
    assert len(restored) == 3
    assert masked(restored) == masked(live)


VERSION_1_SNAPSHOT: dict[str, Any] = {
    "agentId": "ops",
    "options": {},
    "runId": "r1",
    "messageId": "m1",
    "messages": [
        {"role": "user", "content": [{"type": "text", "text": "go"}]},
        {
            "role": "assistant",
            "content": [{"type": "tool-call", "toolCallId": "c1", "toolName": "pay", "input": {}}],
        },
    ],
    "inputCount": 1,
    "historyCount": 0,
    "steps": [],
    "usage": {},
    "stepNumber": 1,
    "processorRetryCount": 0,
    "backgroundTaskIds": [],
    "waitedTaskIds": [],
    "reasoning": [],
    "toolCalls": [],
    "toolResults": [],
    "suspendPayload": {"question": "?"},
    "pending": {
        "calls": [
            {"toolCallId": "c1", "toolName": "pay", "args": {}, "argsError": None, "providerMetadata": None}
        ],
        "awaitingApproval": [],
        "suspended": {"c1": {"question": "?"}},
        "done": {},
        "stepRecord": {
            "text": "",
            "finishReason": "tool-calls",
            "resume_data": {"c0": 1},
            "approved": ["c0"],
        },
    },
}


def test_a_version_1_snapshot_still_loads() -> None:
    """Snapshots written before the state had a version: missing fields get their defaults and
    the tool step's control keys move out of its step record."""
    state = RunState.from_json(VERSION_1_SNAPSHOT)
    assert state.status == "suspended" and state.message_segments == [] and state.continued is None
    assert state.pending is not None
    assert state.pending.suspended == {"c1": {"question": "?"}}
    assert (state.pending.approved, state.pending.resume_data) == (["c0"], {"c0": 1})
    assert "approved" not in state.pending.step_record and "resume_data" not in state.pending.step_record
    assert state.to_json()["stateVersion"] == STATE_VERSION


@pytest.mark.parametrize("version", [STATE_VERSION + 1, 0, "2"])
def test_an_unknown_version_fails_naming_it(version: Any) -> None:
    with pytest.raises(UnsupportedRunStateError, match=rf"state version {re.escape(repr(version))}"):
        RunState.from_json({**VERSION_1_SNAPSHOT, "stateVersion": version})
