"""The span store: Mastra's AI-tracing span records, scores, feedback and logs, in SQLite
(:class:`SpanStore`) or PostgreSQL (:class:`PostgresSpanStore`), the same interface and SQL.

Written by :class:`~runstream.observability.processor.StoreSpanProcessor` from its worker thread
(batches, one transaction each, never on a run's path) and read by the server's
``/api/observability`` routes through :func:`asyncio.to_thread`. ``path`` may be the file of a
:class:`~runstream.storage.SqliteStorage` (WAL lets both connections work) or ``":memory:"``.

Retention is bounded: spans older than ``max_age`` and all but the newest ``max_spans`` are
deleted after each write (scores and feedback: the newest ``max_signals``; logs: ``max_age`` and
the newest ``max_logs``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeAlias

import orjson

from runstream.errors import ConfigurationError
from runstream.observability._sql import Backend, PostgresBackend, Row, SqliteBackend
from runstream.observability.records import mastra_span
from runstream.observability.trace_query import TraceQueryPlan, encode_cursor, trace_row

_SPAN_COLUMNS = (
    "trace_id",
    "span_id",
    "parent_span_id",
    "name",
    "span_type",
    "entity_type",
    "entity_id",
    "entity_name",
    "resource_id",
    "thread_id",
    "run_id",
    "service_name",
    "environment",
    "has_error",
    "started_at",
    "ended_at",
    "record",
    "duration_ms",
    "input_tokens",
    "output_tokens",
    "provider",
    "model",
)
_UPSERT_SPAN = (
    f"INSERT INTO ai_spans ({', '.join(_SPAN_COLUMNS)}) VALUES ({', '.join('?' for _ in _SPAN_COLUMNS)}) "
    "ON CONFLICT (trace_id, span_id) DO UPDATE SET "
    + ", ".join(f"{column} = excluded.{column}" for column in _SPAN_COLUMNS[2:])
)
SPAN_COLUMNS = _SPAN_COLUMNS
_READ = ", ".join(column for column in _SPAN_COLUMNS if column not in ("has_error", "duration_ms"))
_READ_ROOT = ", ".join(f"r.{column}" for column in _READ.split(", "))
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


Record: TypeAlias = Mapping[str, Any]
"""A stored record as Mastra's JSON (span, score, feedback or log)."""

METRIC_COLUMNS = {
    "duration": "duration_ms",
    "input_tokens": "input_tokens",
    "output_tokens": "output_tokens",
}
METRIC_DIMENSIONS = {
    "entityType": "entity_type",
    "entityId": "entity_id",
    "entityName": "entity_name",
    "resourceId": "resource_id",
    "threadId": "thread_id",
    "runId": "run_id",
    "traceId": "trace_id",
    "serviceName": "service_name",
    "environment": "environment",
    "provider": "provider",
    "model": "model",
    "status": "CASE WHEN has_error = 1 THEN 'error' ELSE 'ok' END",
}
"""Metric filters and group-by fields (Mastra's name → column or expression; ``status`` is
``ok``/``error`` as Mastra's metric label, what Studio's Trace Volume chart groups by)."""


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


