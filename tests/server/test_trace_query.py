"""Mastra's advanced trace query (``POST /api/observability/traces/query``, what Studio's Traces
pages ask for) over the span store: predicates on the trace, its spans, scores and feedback;
keyset, numbered and thread-group pages; Mastra's 400/409/413/422/501 answers; a confined caller
sees only its resource's traces (another's cursor or filter never reaches them)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx2 as httpx
import pytest

from tests.otel_testkit import spans
from tests.server.security_kit import Secured, sse_chunks
from tests.server.test_observability_api import observed

QUERY = "/api/observability/traces/query"
__all__ = ["observed", "spans"]  # fixtures, re-exported for pytest


_NOW = datetime.now(UTC)
RANGE = {"from": (_NOW - timedelta(days=7)).isoformat(), "to": (_NOW + timedelta(days=1)).isoformat()}
"""One range for the session: a keyset cursor is bound to its query's exact range."""


def week() -> dict[str, str]:
    return RANGE


def eq(path: str, literal: Any) -> dict[str, Any]:
    return {"op": "eq", "left": {"path": path}, "right": {"literal": literal}}


def run(client: httpx.Client, s: Secured, text: str, agent: str = "assistant") -> str:
    """A run in a new thread (flushed to the store); returns the thread id."""
    thread = f"t-{uuid.uuid4().hex[:8]}"
    sse_chunks(
        client.post(f"/api/agents/{agent}/stream", json={"messages": text, "memory": {"thread": thread}})
    )
    processor = s.context.runstream._span_processor
    assert processor is not None and processor.force_flush()
    return thread


def query(client: httpx.Client, **body: Any) -> dict[str, Any]:
    answer = client.post(QUERY, json={"timeRange": week(), **body})
    assert answer.status_code == 200, answer.text
    result: dict[str, Any] = answer.json()
    return result


def test_predicates_on_the_trace_its_spans_and_scores(observed: Secured) -> None:
    s = observed
    weather, hello = run(s.a, s, "weather"), run(s.a, s, "hi")
    every = query(s.a)
    assert [t["threadId"] for t in every["traces"]] == [hello, weather]  # newest first
    assert every["page"] == {"next": None}
    trace = every["traces"][1]
    assert set(trace) == {
        "traceId", "rootSpanId", "name", "entityId", "parentSpanId", "createdAt", "metadata",
        "inputPreview", "threadId", "resourceId", "startedAt", "endedAt", "entityName",
        "entityType", "environment", "status",
    }  # fmt: skip
    assert (trace["entityType"], trace["entityId"], trace["status"], trace["parentSpanId"]) == (
        "agent",
        "assistant",
        "success",
        None,
    )
    assert trace["resourceId"] == "user-a" and trace["rootSpanId"]

    def threads(where: dict[str, Any], client: httpx.Client = s.a) -> list[str]:
        return [t["threadId"] for t in query(client, where=where)["traces"]]

    tool_spans = {"spans": {"some": eq("spanType", "tool_call")}}
    assert threads(tool_spans) == [weather]
    assert threads({"spans": {"none": eq("spanType", "tool_call")}}) == [hello]
    # Studio's agent Traces tab: the root entity type and a span of the agent.
    agent_tab = {
        "op": "and",
        "args": [eq("entityType", "agent"), {"spans": {"some": eq("entityId", "assistant")}}],
    }
    assert threads(agent_tab) == [hello, weather]
    assert threads(eq("threadId", weather)) == [weather]
    assert threads({"op": "not", "arg": eq("threadId", weather)}) == [hello]
    assert threads({"op": "in", "value": {"path": "threadId"}, "set": [hello, "other"]}) == [hello]
    assert threads({"op": "or", "args": [eq("status", "error"), eq("metadata.runId", "nope")]}) == []
    assert threads(
        {"spans": {"some": {"op": "gte", "left": {"path": "durationMs"}, "right": {"literal": 0}}}}
    ) == [
        hello,
        weather,
    ]
    assert threads({"op": "exists", "path": "metadata.otelTraceId"}) == [hello, weather]
    # A score on the weather trace.
    scored = {
        "score": {"scorerId": "relevance", "score": 0.4, "traceId": trace["traceId"], "scoreSource": "ui"}
    }
    assert s.a.post("/api/observability/scores", json=scored).status_code == 200
    low = {
        "op": "and",
        "args": [
            eq("scorerId", "relevance"),
            {"op": "lt", "left": {"path": "score"}, "right": {"literal": 0.6}},
        ],
    }
    assert threads({"scores": {"some": low}}) == [weather]
    assert threads({"scores": {"some": eq("scoreSource", "ui")}}) == [weather]
    assert threads({"scores": {"none": low}}) == [hello]
    assert threads({"feedback": {"some": {"op": "exists", "path": "comment"}}}) == []
    # Ordered oldest first; B sees none of A's traces, whatever it asks.
    ascending = query(s.a, orderBy=[{"field": "endedAt", "direction": "asc"}])
    assert [t["threadId"] for t in ascending["traces"]] == [weather, hello]
    assert query(s.b)["traces"] == [] and threads(eq("resourceId", "user-a"), s.b) == []


