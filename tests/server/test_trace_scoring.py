"""Registered scorers (``Runstream(scorers=...)``): listed at ``/api/scores/scorers`` in Mastra's
entries, and run over a stored trace by ``POST /api/observability/traces/score`` (what Studio's
"Score trace" sends); the score is listed with the trace's and its span's scores. On SQLite and
PostgreSQL span stores; another resource's trace is a 404 like a missing one."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from runstream import _tracing as tracing
from runstream.models.base import PromptMessage
from runstream.observability import PostgresSpanStore, SpanStore
from runstream.scoring import ScoreInput, Scorer
from runstream.storage import SqliteStorage
from tests.conftest import POSTGRES_URL
from tests.otel_testkit import spans
from tests.server.agents import Gates, build_runstream
from tests.server.security_kit import Secured, serve_secured
from tests.server.test_observability_api import OBS, a_traced_run
from tests.storage.postgres_testkit import drop_schema, require_postgres, unreachable_reason

__all__ = ["spans"]


def echo(data: ScoreInput) -> tuple[float, str]:
    """Scores 1 when the run answered; its reason quotes what it was asked and said."""
    asked = " ".join(_said(m) for m in data.messages)
    return (1.0 if data.text else 0.0), f"asked {asked!r}; said {data.text!r}"


def _said(message: PromptMessage) -> str:
    content = message["content"]
    return content if isinstance(content, str) else "".join(p["text"] for p in content if p["type"] == "text")


def broken(data: ScoreInput) -> tuple[float, str]:
    raise RuntimeError("judge unreachable")


@pytest.fixture(params=["sqlite", "postgres"])
def scored(request: pytest.FixtureRequest, tmp_path: Path, spans: InMemorySpanExporter) -> Iterator[Secured]:
    """A served runtime with registered scorers and a span store keeping message content."""
    runtime = build_runstream(Gates(), SqliteStorage(tmp_path / "runstream.db"))
    runtime.scorers = {
        "echo": Scorer(id="echo", score=echo, name="Echo", description="Quotes the run"),
        "broken": Scorer(id="broken", score=broken),
    }
    if request.param == "postgres":
        require_postgres(unreachable_reason())
        store: SpanStore = PostgresSpanStore(POSTGRES_URL, schema=f"scoring_test_{uuid.uuid4().hex}")
    else:
        store = SpanStore(str(tmp_path / "runstream.db"))
    runtime.observability = store
    tracing.configure(capture_content=True)
    try:
        with serve_secured(runtime) as server:
            yield server
    finally:
        tracing.configure(capture_content=None)
        if isinstance(store, PostgresSpanStore):
            asyncio.run(drop_schema(store.schema))


def test_registered_scorers_are_listed_as_mastra_entries(scored: Secured) -> None:
    listed = scored.a.get("/api/scores/scorers").json()
    assert sorted(listed) == ["broken", "echo"]
    config = {"id": "echo", "name": "Echo", "description": "Quotes the run"}
    assert listed["echo"] == {
        "scorer": {**config, "config": config},
        "agentIds": [],
        "agentNames": [],
        "workflowIds": [],
        "isRegistered": True,
        "source": "code",
    }
    assert scored.a.get("/api/scores/scorers/echo").json() == listed["echo"]
    assert scored.a.get("/api/scores/scorers/nope").json() is None


def test_a_trace_scored_by_a_registered_scorer_is_listed(scored: Secured) -> None:
    s = scored
    trace_id = a_traced_run(s, "weather in Paris?")
    spans = s.a.get(f"{OBS}/traces/{trace_id}").json()["spans"]
    root = next(span for span in spans if span["parentSpanId"] is None)
    answer = s.a.post(f"{OBS}/traces/score", json={"scorerName": "echo", "targets": [{"traceId": trace_id}]})
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"status": "success", "message": "Scoring started for 1 trace", "traceCount": 1}
    (score,) = s.a.get(f"{OBS}/scores", params={"traceId": trace_id}).json()["scores"]
    last_answer = [span for span in spans if span["spanType"] == "model_generation"][-1]["output"]
    said = "".join(p["content"] for p in last_answer[-1]["parts"] if p["type"] == "text")
    assert (score["scorerId"], score["scorerName"], score["score"], score["source"]) == (
        "echo",
        "Echo",
        1.0,
        "TEST",
    )
    assert score["reason"] == f"asked 'weather in Paris?'; said {said!r}" and said
    assert (score["traceId"], score["spanId"]) == (trace_id, root["spanId"])
    # Studio's Scores tab of the span lists it.
    (row,) = s.a.get(f"{OBS}/traces/{trace_id}/{root['spanId']}/scores").json()["scores"]
    assert (row["scorer"], row["score"], row["source"]) == ({"id": "echo", "name": "Echo"}, 1.0, "TEST")
    # A named span: the tool call's arguments and result.
    tool = next(span for span in spans if span["spanType"] == "tool_call")
    target = {"traceId": trace_id, "spanId": tool["spanId"]}
    assert (
        s.a.post(f"{OBS}/traces/score", json={"scorerName": "echo", "targets": [target]}).status_code == 200
    )
    (on_tool,) = s.a.get(f"{OBS}/traces/{trace_id}/{tool['spanId']}/scores").json()["scores"]
    assert on_tool["score"] == 1.0
    # B cannot score A's trace: the 404 of a missing one; nothing was stored for it.
    stolen = s.b.post(f"{OBS}/traces/score", json={"scorerName": "echo", "targets": [{"traceId": trace_id}]})
    assert stolen.status_code == 404 and stolen.json() == {"error": f"Trace with id {trace_id} not found"}
    missing = s.a.post(f"{OBS}/traces/score", json={"scorerName": "echo", "targets": [{"traceId": "nope"}]})
    assert missing.json() == {"error": "Trace with id nope not found"}
    assert len(s.a.get(f"{OBS}/scores", params={"traceId": trace_id}).json()["scores"]) == 2


def test_trace_score_bodies_are_checked(scored: Secured) -> None:
    s = scored
    trace_id = a_traced_run(s)
    one = [{"traceId": trace_id}]
    for body, status, words in (
        ({}, 400, "'scorerName'"),
        ({"scorerName": "", "targets": one}, 400, "'scorerName'"),
        ({"scorerName": "echo"}, 400, "'targets'"),
        ({"scorerName": "echo", "targets": []}, 400, "'targets'"),
        ({"scorerName": "echo", "targets": one * 21}, 400, "'targets'"),
        ({"scorerName": "echo", "targets": [5]}, 400, "'targets.0'"),
        ({"scorerName": "echo", "targets": [{"traceId": "x\n"}]}, 400, "targets.0.traceId"),
        ({"scorerName": "echo", "targets": [{"traceId": trace_id, "spanId": 3}]}, 400, "targets.0.spanId"),
        ({"scorerName": "nope", "targets": one}, 404, "Scorer 'nope' not found"),
        (
            {"scorerName": "echo", "targets": [{"traceId": trace_id, "spanId": "nope"}]},
            404,
            "Span with id nope",
        ),
        ({"scorerName": "broken", "targets": one}, 422, "judge unreachable"),
    ):
        answer = s.a.post(f"{OBS}/traces/score", json=body)
        assert answer.status_code == status and words in answer.json()["error"], (body, answer.text)
    assert s.a.post(f"{OBS}/traces/score", content=b"[1]").status_code == 400
    assert s.a.get(f"{OBS}/scores", params={"traceId": trace_id}).json()["scores"] == []


def test_a_trace_without_captured_content_is_refused(scored: Secured) -> None:
    tracing.configure(capture_content=False)
    trace_id = a_traced_run(scored)
    answer = scored.a.post(
        f"{OBS}/traces/score", json={"scorerName": "echo", "targets": [{"traceId": trace_id}]}
    )
    assert answer.status_code == 400 and "no stored output to score" in answer.json()["error"]
