"""The span store: Mastra's AI-tracing span records, scores, feedback and logs, in SQLite
(:class:`SpanStore`) or PostgreSQL (:class:`PostgresSpanStore`), the same interface and SQL.

Written by :class:`~runstream.observability.processor.StoreSpanProcessor` from its worker thread
(batches, one transaction each, never on a run's path) and read by the server's
``/api/observability`` routes through :func:`asyncio.to_thread`. ``path`` may be the file of a
:class:`~runstream.storage.SqliteStorage` (WAL lets both connections work) or ``":memory:"``.

Spans are kept a row per trace per written batch (``ai_span_batches``: the trace's spans of that
batch in one JSON document), and each trace's root span once more in ``ai_traces``, the trace
list's index: a span costs its encoding and a share of one insert instead of a row with its
indexes. The roots are put in ``ai_traces`` when the trace list is next read
(:meth:`SpanStore.index_roots`), and a span's facts in ``ai_span_facts`` when metrics are
(:meth:`SpanStore.index_facts`), so a write touches one table (a commit's pages are most of a
write's cost). Reads decode the batches of a trace (its tree, a span) or of a time range and
filter them exactly; the records are built then (:mod:`.records`).

Retention is bounded: spans older than ``max_age`` and all but the newest ``max_spans`` are
deleted after each write that finds the oldest stored row due, a batch at a time (``upto``, the
number of a batch's last span among all spans written, is what the count is kept by; a batch goes
when its last span is older than the newest ``max_spans``, and a trace's root with its batch).
Scores and feedback: the newest ``max_signals``; logs: ``max_age`` and the newest ``max_logs``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TypeAlias

import orjson

from runstream.errors import ConfigurationError
from runstream.observability import metric_sql
from runstream.observability._indexes import TRACE_COLUMNS as TRACE_COLUMNS
from runstream.observability._indexes import ReadIndexes, batch_spans, record_columns
from runstream.observability._sql import (
    Backend,
    PostgresBackend,
    SqliteBackend,
    SqlParam,
    SqlRow,
    SqlStep,
    SqlValue,
)
from runstream.observability.metrics import interpolate
from runstream.observability.records import (
    FACT_COLUMNS,
    LogRecord,
    SpanColumns,
    epoch_ms,
    iso_ns,
    mastra_span,
)
from runstream.observability.trace_query import TraceQueryPlan, encode_cursor, trace_row

_INSERT_BATCH = (
    "INSERT INTO ai_span_batches (upto, trace_id, resource_id, first_started, last_started, roots, spans) "
    "VALUES (?, ?, ?, ?, ?, ?, ?)"
)
_WRITE_STATE = (
    "SELECT (SELECT COALESCE(MAX(upto), 0) FROM ai_span_batches) AS upto, "
    "(SELECT MIN(last_started) FROM ai_span_batches) AS batch_started, "
    "(SELECT MIN(started_at) FROM ai_traces) AS root_started, "
    "(SELECT MIN(upto) FROM ai_span_facts) AS ai_span_facts, "
    "(SELECT MIN(upto) FROM ai_span_batches) AS ai_span_batches, "
    "(SELECT MIN(upto) FROM ai_traces) AS ai_traces"
)
"""What a write reads first (each an index's end): the ``upto`` its batches number on from,
and the oldest of each table, whether retention has anything to delete."""
_RETAINED = ("ai_span_facts", "ai_span_batches", "ai_traces")
_FACT_LIST = ", ".join(FACT_COLUMNS)
_READ_ROOT = f"NULL AS parent_span_id, {', '.join(TRACE_COLUMNS)}, record"
_LOG_COLUMNS = ("timestamp", "level", "trace_id", "run_id", "resource_id", "record")
TRACE_FILTERS = {
    "traceId": "trace_id",
    "spanType": "span_type",
    "entityType": "entity_type",
    "entityId": "entity_id",
    "entityName": "entity_name",
    "resourceId": "resource_id",
    "threadId": "thread_id",
    "runId": "run_id",
    "serviceName": "service_name",
    "environment": "environment",
}
"""Trace-list filters (query parameter → column), compared for equality on the root span."""
TRACE_ORDER = {"startedAt": "started_at", "endedAt": "ended_at"}
DISCOVERY = {
    "entity_type": "entity_type",
    "entity_name": "entity_name",
    "service_name": "service_name",
    "environment": "environment",
}


Record: TypeAlias = Mapping[str, object]
"""A stored record as Mastra's JSON (span, score, feedback or log)."""


@dataclass(frozen=True, slots=True)
class TraceQuery:
    """A page of traces (their root spans), newest first unless ``ascending``."""

    filters: Mapping[str, str] = field(default_factory=dict)
    """Record field (a key of :data:`TRACE_FILTERS`) → value."""
    status: str | None = None
    """``"error"`` or ``"success"``."""
    start: datetime | None = None
    end: datetime | None = None
    order_by: str = "startedAt"
    ascending: bool = False
    page: int = 0
    per_page: int = 10
    resource_id: str | None = None
    """Confine to one resource's traces (a confined caller)."""


@dataclass(frozen=True, slots=True)
class SpanBatch:
    """One trace's spans from one written batch: a row of ``ai_span_batches``, and its root
    spans' rows of ``ai_traces``."""

    trace_id: str
    resource_id: str | None
    first_started: str
    last_started: str
    """The earliest and the latest ``startedAt`` of its spans (ISO text)."""
    count: int
    spans: str
    """JSON: ``{"trace": TRACE_CONTEXT, "spans": [entry, ...]}`` as the processor wrote it
    (:func:`~runstream.observability.records.span_columns`), or ``{"records": [record]}``."""
    roots: int = 0
    """How many of its spans are trace roots (``parentSpanId`` ``None``): not written to
    ``ai_traces`` with it, but when the trace list is first read (:meth:`SpanStore.index_roots`)."""


class _Where:
    """A WHERE clause and its parameters, built a condition at a time: the one builder of the
    store's filtered queries (traces, signals, logs, span batches)."""

    def __init__(self, *conditions: str, params: Iterable[SqlParam] = ()) -> None:
        self.conditions = list(conditions)
        self.params = list(params)

    def equal(self, columns: Mapping[str, str], filters: Mapping[str, str]) -> _Where:
        """``column = value`` for each filter (its key → column through ``columns``)."""
        for key, value in filters.items():
            self.conditions.append(f"{columns[key]} = ?")
            self.params.append(value)
        return self

    def within(self, start: datetime | None, end: datetime | None, column: str) -> _Where:
        """``column >= start`` and ``column <= end``."""
        for bound, operator in ((start, ">="), (end, "<=")):
            if bound is not None:
                self.conditions.append(f"{column} {operator} ?")
                self.params.append(_text(bound))
        return self

    def resource(self, resource_id: str | None) -> _Where:
        """Confined to one resource (``None``: any)."""
        if resource_id is not None:
            self.conditions.append("resource_id = ?")
            self.params.append(resource_id)
        return self

    def one_of(self, column: str, values: Sequence[str]) -> _Where:
        if values:
            self.conditions.append(f"{column} IN ({', '.join('?' for _ in values)})")
            self.params.extend(values)
        return self

    @property
    def sql(self) -> str:
        return " AND ".join(self.conditions) or "1 = 1"


class SpanStore(ReadIndexes):
    """The span store on SQLite (``path``: a file, or ``":memory:"``)."""

    def __init__(
        self,
        path: str = ":memory:",
        *,
        max_age: timedelta = timedelta(days=7),
        max_spans: int = 100_000,
        max_signals: int = 100_000,
        max_logs: int = 100_000,
    ) -> None:
        self.path = path
        self._setup(SqliteBackend(path), max_age, max_spans, max_signals, max_logs)

    def _setup(
        self, backend: Backend, max_age: timedelta, max_spans: int, max_signals: int, max_logs: int
    ) -> None:
        for name, bound in (("max_spans", max_spans), ("max_signals", max_signals), ("max_logs", max_logs)):
            if bound < 1:
                raise ConfigurationError(f"{name} must be at least 1")
        self._backend = backend
        self._insert_facts = (
            f"COPY ai_span_facts ({_FACT_LIST}) FROM STDIN"  # (a statement a row is a round trip each)
            if self.dialect == "postgres"
            else f"INSERT INTO ai_span_facts ({_FACT_LIST}) VALUES ({', '.join('?' for _ in FACT_COLUMNS)})"
        )
        self.max_age = max_age
        self.max_spans = max_spans
        self.max_signals = max_signals
        self.max_logs = max_logs
        self.fed = False
        """Whether a :class:`StoreSpanProcessor` feeds this store (the runtime installs one at start if not)."""
        self.run_context: Callable[[str], Mapping[str, str | None]] | None = None
        """Set by the processor feeding the store: a run id → its stored trace's ``traceId``,
        ``spanId``, ``resourceId``, ``threadId``, ``entityId``, ``entityName`` (for logs)."""

    def close(self) -> None:
        self._backend.close()

    # -- writes -----------------------------------------------------------------------------------
    def write_spans(self, records: Sequence[Record], *, now: datetime | None = None) -> None:
        """Append Mastra span records (each a batch of its own) in one transaction, then apply
        retention."""
        self.write_batches([_record_batch(record) for record in records], now=now)

    def write_batches(self, batches: Sequence[SpanBatch], *, now: datetime | None = None) -> None:
        """Append span batches (the processor's, one per trace of its batch) in one transaction,
        then apply retention (their facts and roots, if indexed, go with them).

        Their roots wait for the first read of the trace list (:meth:`index_roots`), as their
        facts wait for metrics: a batch is one row, and a write touches one table's pages and
        indexes. Retention runs only when the oldest batch, root or fact is due (the write reads
        each table's oldest first, an index's end each)."""
        if not batches:
            return
        cutoff = _text((now or datetime.now(UTC)) - self.max_age)

        def steps(state: list[SqlRow]) -> list[SqlStep]:
            upto = int(state[0]["upto"] or 0)
            first = upto + batches[0].count
            rows = []
            for b in batches:
                upto += b.count
                rows.append(
                    (upto, b.trace_id, b.resource_id, b.first_started, b.last_started, b.roots, b.spans)
                )
            written = (min(b.last_started for b in batches), first)
            return [(_INSERT_BATCH, rows, True), *self._retention(state[0], written, cutoff, upto)]

        self._backend.transact(_WRITE_STATE, (), steps)

    def _retention(self, state: SqlRow, written: tuple[str, int], cutoff: str, upto: int) -> list[SqlStep]:
        """The deletes a write needs: ``state`` (:data:`_WRITE_STATE`) has each table's oldest
        before it, ``written`` the oldest ``last_started`` and first ``upto`` of its batches,
        ``upto`` its last."""
        started, first = written
        held_started, held_first = state["batch_started"], state["ai_span_batches"]
        oldest = {
            **state,
            "batch_started": min(started, held_started) if isinstance(held_started, str) else started,
            "ai_span_batches": first if held_first is None else min(first, int(held_first)),
        }
        steps: list[SqlStep] = []
        if _before(oldest["batch_started"], cutoff):
            steps += [
                (
                    "DELETE FROM ai_span_facts WHERE upto IN "
                    "(SELECT upto FROM ai_span_batches WHERE last_started < ?)",
                    (cutoff,),
                    False,
                ),
                ("DELETE FROM ai_span_batches WHERE last_started < ?", (cutoff,), False),
            ]
        if _before(oldest["root_started"], cutoff):
            steps.append(("DELETE FROM ai_traces WHERE started_at < ?", (cutoff,), False))
        # (after deletes by age, the newest batch may be older than this write's last)
        aged = bool(steps)
        steps += [
            (
                f"DELETE FROM {table} WHERE upto <= (SELECT MAX(upto) FROM ai_span_batches) - ?",
                (self.max_spans,),
                False,
            )
            for table in _RETAINED
            if oldest[table] is not None and (aged or int(oldest[table] or 0) <= upto - self.max_spans)
        ]
        return steps

    def write_logs(self, records: Sequence[LogRecord], *, now: datetime | None = None) -> None:
        """Append log records (Mastra's log record shape), then apply retention."""
        if not records:
            return
        cutoff = _text((now or datetime.now(UTC)) - self.max_age)
        rows = [
            (
                record["timestamp"],
                record["level"],
                record.get("traceId"),
                record.get("runId"),
                record.get("resourceId"),
                orjson.dumps(record, default=str).decode(),
            )
            for record in records
        ]
        self._backend.write(
            [
                (
                    f"INSERT INTO ai_logs ({', '.join(_LOG_COLUMNS)}) VALUES (?, ?, ?, ?, ?, ?)",
                    rows,
                    True,
                ),
                ("DELETE FROM ai_logs WHERE timestamp < ?", (cutoff,), False),
                (
                    "DELETE FROM ai_logs WHERE seq <= (SELECT MAX(seq) FROM ai_logs) - ?",
                    (self.max_logs,),
                    False,
                ),
            ]
        )

    def add_signal(self, kind: str, record: Record, resource_id: str | None) -> str:
        """Store a score or a feedback record (``kind``: ``score`` / ``feedback``); returns its id."""
        key = "scoreId" if kind == "score" else "feedbackId"
        signal_id = str(record.get(key) or uuid.uuid4())
        stored = {**record, key: signal_id}
        stored.setdefault("timestamp", _text(datetime.now(UTC)))
        name = stored.get("scorerId") if kind == "score" else stored.get("feedbackType")
        row = (
            kind,
            signal_id,
            _value(stored.get("traceId")),
            _value(stored.get("spanId")),
            _value(name),
            resource_id,
            _value(stored["timestamp"]),
            orjson.dumps(stored, default=str).decode(),
        )
        self._backend.write(
            [
                (
                    "INSERT INTO ai_signals (kind, id, trace_id, span_id, name, resource_id, timestamp, record) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET record = excluded.record",
                    row,
                    False,
                ),
                (
                    "DELETE FROM ai_signals WHERE kind = ? AND seq <= (SELECT MAX(seq) FROM ai_signals) - ?",
                    (kind, self.max_signals),
                    False,
                ),
            ]
        )
        return signal_id

    # -- reads ------------------------------------------------------------------------------------
    def _batches(self, where: _Where) -> Iterator[SpanColumns]:
        """The spans of the batches matching ``where``, oldest batch first, as their columns
        (:func:`~runstream.observability._indexes.batch_spans`)."""
        rows = self._rows(f"SELECT spans FROM ai_span_batches WHERE {where.sql} ORDER BY seq", where.params)
        for row in rows:
            yield from batch_spans(str(row["spans"]))

    def list_traces(self, query: TraceQuery) -> tuple[list[Record], int]:
        """A page of root spans and the number of matching traces."""
        self.index_roots()
        where = _Where().equal(TRACE_FILTERS, query.filters)
        if query.status is not None:
            where.conditions.append("has_error = 1" if query.status == "error" else "has_error = 0")
        where.within(query.start, query.end, "started_at").resource(query.resource_id)
        total = _count(self._rows(f"SELECT COUNT(*) AS n FROM ai_traces WHERE {where.sql}", where.params))
        direction = "ASC" if query.ascending else "DESC"
        rows = self._rows(
            f"SELECT {_READ_ROOT} FROM ai_traces WHERE {where.sql} "
            f"ORDER BY {TRACE_ORDER[query.order_by]} {direction}, seq {direction} LIMIT ? OFFSET ?",
            [*where.params, query.per_page, query.page * query.per_page],
        )
        return [_root_record(row) for row in rows], total

    def trace_owner(self, trace_id: str) -> tuple[bool, str | None]:
        """Whether the trace exists, and the resource it belongs to (its root's, else its first
        batch's)."""
        self.index_roots()
        for table in ("ai_traces", "ai_span_batches"):
            rows = self._rows(
                f"SELECT resource_id FROM {table} WHERE trace_id = ? ORDER BY seq LIMIT 1", (trace_id,)
            )
            if rows:
                return True, _text_or_none(rows[0]["resource_id"])
        return False, None

    def get_trace(self, trace_id: str) -> list[Record]:
        """The trace's spans, by start (then as written)."""
        spans = sorted(self._batches(_Where("trace_id = ?", params=(trace_id,))), key=_started)
        return [_span_record(columns) for columns in spans]

    def get_span(self, trace_id: str, span_id: str) -> Record | None:
        for columns in self._batches(_Where("trace_id = ?", params=(trace_id,))):
            if columns["span_id"] == span_id:
                return _span_record(columns)
        return None

    @property
    def dialect(self) -> str:
        """``sqlite`` or ``postgres``: the SQL dialect a :class:`TraceQueryPlan` is compiled for."""
        return "postgres" if isinstance(self._backend, PostgresBackend) else "sqlite"

    def query_traces(self, query: TraceQueryPlan) -> dict[str, object]:
        """Mastra's trace-query answer: completed traces (root spans that ended) started in the
        query's range and matching its predicate, a keyset or numbered page of them, or the
        distinct thread ids of such traces."""
        self.index_roots()
        where = [
            "r.ended_at IS NOT NULL",
            "r.started_at >= ?",
            "r.started_at <= ?",
        ]
        params: list[SqlParam] = [query.start, query.end]
        if query.resource_id is not None:
            where.append("r.resource_id = ?")
            params.append(query.resource_id)
        if query.where is not None:
            where.append(query.where[0])
            params.extend(query.where[1])
        if query.result == "groups":
            where.append("r.thread_id IS NOT NULL")
            if query.after is not None:
                where.append("r.thread_id > ?")
                params.append(query.after[1])
            rows = self._rows(
                f"SELECT DISTINCT r.thread_id AS thread_id FROM ai_traces r WHERE {' AND '.join(where)} "
                "ORDER BY r.thread_id LIMIT ?",
                [*params, query.limit + 1],
            )
            groups = [{"threadId": row["thread_id"]} for row in rows[: query.limit]]
            more = len(rows) > query.limit
            return {
                "groups": groups,
                "page": {"next": encode_cursor(query, "", str(groups[-1]["threadId"])) if more else None},
            }
        sort = f"r.{query.order_field}"
        direction = "DESC" if query.descending else "ASC"
        if query.page is not None:
            clause = " AND ".join(where)
            total = _count(self._rows(f"SELECT COUNT(*) AS n FROM ai_traces r WHERE {clause}", params))
            rows = self._rows(
                f"SELECT {_READ_ROOT} FROM ai_traces r WHERE {clause} ORDER BY {sort} {direction}, r.trace_id "
                "LIMIT ? OFFSET ?",
                [*params, query.limit, query.page * query.limit],
            )
            pagination = {
                "total": total,
                "page": query.page,
                "perPage": query.limit,
                "hasMore": (query.page + 1) * query.limit < total,
            }
            return {"traces": [trace_row(_root_record(row)) for row in rows], "pagination": pagination}
        if query.after is not None:
            where.append(f"({sort} {'<' if query.descending else '>'} ? OR ({sort} = ? AND r.trace_id > ?))")
            params.extend([query.after[0], query.after[0], query.after[1]])
        rows = self._rows(
            f"SELECT {_READ_ROOT} FROM ai_traces r WHERE {' AND '.join(where)} "
            f"ORDER BY {sort} {direction}, r.trace_id LIMIT ?",
            [*params, query.limit + 1],
        )
        traces = [trace_row(_root_record(row)) for row in rows[: query.limit]]
        next_cursor = None
        if len(rows) > query.limit:
            last = rows[query.limit - 1]
            next_cursor = encode_cursor(query, str(last[query.order_field]), str(last["trace_id"]))
        return {"traces": traces, "page": {"next": next_cursor}}

    def list_signals(
        self,
        kind: str,
        *,
        filters: Mapping[str, str],
        page: int,
        per_page: int,
        ascending: bool = False,
        resource_id: str | None = None,
    ) -> tuple[list[Record], int]:
        """Scores or feedback, filtered by ``traceId`` / ``spanId`` / ``name`` (scorer or type)."""
        columns = {"traceId": "trace_id", "spanId": "span_id", "name": "name"}
        where = _Where("kind = ?", params=(kind,)).equal(columns, filters).resource(resource_id)
        return self._page("ai_signals", where, page, per_page, ascending)

    def list_logs(
        self,
        *,
        filters: Mapping[str, str],
        levels: Sequence[str] = (),
        start: datetime | None = None,
        end: datetime | None = None,
        page: int,
        per_page: int,
        ascending: bool = False,
        resource_id: str | None = None,
    ) -> tuple[list[Record], int]:
        """Log records, filtered by ``traceId`` / ``runId`` / ``resourceId``, levels and time."""
        columns = {"traceId": "trace_id", "runId": "run_id", "resourceId": "resource_id"}
        where = _Where().equal(columns, filters).one_of("level", levels).within(start, end, "timestamp")
        return self._page("ai_logs", where.resource(resource_id), page, per_page, ascending)

    def _page(
        self, table: str, where: _Where, page: int, per_page: int, ascending: bool
    ) -> tuple[list[Record], int]:
        total = _count(self._rows(f"SELECT COUNT(*) AS n FROM {table} WHERE {where.sql}", where.params))
        direction = "ASC" if ascending else "DESC"
        rows = self._rows(
            f"SELECT record FROM {table} WHERE {where.sql} ORDER BY timestamp {direction}, seq {direction} "
            "LIMIT ? OFFSET ?",
            [*where.params, per_page, page * per_page],
        )
        return [orjson.loads(str(row["record"])) for row in rows], total

    def metric_points(
        self,
        span_type: str,
        column: str,
        *,
        filters: Mapping[str, str],
        start: datetime | None,
        end: datetime | None,
        resource_id: str | None,
        limit: int = 100_000,
    ) -> list[SqlRow]:
        """The spans of ``span_type`` with a value in ``column`` (a
        :data:`~runstream.observability.metric_sql.METRIC_COLUMNS` name), oldest first:
        ``timestamp``, ``value`` and the dimensions metrics group and filter by."""
        self.index_facts()
        selection = metric_sql.Selection(
            [metric_sql.Member("", span_type, column)],
            filters,
            start=None if start is None else epoch_ms(_text(start)),
            end=None if end is None else epoch_ms(_text(end)),
            resource_id=resource_id,
            limit=limit,
        )
        source, params = metric_sql.points(selection)
        dimensions = ", ".join(f'{name} AS "{key}"' for key, name in metric_sql.METRIC_DIMENSIONS.items())
        rows = self._rows(
            f"SELECT started_ms, value, {dimensions} FROM ({source}) p ORDER BY started_ms, upto, position",
            params,
        )
        return [
            {
                "timestamp": iso_ns(int(row["started_ms"] or 0) * 1_000_000),
                **{key: value for key, value in row.items() if key != "started_ms"},
            }
            for row in rows
        ]

    def metric_groups(
        self,
        selection: metric_sql.Selection,
        *,
        aggregation: str,
        distinct: str | None = None,
        group_by: Sequence[str] = (),
        series: bool = False,
        step: int | None = None,
    ) -> list[SqlRow]:
        """The selected observations aggregated per group (:func:`.metric_sql.grouped`)."""
        self.index_facts()
        sql, params = metric_sql.grouped(
            selection,
            self.dialect,
            aggregation=aggregation,
            distinct=distinct,
            group_by=group_by,
            series=series,
            step=step,
        )
        return self._rows(sql, params)

    def metric_percentiles(
        self, selection: metric_sql.Selection, fractions: Sequence[float], step: int
    ) -> dict[int, list[float]]:
        """Each bucket's (start, epoch seconds) percentiles of the selected values, in the order of
        ``fractions``."""
        self.index_facts()
        sql, params = metric_sql.percentiles(selection, self.dialect, fractions, step)
        if self.dialect == "sqlite":
            return interpolate(self._rows(sql, params), fractions)
        return {int(row["bucket"] or 0): _floats(row["percentiles"]) for row in self._rows(sql, params)}

    def distinct(
        self, column: str, *, entity_type: str | None = None, resource_id: str | None = None
    ) -> list[str]:
        """Distinct non-null values of a discovery column (a key of :data:`DISCOVERY`), the first
        1,000 in order."""
        self.index_facts()
        name = DISCOVERY[column]
        where = _Where(f"{name} IS NOT NULL").resource(resource_id)
        if entity_type is not None:
            where.conditions.append("entity_type = ?")
            where.params.append(entity_type)
        rows = self._rows(
            f"SELECT DISTINCT {name} AS value FROM ai_span_facts WHERE {where.sql} ORDER BY value LIMIT 1000",
            where.params,
        )
        return [str(row["value"]) for row in rows]


class PostgresSpanStore(SpanStore):
    """The span store on PostgreSQL: tables in ``schema`` (created if missing), reached through a
    small psycopg connection pool (needs the ``postgres`` extra)."""

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = "runstream",
        max_age: timedelta = timedelta(days=7),
        max_spans: int = 100_000,
        max_signals: int = 100_000,
        max_logs: int = 100_000,
    ) -> None:
        self.path = dsn
        self.schema = schema
        self._setup(PostgresBackend(dsn, schema), max_age, max_spans, max_signals, max_logs)