def test_pages_and_thread_groups(observed: Secured) -> None:
    s = observed
    made = [run(s.a, s, "hi") for _ in range(3)]
    first = query(s.a, page={"limit": 2})
    assert [t["threadId"] for t in first["traces"]] == made[:0:-1]
    second = query(s.a, page={"limit": 2, "after": first["page"]["next"]})
    assert [t["threadId"] for t in second["traces"]] == made[:1] and second["page"] == {"next": None}
    numbered = query(s.a, pagination={"page": 1, "perPage": 2})
    assert [t["threadId"] for t in numbered["traces"]] == made[:1]
    assert numbered["pagination"] == {"total": 3, "page": 1, "perPage": 2, "hasMore": False}
    groups = query(s.a, group={"by": ["threadId"]}, page={"limit": 2})
    assert groups["groups"] == [{"threadId": t} for t in sorted(made)[:2]]
    rest = query(s.a, group={"by": ["threadId"]}, page={"limit": 2, "after": groups["page"]["next"]})
    assert rest == {"groups": [{"threadId": sorted(made)[2]}], "page": {"next": None}}
    # A cursor belongs to its query and its caller: another query's or B's is a conflict.
    cursor = first["page"]["next"]
    for client, body in (
        (s.a, {"page": {"limit": 2, "after": cursor}, "where": eq("status", "success")}),
        (s.b, {"page": {"limit": 2, "after": cursor}}),
    ):
        answer = client.post(QUERY, json={"timeRange": week(), **body})
        assert answer.status_code == 409 and answer.json()["code"] == "TRACE_QUERY_CURSOR_CONFLICT"
    malformed = s.a.post(QUERY, json={"timeRange": week(), "page": {"limit": 2, "after": "!!"}})
    assert malformed.status_code == 400 and malformed.json()["code"] == "TRACE_QUERY_CURSOR_MALFORMED"


@pytest.mark.parametrize(
    ("body", "code", "path"),
    [
        ({}, "invalid_request", ["timeRange"]),
        (
            {"timeRange": {"from": "2026-01-02T00:00:00Z", "to": "2026-01-01T00:00:00Z"}},
            "invalid_time_range",
            ["timeRange"],
        ),
        (
            {"timeRange": {"from": "2026-01-01T00:00:00Z", "to": "2026-03-01T00:00:00Z"}},
            "time_range_too_large",
            ["timeRange"],
        ),
        ({"where": eq("name", "x")}, "field_not_allowed", ["where", "left", "path"]),
        (
            {"where": {"op": "lt", "left": {"path": "threadId"}, "right": {"literal": "x"}}},
            "operator_not_allowed",
            ["where", "op"],
        ),
        ({"where": eq("startedAt", "yesterday")}, "invalid_literal", ["where", "right", "literal"]),
        ({"where": eq("metadata.", "x")}, "invalid_metadata_key", ["where", "left", "path"]),
        (
            {"where": {"spans": {"some": {"scores": {"some": eq("score", 1)}}}}},
            "invalid_request",
            ["where", "spans", "some"],
        ),
        (
            {"where": {"op": "in", "value": {"path": "threadId"}, "set": ["a", 1]}},
            "invalid_literal",
            ["where", "set"],
        ),
        (
            {"where": {"op": "eq", "left": {"literal": 1}, "right": {"path": "threadId"}}},
            "invalid_operands",
            ["where"],
        ),
        ({"where": {"op": "xor", "args": []}}, "invalid_request", ["where"]),
        ({"page": {"limit": 1}, "pagination": {"page": 0}}, "pagination_mode_conflict", ["pagination"]),
        ({"page": {"limit": 5000}}, "invalid_request", ["page", "limit"]),
        ({"limit": 5}, "invalid_request", ["limit"]),
        ({"sql": "1"}, "invalid_request", ["sql"]),
    ],
)
def test_invalid_queries_are_422_with_the_issue(
    observed: Secured, body: dict[str, Any], code: str, path: list[Any]
) -> None:
    answer = observed.a.post(
        QUERY, json={"timeRange": week(), **body} if "timeRange" not in body and body != {} else body
    )
    assert answer.status_code == 422, answer.text
    result = answer.json()
    assert (result["code"], result["message"]) == ("TRACE_QUERY_INVALID", "The trace query is invalid")
    assert {"code": code, "path": path} in [
        {"code": i["code"], "path": i["path"]} for i in result["issues"]
    ], result


def test_bounds_and_malformed_bodies(observed: Secured) -> None:
    s = observed
    deep: dict[str, Any] = eq("threadId", "x")
    for _ in range(12):
        deep = {"op": "not", "arg": deep}
    wide = {"op": "or", "args": [eq("threadId", str(i)) for i in range(101)]}
    for where in (deep, wide):
        answer = s.a.post(QUERY, json={"timeRange": week(), "where": where})
        assert answer.status_code == 422 and answer.json()["issues"][0]["code"] == "predicate_too_complex"
    assert s.a.post(QUERY, content=b"{").json()["error"] == "Invalid request body"
    assert s.a.post(QUERY, content=b"[1]").status_code == 400
    huge = s.a.post(QUERY, json={"timeRange": week(), "where": eq("threadId", "x" * 300_000)})
    assert huge.status_code == 413
    delta = s.a.post(QUERY, json={"timeRange": week(), "mode": "delta"})
    assert delta.status_code == 501 and delta.json()["code"] == "TRACE_QUERY_UNSUPPORTED"
    # Hostile strings are values, never SQL.
    assert query(s.a, where=eq("metadata.x'); DROP TABLE ai_spans; --", "1"))["traces"] == []
    assert query(s.a, where={"scores": {"some": eq("scoreSource", "' OR 1=1 --")}})["traces"] == []


def test_without_a_store_it_is_mastras_501(client: httpx.Client) -> None:
    answer = client.post(QUERY, json={"timeRange": week()})
    assert answer.status_code == 501 and answer.json()["code"] == "TRACE_QUERY_UNSUPPORTED"
