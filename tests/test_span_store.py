"""The span store fed by the OTel spans: Mastra's AI-tracing records, a run with its background
task and the continuation turn it woke as one trace, sampling, retention, scores, logs. The
contract runs on both backends (SQLite, PostgreSQL in a fresh schema)."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from runstream import Agent
from runstream import _tracing as tracing
from runstream.observability import PostgresSpanStore, SpanStore, TraceQuery
from runstream.observability.processor import StoreSpanProcessor, install_span_store
from runstream.observability.store import iso
from runstream.observability.trace_query import plan_trace_query
from runstream.runtime import Runstream
from runstream.storage import SqliteStorage
from runstream.testing import ScriptedModel
from runstream.workflows import Step, Workflow
from tests.conftest import POSTGRES_URL
from tests.otel_testkit import PROVIDER, spans
from tests.storage.postgres_testkit import drop_schema, require_postgres, unreachable_reason
from tests.test_tracing import calculator, research_until_idle

__all__ = ["spans"]


NewStore = Callable[..., SpanStore]


@pytest.fixture(scope="module")
def postgres_problem() -> str | None:
    return unreachable_reason()


@pytest.fixture(params=["sqlite", "postgres"])
def new_store(
    request: pytest.FixtureRequest, tmp_path: Path, postgres_problem: str | None
) -> Iterator[NewStore]:
    """Makes stores on one backend (SQLite files, or PostgreSQL schemas dropped afterwards)."""
    made: list[SpanStore] = []

    def make(**options: Any) -> SpanStore:
        if request.param == "postgres":
            require_postgres(postgres_problem)
            store: SpanStore = PostgresSpanStore(
                POSTGRES_URL, schema=f"spans_test_{uuid.uuid4().hex}", **options
            )
        else:
            store = SpanStore(str(tmp_path / f"spans{len(made)}.db"), **options)
        made.append(store)
        return store

    yield make
    for store in made:
        store.close()
        if isinstance(store, PostgresSpanStore):
            asyncio.run(drop_schema(store.schema))


@pytest.fixture
def stored(
    spans: InMemorySpanExporter, new_store: NewStore
) -> Iterator[tuple[SpanStore, StoreSpanProcessor]]:
    store = new_store()
    processor = install_span_store(store, provider=PROVIDER)
    yield store, processor
    processor.shutdown()


def tree(store: SpanStore, trace_id: str) -> dict[str, dict[str, Any]]:
    return {span["spanId"]: span for span in store.get_trace(trace_id)}


async def test_a_run_is_stored_as_mastra_span_records(stored: tuple[SpanStore, StoreSpanProcessor]) -> None:
    store, processor = stored
    agent = calculator()
    async with Runstream(agents=[agent]):
        await agent.generate("divide", memory=None)
    assert processor.force_flush()
    (root,), total = store.list_traces(TraceQuery())
    assert total == 1
    assert root["spanType"] == "agent_run" and root["parentSpanId"] is None
    assert (root["entityType"], root["entityId"], root["entityName"]) == ("agent", "calc", "Calculator")
    assert root["attributes"]["usage"] == {"inputTokens": 6, "outputTokens": 4}
    assert (
        root["isEvent"] is False and root["startedAt"].endswith("Z") and root["endedAt"] >= root["startedAt"]
    )
    spans = tree(store, root["traceId"])
    kinds = sorted(s["spanType"] for s in spans.values())
    assert kinds == ["agent_run", "model_generation", "model_generation", "tool_call", "tool_call"]
    assert root["name"] == "invoke_agent Calculator"
    children = [s for s in spans.values() if s["spanId"] != root["spanId"]]
    assert all(s["parentSpanId"] == root["spanId"] for s in children)
    tools = [s for s in children if s["spanType"] == "tool_call"]
    assert {s["entityId"] for s in tools} == {"divide"}
    failed = [s for s in tools if s["error"] is not None]
    assert len(failed) == 1 and failed[0]["attributes"]["success"] is False
    generation = next(s for s in children if s["spanType"] == "model_generation")
    assert generation["entityId"] == "calc" and generation["attributes"]["usage"] == {
        "inputTokens": 3,
        "outputTokens": 2,
    }
    assert store.get_span(root["traceId"], generation["spanId"]) == generation
    assert store.distinct("entity_type") == ["agent", "tool"]
    assert store.distinct("entity_name", entity_type="tool") == ["divide"]


@pytest.mark.parametrize("captured", [True, False])
async def test_an_agent_runs_input_and_output_are_its_root_spans_when_content_is_captured(
    stored: tuple[SpanStore, StoreSpanProcessor], captured: bool
) -> None:
    """Studio's Traces page shows a trace's input from its root span: the run's new input and
    its answer are kept there when content capture is on, and nothing when it is off."""
    store, processor = stored
    agent = calculator()
    tracing.configure(capture_content=captured)
    try:
        async with Runstream(agents=[agent]):
            await agent.generate("six by three", memory=None)
    finally:
        tracing.configure(capture_content=None)
    assert processor.force_flush()
    (root,), _ = store.list_traces(TraceQuery())
    window = {"from": iso(datetime.now(UTC) - timedelta(hours=1)), "to": iso(datetime.now(UTC))}
    plan = plan_trace_query({"timeRange": window}, dialect=store.dialect, resource_id=None)
    (row,) = store.query_traces(plan)["traces"]
    assert store.get_span(root["traceId"], root["spanId"]) == root
    if not captured:
        assert (root["input"], root["output"], row["inputPreview"]) == (None, None, None)
        return
    assert root["input"] == [{"role": "user", "parts": [{"type": "text", "content": "six by three"}]}]
    assert root["output"] == [
        {"role": "assistant", "parts": [{"type": "text", "content": "2"}], "finish_reason": "stop"}
    ]
    assert row["inputPreview"] == "six by three"


async def test_background_task_and_its_continuation_turn_join_the_runs_trace(
    stored: tuple[SpanStore, StoreSpanProcessor],
) -> None:
    store, processor = stored
    await research_until_idle()
    assert processor.force_flush()
    (root,), total = store.list_traces(TraceQuery())
    assert total == 1 and root["resourceId"] == "u" and root["threadId"] == "t"
    spans = tree(store, root["traceId"])
    runs = [s for s in spans.values() if s["spanType"] == "agent_run"]
    assert len(runs) == 2
    (task,) = [s for s in spans.values() if s["attributes"].get("backgroundTaskId")]
    # The task hangs under the run that started it, the continuation turn under the task.
    assert task["parentSpanId"] == root["spanId"] and task["resourceId"] == "u"
    (turn,) = [s for s in runs if s["spanId"] != root["spanId"]]
    assert turn["parentSpanId"] == task["spanId"] and turn["attributes"]["continuation"] is True
    assert turn["traceId"] == root["traceId"] == task["traceId"]
    turn_children = [s for s in spans.values() if s["parentSpanId"] == turn["spanId"]]
    assert [s["spanType"] for s in turn_children] == ["model_generation"]
    # Owner confinement at the store.
    assert store.list_traces(TraceQuery(resource_id="someone-else"))[1] == 0
    assert store.trace_owner(root["traceId"]) == (True, "u")


async def test_sampling_keeps_whole_traces_or_none(spans: InMemorySpanExporter, new_store: NewStore) -> None:
    store = new_store()
    processor = StoreSpanProcessor(store, sample_rate=0.0)
    PROVIDER.add_span_processor(processor)
    agent = calculator()
    try:
        async with Runstream(agents=[agent]):
            await agent.generate("divide")
        assert processor.force_flush()
        assert store.list_traces(TraceQuery())[1] == 0 and store.get_trace("x") == []
        assert spans.get_finished_spans()  # the other observer still saw them
    finally:
        processor.shutdown()
    with pytest.raises(ValueError):
        StoreSpanProcessor(store, sample_rate=2)


def record(trace: str, span: str, started: datetime, parent: str | None = None) -> dict[str, Any]:
    return {
        "traceId": trace,
        "spanId": span,
        "parentSpanId": parent,
        "name": "run",
        "spanType": "agent_run",
        "startedAt": started.strftime("%Y-%m-%dT%H:%M:%S.000Z"),
    }


def test_retention_is_bounded_by_age_and_count(new_store: NewStore) -> None:
    now = datetime(2026, 1, 10, tzinfo=UTC)
    store = new_store(max_age=timedelta(days=1), max_spans=3)
    store.write_spans([record("old", "a", now - timedelta(days=2))], now=now)
    assert store.get_trace("old") == []
    store.write_spans([record(f"t{i}", "s", now - timedelta(minutes=i)) for i in range(5)], now=now)
    page, total = store.list_traces(TraceQuery(per_page=2))
    assert total == 3 and [s["traceId"] for s in page] == ["t2", "t3"]
    oldest, _ = store.list_traces(TraceQuery(ascending=True, per_page=1, page=0))
    assert oldest[0]["traceId"] == "t4"


async def test_the_store_shares_a_sqlite_storage_file(tmp_path: Path) -> None:
    path = tmp_path / "runstream.db"
    storage = SqliteStorage(path)
    await storage.init()
    try:
        store = SpanStore(str(path))
        store.write_spans([record("t", "s", datetime.now(UTC))])
        score_id = store.add_signal("score", {"scorerId": "relevance", "score": 0.5, "traceId": "t"}, "u")
        scores, total = store.list_signals("score", filters={"traceId": "t"}, page=0, per_page=10)
        assert total == 1 and scores[0]["scoreId"] == score_id and scores[0]["score"] == 0.5
        assert store.list_signals("score", filters={}, page=0, per_page=10, resource_id="v")[1] == 0
        assert await storage.get_thread("none") is None
        store.close()
    finally:
        await storage.close()


def test_a_write_waiting_for_the_files_lock_is_kept_and_reads_do_not_wait(tmp_path: Path) -> None:
    """Another connection to the file (a SqliteStorage's: its transactions span event-loop turns,
    so under load they can hold the write lock for seconds) holds the lock longer than the 5 s
    busy timeout the store used to have: a log and a span written meanwhile wait and are kept
    (they were lost: 'database is locked'), and reads answer while the write waits (they queued
    behind it)."""
    path = tmp_path / "runstream.db"
    store = SpanStore(str(path))
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    held_since = time.monotonic()
    now = datetime.now(UTC)
    failures: list[Exception] = []

    def write() -> None:
        try:
            store.write_logs([{"timestamp": iso(now), "level": "error", "message": "m", "traceId": "t"}])
            store.write_spans([record("t", "s", now)])
        except Exception as exc:
            failures.append(exc)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        assert store.list_logs(filters={}, page=0, per_page=10)[1] == 0
        assert writer.is_alive()  # the read did not wait for the write
        time.sleep(max(0.0, held_since + 5.5 - time.monotonic()))
    finally:
        other.execute("COMMIT")
        other.close()
        writer.join()
    assert failures == []
    assert store.list_logs(filters={}, page=0, per_page=10)[1] == 1
    assert [root["traceId"] for root in store.list_traces(TraceQuery())[0]] == ["t"]
    store.close()


async def test_a_runtime_feeds_its_store_once(spans: InMemorySpanExporter) -> None:
    store = SpanStore()
    processor = install_span_store(store, provider=PROVIDER, sample_rate=0.0)
    agent = calculator()
    runtime = Runstream(agents=[agent], observability=store)
    try:
        async with runtime:
            assert runtime._span_processor is None  # fed already: the sampling one stays alone
            await agent.generate("divide")
        assert processor.force_flush() and store.list_traces(TraceQuery())[1] == 0
    finally:
        processor.shutdown()


def test_scores_feedback_and_logs_are_kept_and_listed(new_store: NewStore) -> None:
    now = datetime.now(UTC)
    store = new_store(max_logs=2)
    store.write_spans([record("t", "s", now)])
    score_id = store.add_signal("score", {"scorerId": "relevance", "score": 0.5, "traceId": "t"}, "u")
    store.add_signal("feedback", {"feedbackType": "thumbs", "value": 1, "traceId": "t"}, "u")
    scores, total = store.list_signals("score", filters={"traceId": "t"}, page=0, per_page=10)
    assert total == 1 and scores[0]["scoreId"] == score_id and scores[0]["score"] == 0.5
    assert store.list_signals("feedback", filters={"name": "thumbs"}, page=0, per_page=10)[1] == 1
    assert store.list_signals("score", filters={}, page=0, per_page=10, resource_id="v")[1] == 0
    logs = [
        {"timestamp": iso(now + timedelta(seconds=i)), "level": level, "message": f"m{i}", "traceId": "t"}
        for i, level in enumerate(("info", "warn", "error"))
    ]
    store.write_logs(logs)
    kept, total = store.list_logs(filters={"traceId": "t"}, page=0, per_page=10)
    assert total == 2 and [log["message"] for log in kept] == ["m2", "m1"]  # the newest two, newest first
    assert store.list_logs(filters={}, levels=["warn"], page=0, per_page=10)[0][0]["message"] == "m1"


def test_metric_points_come_from_the_stored_spans(new_store: NewStore) -> None:
    store = new_store()
    start = datetime(2026, 1, 10, tzinfo=UTC)
    spans = [
        {
            **record("t", f"s{i}", start + timedelta(minutes=i)),
            "endedAt": iso(start + timedelta(minutes=i, milliseconds=100 * (i + 1))),
            "spanType": "model_generation",
            "resourceId": "u" if i < 2 else "v",
            "attributes": {"usage": {"inputTokens": 10 * i, "outputTokens": 1}, "model": "m"},
        }
        for i in range(3)
    ]
    store.write_spans(spans, now=start)
    points = store.metric_points(
        "model_generation", "duration", filters={"model": "m"}, start=None, end=None, resource_id="u"
    )
    assert [round(p["value"]) for p in points] == [100, 200] and points[0]["resourceId"] == "u"
    tokens = store.metric_points(
        "model_generation", "input_tokens", filters={}, start=None, end=None, resource_id=None
    )
    assert [p["value"] for p in tokens] == [0, 10, 20]


async def test_a_workflow_run_and_its_steps_are_one_trace_with_its_agent(
    stored: tuple[SpanStore, StoreSpanProcessor],
) -> None:
    store, processor = stored
    agent = Agent("writer", model=ScriptedModel.text("Rust is safe."))
    inner = Workflow("review").then(Step("spell", lambda ctx: {"prompt": ctx.input_data["prompt"]})).commit()
    wf = (
        Workflow("summary")
        .map({"prompt": {"template": "Summarize ${inputData.topic}"}})
        .then(inner)
        .then(agent)
        .commit()
    )
    run = await wf.create_run()
    assert (await run.start(input_data={"topic": "Rust"})).status == "success"
    assert processor.force_flush()
    (root,), total = store.list_traces(TraceQuery(filters={"entityType": "workflow_run"}))
    assert total == 1 and (root["spanType"], root["entityId"]) == ("workflow_run", "summary")
    assert root["runId"] == run.run_id and root["attributes"]["status"] == "success"
    spans = tree(store, root["traceId"])
    steps = {s["entityId"]: s for s in spans.values() if s["spanType"] == "workflow_step"}
    assert set(steps) == {"review", "spell", "writer"} | {k for k in steps if k.startswith("mapping")}
    assert steps["spell"]["parentSpanId"] == steps["review"]["spanId"]  # the nested workflow's step
    assert steps["review"]["parentSpanId"] == root["spanId"] == steps["writer"]["parentSpanId"]
    (run_span,) = [s for s in spans.values() if s["spanType"] == "agent_run"]
    assert run_span["parentSpanId"] == steps["writer"]["spanId"] and run_span["entityId"] == "writer"
    duration = store.metric_points(
        "workflow_run", "duration", filters={}, start=None, end=None, resource_id=None
    )
    assert len(duration) == 1 and duration[0]["value"] >= 0


def test_trace_queries_read_fields_columns_and_json_alike(new_store: NewStore) -> None:
    """The advanced trace query on each backend: columns, JSON fields of scores and feedback
    (numbers and text kept apart), a root's metadata, thread groups; running traces left out."""
    now = datetime.now(UTC).replace(microsecond=0)
    store = new_store()

    def root(trace: str, thread: str, minutes: int, *, ended: bool = True, **metadata: Any) -> dict[str, Any]:
        started = now - timedelta(minutes=minutes)
        return {
            **record(trace, f"{trace}-root", started),
            "threadId": thread,
            "endedAt": iso(started + timedelta(seconds=1)) if ended else None,
            "metadata": metadata,
        }

    store.write_spans(
        [
            root("t1", "th-a", 3, region=" west "),
            root("t2", "th-b", 2),
            root("t3", "th-a", 1),
            root("t4", "th-c", 0, ended=False),
        ]
    )
    store.add_signal(
        "score", {"scorerId": "factuality", "score": 0.4, "traceId": "t1", "scorerVersion": "2"}, None
    )
    store.add_signal(
        "feedback", {"feedbackType": "rating", "value": -1, "traceId": "t2", "comment": "bad"}, None
    )
    store.add_signal("feedback", {"feedbackType": "label", "value": "3", "traceId": "t3"}, None)
    window = {"from": iso(now - timedelta(hours=1)), "to": iso(now + timedelta(minutes=1))}

    def traces(where: dict[str, Any] | None = None, **body: Any) -> list[str]:
        plan = plan_trace_query(
            {"timeRange": window, "where": where, **body}, dialect=store.dialect, resource_id=None
        )
        return [t["traceId"] for t in store.query_traces(plan)["traces"]]

    def eq(path: str, literal: Any, op: str = "eq") -> dict[str, Any]:
        return {"op": op, "left": {"path": path}, "right": {"literal": literal}}

    assert traces() == ["t3", "t2", "t1"]  # t4 still runs
    assert traces(
        {"scores": {"some": {"op": "and", "args": [eq("score", 0.5, "lt"), eq("scorerVersion", "2")]}}}
    ) == ["t1"]
    assert traces({"feedback": {"some": eq("value", 0, "lt")}}) == ["t2"]
    assert traces({"feedback": {"some": eq("value", "3")}}) == ["t3"]  # the text "3", not a number
    assert traces({"feedback": {"some": eq("value", 3)}}) == []
    assert traces({"feedback": {"some": {"op": "exists", "path": "comment"}}}) == ["t2"]
    assert traces(eq("metadata.region", "west")) == ["t1"]  # trimmed, as Mastra compares
    assert traces({"op": "notExists", "path": "metadata.region"}) == ["t3", "t2"]
    grouped = plan_trace_query(
        {"timeRange": window, "group": {"by": ["threadId"]}}, dialect=store.dialect, resource_id=None
    )
    assert store.query_traces(grouped) == {
        "groups": [{"threadId": "th-a"}, {"threadId": "th-b"}],
        "page": {"next": None},
    }


