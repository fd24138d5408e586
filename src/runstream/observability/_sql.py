"""The span store's tables and its two SQL backends (SQLite by default, PostgreSQL at scale).

Both speak the same SQL, written with ``?`` placeholders (the PostgreSQL backend turns them into
psycopg's ``%s``), and both give rows as dicts. Writes are one transaction per batch
(``executemany``); reads are short queries. Each backend is thread-safe: the store is written
from the span processor's worker thread and read through :func:`asyncio.to_thread`.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal, Protocol, TypeAlias

SqlValue: TypeAlias = str | int | float | None
"""A value of the store's columns and queries (text, integers, numbers; ``NULL``)."""
SqlParam: TypeAlias = SqlValue | list[str]
"""A query's parameter: a value, or a PostgreSQL text array (a JSON path)."""
SqlRow: TypeAlias = Mapping[str, SqlValue]
"""A row: column (or alias) → value."""
SqlStep: TypeAlias = (
    tuple[str, Sequence[SqlParam], Literal[False]] | tuple[str, Sequence[Sequence[SqlParam]], Literal[True]]
)
SqlSteps: TypeAlias = Sequence[SqlStep]
"""A transaction's ``(sql, params, many)`` steps: ``many`` runs ``sql`` once per parameter row
(on PostgreSQL, a ``COPY ... FROM STDIN`` takes the rows as its data)."""

