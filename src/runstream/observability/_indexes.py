"""What the span store indexes when it is read: a stored batch's spans as their columns, the
trace list's rows (``ai_traces``: each trace's root) and the metrics' facts (``ai_span_facts``:
a narrow row per span), made from the batches stored since the last read.

The writer keeps a batch as one row (its JSON document); the rows the trace list, metrics and
discovery read are made from it before they read, a few hundred batches a transaction, so a
span costs its writer a share of one insert (into one table), and a batch is decoded once for
its facts and once more if it holds a root.
:class:`ReadIndexes` is the part of :class:`~runstream.observability.store.SpanStore` that does it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime

import orjson

from runstream.observability._sql import Backend, SqlParam, SqlRow, SqlStep, SqlValue
from runstream.observability.records import SpanColumns, columns_facts, span_columns

TRACE_COLUMNS = (
    "trace_id",
    "span_id",
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
)
"""A root span's columns in ``ai_traces`` (its ``record`` besides)."""
_INSERT_ROOT = (
    f"INSERT INTO ai_traces (upto, {', '.join(TRACE_COLUMNS)}, record) "
    f"VALUES ({', '.join('?' for _ in range(len(TRACE_COLUMNS) + 2))})"
)
_INDEX_BATCHES = 500
"""Batches indexed a transaction: the writer waits for their inserts."""


class ReadIndexes:
    """Reads through :meth:`_rows`, and the indexes they make first (:meth:`index_roots`,
    :meth:`index_facts`)."""

    _backend: Backend
    _insert_facts: str
    """The statement a span's facts are written with (a ``COPY`` on PostgreSQL)."""

    def _rows(self, sql: str, params: Iterable[SqlParam] = ()) -> list[SqlRow]:
        """The rows of a query (a test may see what is read here)."""
        return self._backend.rows(sql, params)

    def index_roots(self) -> None:
        """Put the roots of the batches stored since the last time in ``ai_traces``, what the
        trace list reads: run before it reads (as :meth:`index_facts` before metrics), a few
        hundred batches a transaction; nothing to do costs one query. Every batch stored before
        the call is indexed when it returns, also when another reader indexed meanwhile."""
        while not self._index_roots():
            pass

    def _index_roots(self) -> bool:
        """Index the next batches with roots; whether that was the last of them. Decoded before
        the write transaction, which adds their roots unless another reader indexed meanwhile
        (then this one reads on from where that one stopped: it may have read fewer batches),
        and drops those of batches retention removed meanwhile."""
        (state,) = self._rows(
            "SELECT (SELECT upto FROM ai_index_marks WHERE name = 'roots') AS mark, "
            "(SELECT MAX(upto) FROM ai_span_batches) AS latest"
        )
        mark, latest = int(state["mark"] or 0), state["latest"]
        if latest is None or int(latest) <= mark:
            return True
        batches = self._rows(
            "SELECT spans, upto FROM ai_span_batches WHERE upto > ? AND upto <= ? AND roots > 0 "
            "ORDER BY upto LIMIT ?",
            (mark, latest, _INDEX_BATCHES),
        )
        until = batches[-1]["upto"] if len(batches) == _INDEX_BATCHES else latest
        rows = [row for batch in batches for row in _root_rows(batch)]
        gone = (
            "DELETE FROM ai_traces WHERE upto > ? AND upto <= ? "
            "AND upto NOT IN (SELECT upto FROM ai_span_batches WHERE upto > ? AND upto <= ?)"
        )
        steps: list[SqlStep] = [
            (_INSERT_ROOT, rows, True),
            (gone, (mark, until) * 2, False),
            ("UPDATE ai_index_marks SET upto = ? WHERE name = 'roots'", (until,), False),
        ]
        unmoved = self._write_if_unmoved("SELECT upto FROM ai_index_marks WHERE name = 'roots'", mark, steps)
        # (no mark row, which the store's opening adds, would never be unmoved: stop, not loop)
        return (unmoved or state["mark"] is None) and len(batches) < _INDEX_BATCHES

    def index_facts(self) -> None:
        """Write the facts (``ai_span_facts``: a narrow row per span) of the batches stored since
        the last time, what metrics and discovery read: run before they read, so a span costs
        its writer nothing more and is decoded once (as the read path decodes it), a few
        thousand batches a transaction."""
        while self._unindexed() and not self._index_batches():
            pass

    def _unindexed(self) -> bool:
        (latest,) = self._rows(
            "SELECT (SELECT MAX(upto) FROM ai_span_batches) AS batches, "
            "(SELECT MAX(upto) FROM ai_span_facts) AS facts"
        )
        return latest["batches"] is not None and latest["batches"] != latest["facts"]

    def _index_batches(self) -> bool:
        """Index the next batches; whether that was the last of them. They are decoded before
        the write transaction (the writer waits only for the inserts), which adds their facts
        unless another reader indexed meanwhile (then this one reads on from where that one
        stopped), and drops those of batches retention removed meanwhile."""
        (mark,) = self._rows("SELECT COALESCE(MAX(upto), 0) AS n FROM ai_span_facts")
        batches = self._rows(
            "SELECT upto, spans FROM ai_span_batches WHERE upto > ? ORDER BY upto LIMIT ?",
            (mark["n"], _INDEX_BATCHES),
        )
        if not batches:
            return True
        facts = [
            (batch["upto"], position, *columns_facts(columns))
            for batch in batches
            for position, columns in enumerate(batch_spans(str(batch["spans"])))
        ]
        span = (batches[0]["upto"], batches[-1]["upto"])
        gone = (
            "DELETE FROM ai_span_facts WHERE upto BETWEEN ? AND ? "
            "AND upto NOT IN (SELECT upto FROM ai_span_batches WHERE upto BETWEEN ? AND ?)"
        )
        steps: list[SqlStep] = [(self._insert_facts, facts, True), (gone, span * 2, False)]
        unmoved = self._write_if_unmoved(
            "SELECT COALESCE(MAX(upto), 0) AS upto FROM ai_span_facts", mark["n"], steps
        )
        return unmoved and len(batches) < _INDEX_BATCHES

    def _write_if_unmoved(self, sql: str, mark: SqlValue, steps: list[SqlStep]) -> bool:
        """Run ``steps`` in one write transaction if the index's mark (``sql``'s ``upto``) is
        still ``mark``, as this reader read it; ``False`` when another reader indexed meanwhile."""
        unmoved = False

        def then(now: list[SqlRow]) -> list[SqlStep]:
            nonlocal unmoved
            unmoved = bool(now) and now[0]["upto"] == mark
            return steps if unmoved else []

        self._backend.transact(sql, (), then)
        return unmoved


