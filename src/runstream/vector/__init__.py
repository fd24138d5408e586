"""Vector stores (Mastra's ``MastraVector``): indexes of embeddings with metadata, searched by
similarity under Mastra's metadata filter language.

:class:`SqliteVector` (``sqlite-vec``, the embedded default, in the storage's SQLite file) and
:class:`PgVector` (PostgreSQL with ``pgvector``; needs the ``postgres`` extra, imported on first
access) implement :class:`VectorStore`. Embedders turn text into vectors
(:mod:`runstream.vector.embedders`).
"""

from typing import TYPE_CHECKING, Any

from runstream.vector.base import (
    MAX_DIMENSION,
    MAX_TOP_K,
    MAX_UPSERT_BATCH,
    IndexConfig,
    IndexStats,
    Metric,
    QueryResult,
    VectorDimensionError,
    VectorIndexExistsError,
    VectorIndexNotFoundError,
    VectorNotFoundError,
    VectorStore,
)
from runstream.vector.filter import InvalidFilterError
from runstream.vector.sqlite import SqliteVector

if TYPE_CHECKING:
    from runstream.vector.postgres import PgVector


def __getattr__(name: str) -> Any:
    if name == "PgVector":
        from runstream.vector.postgres import PgVector

        return PgVector
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "MAX_DIMENSION",
    "MAX_TOP_K",
    "MAX_UPSERT_BATCH",
    "IndexConfig",
    "IndexStats",
    "InvalidFilterError",
    "Metric",
    "PgVector",
    "QueryResult",
    "SqliteVector",
    "VectorDimensionError",
    "VectorIndexExistsError",
    "VectorIndexNotFoundError",
    "VectorNotFoundError",
    "VectorStore",
]
