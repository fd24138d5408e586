"""Mastra's metrics and logs routes over the span store: values computed from a real run's stored
spans, Mastra's 400 bodies naming the field, bounded inputs, and a confined caller seeing only
its resource's metrics and logs."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from tests.otel_testkit import spans
from tests.server.security_kit import Secured, sse_chunks
from tests.server.test_observability_api import a_traced_run, observed

OBS = "/api/observability"
__all__ = ["observed", "spans"]  # fixtures, re-exported for pytest


def metric(s: Secured, kind: str, body: dict[str, Any], caller: str = "a") -> Any:
    answer = getattr(s, caller).post(f"{OBS}/metrics/{kind}", json=body)
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_metrics_and_logs_are_confined_and_checked(observed: Secured) -> None:
    s = observed
    trace_id = a_traced_run(s)
    spans = s.a.get(f"{OBS}/traces/{trace_id}").json()["spans"]
    generations = [span for span in spans if span["spanType"] == "model_generation"]
    input_tokens = sum(span["attributes"]["usage"]["inputTokens"] for span in generations)
    tokens = metric(s, "aggregate", {"name": ["mastra_model_total_input_tokens"], "aggregation": "sum"})
    assert tokens["value"] == input_tokens > 0 and tokens["previousValue"] is None
    runs = {"name": ["mastra_agent_duration_ms"], "aggregation": "count"}
    assert metric(s, "aggregate", runs)["value"] == 1
    assert metric(s, "aggregate", runs, caller="b")["value"] == 0  # B's resource ran nothing
    root = next(span for span in spans if span["parentSpanId"] is None)
    assert metric(s, "aggregate", {**runs, "filters": {"threadId": root["threadId"]}})["value"] == 1
    assert metric(s, "aggregate", {**runs, "filters": {"experimentId": "x"}})["value"] == 0
    window = {"timestamp": {"start": "2026-01-01T00:00:00Z", "end": "2100-01-01T00:00:00Z"}}
    compared = metric(s, "aggregate", {**runs, "filters": window, "comparePeriod": "previous_period"})
    assert compared["value"] == 1 and compared["previousValue"] == 0
    tools = metric(
        s,
        "breakdown",
        {"name": ["mastra_tool_duration_ms"], "groupBy": ["entityName"], "aggregation": "count"},
    )
    assert [(g["dimensions"], g["value"]) for g in tools["groups"]] == [({"entityName": "get_weather"}, 1)]
    # Studio's Trace Volume chart: counts by entity and status (Mastra's labels ok / error).
    volume = {
        "name": ["mastra_agent_duration_ms"],
        "groupBy": ["entityName", "status"],
        "aggregation": "count",
    }
    assert [(g["dimensions"], g["value"]) for g in metric(s, "breakdown", volume)["groups"]] == [
        ({"entityName": "Assistant", "status": "ok"}, 1)
    ]
    assert metric(s, "aggregate", {**runs, "filters": {"status": "error"}})["value"] == 0
    series = metric(
        s, "timeseries", {"name": ["mastra_model_duration_ms"], "interval": "1h", "aggregation": "count"}
    )["series"]
    assert [(one["name"], [p["value"] for p in one["points"]]) for one in series] == [
        ("mastra_model_duration_ms", [len(generations)])
    ]
    assert series[0]["points"][0]["timestamp"].endswith(":00:00.000Z")
    durations = [
        (datetime.fromisoformat(span["endedAt"]) - datetime.fromisoformat(span["startedAt"])).total_seconds()
        * 1000
        for span in generations
    ]
    p = metric(
        s,
        "percentiles",
        {"name": "mastra_model_duration_ms", "percentiles": [0.5, 0.95], "interval": "1d"},
    )["series"]
    assert [one["percentile"] for one in p] == [0.5, 0.95]
    # Stored durations are exact; the records' timestamps are whole milliseconds.
    assert all(min(durations) - 1 <= one["points"][0]["value"] <= max(durations) + 1 for one in p)
    assert metric(
        s, "percentiles", {"name": "mastra_model_duration_ms", "percentiles": [0.5], "interval": "1d"}, "b"
    )["series"] == [{"percentile": 0.5, "points": []}]
    assert s.a.get(f"{OBS}/discovery/metric-names", params={"prefix": "mastra_model"}).json()["names"] == [
        "mastra_model_duration_ms",
        "mastra_model_total_input_tokens",
        "mastra_model_total_output_tokens",
    ]
    assert s.a.get(f"{OBS}/discovery/metric-label-keys", params={"metricName": "x"}).json() == {"keys": []}
    # Mastra's 400 bodies name the field.
    for kind, body, field in (
        ("aggregate", {"aggregation": "sum"}, "name"),
        ("aggregate", {"name": [], "aggregation": "sum"}, "name"),
        ("aggregate", {"name": ["m"], "aggregation": "median"}, "aggregation"),
        ("aggregate", {"name": ["m"], "aggregation": "count_distinct"}, "distinctColumn"),
        ("aggregate", {"name": ["m"], "aggregation": "sum", "comparePeriod": "last_year"}, "comparePeriod"),
        (
            "aggregate",
            {"name": ["m"], "aggregation": "sum", "filters": {"timestamp": {"start": "x"}}},
            "filters.timestamp.start",
        ),
        ("breakdown", {"name": ["m"], "aggregation": "sum"}, "groupBy"),
        ("breakdown", {"name": ["m"], "aggregation": "sum", "groupBy": ["x"], "limit": 10**9}, "limit"),
        ("breakdown", {"name": ["m"], "aggregation": "sum", "groupBy": ["password"]}, "groupBy"),
        ("timeseries", {"name": ["m"], "aggregation": "sum", "interval": "2h"}, "interval"),
        ("percentiles", {"name": "m", "percentiles": [2], "interval": "1h"}, "percentiles.0"),
        ("percentiles", {"name": "m", "percentiles": [], "interval": "1h"}, "percentiles"),
        ("percentiles", {"name": "x" * 300, "percentiles": [0.5], "interval": "1h"}, "name"),
    ):
        answer = s.a.post(f"{OBS}/metrics/{kind}", json=body)
        assert answer.status_code == 400, (body, answer.text)
        error = answer.json()
        assert error["error"] == "Invalid request body" and field in [i["field"] for i in error["issues"]], (
            error
        )
    assert s.a.post(f"{OBS}/metrics/aggregate", content=b"[1]").status_code == 400
    # Logs: the failed run's error is kept with its run and trace; B does not see it.
    thread = f"t-{uuid.uuid4().hex[:8]}"
    sse_chunks(
        s.a.post("/api/agents/assistant/stream", json={"messages": "fail", "memory": {"thread": thread}})
    )
    runtime = s.context.runstream
    assert runtime._span_processor.force_flush()
    runtime._log_keeper.flush()
    logs = s.a.get(f"{OBS}/logs", params={"level": "error"}).json()
    (log,) = logs["logs"]
    assert "the model call failed" in log["message"] and log["resourceId"] == "user-a"
    failed = s.a.get(f"{OBS}/traces", params={"threadId": thread}).json()["spans"][0]
    assert log["traceId"] == failed["traceId"] and log["runId"] == failed["runId"]
    assert logs["pagination"] == {"total": 1, "page": 0, "perPage": 10, "hasMore": False}
    assert s.a.get(f"{OBS}/logs", params={"filters": f'{{"traceId": "{trace_id}"}}'}).json()["logs"] == []
    assert s.b.get(f"{OBS}/logs").json()["logs"] == []
    for params in (
        {"level": "loud"},
        {"level": "[1]"},
        {"timestamp": "{"},
        {"perPage": "1000"},
        {"direction": "up"},
    ):
        assert s.a.get(f"{OBS}/logs", params=params).status_code == 400, params