def batch_spans(document: str) -> Sequence[SpanColumns]:
    """A stored batch's spans as their columns: ``raw`` besides for the processor's, ``record``
    (as given) for records."""
    batch = orjson.loads(document)
    if "records" in batch:
        return [{**record_columns(record), "record": record} for record in batch["records"]]
    trace = batch["trace"]
    return [span_columns(trace, entry) for entry in batch["spans"]]


def record_columns(record: Mapping[str, object]) -> SpanColumns:
    """A Mastra span record's columns (as :func:`~runstream.observability.records.span_columns`
    gives a processor's span's)."""
    attributes = record.get("attributes")
    attributes = attributes if isinstance(attributes, Mapping) else {}
    usage = attributes.get("usage")
    usage = usage if isinstance(usage, Mapping) else {}
    started, ended = record.get("startedAt"), record.get("endedAt")
    duration = None
    if isinstance(started, str) and isinstance(ended, str):
        delta = datetime.fromisoformat(ended) - datetime.fromisoformat(started)
        duration = delta.total_seconds() * 1000
    get = record.get
    return {
        "trace_id": str(get("traceId")),
        "span_id": str(get("spanId")),
        "parent_span_id": _text(get("parentSpanId")),
        "name": str(get("name")),
        "span_type": str(get("spanType")),
        "entity_type": _text(get("entityType")),
        "entity_id": _text(get("entityId")),
        "entity_name": _text(get("entityName")),
        "resource_id": _text(get("resourceId")),
        "thread_id": _text(get("threadId")),
        "run_id": _text(get("runId")),
        "service_name": _text(get("serviceName")),
        "environment": _text(get("environment")),
        "has_error": 1 if get("error") else 0,
        "status": "error" if get("error") else "ok",
        "started_at": str(started),
        "ended_at": _text(ended),
        "duration_ms": duration,
        "input_tokens": _int(usage.get("inputTokens")),
        "output_tokens": _int(usage.get("outputTokens")),
        "provider": _text(attributes.get("provider")),
        "model": _text(attributes.get("model")),
    }


def _trace_row(upto: SqlValue, columns: SpanColumns, record: str) -> tuple[SqlValue, ...]:
    """A root span's row of ``ai_traces``: its batch's ``upto``, the :data:`TRACE_COLUMNS` and
    its record."""
    c = columns
    return (
        *(upto, c["trace_id"], c["span_id"], c["name"], c["span_type"], c["entity_type"]),
        *(c["entity_id"], c["entity_name"], c["resource_id"], c["thread_id"], c["run_id"]),
        *(c["service_name"], c["environment"], c["has_error"], c["started_at"], c["ended_at"], record),
    )


def _root_rows(batch: SqlRow) -> list[tuple[SqlValue, ...]]:
    """A stored batch's roots as rows of ``ai_traces``: a record as given, a processor's span
    as its raw OTel data (:func:`~runstream.observability.store._root_record` builds Mastra's record of either)."""
    rows = []
    for columns in batch_spans(str(batch["spans"])):
        if columns["parent_span_id"] is None:
            given = columns.get("record")
            record = {"otel": columns["raw"]} if given is None else given
            rows.append(_trace_row(batch["upto"], columns, orjson.dumps(record, default=str).decode()))
    return rows


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) else None
