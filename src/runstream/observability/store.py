"""The span store: Mastra's AI-tracing span records, scores and feedback, in SQLite.

Written by :class:`~runstream.observability.processor.StoreSpanProcessor` from its worker thread
(batches, never on a run's path) and read by the server's ``/api/observability`` routes through
:func:`asyncio.to_thread`. One ``sqlite3`` connection guarded by a lock; ``path`` may be the file
of a :class:`~runstream.storage.SqliteStorage` (WAL lets both connections work) or ``":memory:"``.

Retention is bounded: spans older than ``max_age`` and all but the newest ``max_spans`` are
deleted after each write (scores and feedback: the newest ``max_signals``).
"""

from __future__ import annotations

import json
import sqlite3
import threading
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from runstream.storage._sqlite_schema import SPAN_STORE_TABLES

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
)
_RECORD_KEYS = {
    "trace_id": "traceId",
    "span_id": "spanId",
    "parent_span_id": "parentSpanId",
    "name": "name",
    "span_type": "spanType",
    "entity_type": "entityType",
    "entity_id": "entityId",
    "entity_name": "entityName",
    "resource_id": "resourceId",
    "thread_id": "threadId",
    "run_id": "runId",
    "service_name": "serviceName",
    "environment": "environment",
    "started_at": "startedAt",
    "ended_at": "endedAt",
}
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
    def __init__(
        self,
        path: str = ":memory:",
        *,
        max_age: timedelta = timedelta(days=7),
        max_spans: int = 100_000,
        max_signals: int = 100_000,
    ) -> None:
        self.path = path
        self.max_age = max_age
        self.max_spans = max_spans
        self.max_signals = max_signals
        self.fed = False
        """Whether a :class:`StoreSpanProcessor` feeds this store (the runtime installs one at start if not)."""
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=5.0)
        self._db.row_factory = sqlite3.Row
        if path != ":memory:":
            self._db.execute("PRAGMA journal_mode=WAL")
        for statement in SPAN_STORE_TABLES:
            self._db.execute(statement)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # -- writes -----------------------------------------------------------------------------------
    def write_spans(self, records: Sequence[Mapping[str, Any]], *, now: datetime | None = None) -> None:
        """Insert (or replace) span records, then apply retention."""
        if not records:
            return
        rows = [self._span_row(record) for record in records]
        placeholders = ", ".join("?" for _ in _SPAN_COLUMNS)
        cutoff = _text((now or datetime.now(UTC)) - self.max_age)
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.executemany(
                    f"INSERT OR REPLACE INTO ai_spans ({', '.join(_SPAN_COLUMNS)}) VALUES ({placeholders})",
                    rows,
                )
                self._db.execute("DELETE FROM ai_spans WHERE started_at < ?", (cutoff,))
                self._db.execute(
                    "DELETE FROM ai_spans WHERE seq <= (SELECT MAX(seq) FROM ai_spans) - ?", (self.max_spans,)
                )
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    @staticmethod
    def _span_row(record: Mapping[str, Any]) -> tuple[Any, ...]:
        values: list[Any] = []
        for column in _SPAN_COLUMNS:
            if column == "has_error":
                values.append(1 if record.get("error") else 0)
            elif column == "record":
                values.append(json.dumps(record, default=str, separators=(",", ":")))
            else:
                values.append(record.get(_RECORD_KEYS[column]))
        return tuple(values)

    def add_signal(self, kind: str, record: Mapping[str, Any], resource_id: str | None) -> str:
        """Store a score or a feedback record (``kind``: ``score`` / ``feedback``); returns its id."""
        key = "scoreId" if kind == "score" else "feedbackId"
        signal_id = str(record.get(key) or uuid.uuid4())
        stored = {**record, key: signal_id}
        stored.setdefault("timestamp", _text(datetime.now(UTC)))
        name = stored.get("scorerId") if kind == "score" else stored.get("feedbackType")
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO ai_signals (kind, id, trace_id, span_id, name, resource_id, timestamp, "
                "record) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    kind,
                    signal_id,
                    stored.get("traceId"),
                    stored.get("spanId"),
                    name,
                    resource_id,
                    stored["timestamp"],
                    json.dumps(stored, default=str, separators=(",", ":")),
                ),
            )
            self._db.execute(
                "DELETE FROM ai_signals WHERE kind = ? AND seq <= (SELECT MAX(seq) FROM ai_signals) - ?",
                (kind, self.max_signals),
            )
        return signal_id

    # -- reads ------------------------------------------------------------------------------------
    def _rows(self, sql: str, params: Iterable[Any] = ()) -> list[sqlite3.Row]:
        with self._lock:
            return list(self._db.execute(sql, tuple(params)).fetchall())

    def list_traces(self, query: TraceQuery) -> tuple[list[dict[str, Any]], int]:
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
        total = int(self._rows(f"SELECT COUNT(*) FROM ai_spans WHERE {clause}", params)[0][0])
        direction = "ASC" if query.ascending else "DESC"
        rows = self._rows(
            f"SELECT record FROM ai_spans WHERE {clause} "
            f"ORDER BY {TRACE_ORDER[query.order_by]} {direction}, seq {direction} LIMIT ? OFFSET ?",
            [*params, query.per_page, query.page * query.per_page],
        )
        return [json.loads(row["record"]) for row in rows], total

    def trace_owner(self, trace_id: str) -> tuple[bool, str | None]:
        """Whether the trace exists, and the resource it belongs to."""
        rows = self._rows(
            "SELECT resource_id FROM ai_spans WHERE trace_id = ? ORDER BY parent_span_id IS NOT NULL, seq LIMIT 1",
            (trace_id,),
        )
        return (True, rows[0]["resource_id"]) if rows else (False, None)

    def get_trace(self, trace_id: str) -> list[dict[str, Any]]:
        rows = self._rows(
            "SELECT record FROM ai_spans WHERE trace_id = ? ORDER BY started_at, seq", (trace_id,)
        )
        return [json.loads(row["record"]) for row in rows]

    def get_span(self, trace_id: str, span_id: str) -> dict[str, Any] | None:
        rows = self._rows(
            "SELECT record FROM ai_spans WHERE trace_id = ? AND span_id = ?", (trace_id, span_id)
        )
        return json.loads(rows[0]["record"]) if rows else None

    def list_signals(
        self,
        kind: str,
        *,
        filters: Mapping[str, str],
        page: int,
        per_page: int,
        ascending: bool = False,
        resource_id: str | None = None,
    ) -> tuple[list[dict[str, Any]], int]:
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
        clause = " AND ".join(where)
        total = int(self._rows(f"SELECT COUNT(*) FROM ai_signals WHERE {clause}", params)[0][0])
        direction = "ASC" if ascending else "DESC"
        rows = self._rows(
            f"SELECT record FROM ai_signals WHERE {clause} ORDER BY timestamp {direction}, seq {direction} "
            "LIMIT ? OFFSET ?",
            [*params, per_page, page * per_page],
        )
        return [json.loads(row["record"]) for row in rows], total

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


def _text(moment: datetime) -> str:
    """UTC ISO 8601 with milliseconds and ``Z`` (as Mastra's JSON dates; sorts as text)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


iso = _text
