"""An agent's ``scorers`` score each of its runs that succeeds, after it ends, in the background.

Mastra's ``new Agent({scorers: {key: {scorer, sampling}}})``: when a run ends with success, each
scorer (drawn by its sampling rate) gets the run's input messages and its answer, on the runtime's
:class:`~runstream.background_scoring.ScoringRunner`, never delaying the run's end nor failing
it. Each score is kept as a :class:`~runstream.background_scoring.RunScore`: in the runtime's span
store when it has one (linked to the run's trace and span, under the run's resource, listed by
``GET /api/observability/scores``) and on the run's output (``await out.scores``) in any case. A
scorer that raises or returns no finite number is logged and leaves no score; a full runner skips
the run's scoring with a warning.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from functools import partial

from runstream.background_scoring import (
    MAX_REASON,
    ScoringQueueFullError,
    ScoringRunner,
    score_once,
    uninterrupted,
)
from runstream.observability.store import SpanStore
from runstream.run._run_scores import RunScore, RunScores
from runstream.run._run_state import LoopConfig, RunState
from runstream.scoring import AgentScorer, ScoreInput

logger = logging.getLogger("runstream.scoring")
RunnerSource = Callable[[], ScoringRunner]
StoreSource = Callable[[], SpanStore | None]


class RunScoring:
    """Where an agent's run scores go: the runtime's runner and span store (read when a run ends:
    a runtime may get its store after its agents), or the agent's own runner without a runtime."""

    __slots__ = ("_own", "runner_of", "store_of")

    def __init__(self) -> None:
        self._own: ScoringRunner | None = None
        self.runner_of: RunnerSource | None = None
        self.store_of: StoreSource | None = None

    def runner(self) -> ScoringRunner:
        if self.runner_of is not None:
            return self.runner_of()
        if self._own is None:
            self._own = ScoringRunner()
        return self._own

    def store(self) -> SpanStore | None:
        return self.store_of() if self.store_of is not None else None

    def start(
        self,
        agent_id: str,
        agent_name: str,
        scorers: Mapping[str, AgentScorer],
        cfg: LoopConfig,
        state: RunState,
    ) -> RunScores:
        """Start the sampled scorers on the ended run ``state``; their scores gather in the result."""
        scores = RunScores()
        runner, store = self.runner(), self.store()
        drawn = dict(scores_drawn(scorers, runner))
        if not drawn:
            return scores
        context = dict(store.run_context(state.run_id)) if store is not None and store.run_context else {}
        data = ScoreInput(text=state.text, messages=state.messages[: state.input_count], iteration=1)
        base = {
            "entityId": agent_id,
            "entityName": agent_name,
            "runId": state.run_id,
            "traceId": context.get("traceId"),
            "spanId": context.get("spanId"),
            "resourceId": context.get("resourceId") or cfg.resource_id,
            "threadId": cfg.thread_id,
        }
        jobs = [partial(_score, key, entry, data, base, store, scores) for key, entry in drawn.items()]
        try:
            scores.tasks = runner.submit(jobs)
        except ScoringQueueFullError as exc:
            logger.warning("Scoring of run %s skipped: %s", state.run_id, exc, extra={"runId": state.run_id})
        return scores


def scores_drawn(scorers: Mapping[str, AgentScorer], runner: ScoringRunner) -> list[tuple[str, AgentScorer]]:
    """The scorers that score this run: every one at rate 1, none at rate 0, else when
    ``runner.sample()`` is below its rate (one draw per such scorer, in the agent's order)."""
    return [
        (key, entry)
        for key, entry in scorers.items()
        if entry.rate >= 1 or (entry.rate > 0 and runner.sample() < entry.rate)
    ]


async def _score(
    key: str,
    entry: AgentScorer,
    data: ScoreInput,
    base: Mapping[str, str | None],
    store: SpanStore | None,
    scores: RunScores,
) -> None:
    scorer = entry.scorer
    result = await score_once(
        scorer, data, runId=base["runId"], traceId=base["traceId"], resourceId=base["resourceId"]
    )
    if result is None:
        return
    reason = result["reason"]
    score: RunScore = {
        "scorerId": scorer.id,
        "scorerName": scorer.name or scorer.id,
        "scorerKey": key,
        "score": float(result["score"]),
        "reason": None if reason is None else str(reason)[:MAX_REASON],
        "source": "LIVE",
        "entityType": "AGENT",
        "entityId": str(base["entityId"]),
        "entityName": str(base["entityName"]),
        "runId": str(base["runId"]),
        "traceId": base["traceId"],
        "spanId": base["spanId"],
        "resourceId": base["resourceId"],
        "threadId": base["threadId"],
    }
    if store is not None:
        await uninterrupted(partial(store.add_signal, "score", score, score["resourceId"]))
    scores.scores.append(score)
