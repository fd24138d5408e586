"""Goals: a per-thread objective that a judge checks after every run that ends with the model done.

The objective lives in the thread's state in storage (set, get, update options, clear). While it
is ``active``, each run shows it to the model (``<current-objective>``) and, after the model's
final step, the judge decides: ``done`` (status done), ``continue`` (the loop goes on with the
judge's feedback as a ``system-reminder``), or ``waiting`` (stays active, the loop stops for the
user). Every judgement uses one run of the budget (``max_runs``, default 50); when the budget is
spent the goal is paused with a reason that says to raise ``max_runs``. A judge that fails pauses
the goal too. A paused or done goal is not judged again. No judge, no judging: nothing happens.
"""

from __future__ import annotations

import inspect
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Literal, NotRequired, TypedDict, cast

from pydantic_core import from_json

from runstream._clock import now_utc
from runstream._json import JsonObject
from runstream._payloads import GoalPayload, ScorerResult
from runstream._schema import UNDEFINED, Schema
from runstream.chunks import AgentChunk, DataChunk, GoalChunk
from runstream.errors import InvalidInputError
from runstream.models.base import LanguageModel, ModelRequest, PromptMessage
from runstream.run._run_state import CheckVerdict, LoopConfig, RunState
from runstream.storage import Storage
from runstream.structured import StructuredOutputError

GoalStatus = Literal["active", "paused", "done"]
DEFAULT_MAX_RUNS = 50
STATE_KEY = "goal"
SCORER_ID = "goal-scorer"
SCORER_NAME = "Goal (LLM)"

JUDGE_PROMPT = (
    "You judge whether an assistant has achieved a goal. Your decision controls whether it keeps working.\n\n"
    "Compare what the goal requires with what the assistant actually produced; judge substance, not wording.\n"
    '- "done": every requirement of the goal is met.\n'
    '- "waiting": the goal itself requires a user checkpoint (feedback, confirmation, an external event) and '
    "the assistant has correctly stopped there, or the user asked a question that the assistant answered.\n"
    '- "continue": the goal is not met and the assistant should keep working on its own.\n\n'
    "The reason goes back to the assistant when the goal is not done: say precisely what is still missing."
)


class ObjectiveState(TypedDict):
    """An objective as a thread's state keeps it (Mastra's goal record)."""

    id: str
    objective: str
    status: GoalStatus
    runsUsed: int
    activeDurationMs: int
    startedAt: int
    updatedAt: int
    maxRuns: NotRequired[int]
    prompt: NotRequired[str]
    pausedReason: NotRequired[str]


class _GoalBase(TypedDict):
    objective: str
    maxRuns: int


class Verdict(TypedDict):
    """The judge's answer (checked against :data:`VERDICT_SCHEMA`)."""

    decision: Literal["done", "continue", "waiting"]
    reason: str


VERDICT_SCHEMA: JsonObject = {
    "type": "object",
    "properties": {
        "decision": {"type": "string", "enum": ["done", "continue", "waiting"]},
        "reason": {"type": "string"},
    },
    "required": ["decision", "reason"],
    "additionalProperties": False,
}

_VERDICT = Schema(VERDICT_SCHEMA)

JudgeResolver = Callable[[RunState], LanguageModel | Awaitable[LanguageModel | None] | None]
CustomScorer = Callable[["JudgeInput"], Awaitable[tuple[str, str]]]
"""Returns ``(decision, reason)``; decision is ``done``, ``continue`` or ``waiting``."""


@dataclass(slots=True)
class JudgeInput:
    objective: str
    latest_user_message: str
    latest_assistant_message: str
    steps_since_user: int


@dataclass(slots=True)
class GoalConfig:
    """``goal=`` on an agent: who judges and how many judgements a goal may use."""

    judge: LanguageModel | str | JudgeResolver | None = None
    max_runs: int = DEFAULT_MAX_RUNS
    prompt: str = JUDGE_PROMPT
    scorer: CustomScorer | None = None

    def __post_init__(self) -> None:
        if isinstance(self.judge, str):  # resolved once, at the first judgement
            from runstream.models.registry import ModelString

            self.judge = ModelString(self.judge)


