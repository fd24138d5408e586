"""The embedded :class:`~runstream.vector.base.VectorStore`: SQLite with ``sqlite-vec``.

Vectors live in the same database file as :class:`~runstream.storage.SqliteStorage`
(``SqliteVector(storage)`` or the same path), one table per index (``vectors_<name>``: ``id``,
the vector as ``sqlite-vec``'s float32 blob, its squared norm, the metadata as JSON text),
listed in ``vector_indexes``. The store has its own connection (WAL mode lets it and the
storage's connection work side by side; writes wait on SQLite's busy timeout).

A query is an exact scan: ``sqlite-vec``'s SIMD distance functions over the rows that pass the
metadata filter (compiled to SQL by :mod:`runstream.vector._filter_sql`), keeping the best
``top_k``. The dot product comes from the L2 distance and the stored norms
(``a·q = (|a|² + |q|² - |a-q|²) / 2``), as ``sqlite-vec`` has no dot-product function.

The interpreter's ``sqlite3`` often cannot load extensions (pyenv and some distributions build it
without); the ``sqlean.py`` package, a ``sqlite3`` with extension loading, is used then, by the
storage too (:mod:`runstream.storage._sqlite_driver`: one SQLite library per process).
"""

from __future__ import annotations

import asyncio
import os
from array import array
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import aiosqlite
import orjson
import sqlite_vec  # type: ignore[import-untyped]

from runstream.storage import _sqlite_driver as _driver
from runstream.storage.errors import StorageClosedError, StorageError
from runstream.storage.sqlite import SqliteStorage
from runstream.vector._filter_sql import SqliteFilter, SqliteParams
from runstream.vector.base import (
    IndexConfig,
    IndexStats,
    Metric,
    QueryResult,
    VectorIndexExistsError,
    VectorIndexNotFoundError,
    VectorNotFoundError,
    check_dimension,
    check_metadata,
    check_metric,
    check_name,
    check_top_k,
    check_vector,
    prepare_upsert,
)
from runstream.vector.filter import parse_filter

_REGISTRY = """CREATE TABLE IF NOT EXISTS vector_indexes (
    name TEXT PRIMARY KEY, dimension INTEGER NOT NULL, metric TEXT NOT NULL, created_at TEXT NOT NULL
)"""


def _load_vec(db: Any) -> None:
    db.enable_load_extension(True)
    sqlite_vec.load(db)
    db.enable_load_extension(False)


def _blob(vector: list[float]) -> bytes:
    return array("f", vector).tobytes()


def _unblob(data: bytes) -> list[float]:
    return array("f", data).tolist()


def _norm2(vector: list[float]) -> float:
    return sum(x * x for x in vector)


def _encode(metadata: dict[str, Any]) -> str:
    try:
        return orjson.dumps(metadata, option=orjson.OPT_SORT_KEYS).decode()
    except TypeError as exc:
        from runstream.errors import InvalidTypeError

        raise InvalidTypeError(f"metadata must be JSON: {exc}") from None


