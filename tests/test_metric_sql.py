"""Metrics and discovery computed by the database (``ai_span_facts``) give what a plain Python
computation over the same stored spans gives, on SQLite and PostgreSQL: aggregates, groups,
time series and percentiles, confined to a resource or not, after retention, and on a store
written before the table existed (indexed once when it opens)."""

from __future__ import annotations

import asyncio
import math
import uuid
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider

from bench.bench_metrics import emit
from runstream.observability import PostgresSpanStore, SpanStore
from runstream.observability import metrics as shape
from runstream.observability.metric_sql import METRIC_COLUMNS, METRIC_DIMENSIONS, Member, Selection
from runstream.observability.processor import StoreSpanProcessor
from runstream.observability.records import (
    FACT_COLUMNS,
    columns_facts,
    epoch_ms,
)
from runstream.observability.store import SpanColumns, _Where, iso
from tests.conftest import POSTGRES_URL
from tests.storage.postgres_testkit import drop_schema, require_postgres, unreachable_reason

START = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=4)
Point = dict[str, Any]


@pytest.fixture(scope="module")
def postgres_problem() -> str | None:
    return unreachable_reason()


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, postgres_problem: str | None) -> str:
    if request.param == "postgres":
        require_postgres(postgres_problem)
    return str(request.param)


@pytest.fixture
def open_store(backend: str, tmp_path: Path) -> Iterator[Any]:
    """Opens stores at one place of ``backend`` (a SQLite file, a PostgreSQL schema dropped
    afterwards): each call opens it again."""
    made: list[SpanStore] = []
    schema = f"metric_sql_{uuid.uuid4().hex}"

    def make(**options: Any) -> SpanStore:
        if backend == "postgres":
            store: SpanStore = PostgresSpanStore(POSTGRES_URL, schema=schema, **options)
        else:
            store = SpanStore(str(tmp_path / "spans.db"), **options)
        made.append(store)
        return store

    yield make
    for store in made:
        store.close()
    if backend == "postgres":
        asyncio.run(drop_schema(schema))


def feed(store: SpanStore, spans: int, start: datetime = START, seed: int = 7) -> None:
    """Synthetic runs through the SDK and the processor (as a service stores them), a few
    records given as Mastra's, in several writes."""
    processor = StoreSpanProcessor(store, max_queue_size=spans * 2, max_export_batch_size=97)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    emit(provider.get_tracer("test"), spans, start=start, seed=seed, grain_ms=10_000)  # runs start together
    processor.shutdown()
    store.write_spans(
        [
            {
                "traceId": "given",
                "spanId": f"g{i}",
                "name": "given run",
                "spanType": "agent_run",
                "entityType": "agent",
                "entityName": "Given",
                "resourceId": "user-a",
                "startedAt": iso(start + timedelta(hours=3, minutes=30)),  # the last, all at once
                "endedAt": iso(start + timedelta(hours=3, minutes=30, milliseconds=40 * i + 3)),
                "error": {"message": "x"} if i % 2 else None,
                "attributes": {"usage": {"inputTokens": i, "outputTokens": True}, "model": "given-model"},
            }
            for i in range(6)
        ]
    )


def stored_spans(store: SpanStore) -> list[SpanColumns]:
    """The stored spans as the Python read path derives them, oldest batch first."""
    return list(store._batches(_Where()))


# -- the reference: the Python computation the store did before, over decoded batches -----------
def points(
    spans: Sequence[SpanColumns],
    names: Sequence[str],
    *,
    filters: Mapping[str, str] = {},
    start: str | None = None,
    end: str | None = None,
    resource_id: str | None = None,
    trace_ids: Sequence[str] | None = None,
    limit: int = 100_000,
) -> list[Point]:
    found: list[Point] = []
    for name in names:
        span_type, column = shape.METRICS[name]
        value_column = METRIC_COLUMNS[column]
        mine = [
            {
                "name": name,
                "timestamp": span["started_at"],
                "value": span.get(value_column),
                **{key: span.get(column) for key, column in METRIC_DIMENSIONS.items()},
            }
            for span in spans
            if span["span_type"] == span_type
            and span.get(value_column) is not None
            and (start is None or span["started_at"] >= start)
            and (end is None or span["started_at"] <= end)
            and (resource_id is None or span["resource_id"] == resource_id)
            and all(span.get(METRIC_DIMENSIONS[key]) == value for key, value in filters.items())
        ]
        mine.sort(key=lambda point: str(point["timestamp"]))
        found.extend(mine[:limit])
    if trace_ids is not None:
        found = [point for point in found if point["traceId"] in trace_ids]
    found.sort(key=lambda point: str(point["timestamp"]))
    return found


