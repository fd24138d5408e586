"""Registered scorers (``Runstream(scorers=...)``): listed at ``/api/scores/scorers`` in Mastra's
entries, and run over a stored trace by ``POST /api/observability/traces/score`` (what Studio's
"Score trace" sends): the request checks the body and targets and answers at once, the scorer
runs in the runtime's background scoring runner, and the score is listed with the trace's and its
span's scores. On SQLite and PostgreSQL span stores; another resource's trace is a 404 like a
missing one; a failing scorer leaves a log record and no score; a full runner answers 429."""

from __future__ import annotations

import asyncio
import math
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from runstream import _tracing as tracing
from runstream.background_scoring import ScoringRunner
from runstream.models.base import PromptMessage
from runstream.observability import PostgresSpanStore, SpanStore
from runstream.scoring import AgentScorer, ScoreInput, Scorer
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


def not_a_number(data: ScoreInput) -> tuple[float, str]:
    return math.nan, "lost count"


GATE = threading.Event()
"""What the ``slow`` scorer waits for (off the server's event loop)."""
STARTED = threading.Event()


async def slow(data: ScoreInput) -> tuple[float, str]:
    STARTED.set()
    await asyncio.to_thread(GATE.wait, 30)
    return 0.5, "took its time"


def settle(s: Secured) -> None:
    """Wait until the server's background scorer runs have ended."""
    runner = s.context.runstream.scoring
    if runner._loop is not None:
        asyncio.run_coroutine_threadsafe(runner.join(), runner._loop).result(30)


@pytest.fixture(params=["sqlite", "postgres"])
def scored(request: pytest.FixtureRequest, tmp_path: Path, spans: InMemorySpanExporter) -> Iterator[Secured]:
    """A served runtime with registered scorers and a span store keeping message content."""
    runtime = build_runstream(Gates(), SqliteStorage(tmp_path / "runstream.db"))
    runtime.scorers = {
        "echo": Scorer(id="echo", score=echo, name="Echo", description="Quotes the run"),
        "broken": Scorer(id="broken", score=broken),
        "nan": Scorer(id="nan", score=not_a_number),
        "slow": Scorer(id="slow", score=slow),
    }
    runtime.scoring = ScoringRunner(concurrency=1, max_pending=2)
    GATE.clear()
    STARTED.clear()
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
        GATE.set()  # a slow scorer left waiting ends with the server
        tracing.configure(capture_content=None)
        if isinstance(store, PostgresSpanStore):
            asyncio.run(drop_schema(store.schema))


def test_registered_scorers_are_listed_as_mastra_entries(scored: Secured) -> None:
    listed = scored.a.get("/api/scores/scorers").json()
    assert sorted(listed) == ["broken", "echo", "nan", "slow"]
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
    settle(s)
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
    settle(s)
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
    ):
        answer = s.a.post(f"{OBS}/traces/score", json=body)
        assert answer.status_code == status and words in answer.json()["error"], (body, answer.text)
    assert s.a.post(f"{OBS}/traces/score", content=b"[1]").status_code == 400
    settle(s)
    assert s.a.get(f"{OBS}/scores", params={"traceId": trace_id}).json()["scores"] == []


def test_a_trace_without_captured_content_is_refused(scored: Secured) -> None:
    tracing.configure(capture_content=False)
    trace_id = a_traced_run(scored)
    answer = scored.a.post(
        f"{OBS}/traces/score", json={"scorerName": "echo", "targets": [{"traceId": trace_id}]}
    )
    assert answer.status_code == 400 and "no stored output to score" in answer.json()["error"]


def test_the_answer_does_not_wait_for_the_scorer(scored: Secured) -> None:
    s = scored
    trace_id = a_traced_run(s)
    answer = s.a.post(f"{OBS}/traces/score", json={"scorerName": "slow", "targets": [{"traceId": trace_id}]})
    assert answer.status_code == 200 and answer.json()["traceCount"] == 1
    assert STARTED.wait(10) and not GATE.is_set()  # answered while the scorer is still running
    assert s.a.get(f"{OBS}/scores", params={"traceId": trace_id}).json()["scores"] == []
    GATE.set()
    settle(s)
    (score,) = s.a.get(f"{OBS}/scores", params={"traceId": trace_id}).json()["scores"]
    assert (score["scorerId"], score["score"], score["reason"]) == ("slow", 0.5, "took its time")


