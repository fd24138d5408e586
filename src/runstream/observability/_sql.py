"""The span store's tables and its two SQL backends (SQLite by default, PostgreSQL at scale).

Both speak the same SQL, written with ``?`` placeholders (the PostgreSQL backend turns them into
psycopg's ``%s``), and both give rows as dicts. Writes are one transaction per batch
(``executemany``); reads are short queries. Each backend is thread-safe: the store is written
from the span processor's worker thread and read through :func:`asyncio.to_thread`.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol, TypeAlias

Row: TypeAlias = Mapping[str, Any]
"""A row: column (or alias) → value."""

_TABLES = (
    """CREATE TABLE IF NOT EXISTS ai_spans (
        seq {serial} PRIMARY KEY,
        trace_id TEXT NOT NULL,
        span_id TEXT NOT NULL,
        parent_span_id TEXT,
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
        record TEXT NOT NULL,
        duration_ms {real},
        input_tokens BIGINT,
        output_tokens BIGINT,
        provider TEXT,
        model TEXT,
        UNIQUE (trace_id, span_id)
    )""",
    "CREATE INDEX IF NOT EXISTS ai_spans_started ON ai_spans (started_at)",
    # Only root spans in the trace-list index: a child span's insert updates one b-tree fewer.
    "CREATE INDEX IF NOT EXISTS ai_spans_roots ON ai_spans (started_at) WHERE parent_span_id IS NULL",
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
)
_ADDED_COLUMNS = (
    ("ai_spans", "duration_ms", "{real}"),
    ("ai_spans", "input_tokens", "BIGINT"),
    ("ai_spans", "output_tokens", "BIGINT"),
    ("ai_spans", "provider", "TEXT"),
    ("ai_spans", "model", "TEXT"),
)
"""Columns added after the first tables shipped (a store file from then gains them at open)."""


def tables(dialect: str) -> list[str]:
    kinds = (
        {"serial": "INTEGER", "real": "REAL"}
        if dialect == "sqlite"
        else {
            "serial": "BIGSERIAL",
            "real": "DOUBLE PRECISION",
        }
    )
    return [statement.format(**kinds) for statement in _TABLES]


class Backend(Protocol):
    def write(self, steps: Sequence[tuple[str, Sequence[Any] | Sequence[Sequence[Any]], bool]]) -> None:
        """Run ``(sql, params, many)`` steps in one transaction."""

    def rows(self, sql: str, params: Iterable[Any] = ()) -> list[Row]: ...

    def close(self) -> None: ...


class SqliteBackend:
    """One ``sqlite3`` connection guarded by a lock (WAL on a file, so it can share a
    :class:`~runstream.storage.SqliteStorage`'s file)."""

    def __init__(self, path: str) -> None:
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=5.0)
        self._db.row_factory = lambda cursor, row: {
            column[0]: value for column, value in zip(cursor.description, row, strict=True)
        }
        if path != ":memory:":
            self._db.execute("PRAGMA journal_mode=WAL")
            # Spans are telemetry: a power cut may lose the last batches, never corrupt the file.
            self._db.execute("PRAGMA synchronous=NORMAL")
        for statement in tables("sqlite"):
            self._db.execute(statement)
        for table, column, kind in _ADDED_COLUMNS:
            present = {row["name"] for row in self._db.execute(f"PRAGMA table_info({table})")}
            if column not in present:
                self._db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind.format(real='REAL')}")

    def write(self, steps: Sequence[tuple[str, Sequence[Any] | Sequence[Sequence[Any]], bool]]) -> None:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                for sql, params, many in steps:
                    if many:
                        self._db.executemany(sql, params)
                    else:
                        self._db.execute(sql, tuple(params))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def rows(self, sql: str, params: Iterable[Any] = ()) -> list[Row]:
        with self._lock:
            return list(self._db.execute(sql, tuple(params)).fetchall())

    def close(self) -> None:
        with self._lock:
            self._db.close()


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
            for table, column, kind in _ADDED_COLUMNS:
                conn.execute(
                    f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {column} "
                    f"{kind.format(real='DOUBLE PRECISION')}"
                )

    @staticmethod
    def _sql(sql: str) -> str:
        return sql.replace("?", "%s")

    def write(self, steps: Sequence[tuple[str, Sequence[Any] | Sequence[Sequence[Any]], bool]]) -> None:
        with self._pool.connection() as conn, conn.transaction(), conn.cursor() as cursor:
            for sql, params, many in steps:
                if many:
                    cursor.executemany(self._sql(sql), params)
                else:
                    cursor.execute(self._sql(sql), tuple(params))

    def rows(self, sql: str, params: Iterable[Any] = ()) -> list[Row]:
        with self._pool.connection() as conn:
            return list(conn.execute(self._sql(sql), tuple(params)).fetchall())

    def close(self) -> None:
        self._pool.close()
