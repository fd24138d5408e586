"""A durable run (``durable_runs=TemporalRuns(...)``) is scored where it runs, as an in-process
run is when its output closes: its agent's ``scorers`` (or the run's own, found by name on the
worker), sampled by the worker's scoring runner, stored in its span store under the run's
resource, in the in-process record's shape. Here the worker is this process
(``run_worker=True``) on the session's Temporal dev server."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from runstream import Agent, Runstream
from runstream.background_scoring import ScoringRunner
from runstream.durable import TemporalRuns
from runstream.errors import InvalidInputError
from runstream.memory import Memory
from runstream.observability import SpanStore, TraceQuery
from runstream.scoring import ScoreInput, Scorer
from runstream.tasks.temporal import TemporalSettings
from runstream.tasks.temporal.devserver import TemporalDevServer
from runstream.testing import ScriptedModel
from tests.conftest import REDIS_URL
from tests.otel_testkit import spans

__all__ = ["spans"]

MEMORY = {"thread": "t1", "resource": "u1"}


def answer(data: ScoreInput) -> tuple[float, str]:
    return 1.0, f"said {data.text!r}"


class Draws:
    """An injected random source: plays ``values`` in order."""

    def __init__(self, *values: float) -> None:
        self.values = list(values)

    def __call__(self) -> float:
        return self.values.pop(0)


def scored_agent() -> Agent:
    return Agent(
        "scored",
        model=ScriptedModel.text("Paris.", "Rome."),
        memory=Memory(),
        scorers={
            "answer": Scorer(id="answer", score=answer, name="Answer"),
            "half": {"scorer": Scorer(id="half", score=answer), "sampling": 0.5},
        },
    )


def build(store: SpanStore, durable_runs: TemporalRuns | None = None) -> Runstream:
    return Runstream(
        agents=[scored_agent()],
        observability=store,
        scorers=[Scorer(id="relevance", score=lambda d: (0.5, "somewhat"))],
        scoring=ScoringRunner(sample=Draws(0.7, 0.2)),  # 'half': skipped, then scored
        durable_runs=durable_runs,
    )


@pytest.fixture
async def durable(
    temporal_server: TemporalDevServer, tmp_path: Path, spans: InMemorySpanExporter
) -> AsyncIterator[Runstream]:
    prefix = f"score-{uuid.uuid4().hex[:10]}"
    runs = TemporalRuns(
        REDIS_URL,
        temporal=TemporalSettings(address=temporal_server.address, task_queue=prefix),
        log_prefix=f"{prefix}:durable",
        run_worker=True,
    )
    async with build(SpanStore(str(tmp_path / "durable.db")), runs) as runtime:
        yield runtime


async def scores_of(runtime: Runstream, run_id: str, resource: str | None = "u1") -> list[dict[str, Any]]:
    """The stored scores of ``run_id`` once the runtime's scoring has ended."""
    await runtime.scoring.join()
    store = runtime.observability
    assert store is not None
    listed, _ = store.list_signals("score", filters={}, page=0, per_page=50, resource_id=resource)
    return sorted((dict(x) for x in listed if x["runId"] == run_id), key=lambda x: str(x["scorerKey"]))


async def two_runs(runtime: Runstream) -> list[list[dict[str, Any]]]:
    agent = runtime.get_agent("scored")
    first = await agent.stream("Capital of France?", memory=MEMORY)
    async with asyncio.timeout(60):
        assert await first.text == "Paris."
    second = await agent.stream("And Italy?", memory=MEMORY, scorers={"named": "relevance", "half": "half"})
    async with asyncio.timeout(60):
        assert await second.text == "Rome."
    return [await scores_of(runtime, first.run_id), await scores_of(runtime, second.run_id)]


async def test_a_durable_run_is_scored_on_its_worker_as_in_process(
    durable: Runstream, tmp_path: Path
) -> None:
    stored = await two_runs(durable)
    assert [[(x["scorerKey"], x["scorerId"], x["reason"]) for x in run] for run in stored] == [
        [("answer", "answer", "said 'Paris.'")],  # 'half' drew 0.7: not this run
        [("half", "half", "said 'Rome.'"), ("named", "relevance", "somewhat")],  # the run's own, by name
    ]
    assert {(x["resourceId"], x["threadId"], x["entityId"], x["source"]) for run in stored for x in run} == {
        ("u1", "t1", "scored", "LIVE")
    }
    assert await scores_of(durable, stored[0][0]["runId"], resource="u2") == []  # another resource's
    # Each score is linked to its run's agent span, opened by the worker's activity: the run is one
    # stored trace, its model call under the agent span.
    store = durable.observability
    assert store is not None
    assert durable._span_processor is not None and durable._span_processor.force_flush()
    for run in stored:
        for score in run:
            assert score["traceId"] is not None and score["spanId"] is not None
            spans = store.get_trace(str(score["traceId"]))
            root = next(span for span in spans if span["parentSpanId"] is None)
            assert (root["spanId"], root["name"], root["metadata"]["runId"]) == (
                score["spanId"],
                "invoke_agent scored",
                score["runId"],
            )
            assert [span["spanType"] for span in spans if span["parentSpanId"] == root["spanId"]] == [
                "model_generation"
            ]
            assert store.list_traces(TraceQuery(filters={"runId": score["runId"]}))[1] == 1  # its only one
    async with build(SpanStore(str(tmp_path / "local.db"))) as local:
        in_process = await two_runs(local)
    ids = ("runId", "traceId", "spanId", "scoreId", "timestamp")
    for durable_run, local_run in zip(stored, in_process, strict=True):
        assert [sorted(x) for x in durable_run] == [sorted(x) for x in local_run]  # the same record shape
        assert [{k: v for k, v in x.items() if k not in ids} for x in durable_run] == [
            {k: v for k, v in x.items() if k not in ids} for x in local_run
        ]


async def test_a_durable_runs_scorers_must_be_known_to_its_workers_by_name(durable: Runstream) -> None:
    agent = durable.get_agent("scored")
    unregistered = Scorer(id="adhoc", score=answer)
    with pytest.raises(
        InvalidInputError, match=r"scorers\['k'\]: a durable run's workers find its scorers by name"
    ):
        await agent.stream("hi", memory=MEMORY, scorers={"k": unregistered})
    with pytest.raises(InvalidInputError, match=r"no scorer 'relevanse'.*did you mean 'relevance'"):
        await agent.stream("hi", memory=MEMORY, scorers={"k": "relevanse"})