async def test_the_sql_span_rows_match_the_records(stored: tuple[SpanStore, StoreSpanProcessor]) -> None:
    """``ai_span_rows`` (what the trace query's ``spans`` clauses read) derives a span's columns in
    SQL as the read path does in Python, for the processor's spans and for given records."""
    store, processor = stored
    agent = calculator()
    async with Runstream(agents=[agent]):
        await agent.generate("divide", memory=None)
    assert processor.force_flush()
    (root,), _ = store.list_traces(TraceQuery())
    started = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
    given = {**record("given", "g", started), "endedAt": iso(started + timedelta(seconds=1.5))}
    store.write_spans([{**given, "entityType": "agent", "attributes": {"model": "m", "provider": "p"}}])
    for trace_id in (root["traceId"], "given"):
        rows = store._rows(
            "SELECT name, span_type, entity_type, entity_id, entity_name, has_error, started_at, ended_at, "
            "duration_ms, provider, model FROM ai_span_rows WHERE trace_id = ?",
            (trace_id,),
        )
        expected = sorted(
            (
                s["name"],
                s["spanType"],
                s.get("entityType"),
                s.get("entityId"),
                s.get("entityName"),
                int(s.get("error") is not None),
                s["startedAt"],
                s["endedAt"],
                s["attributes"].get("provider"),
                s["attributes"].get("model"),
            )
            for s in store.get_trace(trace_id)
        )
        columns = ("name", "span_type", "entity_type", "entity_id", "entity_name", "has_error")
        assert (
            sorted(
                (*(r[c] for c in columns), r["started_at"], r["ended_at"], r["provider"], r["model"])
                for r in rows
            )
            == expected
        )
        assert rows and all(float(r["duration_ms"]) >= 0 for r in rows)
    (given_row,) = store._rows("SELECT duration_ms FROM ai_span_rows WHERE trace_id = 'given'")
    assert round(float(given_row["duration_ms"])) == 1500


async def test_a_full_queue_drops_spans_and_never_blocks(
    spans: InMemorySpanExporter, new_store: NewStore
) -> None:
    store = new_store()
    processor = StoreSpanProcessor(store, max_queue_size=2, schedule_delay_millis=3_600_000)
    PROVIDER.add_span_processor(processor)
    agent = calculator()
    try:
        async with Runstream(agents=[agent]):
            await agent.generate("divide", memory=None)
        ended = spans.get_finished_spans()
        assert processor.dropped == len(ended) - 2
        assert processor.force_flush()
        kept = store.get_trace(f"{ended[0].context.trace_id:032x}")  # the first two that ended
        assert sorted(span["spanId"] for span in kept) == sorted(
            f"{s.context.span_id:016x}" for s in ended[:2]
        )
    finally:
        processor.shutdown()
