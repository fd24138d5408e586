"""Mastra's ``/api/observability`` over the span store: a confined caller's runs listed as traces,
their span trees and spans, scores and feedback created with validation and listed, discovery;
another resource's trace, score or feedback is a 404 / invisible. And Mastra's
save-messages into owned threads."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx2 as httpx
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from runstream.observability import SpanStore
from runstream.observability.store import iso
from runstream.storage import SqliteStorage
from tests.otel_testkit import spans
from tests.server.agents import Gates, build_runstream
from tests.server.security_kit import Secured, serve_secured, sse_chunks

OBS = "/api/observability"
__all__ = ["spans"]


@pytest.fixture
def observed(tmp_path: Path, spans: InMemorySpanExporter) -> Iterator[Secured]:
    """A server whose runtime feeds a span store from the tests' one global SDK provider."""
    runtime = build_runstream(Gates(), SqliteStorage(tmp_path / "runstream.db"))
    runtime.observability = SpanStore(str(tmp_path / "runstream.db"))
    with serve_secured(runtime) as server:
        yield server


def a_traced_run(s: Secured, text: str = "weather") -> str:
    """A's run with a tool call; returns its trace id once the store has it."""
    thread = f"t-{uuid.uuid4().hex[:8]}"
    sse_chunks(
        s.a.post("/api/agents/assistant/stream", json={"messages": text, "memory": {"thread": thread}})
    )
    processor = s.context.runstream._span_processor
    assert processor is not None and processor.force_flush()
    listed = s.a.get(f"{OBS}/traces", params={"threadId": thread}).json()
    (root,) = listed["spans"]
    return str(root["traceId"])


def test_traces_spans_and_their_owner(observed: Secured) -> None:
    s = observed
    trace_id = a_traced_run(s)
    page = s.a.get(f"{OBS}/traces", params={"perPage": "5", "entityType": "agent"}).json()
    assert page["pagination"] == {"total": 1, "page": 0, "perPage": 5, "hasMore": False}
    (root,) = page["spans"]
    assert (root["spanType"], root["entityId"], root["resourceId"]) == ("agent_run", "assistant", "user-a")
    assert s.a.get(f"{OBS}/traces", params={"entityId": "plain"}).json()["spans"] == []
    nested = s.a.get(f"{OBS}/traces", params={"filters": '{"entityName": "Assistant"}'}).json()
    assert nested["pagination"]["total"] == 1
    tree = s.a.get(f"{OBS}/traces/{trace_id}").json()
    assert tree["traceId"] == trace_id
    kinds = sorted(span["spanType"] for span in tree["spans"])
    assert kinds == ["agent_run", "model_generation", "model_generation", "tool_call"]
    tool = next(span for span in tree["spans"] if span["spanType"] == "tool_call")
    assert tool["entityName"] == "get_weather" and tool["parentSpanId"] == root["spanId"]
    light = s.a.get(f"{OBS}/traces/{trace_id}/light").json()["spans"]
    assert len(light) == 4 and all("input" not in x and "attributes" not in x and x["spanId"] for x in light)
    assert s.b.get(f"{OBS}/traces/{trace_id}/light").status_code == 404
    span = s.a.get(f"{OBS}/traces/{trace_id}/spans/{tool['spanId']}").json()
    assert span == {"span": tool}
    # B sees none of it; its 404s are the missing trace's.
    assert s.b.get(f"{OBS}/traces").json()["spans"] == []
    for path in (f"{OBS}/traces/{trace_id}", f"{OBS}/traces/{trace_id}/spans/{tool['spanId']}"):
        hidden = s.b.get(path)
        assert hidden.status_code == 404 and hidden.json() == {"error": f"Trace with id {trace_id} not found"}
    assert s.a.get(f"{OBS}/traces/nope").json() == {"error": "Trace with id nope not found"}
    assert s.a.get(f"{OBS}/traces/{trace_id}/spans/nope").status_code == 404
    assert s.a.get(f"{OBS}/discovery/entity-types").json() == {"entityTypes": ["agent", "tool"]}
    assert s.a.get(f"{OBS}/discovery/entity-names", params={"entityType": "tool"}).json() == {
        "names": ["get_weather"]
    }
    assert s.b.get(f"{OBS}/discovery/entity-types").json() == {"entityTypes": []}
    assert s.a.get(f"{OBS}/discovery/tags").json() == {"tags": []}


def test_trace_lists_are_bounded_and_checked(observed: Secured) -> None:
    s = observed
    for params in (
        {"perPage": "0"},
        {"perPage": "101"},
        {"page": "-1"},
        {"page": "1e999"},
        {"status": "maybe"},
        {"field": "name"},
        {"direction": "sideways"},
        {"filters": "[1]"},
        {"filters": "{"},
        {"pagination": '{"perPage": "x"}'},
        {"pagination": '{"perPage": 5000}'},
        {"startDate": "yesterday"},
        {"entityId": "x" * 300},
    ):
        answer = s.a.get(f"{OBS}/traces", params=params)
        assert answer.status_code == 400, (params, answer.text)
    assert s.a.get(f"{OBS}/traces", params={"pagination": '{"page": 2, "perPage": 3}'}).json()[
        "pagination"
    ] == {
        "total": 0,
        "page": 2,
        "perPage": 3,
        "hasMore": False,
    }