def test_a_full_scoring_runner_answers_429_and_starts_nothing(scored: Secured) -> None:
    s = scored
    trace_id = a_traced_run(s)
    two = {"scorerName": "slow", "targets": [{"traceId": trace_id}] * 2}
    assert s.a.post(f"{OBS}/traces/score", json=two).status_code == 200  # the runner's 2 places
    assert STARTED.wait(10)
    full = s.a.post(f"{OBS}/traces/score", json={"scorerName": "echo", "targets": [{"traceId": trace_id}]})
    assert full.status_code == 429 and full.headers["retry-after"] == "1"
    assert full.json() == {
        "error": "Scoring queue is full (2 of 2 scorer runs pending, 1 more asked); try again later"
    }
    GATE.set()
    settle(s)
    scores = s.a.get(f"{OBS}/scores", params={"traceId": trace_id}).json()["scores"]
    assert [score["scorerId"] for score in scores] == ["slow", "slow"]  # the refused echo ran nowhere


def test_a_failing_scorer_is_logged_and_stores_nothing(scored: Secured) -> None:
    s = scored
    trace_id = a_traced_run(s)
    for name in ("broken", "nan"):
        body = {"scorerName": name, "targets": [{"traceId": trace_id}]}
        assert s.a.post(f"{OBS}/traces/score", json=body).status_code == 200
    settle(s)
    s.context.runstream._log_keeper.flush()
    assert s.a.get(f"{OBS}/scores", params={"traceId": trace_id}).json()["scores"] == []
    logs = s.a.get(f"{OBS}/logs", params={"traceId": trace_id, "level": "error"}).json()["logs"]
    by_scorer = {log["data"]["scorerId"]: log for log in logs}
    assert sorted(by_scorer) == ["broken", "nan"]
    assert by_scorer["broken"]["message"] == (
        f"Scorer 'broken' failed (traceId {trace_id}, resourceId user-a): RuntimeError: judge unreachable"
    )
    assert "not a finite number" in by_scorer["nan"]["message"] and trace_id in by_scorer["nan"]["message"]
    assert {log["resourceId"] for log in logs} == {"user-a"}
    assert s.b.get(f"{OBS}/logs", params={"traceId": trace_id}).json()["logs"] == []


def test_an_agents_own_scorers_are_listed_and_their_scores_confined(scored: Secured) -> None:
    s = scored
    agent = s.context.runstream.agents["assistant"]
    agent.scorers = AgentScorer.coerce_all(
        {
            "echo": Scorer(id="echo", score=echo, name="Echo"),
            "tone": Scorer(id="tone", score=lambda d: (0.25, "flat")),
        }
    )
    trace_id = a_traced_run(s, "weather in Paris?")
    settle(s)
    scores = s.a.get(f"{OBS}/scores", params={"traceId": trace_id}).json()["scores"]
    by_id = {score["scorerId"]: score for score in scores}
    assert sorted(by_id) == ["echo", "tone"] and by_id["tone"]["score"] == 0.25
    root = next(
        span for span in s.a.get(f"{OBS}/traces/{trace_id}").json()["spans"] if span["parentSpanId"] is None
    )
    assert {(x["source"], x["entityId"], x["spanId"], x["runId"]) for x in scores} == {
        ("LIVE", "assistant", root["spanId"], root["runId"])
    }
    assert by_id["echo"]["reason"].startswith("asked 'weather in Paris?'; said ")
    rows = s.a.get(f"{OBS}/traces/{trace_id}/{root['spanId']}/scores").json()["scores"]
    assert {(r["entityId"], r["entity"]["name"], r["runId"], r["source"]) for r in rows} == {
        ("assistant", agent.name, root["runId"], "LIVE")
    }
    assert s.b.get(f"{OBS}/scores").json()["scores"] == []  # B does not see A's run's scores
    listed = s.a.get("/api/scores/scorers").json()
    assert (listed["echo"]["agentIds"], listed["echo"]["agentNames"], listed["echo"]["isRegistered"]) == (
        ["assistant"],
        [agent.name],
        True,
    )
    assert (listed["tone"]["agentIds"], listed["tone"]["isRegistered"]) == (["assistant"], False)
    assert s.a.get("/api/scores/scorers/tone").json() == listed["tone"]


