"""Scorers: ``is_task_complete`` checks, and an agent's own ``scorers`` (their configuration).

After a step that ends the model's turn (no tool calls), every ``is_task_complete`` scorer scores
the answer; the loop emits an ``is-task-complete`` chunk and, when the check fails and steps
remain, continues with the results as feedback (an assistant message the model sees next).

An agent's ``scorers`` (:class:`AgentScorer`, Mastra's ``scorers: {key: {scorer, sampling}}``)
score a run after it ends, in the background (``runstream.agent._scorers``).
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import Field

from runstream._config_mapping import CONFIG, Amount, Flag, read_dataclass
from runstream._payloads import IsTaskCompletePayload, ScorerResult
from runstream.chunks import AgentChunk, IsTaskCompleteChunk
from runstream.errors import ConfigurationError, ConfigurationTypeError
from runstream.models.base import PromptMessage
from runstream.run._run_state import CheckVerdict, LoopConfig, RunState


@dataclass(slots=True)
class ScoreInput:
    """What a scorer sees: the final text of the step and the conversation so far."""

    text: str
    messages: list[PromptMessage]
    iteration: int


ScoreFn = Callable[[ScoreInput], Awaitable[tuple[float, str]] | tuple[float, str]]


@dataclass(slots=True)
class Scorer:
    """A named check returning ``(score, reason)``; it passes at ``score >= threshold``."""

    id: str
    score: ScoreFn
    name: str = ""
    description: str = ""
    threshold: float = 1.0

    async def run(self, data: ScoreInput) -> ScorerResult:
        started = time.perf_counter()
        outcome = self.score(data)
        score, reason = await outcome if inspect.isawaitable(outcome) else outcome
        return {
            "score": score,
            "passed": score >= self.threshold,
            "reason": reason,
            "scorerId": self.id,
            "scorerName": self.name or self.id,
            "duration": round((time.perf_counter() - started) * 1000),
        }


Rate = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False, strict=True)]
"""A fraction of runs, from 0 to 1."""


@dataclass(frozen=True, slots=True)
class Sampling:
    """Mastra's ``sampling``: ``{"type": "none"}`` (every run) or ``{"type": "ratio", "rate": r}``."""

    __pydantic_config__ = CONFIG

    type: Literal["none", "ratio"]
    rate: Rate | None = None

    def __post_init__(self) -> None:
        if self.type == "ratio" and self.rate is None:
            raise ConfigurationError("sampling of type 'ratio' needs a 'rate' from 0 to 1")


def sampled_rate(sampling: float | Sampling) -> float:
    """The fraction of runs a ``sampling`` scores."""
    if isinstance(sampling, Sampling):
        return 1.0 if sampling.type == "none" or sampling.rate is None else sampling.rate
    return sampling


MAX_SCORER_NAME = 256


@dataclass(frozen=True, slots=True)
class ScorerRef:
    """A scorer a run's ``scorers`` names instead of giving it (Mastra's ``{scorer: "name",
    sampling}``; all a request over HTTP may give): a key of the agent's ``scorers``, or the id
    of one of its scorers or of a scorer registered on the runtime (``Runstream(scorers=...)``),
    looked up when the run starts (``runstream.agent._scorers.resolve_scorers``)."""

    __pydantic_config__ = CONFIG

    scorer: Annotated[str, Field(min_length=1, max_length=MAX_SCORER_NAME, strict=True)]
    sampling: Rate | Sampling = 1.0

    @property
    def rate(self) -> float:
        return sampled_rate(self.sampling)


@dataclass(frozen=True, slots=True)
class AgentScorer:
    """One of an agent's ``scorers``: ``scorer`` scores a ``sampling`` fraction of its runs (a
    number from 0 to 1, or Mastra's :class:`Sampling`; every run by default)."""

    __pydantic_config__ = CONFIG

    scorer: Scorer
    sampling: Rate | Sampling = 1.0

    def __post_init__(self) -> None:
        if not isinstance(self.scorer, Scorer):
            raise ConfigurationTypeError(f"scorer must be a Scorer, not {type(self.scorer).__name__}")
        rate = self.rate
        if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 <= rate <= 1:
            raise ConfigurationError(f"sampling must be a number from 0 to 1, got {self.sampling!r}")

    @property
    def rate(self) -> float:
        """The fraction of runs scored."""
        return sampled_rate(self.sampling)

    @classmethod
    def coerce_all(
        cls, value: Mapping[str, Scorer | AgentScorer | Mapping[str, object]] | Sequence[Scorer] | None
    ) -> dict[str, AgentScorer]:
        """``Agent(scorers=...)``: a mapping of keys to a :class:`Scorer`, an
        :class:`AgentScorer` or Mastra's ``{"scorer": ..., "sampling": ...}``; or a list of
        scorers (keyed by their ids)."""
        read = _scorer_entries(value, "scorers", names=False)
        return {key: entry for key, entry in read.items() if isinstance(entry, AgentScorer)}


RunScorer = AgentScorer | ScorerRef
"""One of a run's own ``scorers``: a scorer given, or one named (:class:`ScorerRef`)."""


def run_scorers(value: object) -> dict[str, RunScorer]:
    """``stream(scorers=...)``, Mastra's per-call ``scorers``: as ``Agent(scorers=...)`` takes
    them, and also by name (a string, or ``{"scorer": "name", "sampling": ...}``)."""
    return _scorer_entries(value, "scorers", names=True)


