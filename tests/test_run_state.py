"""A run's state saves and restores itself: ``to_json`` -> ``from_json`` -> continue streams the
same chunks as continuing the live state; older snapshots load, unknown versions fail clearly."""

from __future__ import annotations

import asyncio
import json
import re
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runstream import Agent, ToolContext, tool
from runstream._config_mapping import camel
from runstream.abort import AbortController, AbortSignal
from runstream.agent import client_tool
from runstream.chunks import AnyChunk
from runstream.goals import GoalConfig
from runstream.memory import Memory
from runstream.run._loop import run_output
from runstream.run._run_snapshot import (
    STATE_VERSION,
    SavedOutcome,
    SavedPendingStep,
    SavedRunState,
    SavedToolCall,
    UnsupportedRunStateError,
)
from runstream.run._run_state import (
    LoopConfig,
    PendingToolStep,
    ResumeAction,
    RunState,
    ToolCall,
    ToolOutcome,
)
from runstream.runtime import Runstream
from runstream.storage import SqliteStorage
from runstream.structured import StructuredOutput
from runstream.testing import RecordedCall, ScriptedModel

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
_CLOCK_KEYS = {
    "startedAt",
    "createdAt",
    "updatedAt",
    "timestamp",
    "completedAt",
    "suspendedAt",
    "duration",
    "activeDurationMs",
}
"""Keys whose values are clock readings or measured durations."""


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


def loop_config(model: ScriptedModel, *, structured: bool, durable: bool = False) -> LoopConfig:
    return LoopConfig(
        agent_id="a",
        model=model,
        tools={t.name: t for t in (echo, delete_file, pay, ASK_USER)},
        client_tools=frozenset({"ask_user"}),
        max_steps=20,
        structured_output=StructuredOutput.coerce(ANSWER_SCHEMA) if structured else None,
        durable=durable,
    )


def new_state() -> RunState:
    return RunState(
        run_id="run-1",
        message_id="msg-1",
        messages=[{"role": "user", "content": [{"type": "text", "text": "go"}]}],
        input_count=1,
    )


async def drive(
    cfg: LoopConfig,
    state: RunState,
    first: ResumeAction | None,
    answers: Iterator[bool],
    chunks: list[AnyChunk],
    *,
    round_trip: bool = False,
) -> RunState:
    """Run the loop from ``state`` to its end into ``chunks``, answering every stop for a human
    from ``answers``; with ``round_trip`` the state goes through JSON text at every stop, as a
    restart does. Returns the state it ended with."""
    async for chunk in run_output(cfg, state, first, AbortController()).full_stream:
        chunks.append(chunk)  # one by one: a durable run's snapshot notes how many came before it
    while state.status == "suspended":
        if round_trip:
            saved = json.loads(json.dumps(state.to_json()))
            state = RunState.from_json(saved)
            assert masked(state.to_json()) == masked(saved)  # nothing lost on the way
        action = answer(state, next(answers, True))
        state.status = "running"
        cfg.abort_signal = AbortSignal()
        async for chunk in run_output(cfg, state, action, AbortController()).full_stream:
            chunks.append(chunk)
    return state


async def play(
    script: list[Any], approvals: list[bool], *, structured: bool, round_trip: bool
) -> tuple[list[Any], dict[str, Any]]:
    """Run ``script`` to its end, answering every stop for a human (through JSON with ``round_trip``)."""
    cfg = loop_config(ScriptedModel(calls=script), structured=structured)
    chunks: list[AnyChunk] = []
    state = await drive(cfg, new_state(), None, iter(approvals), chunks, round_trip=round_trip)
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


@dataclass
class Saved:
    """A durable run's snapshot after one step, and how far the run was when it was taken."""

    chunks: int
    model_calls: int
    answers: int
    snapshot: str


async def play_durable(
    script: list[Any], approvals: list[bool], *, structured: bool
) -> tuple[list[AnyChunk], list[Saved]]:
    """A durable run of ``script`` (a snapshot after every step, as a durable agent saves)."""
    model = ScriptedModel(calls=script)
    cfg = loop_config(model, structured=structured, durable=True)
    chunks: list[AnyChunk] = []
    answers = Counted(approvals)
    saved: list[Saved] = []

    async def on_step_end(state: RunState) -> None:
        saved.append(Saved(len(chunks), model.call_count, answers.used, json.dumps(state.to_json())))

    cfg.on_step_end = on_step_end
    await drive(cfg, new_state(), None, answers, chunks)
    return chunks, saved


