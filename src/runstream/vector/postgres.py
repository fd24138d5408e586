"""PostgreSQL :class:`~runstream.vector.base.VectorStore` with ``pgvector`` (Mastra's ``PgVector``).

One table per index in the configured schema (``vectors_<name>``: ``id`` text key,
``embedding vector(n)``, ``metadata jsonb``), listed in ``vector_indexes`` with its dimension,
metric and index type. The ``vector`` extension is created on first use (the role needs the
right to, or an administrator creates it once).

Index options (Mastra's ``indexConfig``, :class:`~runstream.vector.base.IndexConfig`): ``hnsw``
(the default: ``m``, ``ef_construction``), ``ivfflat`` (``lists``; best built once data is
there) or ``flat`` (exact scans). A filtered query on an approximate index sets ``pgvector``'s
iterative scans (``hnsw.iterative_scan`` / ``ivfflat.iterative_scan``), so a selective filter
still finds ``top_k`` rows. The metadata filter is compiled to ``jsonb`` SQL by
:mod:`runstream.vector._filter_sql`.

Scores as on every backend (higher is better): ``1 - (embedding <=> q)`` for cosine,
``1 - (embedding <-> q)`` for euclidean, and ``-(embedding <#> q)`` (the dot product) for
dotproduct.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager

import asyncpg
import orjson

from runstream._json import JsonMapping, JsonObject
from runstream.errors import InvalidInputError, InvalidTypeError
from runstream.storage._postgres_schema import Connection, quote_ident
from runstream.storage._query import SqlParams
from runstream.storage.errors import StorageClosedError, StorageError
from runstream.vector._filter_sql import PostgresFilter
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

_OPERATORS: dict[str, tuple[str, str]] = {
    "cosine": ("<=>", "vector_cosine_ops"),
    "euclidean": ("<->", "vector_l2_ops"),
    "dotproduct": ("<#>", "vector_ip_ops"),
}
_HNSW_MAX_DIMENSION = 2000


def _literal(vector: list[float]) -> str:
    return "[" + ",".join(repr(x) for x in vector) + "]"


def _parse_vector(text: str) -> list[float]:
    return [float(x) for x in text.strip("[]").split(",")] if text.strip("[]") else []


def _json(metadata: JsonObject) -> str:
    try:
        return orjson.dumps(metadata).decode()
    except TypeError as exc:
        raise InvalidTypeError(f"metadata must be JSON: {exc}") from None


class PgVector:
    """Vectors in PostgreSQL with ``pgvector``: ``PgVector("postgresql://...", schema="runstream")``."""

    def __init__(self, dsn: str, *, schema: str = "runstream", min_size: int = 1, max_size: int = 10) -> None:
        if not schema or len(schema.encode()) > 63:
            raise InvalidInputError(f"schema name must be 1 to 63 bytes, got {schema!r}")
        self._dsn = dsn
        self._schema = quote_ident(schema)
        self._sizes = (min_size, max_size)
        self._pool: asyncpg.Pool | None = None
        self._lock = asyncio.Lock()
        self._closed = False
        self._indexes: dict[str, tuple[int, Metric, str]] = {}

    def _table(self, name: str) -> str:
        return f"{self._schema}.{quote_ident('vectors_' + name)}"

    async def _get_pool(self) -> asyncpg.Pool:
        async with self._lock:
            if self._closed:
                raise StorageClosedError()
            if self._pool is None:
                pool = await asyncpg.create_pool(self._dsn, min_size=self._sizes[0], max_size=self._sizes[1])
                try:
                    async with pool.acquire() as conn, conn.transaction():
                        await conn.execute("SELECT pg_advisory_xact_lock(hashtext('runstream.vector'))")
                        await conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
                        await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {self._schema}")
                        await conn.execute(
                            f"CREATE TABLE IF NOT EXISTS {self._schema}.vector_indexes (name TEXT PRIMARY KEY,"
                            " dimension INTEGER NOT NULL, metric TEXT NOT NULL, index_type TEXT NOT NULL,"
                            " created_at TIMESTAMPTZ NOT NULL DEFAULT now())"
                        )
                except BaseException:
                    pool.terminate()
                    raise
                self._pool = pool
            return self._pool

    @asynccontextmanager
    async def _connection(self, *, transaction: bool = False) -> AsyncIterator[Connection]:
        try:
            pool = await self._get_pool()
            async with pool.acquire() as conn:
                if transaction:
                    async with conn.transaction():
                        yield conn
                else:
                    yield conn
        except asyncpg.PostgresError as exc:
            raise StorageError(f"PostgreSQL error: {exc}") from exc

    async def _index(self, conn: Connection, name: str) -> tuple[int, Metric, str]:
        check_name(name)
        known = self._indexes.get(name)
        if known is not None:
            return known
        row = await conn.fetchrow(
            f"SELECT dimension, metric, index_type FROM {self._schema}.vector_indexes WHERE name = $1", name
        )
        if row is None:
            raise VectorIndexNotFoundError(f"no vector index {name!r}")
        self._indexes[name] = found = (int(row[0]), check_metric(row[1]), str(row[2]))
        return found

    async def init(self) -> None:
        async with self._connection():
            pass

    async def close(self) -> None:
        async with self._lock:
            self._closed = True
            if self._pool is not None:
                await self._pool.close()
                self._pool = None

    async def create_index(
        self,
        name: str,
        dimension: int,
        metric: Metric = "cosine",
        *,
        index_config: IndexConfig | Mapping[str, object] | None = None,
    ) -> None:
        config = check_new_index(name, dimension, metric, index_config)
        if config.type != "flat" and dimension > _HNSW_MAX_DIMENSION:
            raise InvalidInputError(
                f"pgvector indexes vectors of at most {_HNSW_MAX_DIMENSION} dimensions: "
                "use index_config={'type': 'flat'}"
            )
        table = self._table(name)
        async with self._connection(transaction=True) as conn:
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext($1))", f"runstream.vector.{name}")
            row = await conn.fetchrow(
                f"SELECT dimension, metric FROM {self._schema}.vector_indexes WHERE name = $1", name
            )
            if row is not None:
                check_same_index(name, (int(row[0]), row[1]), dimension, metric)
                return
            await conn.execute(
                f"CREATE TABLE {table} (seq BIGSERIAL, id TEXT PRIMARY KEY, "
                f"embedding vector({dimension}) NOT NULL, metadata JSONB NOT NULL DEFAULT '{{}}')"
            )
            ops = _OPERATORS[metric][1]
            index = quote_ident(f"vectors_{name}_embedding")
            if config.type == "hnsw":
                await conn.execute(
                    f"CREATE INDEX {index} ON {table} USING hnsw (embedding {ops}) "
                    f"WITH (m = {config.m}, ef_construction = {config.ef_construction})"
                )
            elif config.type == "ivfflat":
                await conn.execute(
                    f"CREATE INDEX {index} ON {table} USING ivfflat (embedding {ops}) WITH (lists = {config.lists})"
                )
            await conn.execute(
                f"INSERT INTO {self._schema}.vector_indexes (name, dimension, metric, index_type) "
                "VALUES ($1, $2, $3, $4)",
                name,
                dimension,
                metric,
                config.type,
            )
        self._indexes[name] = (dimension, metric, config.type)

    async def list_indexes(self) -> list[str]:
        async with self._connection() as conn:
            rows = await conn.fetch(f"SELECT name FROM {self._schema}.vector_indexes ORDER BY name")
        return [row[0] for row in rows]

    async def describe_index(self, name: str) -> IndexStats:
        async with self._connection() as conn:
            dimension, metric, _ = await self._index(conn, name)
            count = await conn.fetchval(f"SELECT COUNT(*) FROM {self._table(name)}")
        return IndexStats(dimension, int(count), metric)

    async def delete_index(self, name: str) -> None:
        async with self._connection(transaction=True) as conn:
            await self._index(conn, name)
            await conn.execute(f"DROP TABLE IF EXISTS {self._table(name)}")
            await conn.execute(f"DELETE FROM {self._schema}.vector_indexes WHERE name = $1", name)
            self._indexes.pop(name, None)

    async def upsert(
        self,
        index: str,
        vectors: Sequence[Sequence[float]],
        metadata: Sequence[JsonMapping] | None = None,
        ids: Sequence[str] | None = None,
    ) -> list[str]:
        async with self._connection(transaction=True) as conn:
            dimension, _, _ = await self._index(conn, index)
            rows = prepare_upsert(vectors, metadata, ids, dimension)
            await conn.executemany(
                f"INSERT INTO {self._table(index)} (id, embedding, metadata) VALUES ($1, $2::vector, $3::jsonb) "
                "ON CONFLICT (id) DO UPDATE SET embedding = excluded.embedding, metadata = excluded.metadata",
                [(i, _literal(v), _json(m)) for i, v, m in rows],
            )
        return [row[0] for row in rows]

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
        async with self._connection(transaction=True) as conn:
            dimension, metric, index_type = await self._index(conn, index)
            query = check_vector(vector, dimension)
            params = SqlParams("numeric")
            operator = _OPERATORS[metric][0]
            distance = f"(embedding {operator} {params.add(_literal(query))}::vector)"
            score = (  # a zero vector has no cosine (pgvector: NaN): scored 0, as on SQLite
                f"-{distance}" if metric == "dotproduct" else f"1 - COALESCE(NULLIF({distance}, 'NaN'), 1)"
            )
            clauses = [PostgresFilter(params).where(node, "metadata")] if node is not None else []
            if min_score is not None:
                clauses.append(f"{score} >= {params.add(float(min_score))}::float8")
            where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
            if node is not None and index_type in ("hnsw", "ivfflat"):
                await conn.execute(f"SET LOCAL {index_type}.iterative_scan = relaxed_order")
            rows = await conn.fetch(
                f"SELECT id, metadata::text AS metadata, {score} AS score"
                f"{', embedding::text AS embedding' if include_vector else ''} "
                f"FROM {self._table(index)} {where} ORDER BY {distance} LIMIT {params.add(top_k)}",
                *params.values,
            )
        results = [
            QueryResult(
                id=row["id"],
                score=float(row["score"]),
                metadata=orjson.loads(row["metadata"]),
                vector=_parse_vector(row["embedding"]) if include_vector else None,
            )
            for row in rows
        ]
        results.sort(key=lambda r: -r.score)  # relaxed_order may hand rows slightly out of order
        return results

    async def update_vector(
        self,
        index: str,
        vector_id: str,
        *,
        vector: Sequence[float] | None = None,
        metadata: JsonMapping | None = None,
    ) -> None:
        check_update(vector, metadata)
        async with self._connection() as conn:
            dimension, _, _ = await self._index(conn, index)
            params = SqlParams("numeric")
            sets = []
            if vector is not None:
                sets.append(f"embedding = {params.add(_literal(check_vector(vector, dimension)))}::vector")
            if metadata is not None:
                sets.append(f"metadata = {params.add(_json(check_metadata(metadata)))}::jsonb")
            status = await conn.execute(
                f"UPDATE {self._table(index)} SET {', '.join(sets)} WHERE id = {params.add(vector_id)}",
                *params.values,
            )
        if status.endswith(" 0"):
            raise VectorNotFoundError(f"no vector {vector_id!r} in index {index!r}")

    async def delete_vector(self, index: str, vector_id: str) -> None:
        await self.delete_vectors(index, ids=[vector_id])

    async def delete_vectors(
        self,
        index: str,
        ids: Sequence[str] | None = None,
        filter: JsonMapping | None = None,
    ) -> int:
        node = check_delete(ids, filter)
        async with self._connection() as conn:
            await self._index(conn, index)
            params = SqlParams("numeric")
            if ids is not None:
                where = f"id = ANY({params.add([str(i) for i in ids])}::text[])"
            else:
                assert node is not None
                where = PostgresFilter(params).where(node, "metadata")
            status = await conn.execute(f"DELETE FROM {self._table(index)} WHERE {where}", *params.values)
        return int(status.rsplit(" ", 1)[-1])


__all__ = ["PgVector"]