def test_scores_and_feedback(observed: Secured) -> None:
    s = observed
    trace_id = a_traced_run(s)
    created = s.a.post(
        f"{OBS}/scores",
        json={"score": {"scorerId": "relevance", "score": 0.8, "traceId": trace_id, "reason": "on topic"}},
    )
    assert created.status_code == 200 and created.json() == {"success": True}
    listed = s.a.get(f"{OBS}/scores", params={"traceId": trace_id}).json()
    (score,) = listed["scores"]
    assert (score["scorerId"], score["score"], score["reason"]) == ("relevance", 0.8, "on topic")
    assert score["scoreId"] and score["timestamp"].endswith("Z")
    assert listed["pagination"] == {"total": 1, "page": 0, "perPage": 10, "hasMore": False}
    assert s.a.get(f"{OBS}/scores", params={"scorerId": "other"}).json()["scores"] == []
    # A span's scores, as Studio's Scores tab asks for them (Mastra's scores-domain rows).
    root = next(x for x in s.a.get(f"{OBS}/traces/{trace_id}").json()["spans"] if x["parentSpanId"] is None)
    on_span = {
        "scorerId": "tone",
        "score": 1,
        "traceId": trace_id,
        "spanId": root["spanId"],
        "reason": "kind",
    }
    assert s.a.post(f"{OBS}/scores", json={"score": on_span}).status_code == 200
    by_span = s.a.get(f"{OBS}/traces/{trace_id}/{root['spanId']}/scores").json()
    (row,) = by_span["scores"]
    assert (row["scorerId"], row["score"], row["reason"], row["scorer"]["name"]) == (
        "tone",
        1,
        "kind",
        "tone",
    )
    assert row["id"] and row["createdAt"] and by_span["pagination"]["total"] == 1
    assert s.b.get(f"{OBS}/traces/{trace_id}/{root['spanId']}/scores").status_code == 404
    assert (
        s.a.get(f"{OBS}/traces/{trace_id}/{root['spanId']}/scores", params={"perPage": "0"}).status_code
        == 400
    )
    feedback = {"feedback": {"feedbackType": "thumbs", "value": 1, "traceId": trace_id, "comment": "good"}}
    assert s.a.post(f"{OBS}/feedback", json=feedback).json() == {"success": True}
    assert [f["value"] for f in s.a.get(f"{OBS}/feedback").json()["feedback"]] == [1]
    # B can neither score A's trace nor see A's scores.
    stolen = s.b.post(f"{OBS}/scores", json={"score": {"scorerId": "x", "score": 1, "traceId": trace_id}})
    assert stolen.status_code == 404 and trace_id in stolen.json()["error"]
    assert s.b.post(f"{OBS}/feedback", json=feedback).status_code == 404
    assert s.b.get(f"{OBS}/scores").json()["scores"] == []
    assert s.b.get(f"{OBS}/feedback").json()["feedback"] == []
    # A score of no trace is B's own.
    assert s.b.post(f"{OBS}/scores", json={"score": {"scorerId": "mine", "score": 2}}).status_code == 200
    assert [x["scorerId"] for x in s.b.get(f"{OBS}/scores").json()["scores"]] == ["mine"]
    for body, field in (
        ({}, "'score'"),
        ({"score": []}, "'score'"),
        ({"score": {"score": 1}}, "score.scorerId"),
        ({"score": {"scorerId": "r"}}, "score.score"),
        ({"score": {"scorerId": "r", "score": "high"}}, "score.score"),
        ({"score": {"scorerId": "r", "score": 1e300}}, "score.score"),
        ({"score": {"scorerId": "r", "score": 1, "reason": 5}}, "score.reason"),
        ({"score": {"scorerId": "r", "score": 1, "metadata": [1]}}, "score.metadata"),
        ({"score": {"scorerId": "r", "score": 1, "traceId": ""}}, "score.traceId"),
    ):
        refused = s.a.post(f"{OBS}/scores", json=body)
        assert refused.status_code == 400 and field in refused.json()["error"], (body, refused.text)
    refused = s.a.post(f"{OBS}/feedback", json={"feedback": {"feedbackType": "thumbs", "value": None}})
    assert refused.status_code == 400 and "feedback.value" in refused.json()["error"]


def test_without_a_store_the_lists_are_empty(client: httpx.Client) -> None:
    assert client.get(f"{OBS}/traces").json() == {
        "spans": [],
        "pagination": {"total": 0, "page": 0, "perPage": 10, "hasMore": False},
    }
    assert client.get(f"{OBS}/traces/abc").status_code == 404
    assert client.get(f"{OBS}/discovery/entity-types").json() == {"entityTypes": []}
    assert client.get(f"{OBS}/scores").json()["scores"] == []
    refused = client.post(f"{OBS}/scores", json={"score": {"scorerId": "r", "score": 1}})
    assert refused.status_code == 501