class Counted(Iterator[bool]):
    """The answers to a run's stops, counting how many were given."""

    def __init__(self, answers: list[bool], used: int = 0) -> None:
        self.answers = answers
        self.used = used

    def __next__(self) -> bool:
        self.used += 1
        return self.answers[self.used - 1] if self.used <= len(self.answers) else True


async def resume_durable(
    script: list[Any], approvals: list[bool], saved: Saved, *, structured: bool
) -> list[AnyChunk]:
    """A new process goes on from ``saved`` (its model plays the calls not made yet, numbered as
    the live model numbers them: the request bodies name the call)."""
    model = ScriptedModel(calls=script)
    model.recorded += [RecordedCall(n, [], [], None, None, False) for n in range(saved.model_calls)]
    cfg = loop_config(model, structured=structured, durable=True)
    state = RunState.from_json(json.loads(saved.snapshot))
    state.status = "running"
    chunks: list[AnyChunk] = []
    await drive(cfg, state, ResumeAction("continue"), Counted(approvals, saved.answers), chunks)
    return chunks


DURABLE_TOOLS = st.sampled_from(["echo", "delete_file", "pay", "ask_user"])
DURABLE_SCRIPTS = st.lists(
    st.lists(DURABLE_TOOLS, min_size=1, max_size=2, unique=True), min_size=1, max_size=4
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=DURABLE_SCRIPTS, approvals=st.lists(st.booleans(), max_size=8), structured=st.booleans())
def test_a_durable_run_restored_after_any_step_goes_on_with_the_same_chunks(
    steps: list[list[str]], approvals: list[bool], structured: bool
) -> None:
    """Every snapshot a durable run saves, read back from JSON in a new process, continues with
    exactly the chunks the live run streamed after it."""
    text = json.dumps({"answer": "done"}) if structured else "done"
    script = [tool_step(number, names) for number, names in enumerate(steps)] + [final_step(text)]
    live, saved = asyncio.run(play_durable(script, approvals, structured=structured))
    # (A step that stopped for a human goes on without a snapshot, as in Mastra; the first step
    # of a run that did not stop is always saved.)
    assert saved or {"delete_file", "pay"} & set(steps[0])
    for point in saved:
        resumed = asyncio.run(resume_durable(script, approvals, point, structured=structured))
        assert wire(resumed) == wire(live[point.chunks :])


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


def _verdict(decision: str) -> list[dict[str, Any]]:
    return _say(json.dumps({"decision": decision, "reason": f"judged {decision}"}))


class _GoalProcess:
    """One process of a goal-judged agent on a shared SQLite file; its model and judge go on
    from the call the previous process reached."""

    def __init__(self, db: Path, script: list[Any], verdicts: list[Any], calls: tuple[int, int]) -> None:
        self.model = ScriptedModel(calls=script)
        self.judge = ScriptedModel(calls=verdicts)
        for model, made in ((self.model, calls[0]), (self.judge, calls[1])):
            model.recorded += [RecordedCall(n, [], [], None, None, False) for n in range(made)]
        self.agent = Agent(
            "ops",
            model=self.model,
            tools=[echo, delete_file, pay],
            memory=Memory(),
            goal=GoalConfig(judge=self.judge, max_runs=3),
        )
        self.runtime = Runstream(agents=[self.agent], storage=SqliteStorage(db))

    @property
    def calls(self) -> tuple[int, int]:
        return self.model.call_count, self.judge.call_count

    async def answer(self, run_id: str, stop: str, approve: bool) -> list[AnyChunk]:
        if stop == "tool-call-suspended":
            out = await self.agent.resume_stream({"confirmed": approve}, run_id=run_id)
        elif approve:
            out = await self.agent.approve_tool_call(run_id=run_id)
        else:
            out = await self.agent.decline_tool_call(run_id=run_id, reason="no")
        return [chunk async for chunk in out.full_stream]


