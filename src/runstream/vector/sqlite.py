"""The embedded :class:`~runstream.vector.base.VectorStore`: SQLite with ``sqlite-vec``.

Vectors live in the same database file as :class:`~runstream.storage.SqliteStorage`
(``SqliteVector(storage)`` or the same path), one table per index (``vectors_<name>``: ``id``,
the vector as ``sqlite-vec``'s float32 blob, its squared norm, the metadata as JSON text),
listed in ``vector_indexes``. The store has its own connection (WAL mode lets it and the
storage's connection work side by side; writes wait on SQLite's busy timeout).

A query is an exact scan: ``sqlite-vec``'s distance functions over the rows that pass the
metadata filter (compiled to SQL by :mod:`runstream.vector._filter_sql`), keeping the best
``top_k``. The dot product comes from the L2 distance and the stored norms
(``a·q = (|a|² + |q|² - |a-q|²) / 2``), as ``sqlite-vec`` has no dot-product function.
An index made with filter keys (``index_config={"filter_keys": [...]}``) also has a ``vec0``
table (:mod:`runstream.vector._sqlite_keys`): a query filtering by equality on those keys is a
KNN over the matching vectors only. An index made before filter keys existed gets its ``vec0``
table when ``create_index`` is called again with them (semantic recall does on first use).

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
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import aiosqlite
import orjson
import sqlite_vec  # type: ignore[import-untyped]

from runstream._json import JsonMapping, JsonObject
from runstream._uninterrupted import run_to_end
from runstream.storage import _sqlite_driver as _driver
from runstream.storage.errors import StorageClosedError, StorageError
from runstream.storage.sqlite import SqliteStorage
from runstream.vector import _sqlite_keys as keyed
from runstream.vector._filter_sql import SqliteFilter, SqliteParams, matches
from runstream.vector.base import (
    IndexConfig,
    IndexStats,
    Metric,
    QueryResult,
    VectorIndexNotFoundError,
    VectorNotFoundError,
    check_delete,
    check_metadata,
    check_metric,
    check_name,
    check_new_index,
    check_query,
    check_same_index,
    check_update,
    check_vector,
    prepare_upsert,
)
from runstream.vector.filter import Node

_REGISTRY = """CREATE TABLE IF NOT EXISTS vector_indexes (
    name TEXT PRIMARY KEY, dimension INTEGER NOT NULL, metric TEXT NOT NULL, created_at TEXT NOT NULL,
    filter_keys TEXT NOT NULL DEFAULT '[]', array_keys TEXT NOT NULL DEFAULT '[]'
)"""
_ADDED_COLUMNS = {
    "filter_keys": "ALTER TABLE vector_indexes ADD COLUMN filter_keys TEXT NOT NULL DEFAULT '[]'",
    "array_keys": "ALTER TABLE vector_indexes ADD COLUMN array_keys TEXT NOT NULL DEFAULT '[]'",
}
"""Columns a registry made before filter keys lacks, added when the store opens the file."""


@dataclass(frozen=True, slots=True)
class _Index:
    dimension: int
    metric: Metric
    keys: tuple[str, ...]
    """The filter keys, when the index has a ``vec0`` table."""


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


def _encode(metadata: JsonObject) -> str:
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
        self._indexes: dict[str, _Index] = {}
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
                async with db.execute("PRAGMA table_info(vector_indexes)") as cur:
                    present = {row[1] for row in await cur.fetchall()}
                for column, sql in _ADDED_COLUMNS.items():
                    if column not in present:
                        await db.execute(sql)
            except BaseException:
                await db.close()
                raise
            self._db = db
        return self._db

    @asynccontextmanager
    async def _session(self, write: bool = False) -> AsyncIterator[aiosqlite.Connection]:
        """The connection under the lock; a write runs in one ``BEGIN IMMEDIATE`` transaction."""
        async with self._lock:
            try:
                db = await self._connection()
                if not write:
                    yield db
                    return
                if await run_to_end(db.execute("BEGIN IMMEDIATE")):
                    await run_to_end(db.execute("ROLLBACK"))
                    raise asyncio.CancelledError()
                try:
                    yield db
                except BaseException:
                    await run_to_end(db.execute("ROLLBACK"))
                    raise
                if await run_to_end(db.execute("COMMIT")):
                    raise asyncio.CancelledError()
            except self._error_types as exc:
                raise StorageError(f"SQLite error: {exc}") from exc

    async def _index(self, db: aiosqlite.Connection, name: str) -> _Index:
        check_name(name)
        known = self._indexes.get(name)
        if known is not None:
            return known
        async with db.execute(
            "SELECT dimension, metric, filter_keys FROM vector_indexes WHERE name = ?", (name,)
        ) as cur:
            row = await cur.fetchone()
        if row is None:
            raise VectorIndexNotFoundError(f"no vector index {name!r}")
        metric = check_metric(row[1])
        keys = keyed.decode_keys(row[2]) if keyed.has_table(metric, keyed.decode_keys(row[2])) else ()
        self._indexes[name] = found = _Index(int(row[0]), metric, keys)
        return found

    async def _array_keys(self, db: aiosqlite.Connection, name: str) -> set[str]:
        """Read each time, not cached: another process may have stored an array since."""
        rows = await db.execute_fetchall("SELECT array_keys FROM vector_indexes WHERE name = ?", (name,))
        return {key for row in rows for key in keyed.decode_keys(row[0])}

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
        index_config: IndexConfig | Mapping[str, object] | None = None,
    ) -> None:
        keys = check_new_index(name, dimension, metric, index_config).filter_keys
        async with self._session(write=True) as db:
            async with db.execute(
                "SELECT dimension, metric, filter_keys FROM vector_indexes WHERE name = ?", (name,)
            ) as cur:
                row = await cur.fetchone()
            if row is not None:
                check_same_index(name, (int(row[0]), row[1]), dimension, metric)
                if keys and keys != keyed.decode_keys(row[2]):  # new keys: (re)build the vec0 table
                    await self._build_keyed(db, name, dimension, metric, keys)
                self._indexes.pop(name, None)
                return
            await db.execute(
                "INSERT INTO vector_indexes (name, dimension, metric, created_at) VALUES (?, ?, ?, ?)",
                (name, dimension, metric, datetime.now(UTC).isoformat()),
            )
            await db.execute(
                f'CREATE TABLE "vectors_{name}" (rowid INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, '
                "embedding BLOB NOT NULL, norm2 REAL NOT NULL, metadata TEXT NOT NULL)"
            )
            if keys:
                await self._build_keyed(db, name, dimension, metric, keys)
        self._indexes.pop(name, None)

    async def _build_keyed(
        self, db: aiosqlite.Connection, name: str, dimension: int, metric: Metric, keys: tuple[str, ...]
    ) -> None:
        """Record the filter keys and fill a new ``vec0`` table from the index's rows."""
        await db.execute(f"DROP TABLE IF EXISTS {keyed.table(name)}")
        found: set[str] = set()
        if keyed.has_table(metric, keys):
            await db.execute(keyed.create_sql(name, dimension, metric, keys))
            async with db.execute(f'SELECT rowid, embedding, metadata FROM "vectors_{name}"') as cur:
                while batch := await cur.fetchmany(2000):
                    metadata = [orjson.loads(row[2]) for row in batch]
                    found |= keyed.array_keys(metadata, keys)
                    await db.executemany(
                        keyed.insert_sql(name, keys),
                        [keyed.insert_row(r[0], r[1], m, keys) for r, m in zip(batch, metadata, strict=True)],
                    )
        await db.execute(
            "UPDATE vector_indexes SET filter_keys = ?, array_keys = ? WHERE name = ?",
            (keyed.encode_keys(keys), keyed.encode_keys(sorted(found)), name),
        )

    async def list_indexes(self) -> list[str]:
        async with self._session() as db, db.execute("SELECT name FROM vector_indexes ORDER BY name") as cur:
            return [row[0] for row in await cur.fetchall()]

    async def describe_index(self, name: str) -> IndexStats:
        async with self._session() as db:
            info = await self._index(db, name)
            async with db.execute(f'SELECT COUNT(*) FROM "vectors_{name}"') as cur:
                row = await cur.fetchone()
        return IndexStats(info.dimension, int(row[0]) if row else 0, info.metric)

    async def delete_index(self, name: str) -> None:
        async with self._session(write=True) as db:
            await self._index(db, name)
            await db.execute(f'DROP TABLE IF EXISTS "vectors_{name}"')
            await db.execute(f"DROP TABLE IF EXISTS {keyed.table(name)}")
            await db.execute("DELETE FROM vector_indexes WHERE name = ?", (name,))
            self._indexes.pop(name, None)

    async def upsert(
        self,
        index: str,
        vectors: Sequence[Sequence[float]],
        metadata: Sequence[JsonMapping] | None = None,
        ids: Sequence[str] | None = None,
    ) -> list[str]:
        async with self._session(write=True) as db:
            info = await self._index(db, index)
            rows = prepare_upsert(vectors, metadata, ids, info.dimension)
            blobs = [_blob(v) for _, v, _ in rows]
            await db.executemany(
                f'INSERT INTO "vectors_{index}" (id, embedding, norm2, metadata) VALUES (?, ?, ?, ?) '
                "ON CONFLICT (id) DO UPDATE SET embedding = excluded.embedding, norm2 = excluded.norm2, "
                "metadata = excluded.metadata",
                [(i, b, _norm2(v), _encode(m)) for (i, v, m), b in zip(rows, blobs, strict=True)],
            )
            if info.keys:
                await self._upsert_keyed(db, index, info.keys, rows, blobs)
        return [row[0] for row in rows]

    async def _upsert_keyed(
        self,
        db: aiosqlite.Connection,
        index: str,
        keys: tuple[str, ...],
        rows: Sequence[tuple[str, list[float], Mapping[str, object]]],
        blobs: list[bytes],
    ) -> None:
        """Replace the rows' ``vec0`` entries (``vec0`` cannot update a partition key in place)."""
        ids = orjson.dumps([r[0] for r in rows]).decode()
        async with db.execute(
            f'SELECT id, rowid FROM "vectors_{index}" WHERE id IN (SELECT value FROM json_each(?))', (ids,)
        ) as cur:
            rowids = {row[0]: int(row[1]) for row in await cur.fetchall()}
        await db.executemany(
            f"DELETE FROM {keyed.table(index)} WHERE rowid = ?", [(rowid,) for rowid in rowids.values()]
        )
        await db.executemany(
            keyed.insert_sql(index, keys),
            [keyed.insert_row(rowids[i], b, m, keys) for (i, _, m), b in zip(rows, blobs, strict=True)],
        )
        await self._note_arrays(db, index, keyed.array_keys((m for _, _, m in rows), keys))

    async def _note_arrays(self, db: aiosqlite.Connection, index: str, found: set[str]) -> None:
        if found and not found <= (known := await self._array_keys(db, index)):
            await db.execute(
                "UPDATE vector_indexes SET array_keys = ? WHERE name = ?",
                (keyed.encode_keys(sorted(known | found)), index),
            )

    async def query(
        self,
        index: str,
        vector: Sequence[float],
        top_k: int = 10,
        filter: JsonMapping | None = None,
        include_vector: bool = False,
        min_score: float | None = None,
    ) -> list[QueryResult]:
        node = check_query(top_k, filter)
        async with self._session() as db:
            info = await self._index(db, index)
            query = check_vector(vector, info.dimension)
            rows = await self._knn(db, index, info, query, top_k, node, include_vector)
            if rows is None:
                rows = await self._scan(db, index, info.metric, query, top_k, node, include_vector)
        results = [
            QueryResult(
                id=row[0],
                score=float(row[2]),
                metadata=metadata,
                vector=_unblob(row[3]) if include_vector else None,
            )
            for row, metadata in rows
        ]
        return results if min_score is None else [r for r in results if r.score >= min_score]

    async def _knn(
        self,
        db: aiosqlite.Connection,
        index: str,
        info: _Index,
        query: list[float],
        top_k: int,
        node: Node | None,
        include_vector: bool,
    ) -> list[tuple[Any, JsonObject]] | None:
        """The answer from the ``vec0`` table, or ``None`` when the filter cannot be pushed
        there (or a hash collision let a wrong row in): then the exact scan answers."""
        wanted = keyed.pushable(node, info.keys) if info.keys else None
        if wanted is None or (wanted and set(wanted) & await self._array_keys(db, index)):
            return None
        sql, params = keyed.knn_sql(index, info.keys, wanted, include_vector)
        found = await db.execute_fetchall(sql, [_blob(query), top_k, *params])
        if any(row[2] is None for row in found):  # a zero vector: no cosine, the scan scores it 0
            return None
        rows = [((row[0], row[1], 1.0 - float(row[2]), *row[3:]), orjson.loads(row[1])) for row in found]
        if not all(matches(node, metadata) for _, metadata in rows):
            return None
        return rows

    async def _scan(
        self,
        db: aiosqlite.Connection,
        index: str,
        metric: Metric,
        query: list[float],
        top_k: int,
        node: Node | None,
        include_vector: bool,
    ) -> list[tuple[Any, JsonObject]]:
        """Every row passing the filter, compared exactly."""
        params = SqliteParams()
        blob = _blob(query)
        if metric == "cosine":
            # a zero vector has no cosine: scored 0 (no likeness), not NULL
            score = f"1.0 - COALESCE(vec_distance_cosine(embedding, {params.add(blob)}), 1.0)"
        elif metric == "euclidean":
            score = f"1.0 - vec_distance_l2(embedding, {params.add(blob)})"
        else:
            norm = params.add(_norm2(query))
            l2 = f"vec_distance_l2(embedding, {params.add(blob)})"
            score = f"(norm2 + {norm} - {l2} * {l2}) / 2.0"
        where = f"WHERE {SqliteFilter(params, 'metadata').where(node)}" if node is not None else ""
        sql = (
            f"SELECT id, metadata, {score} AS score{', embedding' if include_vector else ''} "
            f'FROM "vectors_{index}" {where} '
            f"ORDER BY score DESC LIMIT {params.add(top_k)}"
        )
        return [(row, orjson.loads(row[1])) for row in await db.execute_fetchall(sql, params.values)]

    async def update_vector(
        self,
        index: str,
        vector_id: str,
        *,
        vector: Sequence[float] | None = None,
        metadata: JsonMapping | None = None,
    ) -> None:
        check_update(vector, metadata)
        async with self._session(write=True) as db:
            info = await self._index(db, index)
            sets: list[str] = []
            values: list[Any] = []
            if vector is not None:
                checked = check_vector(vector, info.dimension)
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
            if info.keys:
                async with db.execute(
                    f'SELECT rowid, embedding, metadata FROM "vectors_{index}" WHERE id = ?', (vector_id,)
                ) as cur:
                    row = await cur.fetchone()
                assert row is not None
                meta = orjson.loads(row[2])
                await db.execute(f"DELETE FROM {keyed.table(index)} WHERE rowid = ?", (row[0],))
                await db.execute(
                    keyed.insert_sql(index, info.keys), keyed.insert_row(row[0], row[1], meta, info.keys)
                )
                await self._note_arrays(db, index, keyed.array_keys([meta], info.keys))

    async def delete_vector(self, index: str, vector_id: str) -> None:
        await self.delete_vectors(index, ids=[vector_id])

    async def delete_vectors(
        self,
        index: str,
        ids: Sequence[str] | None = None,
        filter: JsonMapping | None = None,
    ) -> int:
        node = check_delete(ids, filter)
        async with self._session(write=True) as db:
            info = await self._index(db, index)
            params = SqliteParams()
            if ids is not None:
                where = f"id IN (SELECT value FROM json_each({params.add(orjson.dumps(list(ids)).decode())}))"
            else:
                assert node is not None
                where = SqliteFilter(params, "metadata").where(node)
            if info.keys:
                async with db.execute(
                    f'SELECT rowid FROM "vectors_{index}" WHERE {where}', params.values
                ) as cur:
                    gone = await cur.fetchall()
                await db.executemany(
                    f"DELETE FROM {keyed.table(index)} WHERE rowid = ?", [(r[0],) for r in gone]
                )
            cur = await db.execute(f'DELETE FROM "vectors_{index}" WHERE {where}', params.values)
            return cur.rowcount


__all__ = ["SqliteVector"]
