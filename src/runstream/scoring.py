"""``is_task_complete``: scorers that judge the final answer of each loop iteration.

After a step that ends the model's turn (no tool calls), every scorer scores the answer; the loop
emits an ``is-task-complete`` chunk and, when the check fails and steps remain, continues with the
results as feedback (an assistant message the model sees next).
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from runstream._config_mapping import CONFIG, Amount, Flag, read_dataclass
from runstream._payloads import IsTaskCompletePayload, ScorerResult
from runstream.chunks import AgentChunk, IsTaskCompleteChunk
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