@dataclass(slots=True)
class Objective:
    """The stored goal of a thread."""

    objective: str
    status: GoalStatus = "active"
    runs_used: int = 0
    max_runs: int | None = None
    prompt: str | None = None
    paused_reason: str | None = None
    id: str = ""
    started_at: int = 0
    updated_at: int = 0
    active_duration_ms: int = 0
    """Time spent judging so far (Mastra's ``activeDurationMs``)."""

    def to_state(self) -> ObjectiveState:
        state: ObjectiveState = {
            "id": self.id,
            "objective": self.objective,
            "status": self.status,
            "runsUsed": self.runs_used,
            "activeDurationMs": self.active_duration_ms,
            "startedAt": self.started_at,
            "updatedAt": self.updated_at,
        }
        if self.max_runs is not None:
            state["maxRuns"] = self.max_runs
        if self.prompt is not None:
            state["prompt"] = self.prompt
        if self.paused_reason is not None:
            state["pausedReason"] = self.paused_reason
        return state

    @classmethod
    def from_state(cls, state: ObjectiveState) -> Objective:
        return cls(
            objective=state["objective"],
            status=state.get("status", "active"),
            runs_used=state.get("runsUsed", 0),
            max_runs=state.get("maxRuns"),
            prompt=state.get("prompt"),
            paused_reason=state.get("pausedReason"),
            id=state.get("id", ""),
            started_at=state.get("startedAt", 0),
            updated_at=state.get("updatedAt", 0),
            active_duration_ms=state.get("activeDurationMs", 0),
        )


def _now_ms() -> int:
    return int(time.time() * 1000)


class Goals:
    """Objectives of threads, stored in thread state."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    async def set(
        self, objective: str, *, thread_id: str, max_runs: int | None = None, prompt: str | None = None
    ) -> Objective:
        if not objective.strip():
            raise InvalidInputError("an objective needs some text")
        now = _now_ms()
        record = Objective(
            objective, max_runs=max_runs, prompt=prompt, id=str(uuid.uuid4()), started_at=now, updated_at=now
        )
        await self.storage.set_thread_state(thread_id, STATE_KEY, record.to_state())
        return record

    async def get(self, thread_id: str) -> Objective | None:
        state = await self.storage.get_thread_state(thread_id, STATE_KEY)
        return Objective.from_state(cast(ObjectiveState, state)) if state else None  # as to_state() wrote it

    async def update(
        self,
        thread_id: str,
        *,
        max_runs: int | None = None,
        prompt: str | None = None,
        status: GoalStatus | None = None,
    ) -> Objective | None:
        """Change options of the thread's goal (no-op without one). ``status="active"`` resumes it."""
        record = await self.get(thread_id)
        if record is None:
            return None
        if max_runs is not None:
            record.max_runs = max_runs
        if prompt is not None:
            record.prompt = prompt
        if status is not None:
            record.status = status
            if status != "paused":
                record.paused_reason = None
        await self._save(thread_id, record)
        return record

    async def clear(self, thread_id: str) -> bool:
        return await self.storage.delete_thread_state(thread_id, STATE_KEY)

    async def _save(self, thread_id: str, record: Objective) -> None:
        record.updated_at = _now_ms()
        await self.storage.set_thread_state(thread_id, STATE_KEY, record.to_state())


def objective_signal(record: Objective, thread_id: str, run_id: str) -> tuple[DataChunk, PromptMessage]:
    """The ``current-objective`` state signal: a chunk for the stream, a message for the model."""
    contents = f"\n  {record.objective}\n"
    chunk = DataChunk(
        "data-signal",
        {
            "id": str(uuid.uuid4()),
            "type": "state",
            "tagName": "current-objective",
            "contents": contents,
            "createdAt": now_utc(),
            "attributes": {"status": record.status},
            "metadata": {
                "value": {"objective": record.to_state()},
                "state": {
                    "id": STATE_KEY,
                    # Mastra's key for the signal's content: length-prefixed objective and status.
                    "cacheKey": f"goal:{len(record.objective)}:{record.objective}{len(record.status)}:{record.status}",
                    "mode": "snapshot",
                    "threadId": thread_id,
                    "version": 1,
                },
            },
        },
        run_id=run_id,
        from_="AGENT",
        transient=True,
    )
    message: PromptMessage = {
        "role": "user",
        "content": [
            {
                "type": "text",
                "text": f'<current-objective status="{record.status}">{contents}</current-objective>',
            }
        ],
    }
    return chunk, message