class SqliteVector:
    """Vectors in a SQLite file (or ``":memory:"``), searched with ``sqlite-vec``."""

    def __init__(self, path: str | os.PathLike[str] | SqliteStorage, *, busy_timeout_ms: int = 5000) -> None:
        """``path``: the database file, or a :class:`SqliteStorage` whose file to share."""
        if isinstance(path, SqliteStorage):
            path = path.path
        self._path = os.fspath(path)
        self._busy_timeout_ms = busy_timeout_ms
        self._db: aiosqlite.Connection | None = None
        self._lock = asyncio.Lock()
        self._closed = False
        self._indexes: dict[str, tuple[int, Metric]] = {}
        self._error_types = _driver.errors()

    async def _connection(self) -> aiosqlite.Connection:
        if self._closed:
            raise StorageClosedError()
        if self._db is None:
            db = await _driver.connect(self._path, setup=_load_vec)
            try:
                await db.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_ms)}")
                if self._path != ":memory:":
                    await db.execute("PRAGMA journal_mode = WAL")
                await db.execute(_REGISTRY)
            except BaseException:
                await db.close()
                raise
            self._db = db
        return self._db

    @asynccontextmanager
    async def _session(self, write: bool = False) -> AsyncIterator[aiosqlite.Connection]:
        """The connection under the lock; a write runs in one ``BEGIN IMMEDIATE`` transaction."""
        from runstream.storage.sqlite import _run_to_end

        async with self._lock:
            try:
                db = await self._connection()
                if not write:
                    yield db
                    return
                if await _run_to_end(db.execute("BEGIN IMMEDIATE")):
                    await _run_to_end(db.execute("ROLLBACK"))
                    raise asyncio.CancelledError()
                try:
                    yield db
                except BaseException:
                    await _run_to_end(db.execute("ROLLBACK"))
                    raise
                if await _run_to_end(db.execute("COMMIT")):
                    raise asyncio.CancelledError()
            except self._error_types as exc:
                raise StorageError(f"SQLite error: {exc}") from exc

    async def _index(self, db: aiosqlite.Connection, name: str) -> tuple[int, Metric]:
        check_name(name)
        known = self._indexes.get(name)
        if known is not None:
            return known
        async with db.execute("SELECT dimension, metric FROM vector_indexes WHERE name = ?", (name,)) as cur:
            row = await cur.fetchone()
        if row is None:
            raise VectorIndexNotFoundError(f"no vector index {name!r}")
        self._indexes[name] = found = (int(row[0]), check_metric(row[1]))
        return found

    async def init(self) -> None:
        async with self._session():
            pass

    async def close(self) -> None:
        async with self._lock:
            self._closed = True
            if self._db is not None:
                await self._db.close()
                self._db = None

    async def create_index(
        self,
        name: str,
        dimension: int,
        metric: Metric = "cosine",
        *,
        index_config: IndexConfig | Mapping[str, Any] | None = None,
    ) -> None:
        check_name(name)
        check_dimension(dimension)
        check_metric(metric)
        IndexConfig.coerce(index_config)
        async with self._session(write=True) as db:
            async with db.execute(
                "SELECT dimension, metric FROM vector_indexes WHERE name = ?", (name,)
            ) as cur:
                row = await cur.fetchone()
            if row is not None:
                if (int(row[0]), row[1]) != (dimension, metric):
                    raise VectorIndexExistsError(
                        f"index {name!r} exists with dimension {row[0]} and metric {row[1]}"
                    )
                return
            await db.execute(
                "INSERT INTO vector_indexes (name, dimension, metric, created_at) VALUES (?, ?, ?, ?)",
                (name, dimension, metric, datetime.now(UTC).isoformat()),
            )
            await db.execute(
                f'CREATE TABLE "vectors_{name}" (rowid INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, '
                "embedding BLOB NOT NULL, norm2 REAL NOT NULL, metadata TEXT NOT NULL)"
            )
        self._indexes[name] = (dimension, metric)

    async def list_indexes(self) -> list[str]:
        async with self._session() as db, db.execute("SELECT name FROM vector_indexes ORDER BY name") as cur:
            return [row[0] for row in await cur.fetchall()]

    async def describe_index(self, name: str) -> IndexStats:
        async with self._session() as db:
            dimension, metric = await self._index(db, name)
            async with db.execute(f'SELECT COUNT(*) FROM "vectors_{name}"') as cur:
                row = await cur.fetchone()
        return IndexStats(dimension, int(row[0]) if row else 0, metric)

    async def delete_index(self, name: str) -> None:
        async with self._session(write=True) as db:
            await self._index(db, name)
            await db.execute(f'DROP TABLE IF EXISTS "vectors_{name}"')
            await db.execute("DELETE FROM vector_indexes WHERE name = ?", (name,))
            self._indexes.pop(name, None)

    async def upsert(
        self,
        index: str,
        vectors: Sequence[Sequence[float]],
        metadata: Sequence[Mapping[str, Any]] | None = None,
        ids: Sequence[str] | None = None,
    ) -> list[str]:
        async with self._session(write=True) as db:
            dimension, _ = await self._index(db, index)
            rows = prepare_upsert(vectors, metadata, ids, dimension)
            await db.executemany(
                f'INSERT INTO "vectors_{index}" (id, embedding, norm2, metadata) VALUES (?, ?, ?, ?) '
                "ON CONFLICT(id) DO UPDATE SET embedding = excluded.embedding, norm2 = excluded.norm2, "
                "metadata = excluded.metadata",
                [(i, _blob(v), _norm2(v), _encode(m)) for i, v, m in rows],
            )
        return [row[0] for row in rows]

    async def query(
        self,
        index: str,
        vector: Sequence[float],
        top_k: int = 10,
        filter: Mapping[str, Any] | None = None,
        include_vector: bool = False,
        min_score: float | None = None,
    ) -> list[QueryResult]:
        check_top_k(top_k)
        node = parse_filter(filter)
        async with self._session() as db:
            dimension, metric = await self._index(db, index)
            query = check_vector(vector, dimension)
            params = SqliteParams()
            blob = _blob(query)
            if metric == "cosine":
                score = f"1.0 - vec_distance_cosine(embedding, {params.add(blob)})"
            elif metric == "euclidean":
                score = f"1.0 - vec_distance_l2(embedding, {params.add(blob)})"
            else:
                norm = params.add(_norm2(query))
                l2 = f"vec_distance_l2(embedding, {params.add(blob)})"
                score = f"(norm2 + {norm} - {l2} * {l2}) / 2.0"
            where = f"WHERE {SqliteFilter(params, 'metadata').where(node)}" if node is not None else ""
            sql = (
                f"SELECT id, metadata, score{', embedding' if include_vector else ''} FROM ("
                f'SELECT id, metadata, embedding, {score} AS score FROM "vectors_{index}" {where})'
            )
            if min_score is not None:
                sql += f" WHERE score >= {params.add(float(min_score))}"
            sql += f" ORDER BY score DESC LIMIT {params.add(top_k)}"
            async with db.execute(sql, params.values) as cur:
                rows = await cur.fetchall()
        return [
            QueryResult(
                id=row[0],
                score=float(row[2]),
                metadata=orjson.loads(row[1]),
                vector=_unblob(row[3]) if include_vector else None,
            )
            for row in rows
        ]

    async def update_vector(
        self,
        index: str,
        vector_id: str,
        *,
        vector: Sequence[float] | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> None:
        if vector is None and metadata is None:
            from runstream.errors import InvalidInputError

            raise InvalidInputError("update_vector needs a vector or metadata")
        async with self._session(write=True) as db:
            dimension, _ = await self._index(db, index)
            sets: list[str] = []
            values: list[Any] = []
            if vector is not None:
                checked = check_vector(vector, dimension)
                sets += ["embedding = ?", "norm2 = ?"]
                values += [_blob(checked), _norm2(checked)]
            if metadata is not None:
                sets.append("metadata = ?")
                values.append(_encode(check_metadata(metadata)))
            cur = await db.execute(
                f'UPDATE "vectors_{index}" SET {", ".join(sets)} WHERE id = ?', [*values, vector_id]
            )
            if cur.rowcount == 0:
                raise VectorNotFoundError(f"no vector {vector_id!r} in index {index!r}")

    async def delete_vector(self, index: str, vector_id: str) -> None:
        await self.delete_vectors(index, ids=[vector_id])

    async def delete_vectors(
        self,
        index: str,
        ids: Sequence[str] | None = None,
        filter: Mapping[str, Any] | None = None,
    ) -> int:
        from runstream.errors import InvalidInputError

        node = parse_filter(filter)
        if (ids is None) == (node is None):
            raise InvalidInputError("delete_vectors takes ids or a filter (exactly one)")
        async with self._session(write=True) as db:
            await self._index(db, index)
            params = SqliteParams()
            if ids is not None:
                where = f"id IN (SELECT value FROM json_each({params.add(orjson.dumps(list(ids)).decode())}))"
            else:
                assert node is not None
                where = SqliteFilter(params, "metadata").where(node)
            cur = await db.execute(f'DELETE FROM "vectors_{index}" WHERE {where}', params.values)
            return cur.rowcount


__all__ = ["SqliteVector"]