def test_a_request_names_its_runs_scorers_and_gets_what_they_see(scored: Secured) -> None:
    """Mastra's ``scorers`` and ``returnScorerData`` in a generate body: the run is scored by the
    scorers the request names (registered on the runtime, or the agent's) besides the agent's
    own (a request adds scorers, never drops the author's), stored under the caller's resource;
    the answer holds ``scoringData``."""
    s = scored
    assert "scoringData" not in s.a.post("/api/agents/assistant/generate", json={"messages": "hi"}).json()
    s.context.runstream.agents["assistant"].scorers = AgentScorer.coerce_all(
        {"tone": Scorer(id="tone", score=lambda d: (0.25, "flat"))}
    )
    body = {
        "messages": "weather in Paris?",
        "memory": {"thread": f"t-{uuid.uuid4().hex[:8]}"},  # (the run's resource: the caller's)
        "scorers": {"quality": {"scorer": "echo", "sampling": {"type": "ratio", "rate": 1}}, "own": "tone"},
        "returnScorerData": True,
    }
    runner = s.context.runstream.scoring
    runner.max_pending = 3  # (the author's one and the request's two)
    answer = s.a.post("/api/agents/assistant/generate", json=body)
    assert answer.status_code == 200, answer.text
    out = answer.json()
    data = out["scoringData"]
    assert [m["role"] for m in data["input"]["inputMessages"]] == ["user"]
    assert [m["role"] for m in data["output"]] == ["assistant", "tool", "assistant"]
    settle(s)
    scores = s.a.get(f"{OBS}/scores").json()["scores"]
    assert sorted((x["scorerKey"], x["scorerId"], x["score"]) for x in scores) == [
        ("own", "tone", 0.25),
        ("quality", "echo", 1.0),
        ("tone", "tone", 0.25),  # the author's own scorer still scores the run
    ]
    assert {(x["source"], x["entityId"], x["runId"].split("~")[0]) for x in scores} == {
        ("LIVE", "assistant", out["runId"])  # (stored under the caller's own run-id namespace)
    }
    assert s.b.get(f"{OBS}/scores").json()["scores"] == []  # B does not see A's run's scores
    runner.max_pending = 2  # the request's two no longer fit beside the author's: only theirs go
    second = s.a.post("/api/agents/assistant/generate", json=body).json()
    settle(s)
    keys = [
        x["scorerKey"] for x in s.a.get(f"{OBS}/scores").json()["scores"] if second["runId"] in x["runId"]
    ]
    assert keys == ["tone"]


def test_a_requests_scorers_are_checked(scored: Secured) -> None:
    s = scored
    for scorers, words in (
        (
            {"k": "ecko"},
            "scorers['k']: no scorer 'ecko' on agent 'assistant' or its runtime; did you mean 'echo'?",
        ),
        (
            {"k": {"scorer": {"id": "mine", "score": "1"}}},
            "'scorers.k' must name a scorer of the agent or the server",
        ),
        ({"k": 5}, "'scorers.k' must name a scorer"),
        (["echo"], "'scorers' must map at most 32 keys"),
        ({f"k{i}": "echo" for i in range(33)}, "'scorers' must map at most 32 keys"),
        ({"k": {"scorer": "echo", "smapling": 1}}, "unknown option 'smapling'; did you mean 'sampling'?"),
        ({"k": {"scorer": "echo", "sampling": 1.5}}, "scorers['k'].sampling must be at most 1"),
        ({"k\n": "echo"}, "scorers"),
    ):
        answer = s.a.post("/api/agents/assistant/stream", json={"messages": "hi", "scorers": scorers})
        assert answer.status_code == 400 and words in answer.json()["error"], (scorers, answer.text)
    s.context.runstream.agents["assistant"].scorers = AgentScorer.coerce_all(
        {"tone": Scorer(id="tone", score=lambda d: (0.25, "flat"))}
    )
    bad_flag = s.a.post("/api/agents/assistant/generate", json={"messages": "hi", "returnScorerData": "yes"})
    assert bad_flag.status_code == 400 and "'returnScorerData' must be a boolean" in bad_flag.json()["error"]
