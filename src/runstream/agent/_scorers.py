"""An agent's ``scorers`` score each of its runs that succeeds, after it ends, in the background.

Mastra's ``new Agent({scorers: {key: {scorer, sampling}}})``: when a run ends with success, each
scorer (drawn by its sampling rate) gets the run's input messages and its answer, on the runtime's
:class:`~runstream.background_scoring.ScoringRunner`, never delaying the run's end nor failing
it. Each score is kept as a :class:`~runstream.background_scoring.RunScore`: in the runtime's span
store when it has one (linked to the run's trace and span, under the run's resource, listed by
``GET /api/observability/scores``) and on the run's output (``await out.scores``) in any case. A
scorer that raises or returns no finite number is logged and leaves no score; a full runner skips
the run's scoring with a warning.

A run's own ``scorers`` (Mastra's per-call ``scorers``: ``stream(scorers=...)``, a request's
``scorers``) replace the agent's for that run; those it names are looked up among the agent's and
the runtime's registered scorers (:func:`resolve_scorers`). A durable run is scored the same way
by the worker that ends it (``runstream.durable.activities``).
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Callable, Collection, Mapping
from functools import partial
from typing import TYPE_CHECKING, Protocol

from runstream.background_scoring import (
    MAX_REASON,
    ScoringQueueFullError,
    ScoringRunner,
    score_once,
    uninterrupted,
)
from runstream.observability.store import SpanStore
from runstream.run._prepare_step import InvalidOptionError
from runstream.run._run_scores import RunScore, RunScores
from runstream.run._run_state import LoopConfig, RunState
from runstream.scoring import AgentScorer, RunScorer, ScoreInput, Scorer

if TYPE_CHECKING:
    from runstream.agent._services import RuntimeServices
    from runstream.agent.run_options import RunOptions

logger = logging.getLogger("runstream.scoring")
RunnerSource = Callable[[], ScoringRunner]
StoreSource = Callable[[], SpanStore | None]


class ScoredAgent(Protocol):
    """What a run's scoring needs of its agent (an ``Agent``)."""

    @property
    def id(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def scorers(self) -> Mapping[str, AgentScorer]: ...


class RunScoring:
    """Where an agent's run scores go: the runtime's runner and span store (read when a run ends:
    a runtime may get its store after its agents), or the agent's own runner without a runtime;
    the runtime's registered scorers, which a run's own ``scorers`` may name."""

    __slots__ = ("_own", "durable", "registered_of", "runner_of", "store_of")

    def __init__(self) -> None:
        self._own: ScoringRunner | None = None
        self.runner_of: RunnerSource | None = None
        self.store_of: StoreSource | None = None
        self.registered_of: Callable[[], Mapping[str, Scorer]] | None = None
        self.durable = False
        """Whether the agent's runs run on workers (``runstream.durable``), which find a run's
        own scorers by name."""

    def bind(self, services: RuntimeServices) -> None:
        self.runner_of, self.store_of = services.scoring, services.span_store
        self.registered_of, self.durable = services.scorers, services.durable_runs is not None

    def registered(self) -> Mapping[str, Scorer]:
        return self.registered_of() if self.registered_of is not None else {}

    def chosen(self, agent: ScoredAgent, options: RunOptions, *, strict: bool) -> Mapping[str, AgentScorer]:
        """The scorers of a run: its own ``scorers`` (named ones looked up: :func:`resolve_scorers`)
        or, when it has none, the agent's."""
        if options.scorers is None:
            return agent.scorers
        registered = self.registered()
        return resolve_scorers(options.scorers, agent.scorers, registered, agent_id=agent.id, strict=strict)

    def check(self, agent: ScoredAgent, options: RunOptions) -> None:
        """A new run's own ``scorers``, checked before it starts (:class:`InvalidOptionError`):
        each named one exists; on a durable agent, each given one is also known by its id (its
        workers find it by name)."""
        if options.scorers is None:
            return
        for key, entry in self.chosen(agent, options, strict=True).items():
            if self.durable and _named(entry.scorer.id, agent.scorers, self.registered()) is not entry.scorer:
                raise InvalidOptionError(
                    f"scorers[{key!r}]: a durable run's workers find its scorers by name: register "
                    f"scorer {entry.scorer.id!r} on agent {agent.id!r} or its runtime (Runstream(scorers=...))"
                )

    def finish(
        self, agent: ScoredAgent, cfg: LoopConfig, state: RunState, options: RunOptions
    ) -> RunScores | None:
        """Start the run's scorers on the ended run ``state`` if it succeeded (in-process when its
        output closes, on a worker when a durable run's activity ends it)."""
        if state.status != "success":
            return None
        scorers = self.chosen(agent, options, strict=False)
        return self.start(agent.id, agent.name, scorers, cfg, state, first=agent.scorers) if scorers else None

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
        *,
        first: Collection[str] = (),
    ) -> RunScores:
        """Start the sampled scorers on the ended run ``state``; their scores gather in the result.
        Those under the keys ``first`` (the agent's own) are one batch for the runner, the rest
        (a request's additions) another: more scorers than the runner can hold cost a run its
        added scores, never the author's."""
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
        jobs = {key: partial(_score, key, entry, data, base, store, scores) for key, entry in drawn.items()}
        for batch in (
            [job for key, job in jobs.items() if key in first],
            [job for key, job in jobs.items() if key not in first],
        ):
            try:
                scores.tasks += runner.submit(batch) if batch else []
            except ScoringQueueFullError as exc:
                logger.warning(
                    "Scoring of run %s skipped: %s", state.run_id, exc, extra={"runId": state.run_id}
                )
        return scores


def resolve_scorers(
    chosen: Mapping[str, RunScorer],
    own: Mapping[str, AgentScorer],
    registered: Mapping[str, Scorer],
    *,
    agent_id: str,
    strict: bool,
) -> dict[str, AgentScorer]:
    """A run's own ``scorers`` (Mastra's per-call ``scorers``, which replace the agent's) with
    each one named looked up: a key of the agent's ``scorers``, an id of one of its scorers, or
    the id of a scorer registered on the runtime, in that order (so a name never reaches code
    the app did not register). One that names none is an :class:`InvalidOptionError` with a
    did-you-mean when ``strict`` (a new run: the caller hears of it before it starts), else
    logged and left out (a restored run, on a worker whose runtime may know fewer, as Mastra
    leaves out a name it cannot find)."""
    found: dict[str, AgentScorer] = {}
    for key, entry in chosen.items():
        if isinstance(entry, AgentScorer):
            found[key] = entry
            continue
        scorer = _named(entry.scorer, own, registered)
        if scorer is not None:
            found[key] = AgentScorer(scorer, entry.sampling)
            continue
        known = sorted({*own, *(e.scorer.id for e in own.values()), *registered})
        close = difflib.get_close_matches(entry.scorer, known, n=1)
        message = (
            f"scorers[{key!r}]: no scorer {entry.scorer!r} on agent {agent_id!r} or its runtime"
            + (f"; did you mean {close[0]!r}?" if close else "")
            + f" (known: {', '.join(map(repr, known)) or 'none'})"
        )
        if strict:
            raise InvalidOptionError(message)
        logger.warning("%s; the run is scored without it", message, extra={"agentId": agent_id})
    return found


def _named(name: str, own: Mapping[str, AgentScorer], registered: Mapping[str, Scorer]) -> Scorer | None:
    if name in own:
        return own[name].scorer
    mine = next((entry.scorer for entry in own.values() if entry.scorer.id == name), None)
    return mine if mine is not None else registered.get(name)


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