def aggregate(found: Sequence[Point], aggregation: str, distinct: str | None = None) -> float | None:
    if aggregation == "count":
        return float(len(found))
    if aggregation == "count_distinct":
        return float(len({point.get(distinct or "name") for point in found} - {None}))
    if not found:
        return None
    values = [float(point["value"]) for point in found]
    return {
        "sum": math.fsum(values),
        "avg": math.fsum(values) / len(values),
        "min": min(values),
        "max": max(values),
        "last": values[-1],
    }[aggregation]


def key(point: Point, group_by: Sequence[str]) -> tuple[str | None, ...]:
    return tuple(None if point.get(name) is None else str(point.get(name)) for name in group_by)


def bucket(moment: str, step: int) -> datetime:
    seconds = datetime.fromisoformat(moment).timestamp()
    return datetime.fromtimestamp(seconds // step * step, UTC)


def percentile(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    rank = fraction * (len(ordered) - 1)
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def close(actual: Any, expected: Any) -> bool:
    """Equal, floats to 1e-9 (a database sums in its own order; Python's ``fsum`` is exact)."""
    if isinstance(expected, float) and isinstance(actual, float):
        return math.isclose(actual, expected, rel_tol=1e-9, abs_tol=1e-9)
    if isinstance(expected, dict) and isinstance(actual, dict):
        return expected.keys() == actual.keys() and all(close(actual[k], expected[k]) for k in expected)
    if isinstance(expected, list | tuple) and isinstance(actual, list | tuple):
        return len(actual) == len(expected) and all(
            close(a, e) for a, e in zip(actual, expected, strict=True)
        )
    return bool(actual == expected)


# -- what the store answers ------------------------------------------------------------------------
def selection(names: Sequence[str], **options: Any) -> Selection:
    """The store's selection of a case (its window's bounds as epoch milliseconds)."""
    for bound in ("start", "end"):
        if options.get(bound) is not None:
            options[bound] = epoch_ms(options[bound])
    return Selection([Member(name, *shape.METRICS[name]) for name in names], **options)


def window(start: str | None, end: str | None) -> dict[str, str | None]:
    return {"start": start, "end": end}


def cases(spans: Sequence[SpanColumns]) -> list[dict[str, Any]]:
    """Selections to compare: metrics (one, several, one twice), filters, windows, a resource,
    some traces, and a limit that cuts."""
    some_traces = sorted({span["trace_id"] for span in spans})[::3]
    middle = window(iso(START + timedelta(minutes=50)), iso(START + timedelta(hours=2, minutes=10)))
    return [
        {"names": ["mastra_agent_duration_ms"]},
        {"names": ["mastra_model_total_input_tokens"], "filters": {"model": "gpt-4o-mini"}},
        {"names": ["mastra_model_duration_ms", "mastra_tool_duration_ms"], **middle},
        {"names": ["mastra_tool_duration_ms", "mastra_tool_duration_ms"], "filters": {"status": "error"}},
        {"names": ["mastra_model_total_output_tokens"], "resource_id": "user-a"},
        {"names": ["mastra_agent_duration_ms", "mastra_workflow_duration_ms"], "trace_ids": some_traces},
        {"names": ["mastra_tool_duration_ms"], "filters": {"entityName": "search"}, "limit": 40},
        {"names": ["mastra_model_duration_ms"], "filters": {"provider": "openai", "resourceId": "user-b"}},
    ]


def check_metrics(store: SpanStore) -> None:
    spans = stored_spans(store)
    assert spans
    for case in cases(spans):
        names = case.pop("names")
        expected_points = points(spans, names, **case)
        chosen = selection(names, **dict(case))
        for aggregation in ("count", "sum", "avg", "min", "max", "last", "count_distinct"):
            distinct = "entityName" if aggregation == "count_distinct" else None
            rows = store.metric_groups(chosen, aggregation=aggregation, distinct=distinct)
            expected = aggregate(expected_points, aggregation, distinct)
            assert close(shape.number(rows[0]["value"]), expected), (names, case, aggregation)
        check_groups(store, chosen, expected_points)
        check_series(store, chosen, expected_points, names)
        check_percentiles(store, chosen, expected_points)


def check_groups(store: SpanStore, chosen: Selection, expected_points: Sequence[Point]) -> None:
    for group_by, aggregation in (
        (["entityName"], "count"),
        (["model", "status"], "avg"),
        (["name"], "last"),
    ):
        groups: dict[tuple[str | None, ...], list[Point]] = defaultdict(list)
        for point in expected_points:
            groups[key(point, group_by)].append(point)
        for descending, limit in ((True, None), (False, 2)):
            expected = sorted(
                ((aggregate(members, aggregation) or 0.0, k) for k, members in groups.items()),
                key=lambda pair: pair[0],
                reverse=descending,
            )[:limit]
            rows = store.metric_groups(chosen, aggregation=aggregation, group_by=group_by)
            answer = shape.breakdown(rows, group_by, limit=limit, descending=descending)
            wanted = [{"dimensions": dict(zip(group_by, k, strict=True)), "value": v} for v, k in expected]
            assert close(answer, wanted), (group_by, aggregation, answer, wanted)


def check_series(
    store: SpanStore, chosen: Selection, expected_points: Sequence[Point], names: Sequence[str]
) -> None:
    name = ",".join(names)
    for group_by, step, aggregation in (
        ([], 300, "sum"),
        (["provider", "model"], 3600, "count"),
        (["status"], 900, "max"),
    ):
        series: dict[str, dict[datetime, list[Point]]] = defaultdict(lambda: defaultdict(list))
        for point in expected_points:
            label = "|".join(v or "" for v in key(point, group_by)) if group_by else name
            series[label][bucket(point["timestamp"], step)].append(point)
        expected = [
            {
                "name": label,
                "points": [
                    {"timestamp": moment, "value": aggregate(members, aggregation) or 0.0}
                    for moment, members in sorted(buckets.items())
                ],
            }
            for label, buckets in series.items()
        ]
        rows = store.metric_groups(chosen, aggregation=aggregation, group_by=group_by, series=True, step=step)
        assert close(shape.time_series(rows, name), expected), (group_by, step)


def check_percentiles(store: SpanStore, chosen: Selection, expected_points: Sequence[Point]) -> None:
    fractions = [0.0, 0.5, 0.9, 0.95, 1.0]
    for step in (900, 86_400):
        buckets: dict[datetime, list[float]] = defaultdict(list)
        for point in expected_points:
            buckets[bucket(point["timestamp"], step)].append(float(point["value"]))
        expected = [
            {
                "percentile": fraction,
                "points": [
                    {"timestamp": moment, "value": percentile(values, fraction)}
                    for moment, values in sorted(buckets.items())
                ],
            }
            for fraction in fractions
        ]
        answer = shape.percentile_series(store.metric_percentiles(chosen, fractions, step), fractions)
        assert close(answer, expected), step


def check_discovery(store: SpanStore) -> None:
    spans = stored_spans(store)
    for column in ("entity_type", "entity_name", "service_name", "environment"):
        for resource_id in (None, "user-a", "nobody"):
            for entity_type in (None, "tool", "agent"):
                expected = sorted(
                    {
                        str(span[column])  # type: ignore[literal-required]
                        for span in spans
                        if span[column] is not None  # type: ignore[literal-required]
                        and (resource_id is None or span["resource_id"] == resource_id)
                        and (entity_type is None or span["entity_type"] == entity_type)
                    }
                )
                answer = store.distinct(column, entity_type=entity_type, resource_id=resource_id)
                assert answer == expected, (column, resource_id, entity_type)


FACTS = f"SELECT {', '.join(FACT_COLUMNS)} FROM ai_span_facts ORDER BY upto, position"


def check_rows(store: SpanStore) -> None:
    """Every stored span has its facts, the columns the Python read path derives, none more."""
    store.index_facts()
    spans = stored_spans(store)
    rows = store._rows(FACTS)
    assert len(rows) == len(spans)
    for row, span in zip(rows, spans, strict=True):
        expected = columns_facts(span)
        assert close([row[c] for c in FACT_COLUMNS[2:]], list(expected)), (row, expected)


# -- the tests ----------------------------------------------------------------------------------------
def test_metrics_and_discovery_in_sql_match_python(open_store: Any) -> None:
    store = open_store(max_spans=100_000)
    feed(store, 1_500)
    check_rows(store)
    check_metrics(store)
    check_discovery(store)
    assert store.distinct("entity_type") == ["agent", "tool", "workflow_run", "workflow_step"]


def test_retention_removes_the_facts_with_their_batches(open_store: Any) -> None:
    """Count, then age: the facts of the batches that went go with them; what is left reads
    as the Python computation over what is left."""
    store = open_store(max_spans=700, max_age=timedelta(days=2))
    feed(store, 600, seed=1)
    check_rows(store)  # indexed
    feed(store, 800, seed=2)  # the oldest batches (and their facts) go
    check_rows(store)
    kept = store._rows("SELECT COUNT(*) AS n FROM ai_span_facts")[0]["n"]
    assert 700 <= kept < 1_000
    check_metrics(store)
    check_discovery(store)
    later = START + timedelta(days=3)
    store.write_spans(
        [{"traceId": "late", "spanId": "l", "name": "run", "spanType": "agent_run", "startedAt": iso(later)}],
        now=later,
    )
    assert store._rows("SELECT COUNT(*) AS n FROM ai_span_facts")[0]["n"] == 0  # all older than 2 days
    check_rows(store)
    assert store.distinct("entity_type") == []


def test_a_store_written_before_the_facts_table_is_indexed_when_read(open_store: Any) -> None:
    store = open_store()
    feed(store, 400)
    check_rows(store)
    before = store._rows(FACTS)
    store._backend.write([("DROP TABLE ai_span_facts", (), False)])  # the previous version's layout
    store.close()
    reopened = open_store()
    assert reopened._rows("SELECT COUNT(*) AS n FROM ai_span_facts")[0]["n"] == 0
    check_metrics(reopened)  # reading indexes it first
    assert close(
        [list(row.values()) for row in reopened._rows(FACTS)], [list(row.values()) for row in before]
    )


class _Racing(SpanStore):
    """A store whose retention removes every batch just after indexing read them (a write of
    another thread landing between the read and the indexing transaction)."""

    armed = False

    def _rows(self, sql: str, params: Any = ()) -> Any:
        rows = super()._rows(sql, params)
        if self.armed and sql.startswith("SELECT upto, spans FROM ai_span_batches"):
            self.armed = False
            late = START + timedelta(days=30)
            self.write_spans(
                [
                    {
                        "traceId": "late",
                        "spanId": "l",
                        "name": "r",
                        "spanType": "agent_run",
                        "startedAt": iso(late),
                    }
                ],
                now=late,
            )
        return rows


def test_facts_of_batches_removed_while_indexing_are_dropped(tmp_path: Path) -> None:
    store = _Racing(str(tmp_path / "spans.db"))
    try:
        feed(store, 200)
        store.armed = True
        store.index_facts()
        check_rows(store)  # only the late span's facts: none of the batches that went
        assert [row["trace_id"] for row in store._rows(FACTS)] == ["late"]
    finally:
        store.close()