def test_save_messages_into_owned_threads(observed: Secured) -> None:
    s = observed
    thread = f"t-{uuid.uuid4().hex[:8]}"
    assert (
        s.a.post("/api/memory/threads", json={"threadId": thread, "resourceId": "user-a"}).status_code == 200
    )
    saved = s.a.post(
        "/api/memory/save-messages",
        params={"agentId": "assistant"},
        json={
            "messages": [
                {
                    "id": "m1",
                    "threadId": thread,
                    "role": "user",
                    "content": "hello",
                    "createdAt": "2026-01-01T00:00:00Z",
                },
                {
                    "threadId": thread,
                    "resourceId": "user-a",
                    "role": "assistant",
                    "content": {"format": 2, "parts": [{"type": "text", "text": "hi"}]},
                },
            ]
        },
    )
    assert saved.status_code == 200, saved.text
    first, second = saved.json()["messages"]
    assert (first["id"], first["resourceId"], first["content"]["parts"]) == (
        "m1",
        "user-a",
        [{"type": "text", "text": "hello"}],
    )
    assert second["role"] == "assistant" and second["id"]
    listed = s.a.get(f"/api/memory/threads/{thread}/messages").json()["messages"]
    assert [m["id"] for m in listed][:1] == ["m1"] and len(listed) == 2
    # B cannot write into A's thread, nor take over A's message id.
    own = f"t-{uuid.uuid4().hex[:8]}"
    assert s.b.post("/api/memory/threads", json={"threadId": own, "resourceId": "user-b"}).status_code == 200
    into_a = s.b.post(
        "/api/memory/save-messages", json={"messages": [{"threadId": thread, "role": "user", "content": "x"}]}
    )
    assert into_a.status_code == 404 and into_a.json()["error"] == f"Thread {thread} not found"
    taken = s.b.post(
        "/api/memory/save-messages",
        json={"messages": [{"id": "m1", "threadId": own, "role": "user", "content": "x"}]},
    )
    assert taken.status_code == 409
    assert (
        s.a.get(f"/api/memory/threads/{thread}/messages").json()["messages"][0]["content"]["parts"][0]["text"]
        == "hello"
    )
    for body, field in (
        ({}, "'messages'"),
        ({"messages": []}, "'messages'"),
        ({"messages": [1]}, "messages[0]"),
        ({"messages": [{"threadId": own, "role": "tool", "content": "x"}]}, "messages[0].role"),
        ({"messages": [{"threadId": own, "role": "user", "content": 5}]}, "messages[0].content"),
        ({"messages": [{"threadId": own, "role": "user", "content": "x", "createdAt": "soon"}]}, "createdAt"),
        (
            {"messages": [{"threadId": own, "role": "user", "content": "x", "resourceId": "user-a"}]},
            "resourceId",
        ),
        ({"messages": [{"role": "user", "content": "x"}]}, "messages[0].threadId"),
    ):
        refused = s.b.post("/api/memory/save-messages", json=body)
        assert refused.status_code == 400 and field in refused.json()["error"], (body, refused.text)
    assert s.b.post("/api/memory/save-messages", params={"agentId": "nope"}, json={}).status_code == 404


def test_workflow_traces_carry_their_runs_resource(observed: Secured) -> None:
    """A confined caller's workflow run is its trace (the run's resource on its spans), invisible
    to another resource."""
    s = observed
    started = s.a.post("/api/workflows/approval/start-async", json={"inputData": {"topic": "moss"}})
    assert started.status_code == 200 and started.json()["status"] == "suspended"
    processor = s.context.runstream._span_processor
    assert processor is not None and processor.force_flush()
    workflows = {"entityType": "workflow_run"}
    (root,) = s.a.get(f"{OBS}/traces", params=workflows).json()["spans"]
    assert (root["entityId"], root["resourceId"]) == ("approval", "user-a")
    assert s.b.get(f"{OBS}/traces", params=workflows).json()["spans"] == []
    assert s.b.get(f"{OBS}/traces/{root['traceId']}").status_code == 404
    week = {
        "from": iso(datetime.now(UTC) - timedelta(days=1)),
        "to": iso(datetime.now(UTC) + timedelta(days=1)),
    }
    by_type = {"op": "eq", "left": {"path": "entityType"}, "right": {"literal": "workflow_run"}}
    seen = [
        t["traceId"]
        for t in s.a.post(f"{OBS}/traces/query", json={"timeRange": week, "where": by_type}).json()["traces"]
    ]
    assert seen == [root["traceId"]]
    assert s.b.post(f"{OBS}/traces/query", json={"timeRange": week, "where": by_type}).json()["traces"] == []