async def _goal_run(
    db: Path, script: list[Any], verdicts: list[Any], approvals: list[bool], *, restart: bool
) -> list[Any]:
    """A goal-judged run that stops for humans; with ``restart`` every answer comes from a new
    process (the run's state and options come back from storage)."""
    process = _GoalProcess(db, script, verdicts, (0, 0))
    await process.runtime.start()
    await process.agent.set_objective("Finish the job", thread_id="t1")
    out = await process.agent.stream("go", memory={"thread": "t1", "resource": "u1"})
    run_id = out.run_id
    chunks = [chunk async for chunk in out.full_stream]
    answers = iter(approvals)
    while chunks[-1].type in ("tool-call-approval", "tool-call-suspended"):
        if restart:
            await process.runtime.close()
            process = _GoalProcess(db, script, verdicts, process.calls)
            await process.runtime.start()
        chunks += await process.answer(run_id, chunks[-1].type, next(answers, True))
    await process.runtime.close()
    return wire(chunks)


GOAL_VERDICTS = st.lists(st.sampled_from(["continue", "done"]), min_size=1, max_size=3)
GOAL_SCRIPTS = st.lists(
    st.lists(st.sampled_from(["echo", "delete_file", "pay"]), min_size=1, max_size=2, unique=True),
    min_size=1,
    max_size=4,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=GOAL_SCRIPTS, verdicts=GOAL_VERDICTS, approvals=st.lists(st.booleans(), max_size=6))
def test_a_goal_run_restored_at_every_stop_streams_the_same_chunks(
    steps: list[list[str]], verdicts: list[str], approvals: list[bool]
) -> None:
    """A run judged against the thread's goal: the objective the model is shown, the judge's
    checks and their feedback turns are the same whether its stops are answered in the process
    that ran it or, from storage, in a new one."""
    script = [tool_step(number, names) for number, names in enumerate(steps)] + [final_step("done")]
    judge = [_verdict(decision) for decision in verdicts]
    with tempfile.TemporaryDirectory() as tmp:
        live = asyncio.run(_goal_run(Path(tmp) / "live.db", script, judge, approvals, restart=False))
        restored = asyncio.run(_goal_run(Path(tmp) / "restart.db", script, judge, approvals, restart=True))
    assert any(chunk["type"] == "goal" for chunk in live)
    assert restored == live


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


NOT_SAVED = {
    RunState: {"error", "span", "saved", "public_steps"},
    PendingToolStep: {"results"},
    ToolCall: {"provider_executed", "chunk_metadata"},
    ToolOutcome: {"call", "run_id"},
}
"""Fields a snapshot leaves out on purpose (see each ``to_json``): any other is saved."""


@pytest.mark.parametrize(
    ("cls", "saved"),
    [
        (RunState, SavedRunState),
        (PendingToolStep, SavedPendingStep),
        (ToolCall, SavedToolCall),
        (ToolOutcome, SavedOutcome),
    ],
)
def test_every_field_is_saved_or_left_out_on_purpose(cls: type[Any], saved: type[Any]) -> None:
    """A field added to the run's state fails here until the snapshot saves it (or says why not)."""
    names = {spec.name for spec in fields(cls)} - NOT_SAVED[cls]
    keys = set(saved.__annotations__) - {"stateVersion", "stepIndex"}
    assert {camel(name) for name in names} == keys


def test_a_snapshot_without_one_of_its_keys_does_not_load() -> None:
    state = RunState.from_json(VERSION_1_SNAPSHOT)
    saved = dict(state.to_json())
    assert RunState.from_json(saved).to_json() == saved
    del saved["hiddenToolErrors"]
    with pytest.raises(UnsupportedRunStateError, match="hiddenToolErrors"):
        RunState.from_json(saved)


def test_a_version_2_snapshot_without_the_keys_added_later_loads_with_their_defaults() -> None:
    saved: dict[str, Any] = dict(RunState.from_json(VERSION_1_SNAPSHOT).to_json())
    for later in ("hiddenToolErrors", "continued", "messageSegments", "checkCounts", "files", "sources"):
        del saved[later]
    del saved["pending"]["suspendedRunIds"]
    state = RunState.from_json({**saved, "stateVersion": 2})
    assert state.hidden_tool_errors == {} and state.continued is None and state.files == []
    assert state.pending is not None and state.pending.suspended_run_ids == {}