class SpanStore:
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
    def write_spans(self, records: Sequence[Mapping[str, Any]], *, now: datetime | None = None) -> None:
        """Insert (or replace) Mastra span records in one transaction, then apply retention."""
        self.write_rows([_span_row(record) for record in records], now=now)

    def write_rows(self, rows: Sequence[Sequence[Any]], *, now: datetime | None = None) -> None:
        """Insert (or replace) span rows (:data:`SPAN_COLUMNS` order; the processor's
        :func:`~runstream.observability.processor.span_row`) in one transaction, then apply
        retention."""
        if not rows:
            return
        cutoff = _text((now or datetime.now(UTC)) - self.max_age)
        self._backend.write(
            [
                (_UPSERT_SPAN, rows, True),
                ("DELETE FROM ai_spans WHERE started_at < ?", (cutoff,), False),
                (
                    "DELETE FROM ai_spans WHERE seq <= (SELECT MAX(seq) FROM ai_spans) - ?",
                    (self.max_spans,),
                    False,
                ),
            ]
        )

    def write_logs(self, records: Sequence[Mapping[str, Any]], *, now: datetime | None = None) -> None:
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

    def add_signal(self, kind: str, record: Mapping[str, Any], resource_id: str | None) -> str:
        """Store a score or a feedback record (``kind``: ``score`` / ``feedback``); returns its id."""
        key = "scoreId" if kind == "score" else "feedbackId"
        signal_id = str(record.get(key) or uuid.uuid4())
        stored = {**record, key: signal_id}
        stored.setdefault("timestamp", _text(datetime.now(UTC)))
        name = stored.get("scorerId") if kind == "score" else stored.get("feedbackType")
        row = (
            kind,
            signal_id,
            stored.get("traceId"),
            stored.get("spanId"),
            name,
            resource_id,
            stored["timestamp"],
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
    def _rows(self, sql: str, params: Iterable[Any] = ()) -> list[Row]:
        return self._backend.rows(sql, params)

    def list_traces(self, query: TraceQuery) -> tuple[list[Record], int]:
        """A page of root spans and the number of matching traces."""
        where = ["parent_span_id IS NULL"]
        params: list[Any] = []
        for key, value in query.filters.items():
            where.append(f"{TRACE_FILTERS[key]} = ?")
            params.append(value)
        if query.status == "error":
            where.append("has_error = 1")
        elif query.status == "success":
            where.append("has_error = 0")
        if query.start is not None:
            where.append("started_at >= ?")
            params.append(_text(query.start))
        if query.end is not None:
            where.append("started_at <= ?")
            params.append(_text(query.end))
        if query.resource_id is not None:
            where.append("resource_id = ?")
            params.append(query.resource_id)
        clause = " AND ".join(where)
        total = int(self._rows(f"SELECT COUNT(*) AS n FROM ai_spans WHERE {clause}", params)[0]["n"])
        direction = "ASC" if query.ascending else "DESC"
        rows = self._rows(
            f"SELECT {_READ} FROM ai_spans WHERE {clause} "
            f"ORDER BY {TRACE_ORDER[query.order_by]} {direction}, seq {direction} LIMIT ? OFFSET ?",
            [*params, query.per_page, query.page * query.per_page],
        )
        return [_span_record(row) for row in rows], total

    def trace_owner(self, trace_id: str) -> tuple[bool, str | None]:
        """Whether the trace exists, and the resource it belongs to."""
        rows = self._rows(
            "SELECT resource_id FROM ai_spans WHERE trace_id = ? "
            "ORDER BY CASE WHEN parent_span_id IS NULL THEN 0 ELSE 1 END, seq LIMIT 1",
            (trace_id,),
        )
        return (True, rows[0]["resource_id"]) if rows else (False, None)

    def get_trace(self, trace_id: str) -> list[Record]:
        rows = self._rows(
            f"SELECT {_READ} FROM ai_spans WHERE trace_id = ? ORDER BY started_at, seq", (trace_id,)
        )
        return [_span_record(row) for row in rows]

    def get_span(self, trace_id: str, span_id: str) -> Record | None:
        rows = self._rows(
            f"SELECT {_READ} FROM ai_spans WHERE trace_id = ? AND span_id = ?", (trace_id, span_id)
        )
        return _span_record(rows[0]) if rows else None

    @property
    def dialect(self) -> str:
        """``sqlite`` or ``postgres``: the SQL dialect a :class:`TraceQueryPlan` is compiled for."""
        return "postgres" if isinstance(self._backend, PostgresBackend) else "sqlite"

    def query_traces(self, query: TraceQueryPlan) -> dict[str, object]:
        """Mastra's trace-query answer: completed traces (root spans that ended) started in the
        query's range and matching its predicate, a keyset or numbered page of them, or the
        distinct thread ids of such traces."""
        where = [
            "r.parent_span_id IS NULL",
            "r.ended_at IS NOT NULL",
            "r.started_at >= ?",
            "r.started_at <= ?",
        ]
        params: list[Any] = [query.start, query.end]
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
                f"SELECT DISTINCT r.thread_id AS thread_id FROM ai_spans r WHERE {' AND '.join(where)} "
                "ORDER BY r.thread_id LIMIT ?",
                [*params, query.limit + 1],
            )
            groups = [{"threadId": row["thread_id"]} for row in rows[: query.limit]]
            more = len(rows) > query.limit
            return {
                "groups": groups,
                "page": {"next": encode_cursor(query, "", groups[-1]["threadId"]) if more else None},
            }
        sort = f"r.{query.order_field}"
        direction = "DESC" if query.descending else "ASC"
        if query.page is not None:
            clause = " AND ".join(where)
            total = int(self._rows(f"SELECT COUNT(*) AS n FROM ai_spans r WHERE {clause}", params)[0]["n"])
            rows = self._rows(
                f"SELECT {_READ_ROOT} FROM ai_spans r WHERE {clause} ORDER BY {sort} {direction}, r.trace_id "
                "LIMIT ? OFFSET ?",
                [*params, query.limit, query.page * query.limit],
            )
            pagination = {
                "total": total,
                "page": query.page,
                "perPage": query.limit,
                "hasMore": (query.page + 1) * query.limit < total,
            }
            return {"traces": [trace_row(_span_record(row)) for row in rows], "pagination": pagination}
        if query.after is not None:
            where.append(f"({sort} {'<' if query.descending else '>'} ? OR ({sort} = ? AND r.trace_id > ?))")
            params.extend([query.after[0], query.after[0], query.after[1]])
        rows = self._rows(
            f"SELECT {_READ_ROOT} FROM ai_spans r WHERE {' AND '.join(where)} "
            f"ORDER BY {sort} {direction}, r.trace_id LIMIT ?",
            [*params, query.limit + 1],
        )
        traces = [trace_row(_span_record(row)) for row in rows[: query.limit]]
        next_cursor = None
        if len(rows) > query.limit:
            last = rows[query.limit - 1]
            next_cursor = encode_cursor(query, last[query.order_field], last["trace_id"])
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
        where = ["kind = ?"]
        params: list[Any] = [kind]
        for key, value in filters.items():
            where.append(f"{columns[key]} = ?")
            params.append(value)
        if resource_id is not None:
            where.append("resource_id = ?")
            params.append(resource_id)
        return self._page("ai_signals", where, params, page, per_page, ascending)

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
        where = ["1 = 1"]
        params: list[Any] = []
        for key, value in filters.items():
            where.append(f"{columns[key]} = ?")
            params.append(value)
        if levels:
            where.append(f"level IN ({', '.join('?' for _ in levels)})")
            params.extend(levels)
        for bound, operator in ((start, ">="), (end, "<=")):
            if bound is not None:
                where.append(f"timestamp {operator} ?")
                params.append(_text(bound))
        if resource_id is not None:
            where.append("resource_id = ?")
            params.append(resource_id)
        return self._page("ai_logs", where, params, page, per_page, ascending)

    def _page(
        self, table: str, where: list[str], params: list[Any], page: int, per_page: int, ascending: bool
    ) -> tuple[list[Record], int]:
        clause = " AND ".join(where)
        total = int(self._rows(f"SELECT COUNT(*) AS n FROM {table} WHERE {clause}", params)[0]["n"])
        direction = "ASC" if ascending else "DESC"
        rows = self._rows(
            f"SELECT record FROM {table} WHERE {clause} ORDER BY timestamp {direction}, seq {direction} "
            "LIMIT ? OFFSET ?",
            [*params, per_page, page * per_page],
        )
        return [orjson.loads(row["record"]) for row in rows], total

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
    ) -> list[Row]:
        """The spans of ``span_type`` with a value in ``column`` (a :data:`METRIC_COLUMNS` name),
        oldest first: ``timestamp``, ``value`` and the dimensions metrics group and filter by."""
        where = ["span_type = ?", f"{METRIC_COLUMNS[column]} IS NOT NULL"]
        params: list[Any] = [span_type]
        for key, value in filters.items():
            where.append(f"{METRIC_DIMENSIONS[key]} = ?")
            params.append(value)
        for bound, operator in ((start, ">="), (end, "<=")):
            if bound is not None:
                where.append(f"started_at {operator} ?")
                params.append(_text(bound))
        if resource_id is not None:
            where.append("resource_id = ?")
            params.append(resource_id)
        dimensions = ", ".join(f'{name} AS "{key}"' for key, name in METRIC_DIMENSIONS.items())
        return self._rows(
            f"SELECT started_at AS timestamp, {METRIC_COLUMNS[column]} AS value, {dimensions} "
            f"FROM ai_spans WHERE {' AND '.join(where)} ORDER BY started_at, seq LIMIT ?",
            [*params, limit],
        )

    def distinct(
        self, column: str, *, entity_type: str | None = None, resource_id: str | None = None
    ) -> list[str]:
        """Distinct non-null values of a discovery column (a key of :data:`DISCOVERY`)."""
        where = [f"{DISCOVERY[column]} IS NOT NULL"]
        params: list[Any] = []
        if entity_type is not None:
            where.append("entity_type = ?")
            params.append(entity_type)
        if resource_id is not None:
            where.append("resource_id = ?")
            params.append(resource_id)
        rows = self._rows(
            f"SELECT DISTINCT {DISCOVERY[column]} AS value FROM ai_spans WHERE {' AND '.join(where)} "
            "ORDER BY value LIMIT 1000",
            params,
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


def _span_record(row: Row) -> Record:
    """A stored span as Mastra's record (built from its columns and raw OTel data when the
    processor stored it, as given when it came as a record)."""
    stored = orjson.loads(row["record"])
    return mastra_span(row, stored["otel"]) if "otel" in stored else stored


def _span_row(record: Mapping[str, Any]) -> tuple[Any, ...]:
    attributes = record.get("attributes") or {}
    usage = attributes.get("usage") or {}
    started, ended = record.get("startedAt"), record.get("endedAt")
    duration = None
    if isinstance(started, str) and isinstance(ended, str):
        delta = datetime.fromisoformat(ended) - datetime.fromisoformat(started)
        duration = delta.total_seconds() * 1000
    get = record.get
    return (
        get("traceId"),
        get("spanId"),
        get("parentSpanId"),
        get("name"),
        get("spanType"),
        get("entityType"),
        get("entityId"),
        get("entityName"),
        get("resourceId"),
        get("threadId"),
        get("runId"),
        get("serviceName"),
        get("environment"),
        1 if get("error") else 0,
        started,
        ended,
        orjson.dumps(record, default=str).decode(),
        duration,
        usage.get("inputTokens"),
        usage.get("outputTokens"),
        attributes.get("provider"),
        attributes.get("model"),
    )


def _text(moment: datetime) -> str:
    """UTC ISO 8601 with milliseconds and ``Z`` (as Mastra's JSON dates; sorts as text)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


iso = _text