class GoalCheck:
    """The loop's completion check for one run on a thread with an active goal."""

    def __init__(self, goals: Goals, config: GoalConfig, thread_id: str, judge: LanguageModel | None) -> None:
        self.goals = goals
        self.config = config
        self.thread_id = thread_id
        self.judge = judge

    async def __call__(
        self, cfg: LoopConfig, state: RunState, text: str
    ) -> AsyncIterator[AgentChunk | CheckVerdict]:
        record = await self.goals.get(self.thread_id)
        if record is None or record.status != "active":
            return
        max_runs = record.max_runs or self.config.max_runs
        base: _GoalBase = {"objective": record.objective, "maxRuns": max_runs}
        if record.runs_used >= max_runs:  # budget already spent: park it without judging
            reason = _budget_reason(max_runs)
            record.status, record.paused_reason = "paused", reason
            await self.goals._save(self.thread_id, record)
            yield _final(
                state.run_id, base, record, passed=False, reason=reason, results=[], duration=0, budget=True
            )
            yield CheckVerdict(continue_loop=False, authoritative=True)
            return
        iteration = record.runs_used + 1
        pending: GoalPayload = {
            "objective": base["objective"],
            "maxRuns": base["maxRuns"],
            "iteration": iteration,
            "passed": False,
            "status": "active",
            "results": [],
            "duration": 0,
            "timedOut": False,
            "maxRunsReached": False,
            "suppressFeedback": True,
            "pending": True,
        }
        yield GoalChunk(state.run_id, pending.copy())
        started = time.perf_counter()
        judge_input = _judge_input(record.objective, state, text)
        try:
            decision, reason = await self._decide(judge_input, record)
            failed = False
        except Exception as exc:  # a failing judge parks the goal instead of looping forever
            decision, reason, failed = "continue", f"Scorer threw an error: Scorer Run Failed: {exc}", True
        duration = round((time.perf_counter() - started) * 1000)
        record.active_duration_ms += duration
        if not failed and reason:
            yield GoalChunk(
                state.run_id,
                {**pending, "activity": [{"type": "reason", "message": reason}]},
            )
        record.runs_used = iteration
        done = not failed and decision == "done"
        waiting = not failed and decision == "waiting"
        budget = not done and not waiting and not failed and iteration >= max_runs
        if failed:
            record.status, record.paused_reason = "paused", reason
        elif done:
            record.status = "done"
        elif budget:
            record.status, record.paused_reason = "paused", _budget_reason(max_runs)
        await self.goals._save(self.thread_id, record)
        should_continue = not (done or waiting or failed or budget)
        score = 1.0 if done else 0.5 if waiting else 0.0
        results = [] if failed else [_result(score, done, reason, duration)]
        final_reason = record.paused_reason if record.status == "paused" else reason
        final = _final(
            state.run_id,
            base,
            record,
            passed=done,
            reason=final_reason or reason,
            results=results,
            duration=duration,
            budget=budget,
            judge_failed=failed,
            waiting=waiting,
            should_continue=should_continue,
        )
        contents = (
            f"[Goal attempt {iteration}/{max_runs}] The goal is not yet complete. Judge feedback: {reason}\n\n"
            f"Continue working toward the goal: {record.objective}"
            if should_continue
            else f"{record.status} ({iteration}/{max_runs})\n{final_reason or reason}"
        )
        yield _judge_signal(state.run_id, contents, final)
        yield final
        feedback: list[PromptMessage] = [
            {
                "role": "user",
                "content": [
                    {
                        "type": "text",
                        "text": f'<system-reminder type="goal-judge">{contents}</system-reminder>',
                    }
                ],
            }
        ]
        yield CheckVerdict(continue_loop=should_continue, feedback=feedback, authoritative=True)

    async def _decide(self, data: JudgeInput, record: Objective) -> tuple[str, str]:
        if self.config.scorer is not None:
            return await self.config.scorer(data)
        if self.judge is None:
            raise RuntimeError("no judge model")
        request = ModelRequest(
            prompt=[
                {"role": "system", "content": record.prompt or self.config.prompt},
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": _judge_text(data)},
                        {
                            "type": "text",
                            "text": "Answer with JSON only, matching this schema:\n"
                            + json.dumps(VERDICT_SCHEMA),
                        },
                    ],
                },
            ],
            response_format={"type": "json", "schema": VERDICT_SCHEMA},
        )
        stream = await self.judge.stream(request)
        text: list[str] = []
        async for part in stream.parts:
            if part["type"] == "text-delta":
                text.append(part["delta"])
            elif part["type"] == "error":
                raise RuntimeError(str(part.get("error")))
        verdict = _parse_verdict("".join(text))
        return str(verdict["decision"]), str(verdict["reason"])