def _scorer_entries(value: object, where: str, *, names: bool) -> dict[str, RunScorer]:
    if value is None:
        return {}
    if isinstance(value, Sequence) and not isinstance(value, str):
        value = {_entry_key(item, str(index)): item for index, item in enumerate(value)}
    if not isinstance(value, Mapping):
        raise ConfigurationTypeError(
            f"{where} must be a mapping of names to scorers or a list of Scorer, not {type(value).__name__}"
        )
    read: dict[str, RunScorer] = {}
    for key, entry in value.items():
        if not isinstance(key, str) or not key:
            raise ConfigurationTypeError(f"{where}: a key must be a non-empty string, got {key!r}")
        read[key] = _scorer_entry(entry, f"{where}[{key!r}]", names)
    return read


def _entry_key(item: object, default: str) -> str:
    """A listed scorer's key: its id (a name given is its own key)."""
    return item if isinstance(item, str) else str(getattr(item, "id", default))


def _scorer_entry(entry: object, where: str, names: bool) -> RunScorer:
    if isinstance(entry, AgentScorer):
        return entry
    if isinstance(entry, Scorer):
        return AgentScorer(entry)
    if names and isinstance(entry, ScorerRef):
        return entry
    if names and isinstance(entry, str):
        return read_dataclass(ScorerRef, {"scorer": entry}, where=where)
    if isinstance(entry, Mapping):
        if names and isinstance(entry.get("scorer"), str):
            return read_dataclass(ScorerRef, entry, where=where)
        return read_dataclass(AgentScorer, entry, where=where)
    what = "a Scorer, an AgentScorer, a scorer's name" if names else "a Scorer, an AgentScorer"
    raise ConfigurationTypeError(
        f"{where} must be {what} or a mapping with 'scorer', not {type(entry).__name__}"
    )


_UNSUPPORTED = {"parallel": "scorers always run in parallel", "onComplete": "not implemented"}


@dataclass(slots=True)
class TaskCompletion:
    """``is_task_complete=`` on an agent or a run."""

    __pydantic_config__ = CONFIG

    scorers: Sequence[Scorer]
    strategy: Literal["all", "any"] = "all"
    timeout_ms: Amount = 600_000
    suppress_feedback: Flag = False

    @classmethod
    def coerce(cls, value: TaskCompletion | Mapping[str, Any] | None) -> TaskCompletion | None:
        if value is None or isinstance(value, TaskCompletion):
            return value
        if isinstance(value, Mapping) and "timeout" in value:  # Mastra's name for timeout_ms
            value = {("timeout_ms" if key == "timeout" else key): item for key, item in value.items()}
        return read_dataclass(cls, value, where="is_task_complete", unsupported=_UNSUPPORTED)

    async def check(
        self, cfg: LoopConfig, state: RunState, text: str
    ) -> AsyncIterator[AgentChunk | CheckVerdict]:
        """The loop's completion check: one ``is-task-complete`` chunk and a verdict."""
        iteration = state.check_counts["is-task-complete"] = state.check_counts.get("is-task-complete", 0) + 1
        data = ScoreInput(text=text, messages=list(state.messages), iteration=iteration)
        started = time.perf_counter()
        timed_out = False
        try:
            async with asyncio.timeout(self.timeout_ms / 1000):
                results = list(await asyncio.gather(*(s.run(data) for s in self.scorers)))
        except TimeoutError:
            timed_out = True
            results = []
        duration = round((time.perf_counter() - started) * 1000)
        verdicts = [r["passed"] for r in results]
        passed = bool(verdicts) and (all(verdicts) if self.strategy == "all" else any(verdicts))
        max_reached = not passed and state.step_number >= cfg.max_steps
        reasons = [r["reason"] for r in results if r["passed"] == passed and r.get("reason")]
        payload: IsTaskCompletePayload = {
            "iteration": iteration,
            "passed": passed,
            "results": results,
            "duration": duration,
            "timedOut": timed_out,
            "reason": "; ".join(reasons) if reasons else ("timed out" if timed_out else ""),
            "maxIterationReached": max_reached,
            "suppressFeedback": self.suppress_feedback,
        }
        yield IsTaskCompleteChunk(state.run_id, payload)
        feedback: list[PromptMessage] = (
            [] if passed else [{"role": "assistant", "content": [{"type": "text", "text": _report(payload)}]}]
        )
        yield CheckVerdict(
            continue_loop=not passed,
            feedback=feedback,
            payload_extra={"isTaskCompleteCheckFailed": not passed},
            # The next answer is a new response message: the run's id with the iteration's number.
            next_message_id=f"{state.message_id.removesuffix(f'-{iteration}')}-{iteration + 1}",
        )


def _report(payload: IsTaskCompletePayload) -> str:
    """The feedback the model sees when the check fails."""
    lines = [
        "#### Completion Check Results",
        "",
        f"Overall: {'✅ COMPLETE' if payload['passed'] else '❌ NOT COMPLETE'}",
        f"Duration: {payload['duration']}ms",
    ]
    for result in payload["results"]:
        mark = "✅" if result["passed"] else "❌"
        lines += [
            "",
            f"**{result['scorerName']}** ({result['scorerId']})",
            f"Score: {_js_number(result['score'])} {mark}",
        ]
        if result.get("reason"):
            lines.append(f"Reason: {result['reason']}")
    lines += ["", "🔄 The task is not yet complete. Please continue working based on the feedback above."]
    return "\n".join(lines)


def _js_number(value: float) -> str:
    """A score as JavaScript prints a number (``0``, not ``0.0``)."""
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)
