"""An agent's own ``scorers`` (Mastra's ``new Agent({scorers: {key: {scorer, sampling}}})``): after
a run succeeds each scorer gets its input messages and answer in the background, never delaying
the run; sampling draws from the runner's injected random source; a failing scorer is logged and
leaves no score; scores reach ``await out.scores`` and, with a span store, the store linked to the
run's trace under its resource. The option is validated like the agent's others."""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from runstream import Agent, Runstream
from runstream.background_scoring import ScoringRunner
from runstream.errors import ConfigurationTypeError, InvalidInputError
from runstream.memory import Memory
from runstream.models.base import PromptMessage
from runstream.observability import SpanStore
from runstream.scoring import AgentScorer, Sampling, ScoreInput, Scorer
from runstream.testing import ScriptedModel
from tests.otel_testkit import spans

__all__ = ["spans"]


def _said(message: PromptMessage) -> str:
    content = message["content"]
    return content if isinstance(content, str) else "".join(p["text"] for p in content if p["type"] == "text")


def quoting(data: ScoreInput) -> tuple[float, str]:
    """Quotes what the run was asked and what it answered."""
    return 1.0, f"asked {[_said(m) for m in data.messages]}; said {data.text!r}"


def broken(data: ScoreInput) -> tuple[float, str]:
    raise RuntimeError("judge unreachable")


def not_a_number(data: ScoreInput) -> tuple[float, str]:
    return math.inf, "too good"


class Draws:
    """An injected random source: plays ``values`` in order."""

    def __init__(self, *values: float) -> None:
        self.values = list(values)

    def __call__(self) -> float:
        return self.values.pop(0)


async def test_scorers_score_a_run_after_it_ends_with_its_input_and_answer() -> None:
    release = asyncio.Event()

    async def slow(data: ScoreInput) -> tuple[float, str]:
        await release.wait()
        return 0.5, "slow but sure"

    agent = Agent(
        "helper",
        model=ScriptedModel.text("Paris."),
        scorers={
            "quote": Scorer(id="quote", score=quoting, name="Quote"),
            "slow": Scorer(id="slow", score=slow),
        },
    )
    out = await agent.stream("Capital of France?")
    assert await out.text == "Paris."  # the run ended while a scorer still waits
    assert out.scoring is not None and not out.scoring.tasks[1].done()
    release.set()
    scores = await out.scores
    by_key = {score["scorerKey"]: score for score in scores}
    assert by_key["quote"]["reason"] == "asked ['Capital of France?']; said 'Paris.'"
    assert (by_key["quote"]["scorerId"], by_key["quote"]["scorerName"], by_key["slow"]["score"]) == (
        "quote",
        "Quote",
        0.5,
    )
    assert {(s["source"], s["entityType"], s["entityId"], s["runId"]) for s in scores} == {
        ("LIVE", "AGENT", "helper", out.run_id)
    }
    assert by_key["quote"]["traceId"] is None  # no span store: the output holds the scores


async def test_sampling_follows_the_injected_random_source() -> None:
    runtime = Runstream(scoring=ScoringRunner(sample=Draws(0.1, 0.49, 0.5)))
    agent = Agent(
        "sampled",
        model=ScriptedModel.text("one", "two", "three"),
        scorers={
            "always": Scorer(id="always", score=quoting),
            "half": {"scorer": Scorer(id="half", score=quoting), "sampling": {"type": "ratio", "rate": 0.5}},
            "never": AgentScorer(Scorer(id="never", score=quoting), sampling=0),
        },
    )
    runtime.add_agent(agent)
    async with runtime:
        keys = []
        for _ in range(3):
            out = await agent.stream("go")
            keys.append(sorted(score["scorerKey"] for score in await out.scores))
    # one draw per run, for 'half' only: 0.1 and 0.49 are below its rate, 0.5 is not
    assert keys == [["always", "half"], ["always", "half"], ["always"]]


async def test_a_failing_scorer_is_logged_and_never_fails_the_run(caplog: pytest.LogCaptureFixture) -> None:
    agent = Agent(
        "fragile",
        model=ScriptedModel.text("Fine."),
        scorers=[
            Scorer(id="broken", score=broken),
            Scorer(id="inf", score=not_a_number),
            Scorer(id="ok", score=quoting),
        ],
    )
    with caplog.at_level(logging.ERROR, logger="runstream.scoring"):
        result = await agent.generate("hello")
        assert result["text"] == "Fine."
        out = await agent.stream("again")
        scores = await out.scores
    assert [score["scorerId"] for score in scores] == ["ok"]
    failures = [r for r in caplog.records if r.name == "runstream.scoring"]
    assert {r.scorerId for r in failures} == {"broken", "inf"}
    assert all(r.runId in r.getMessage() for r in failures)
    assert any("RuntimeError: judge unreachable" in r.getMessage() for r in failures)