def _root_record(row: SqlRow) -> Record:
    """A root span of ``ai_traces`` as Mastra's record (built from its columns and raw OTel data
    when the processor stored it, as given when it came as a record)."""
    stored = orjson.loads(str(row["record"]))
    return mastra_span(row, stored["otel"]) if "otel" in stored else stored


def _span_record(columns: SpanColumns) -> Record:
    """A span of a batch (:func:`_batch_spans`) as Mastra's record."""
    given = columns.get("record")
    return given if given is not None else mastra_span(columns, columns["raw"])


def _started(columns: SpanColumns) -> str:
    return str(columns["started_at"])


def _record_batch(record: Record) -> SpanBatch:
    columns = record_columns(record)
    started = str(columns["started_at"])
    root = columns["parent_span_id"] is None
    return SpanBatch(
        trace_id=str(columns["trace_id"]),
        resource_id=columns["resource_id"],
        first_started=started,
        last_started=started,
        count=1,
        spans=orjson.dumps({"records": [record]}, default=str).decode(),
        roots=1 if root else 0,
    )


def _floats(value: object) -> list[float]:
    """PostgreSQL's array of percentiles."""
    return [float(item) for item in value] if isinstance(value, list) else []


def _text_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _before(stored: SqlValue, cutoff: str) -> bool:
    """Whether a stored ISO time (``NULL``: an empty table) is before ``cutoff``."""
    return isinstance(stored, str) and stored < cutoff


def _count(rows: Sequence[SqlRow]) -> int:
    """``COUNT(*) AS n``'s answer."""
    return int(rows[0]["n"] or 0)


def _value(value: object) -> SqlValue:
    """A record's value for a column: text, a number or ``NULL`` as it is, anything else as text."""
    return value if value is None or isinstance(value, str | int | float) else str(value)


def _text(moment: datetime) -> str:
    """UTC ISO 8601 with milliseconds and ``Z`` (as Mastra's JSON dates; sorts as text)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


iso = _text