_TABLES = (
    # A row per stored trace's root span: the trace list's filters and order, and its record.
    """CREATE TABLE IF NOT EXISTS ai_traces (
        seq {serial} PRIMARY KEY,
        upto BIGINT NOT NULL,
        trace_id TEXT NOT NULL,
        span_id TEXT NOT NULL,
        name TEXT NOT NULL,
        span_type TEXT NOT NULL,
        entity_type TEXT,
        entity_id TEXT,
        entity_name TEXT,
        resource_id TEXT,
        thread_id TEXT,
        run_id TEXT,
        service_name TEXT,
        environment TEXT,
        has_error INTEGER NOT NULL,
        started_at TEXT NOT NULL,
        ended_at TEXT,
        record TEXT NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS ai_traces_started ON ai_traces (started_at)",
    "CREATE INDEX IF NOT EXISTS ai_traces_trace ON ai_traces (trace_id)",
    "CREATE INDEX IF NOT EXISTS ai_traces_upto ON ai_traces (upto)",
    # A row per trace per written batch: all its spans (roots too) in one JSON document, so a
    # span costs its encoding and a share of one insert (store.py: ``upto`` numbers the spans).
    # ``roots``: how many of its spans are trace roots, put in ``ai_traces`` when it is first
    # read (SpanStore.index_roots); a store made before has the column added at open.
    """CREATE TABLE IF NOT EXISTS ai_span_batches (
        seq {serial} PRIMARY KEY,
        upto BIGINT NOT NULL,
        trace_id TEXT NOT NULL,
        resource_id TEXT,
        first_started TEXT NOT NULL,
        last_started TEXT NOT NULL,
        spans TEXT NOT NULL,
        roots INTEGER NOT NULL DEFAULT 0
    )""",
    "CREATE INDEX IF NOT EXISTS ai_span_batches_trace ON ai_span_batches (trace_id)",
    "CREATE INDEX IF NOT EXISTS ai_span_batches_upto ON ai_span_batches (upto)",
    "CREATE INDEX IF NOT EXISTS ai_span_batches_started ON ai_span_batches (last_started)",
    """CREATE TABLE IF NOT EXISTS ai_signals (
        seq {serial} PRIMARY KEY,
        kind TEXT NOT NULL,
        id TEXT NOT NULL UNIQUE,
        trace_id TEXT,
        span_id TEXT,
        name TEXT,
        resource_id TEXT,
        timestamp TEXT NOT NULL,
        record TEXT NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS ai_signals_kind ON ai_signals (kind, timestamp)",
    """CREATE TABLE IF NOT EXISTS ai_logs (
        seq {serial} PRIMARY KEY,
        timestamp TEXT NOT NULL,
        level TEXT NOT NULL,
        trace_id TEXT,
        run_id TEXT,
        resource_id TEXT,
        record TEXT NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS ai_logs_time ON ai_logs (timestamp)",
    # A narrow row per stored span (records.columns_facts), written from its batch before
    # metrics and discovery read (SpanStore.index_facts), deleted with it. Keyed by its batch's
    # ``upto`` (retention, and what is indexed already) and its place in the batch,
    # clustered so on SQLite; ``started_ms``: its start in epoch milliseconds (the ISO text's
    # precision: compared and ordered as that text).
    """CREATE TABLE IF NOT EXISTS ai_span_facts (
        upto BIGINT NOT NULL,
        position INTEGER NOT NULL,
        trace_id {text} NOT NULL,
        span_type {text} NOT NULL,
        entity_type {text},
        entity_id {text},
        entity_name {text},
        resource_id {text},
        thread_id {text},
        run_id {text},
        service_name {text},
        environment {text},
        has_error INTEGER NOT NULL,
        started_ms BIGINT,
        duration_ms {real},
        input_tokens BIGINT,
        output_tokens BIGINT,
        provider {text},
        model {text},
        PRIMARY KEY (upto, position)
    ){clustered}""",
    "CREATE INDEX IF NOT EXISTS ai_span_facts_metric ON ai_span_facts (span_type, started_ms, upto, position)",
)
_OPERATION = {
    "invoke_agent": "agent_run",
    "chat": "model_generation",
    "execute_tool": "tool_call",
    "invoke_workflow": "workflow_run",
    "workflow_step": "workflow_step",
}
_ENTITY = {
    "tool_call": ("tool", "gen_ai.tool.name"),
    "workflow_run": ("workflow_run", "runstream.workflow.id"),
    "workflow_step": ("workflow_step", "runstream.workflow.step.id"),
}


def _span_rows_view(dialect: str) -> str:
    """``ai_span_rows``: every stored span as a row of the columns a query compares (the trace
    query's ``spans`` clauses), derived in SQL from the batches as
    :func:`~runstream.observability.records.span_columns` derives them in Python (an entry ``s``
    of a processor's batch: ``[spanId, parentSpanId, name, startNs, endNs, error, attributes,
    links]``; ``r``, a record given to ``write_spans``)."""
    if dialect == "sqlite":
        spans = "ai_span_batches b, json_each(b.spans, '$.spans') e"
        records = "ai_span_batches b, json_each(b.spans, '$.records') e"

        def item(index: int) -> str:
            return f"json_extract(e.value, '$[{index}]')"

        def attribute(name: str) -> str:
            return f"json_extract(e.value, '$[6].\"{name}\"')"

        def trace(key: str) -> str:
            return f"json_extract(b.spans, '$.trace.{key}')"

        def iso(ns: str) -> str:
            return (
                f"strftime('%Y-%m-%dT%H:%M:%S', {ns} / 1000000000, 'unixepoch') || '.' || "
                f"printf('%03d', ({ns} / 1000000) % 1000) || 'Z'"
            )

        def field(path: str) -> str:
            return f"json_extract(e.value, '$.{path}')"

        duration = f"(julianday({field('endedAt')}) - julianday({field('startedAt')})) * 86400000.0"
    else:
        spans = "ai_span_batches b, jsonb_array_elements(b.spans::jsonb -> 'spans') e(value)"
        records = "ai_span_batches b, jsonb_array_elements(b.spans::jsonb -> 'records') e(value)"

        def item(index: int) -> str:
            return f"(e.value ->> {index})"

        def attribute(name: str) -> str:
            return f"(e.value -> 6 ->> '{name}')"

        def trace(key: str) -> str:
            return f"(b.spans::jsonb -> 'trace' ->> '{key}')"

        def iso(ns: str) -> str:
            return (
                f"to_char(to_timestamp({ns}::bigint / 1000000000) AT TIME ZONE 'UTC', "
                f"'YYYY-MM-DD\"T\"HH24:MI:SS') || '.' || lpad((({ns}::bigint / 1000000) % 1000)::text, 3, '0') || 'Z'"
            )

        def field(path: str) -> str:
            keys = ", ".join(path.split("."))
            return f"(e.value #>> '{{{keys}}}')"

        duration = f"EXTRACT(EPOCH FROM ({field('endedAt')}::timestamptz - {field('startedAt')}::timestamptz)) * 1000"
    start, end = item(3), item(4)
    span_type = (
        "CASE "
        + " ".join(
            f"WHEN {attribute('gen_ai.operation.name')} = '{op}' THEN '{kind}'"
            for op, kind in _OPERATION.items()
        )
        + " ELSE 'generic' END"
    )

    def entity(column: str) -> str:
        if column == "entity_type":
            whens = " ".join(f"WHEN '{kind}' THEN '{name}'" for kind, (name, _) in _ENTITY.items())
            otherwise = "CASE WHEN agent_id IS NOT NULL THEN 'agent' END"
        else:
            whens = " ".join(f"WHEN '{kind}' THEN {kind}_name" for kind in _ENTITY)
            otherwise = "agent_id" if column == "entity_id" else "agent_name"
        return f"CASE span_type {whens} ELSE {otherwise} END AS {column}"

    numeric = "" if dialect == "sqlite" else "::bigint"
    return f"""CREATE VIEW ai_span_rows AS
        SELECT trace_id, name, span_type, {entity("entity_type")}, {entity("entity_id")},
            {entity("entity_name")}, has_error, started_at, ended_at, duration_ms, provider, model
        FROM (
            SELECT b.trace_id, {item(2)} AS name, {span_type} AS span_type,
                {trace("agentId")} AS agent_id, {trace("agentName")} AS agent_name,
                {", ".join(f"{attribute(key)} AS {kind}_name" for kind, (_, key) in _ENTITY.items())},
                CASE WHEN {item(5)} IS NULL THEN 0 ELSE 1 END AS has_error,
                {iso(start)} AS started_at,
                CASE WHEN {end} IS NULL THEN NULL ELSE {iso(end)} END AS ended_at,
                ({end}{numeric} - {start}{numeric}) / 1000000.0 AS duration_ms,
                {attribute("gen_ai.provider.name")} AS provider,
                {attribute("gen_ai.request.model")} AS model
            FROM {spans}
        ) kept
        UNION ALL
        SELECT b.trace_id, {field("name")}, {field("spanType")}, {field("entityType")}, {field("entityId")},
            {field("entityName")}, CASE WHEN {field("error")} IS NULL THEN 0 ELSE 1 END,
            {field("startedAt")}, {field("endedAt")}, {duration},
            {field("attributes.provider")}, {field("attributes.model")}
        FROM {records}"""


_PAGE_SIZE = 16384
"""SQLite page size for a new store file (see :class:`SqliteBackend`)."""

_RETIRED = "DROP TABLE IF EXISTS ai_spans"
"""The first stores kept a row per span (``ai_spans``); that telemetry is dropped at open."""
_ADD_ROOTS = "ALTER TABLE ai_span_batches ADD COLUMN {if_missing}roots INTEGER NOT NULL DEFAULT 0"
"""A store made before ``roots`` existed (its batches' roots are in ``ai_traces`` already: 0)."""
_LACKS_ROOTS = (
    "SELECT 1 AS lacks FROM sqlite_master WHERE name = 'ai_span_batches' "
    "AND NOT EXISTS (SELECT 1 FROM pragma_table_info('ai_span_batches') WHERE name = 'roots')"
)
"""Whether a SQLite store needs :data:`_ADD_ROOTS` (SQLite has no ``ADD COLUMN IF NOT EXISTS``)."""
_MARKS = (
    "CREATE TABLE IF NOT EXISTS ai_index_marks (name TEXT PRIMARY KEY, upto BIGINT NOT NULL)",
    # The batches a store holds when it first gets the mark had their roots written with them.
    "INSERT INTO ai_index_marks (name, upto) SELECT 'roots', (SELECT COALESCE(MAX(upto), 0) FROM ai_span_batches) "
    "WHERE NOT EXISTS (SELECT 1 FROM ai_index_marks WHERE name = 'roots')",
)
"""``ai_index_marks``: the ``upto`` of the last batch whose roots are in ``ai_traces``."""


def tables(dialect: str, *, add_roots: bool = True) -> list[str]:
    """The statements making the store's tables and view (``sqlite`` or ``postgres``), run at
    open: the view is made anew each time, so it follows this code's version (a store written
    before ``ai_span_facts`` existed gets its spans' facts when first read, as new spans do).
    ``add_roots``: add the ``roots`` column to a store made before it (always checked on
    PostgreSQL; on SQLite, :data:`_LACKS_ROOTS` says)."""
    pg = dialect == "postgres"
    types = {
        "serial": "BIGSERIAL" if pg else "INTEGER",
        "text": 'TEXT COLLATE "C"' if pg else "TEXT",  # compared and ordered as Python does
        "real": "DOUBLE PRECISION" if pg else "REAL",
        "clustered": "" if pg else " WITHOUT ROWID",
    }
    return [
        _RETIRED,
        *(statement.format(**types) for statement in _TABLES),
        *([_ADD_ROOTS.format(if_missing="IF NOT EXISTS " if pg else "")] if add_roots else []),
        *_MARKS,
        "DROP VIEW IF EXISTS ai_span_rows",
        _span_rows_view(dialect),
    ]


Then: TypeAlias = Callable[[list[SqlRow]], SqlSteps]
"""What to write, given what a transaction read first."""


class Backend(Protocol):
    def write(self, steps: SqlSteps) -> None:
        """Run ``(sql, params, many)`` steps in one transaction."""

    def transact(self, sql: str, params: Sequence[SqlParam], then: Then) -> None:
        """In one transaction, other writers of the store kept out: read ``sql``, then run the
        steps ``then`` makes of its rows."""

    def rows(self, sql: str, params: Iterable[SqlParam] = ()) -> list[SqlRow]: ...

    def close(self) -> None: ...


WRITE_WAIT_S = 60.0
"""How long a write waits for SQLite's write lock. Another connection to the file (a
:class:`~runstream.storage.SqliteStorage`'s, whose transactions span event-loop turns) may hold
it for seconds under load; the store's writers are off a run's path (the span processor's
worker, the log listener), so they wait rather than lose the batch."""


class SqliteBackend:
    """A write connection and, on a file, a read connection (WAL: reads never queue behind a
    write waiting for the lock), each guarded by a lock. WAL lets the file be shared with a
    :class:`~runstream.storage.SqliteStorage`."""

    def __init__(self, path: str) -> None:
        self._lock = threading.Lock()
        self._db = _connect(path, WRITE_WAIT_S)
        if path != ":memory:":
            # A new file's pages are 16 KiB (a file already made keeps its own): a batch's
            # JSON row fits a page instead of an overflow chain, and a commit writes a third of
            # the WAL frames (each a system call or two) for the same spans.
            self._db.execute(f"PRAGMA page_size={_PAGE_SIZE}")
            self._db.execute("PRAGMA journal_mode=WAL")
            # Spans are telemetry: a power cut may lose the last batches, never corrupt the file.
            self._db.execute("PRAGMA synchronous=NORMAL")
        # In one transaction: another process opening the file at once waits for the view.
        self.transact(
            _LACKS_ROOTS,
            (),
            lambda lacks: [(statement, (), False) for statement in tables("sqlite", add_roots=bool(lacks))],
        )
        # (":memory:" is a database per connection: there the writer reads too)
        self._reader, self._read_lock = (
            (self._db, self._lock) if path == ":memory:" else (_connect(path, 5.0), threading.Lock())
        )

    def write(self, steps: SqlSteps) -> None:
        self.transact("SELECT 1", (), lambda _: steps)

    def transact(self, sql: str, params: Sequence[SqlParam], then: Then) -> None:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                for step in then(list(self._db.execute(sql, tuple(params)).fetchall())):
                    if step[2]:
                        self._db.executemany(step[0], step[1])
                    else:
                        self._db.execute(step[0], tuple(step[1]))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def rows(self, sql: str, params: Iterable[SqlParam] = ()) -> list[SqlRow]:
        with self._read_lock:
            return list(self._reader.execute(sql, tuple(params)).fetchall())

    def close(self) -> None:
        with self._read_lock:
            self._reader.close()
        with self._lock:
            self._db.close()


def _connect(path: str, busy_timeout_s: float) -> sqlite3.Connection:
    db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=busy_timeout_s)
    db.row_factory = lambda cursor, row: {
        column[0]: value for column, value in zip(cursor.description, row, strict=True)
    }
    return db


class PostgresBackend:
    """A small psycopg connection pool on ``schema`` (created if missing; tables in it)."""

    def __init__(self, dsn: str, schema: str, *, max_size: int = 4) -> None:
        import psycopg
        from psycopg import sql as pgsql
        from psycopg.rows import dict_row
        from psycopg_pool import ConnectionPool

        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(pgsql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(pgsql.Identifier(schema)))
        search_path = '"' + schema.replace('"', '""') + '"'
        self._pool: ConnectionPool[Any] = ConnectionPool(
            dsn,
            min_size=1,
            max_size=max_size,
            kwargs={"autocommit": True, "row_factory": dict_row, "options": f"-c search_path={search_path}"},
            check=ConnectionPool.check_connection,
            open=True,
        )
        with self._pool.connection() as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(hashtext('runstream.span_store'))")
            for statement in tables("postgres"):
                conn.execute(statement)

    @staticmethod
    def _sql(sql: str) -> str:
        return sql.replace("?", "%s")

    def write(self, steps: SqlSteps) -> None:
        self.transact("SELECT 1", (), lambda _: steps)

    def transact(self, sql: str, params: Sequence[SqlParam], then: Then) -> None:
        # Writers of the schema's store one at a time (as SQLite's BEGIN IMMEDIATE): batches
        # commit in the order of their ``upto``, which is what ``SpanStore.index_facts`` follows.
        with self._pool.connection() as conn, conn.transaction(), conn.cursor() as cursor:
            cursor.execute(
                "SELECT pg_advisory_xact_lock(hashtext('runstream.span_store.' || current_schema()))"
            )
            cursor.execute(self._sql(sql), tuple(params))
            self._run(cursor, then(list(cursor.fetchall())))

    def _run(self, cursor: Any, steps: SqlSteps) -> None:
        for step in steps:
            if step[2] and step[0].startswith("COPY "):  # rows streamed in PostgreSQL's COPY
                with cursor.copy(step[0]) as copy:
                    for row in step[1]:
                        copy.write_row(row)
            elif step[2]:
                cursor.executemany(self._sql(step[0]), step[1])
            else:
                cursor.execute(self._sql(step[0]), tuple(step[1]))

    def rows(self, sql: str, params: Iterable[SqlParam] = ()) -> list[SqlRow]:
        with self._pool.connection() as conn:
            return list(conn.execute(self._sql(sql), tuple(params)).fetchall())

    def close(self) -> None:
        self._pool.close()