async def test_a_failed_run_is_not_scored() -> None:
    agent = Agent(
        "failing",
        model=ScriptedModel(calls=[{"throwOnCall": "model exploded"}]),
        scorers={"quote": Scorer(id="quote", score=quoting)},
    )
    out = await agent.stream("hi")
    await out.consume()
    assert out.status == "failed" and await out.scores == [] and out.scoring is None


@pytest.fixture
def stored(tmp_path: Path, spans: InMemorySpanExporter) -> Iterator[SpanStore]:
    yield SpanStore(str(tmp_path / "spans.db"))


async def test_scores_are_stored_with_the_runs_trace_and_resource(stored: SpanStore) -> None:
    agent = Agent(
        "remembering",
        model=ScriptedModel.text("Noted."),
        memory=Memory(),
        scorers={"quote": Scorer(id="quote", score=quoting, name="Quote")},
    )
    runtime = Runstream(agents=[agent], observability=stored)
    async with runtime:
        out = await agent.stream("note this", memory={"thread": "t1", "resource": "user-a"})
        (score,) = await out.scores
    listed, total = stored.list_signals("score", filters={}, page=0, per_page=10, resource_id="user-a")
    assert total == 1 and listed[0]["scorerKey"] == "quote" and listed[0]["runId"] == out.run_id
    run_span = next(s for s in stored.get_trace(str(score["traceId"])) if s["spanType"] == "agent_run")
    assert (score["spanId"], run_span["runId"]) == (run_span["spanId"], out.run_id)
    assert (score["resourceId"], score["threadId"]) == ("user-a", "t1")
    assert stored.list_signals("score", filters={}, page=0, per_page=10, resource_id="user-b") == ([], 0)


def test_the_scorers_option_is_checked() -> None:
    scorer = Scorer(id="s", score=quoting)
    model = ScriptedModel.text("x")
    agent = Agent("a", model=model, scorers={"k": {"scorer": scorer, "sampling": {"type": "none"}}})
    assert agent.scorers["k"] == AgentScorer(scorer, Sampling("none")) and agent.scorers["k"].rate == 1.0
    assert list(Agent("b", model=model, scorers=[scorer]).scorers) == ["s"]
    for bad, error, words in (
        ({"k": {"scorer": scorer, "smapling": 0.5}}, InvalidInputError, "did you mean 'sampling'"),
        (
            {"k": {"scorer": scorer, "sampling": 1.5}},
            InvalidInputError,
            "scorers['k'].sampling must be at most 1",
        ),
        ({"k": {"scorer": scorer, "sampling": {"type": "ratio"}}}, InvalidInputError, "needs a 'rate'"),
        ({"k": {"sampling": 0.5}}, InvalidInputError, "scorers['k'] needs 'scorer'"),
        ({"k": 5}, ConfigurationTypeError, "scorers['k'] must be a Scorer"),
        (5, ConfigurationTypeError, "scorers must be a mapping"),
    ):
        with pytest.raises(error, match=words.replace("[", r"\[").replace("]", r"\]").replace(".", r"\.")):
            Agent("c", model=model, scorers=bad)  # type: ignore[arg-type]


async def test_a_full_runner_skips_the_runs_scoring_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    runtime = Runstream(scoring=ScoringRunner(concurrency=1, max_pending=1))
    agent = runtime.add_agent(
        Agent(
            "busy",
            model=ScriptedModel.text("ok"),
            scorers=[Scorer(id="one", score=quoting), Scorer(id="two", score=quoting)],
        )
    )
    with caplog.at_level(logging.WARNING, logger="runstream.scoring"):
        out = await agent.stream("hi")
        assert await out.text == "ok" and await out.scores == []  # the run ended all the same
    (warning,) = [r for r in caplog.records if r.name == "runstream.scoring"]
    assert (
        f"Scoring of run {out.run_id} skipped: Scoring queue is full (0 of 1 scorer runs pending, 2 more asked)"
        in warning.getMessage()
    )
    await runtime.close()