def _parse_verdict(text: str) -> Verdict:
    """The judge's JSON answer, checked the way Mastra checks structured output (zod's words)."""
    try:
        value = from_json(text) if text.strip() else UNDEFINED
    except ValueError:
        value = UNDEFINED
    problems = _VERDICT.issues(value)
    if problems:
        listed = "\n".join(f"- {path or 'root'}: {message}" for path, message in problems)
        raise StructuredOutputError(f"Structured output validation failed: {listed}")
    return value  # type: ignore[no-any-return]


def _budget_reason(max_runs: int) -> str:
    return (
        f"Ran out of evaluation budget ({max_runs} runs) before reaching the goal — raise maxRuns to resume."
    )


def _result(score: float, passed: bool, reason: str, duration: int) -> ScorerResult:
    return {
        "score": score,
        "passed": passed,
        "reason": reason,
        "scorerId": SCORER_ID,
        "scorerName": SCORER_NAME,
        "duration": duration,
    }


def _final(
    run_id: str,
    base: _GoalBase,
    record: Objective,
    *,
    passed: bool,
    reason: str,
    results: list[ScorerResult],
    duration: int,
    budget: bool,
    judge_failed: bool = False,
    waiting: bool = False,
    should_continue: bool = False,
) -> GoalChunk:
    payload: GoalPayload = {
        "objective": base["objective"],
        "maxRuns": base["maxRuns"],
        "iteration": record.runs_used,
        "passed": passed,
        "status": record.status,
        "judgeFailed": judge_failed,
        "waitingForUser": waiting,
        "results": results,
        "reason": reason,
        "duration": duration,
        "timedOut": False,
        "maxRunsReached": budget,
        "suppressFeedback": False,
        "shouldContinue": should_continue,
    }
    if record.paused_reason and record.status == "paused":
        payload["pausedReason"] = record.paused_reason
    return GoalChunk(run_id, payload)


def _judge_input(objective: str, state: RunState, text: str) -> JudgeInput:
    last_user = ""
    steps = 0
    for message in state.messages:
        if message["role"] == "user":
            last_user = _text_of(message)
            steps = 0
        elif message["role"] == "assistant":
            steps += 1
    return JudgeInput(objective, last_user, text, steps)


def _text_of(message: PromptMessage) -> str:
    if message["role"] == "system":
        return message["content"]
    return "".join(p.get("text", "") for p in message["content"] if p["type"] == "text")


def _judge_text(data: JudgeInput) -> str:
    return (
        f"Goal: {data.objective}\n\nLatest user message:\n{data.latest_user_message}\n\n"
        f"Assistant steps since that user message: {data.steps_since_user}\n\n"
        f"Latest assistant message:\n{data.latest_assistant_message}"
    )


async def resolve_judge(
    judge: LanguageModel | str | JudgeResolver | None, state: RunState
) -> LanguageModel | None:
    """A model, a model string (resolved through the provider registry) or a resolver."""
    if judge is None or isinstance(judge, LanguageModel):
        return judge
    if isinstance(judge, str):
        from runstream.models.registry import resolve_model

        return resolve_model(judge)
    resolved = judge(state)
    if inspect.isawaitable(resolved):
        resolved = await resolved
    return resolved


def _judge_signal(run_id: str, contents: str, final: GoalChunk) -> DataChunk:
    """The judge's verdict as the ``data-signal`` (a system reminder) Mastra streams before it."""
    return DataChunk(
        "data-signal",
        {
            "id": str(uuid.uuid4()),
            "type": "reactive",
            "tagName": "system-reminder",
            "contents": contents,
            "createdAt": now_utc(),
            "acceptedAt": now_utc(),
            "attributes": {"type": "goal-judge"},
            "metadata": {"goalEvaluation": final.payload},
        },
        run_id=run_id,
        from_="AGENT",
        transient=True,
    )


async def attach_goal(
    cfg: LoopConfig, state: RunState, config: GoalConfig, goals: Goals, thread_id: str
) -> None:
    """Show the run the thread's active goal (a ``current-objective`` signal and message) and
    judge it after the run, when a judge or scorer resolves; a new run and a restored one alike."""
    record = await goals.get(thread_id)
    if record is None or record.status != "active":
        return
    judge = await resolve_judge(config.judge, state)
    if judge is None and config.scorer is None:
        return
    signal, message = objective_signal(record, thread_id, state.run_id)
    cfg.start_chunks.append(signal)
    cfg.after_input.append(message)
    cfg.completion_checks.append(GoalCheck(goals, config, thread_id, judge))
