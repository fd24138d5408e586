"""The :class:`VectorStore` protocol (Mastra's ``MastraVector``) and what every backend shares:
the records, the checks, the score of each metric.

Mastra's calls, name for name in snake_case: ``create_index(name, dimension, metric)``,
``upsert(index, vectors, metadata, ids)``, ``query(index, vector, top_k, filter,
include_vector, min_score)``, ``describe_index``, ``list_indexes``, ``update_vector``,
``delete_vector``, ``delete_vectors`` (by ids or by filter), ``delete_index``.

Scores are higher-is-better: ``1 - distance`` for ``cosine`` (the cosine similarity, as
Mastra's LibSQL and pg stores give it), ``1 - distance`` for ``euclidean`` (the L2 distance) and
the dot product for ``dotproduct``. ``min_score`` keeps results whose score is at least that.
"""

from __future__ import annotations

import math
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Literal, NotRequired, Protocol, TypedDict, get_args, runtime_checkable

from pydantic import Field

from runstream._config_mapping import CONFIG, checked, read_dataclass
from runstream._json import JsonMapping, JsonObject
from runstream.errors import InvalidInputError, InvalidTypeError, NotFoundError, StateConflictError
from runstream.vector.filter import Node, parse_filter

Metric = Literal["cosine", "euclidean", "dotproduct"]
_METRICS: tuple[Metric, ...] = get_args(Metric)
MAX_DIMENSION = 4096
"""The largest vector a store accepts (OpenAI's largest model has 3072 dimensions)."""
MAX_TOP_K = 1000
MAX_UPSERT_BATCH = 10_000
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


class VectorIndexNotFoundError(NotFoundError):
    """No index by that name in this store (a 404 on the server)."""


class VectorNotFoundError(NotFoundError):
    """No vector with that id in the index."""


class VectorIndexExistsError(StateConflictError):
    """An index by that name exists with another dimension or metric."""


class VectorDimensionError(InvalidInputError):
    """A vector whose length is not the index's dimension."""


class IndexStatsJson(TypedDict):
    dimension: int
    count: int
    metric: Metric


class QueryResultJson(TypedDict):
    id: str
    score: float
    metadata: JsonObject
    vector: NotRequired[list[float]]


@dataclass(frozen=True, slots=True)
class IndexStats:
    """Mastra's ``describeIndex`` answer: ``{dimension, count, metric}``."""

    dimension: int
    count: int
    metric: Metric

    def to_json(self) -> IndexStatsJson:
        return {"dimension": self.dimension, "count": self.count, "metric": self.metric}


@dataclass(slots=True)
class QueryResult:
    """One hit: Mastra's ``{id, score, metadata, vector?}``."""

    id: str
    score: float
    metadata: JsonObject = field(default_factory=dict)
    vector: list[float] | None = None

    def to_json(self) -> QueryResultJson:
        data: QueryResultJson = {"id": self.id, "score": self.score, "metadata": self.metadata}
        if self.vector is not None:
            data["vector"] = self.vector
        return data


MAX_FILTER_KEYS = 4
_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


@dataclass(frozen=True, slots=True)
class IndexConfig:
    """How the vectors are indexed (Mastra's ``indexConfig``).

    PostgreSQL: ``"hnsw"`` (``m``, ``ef_construction``), ``"ivfflat"`` (``lists``) or
    ``"flat"`` (no index: exact scans); SQLite ignores the type. ``filter_keys``
    (``filterKeys``): top-level metadata fields holding strings that queries filter on by
    equality (semantic recall's ``resource_id`` and ``thread_id``); SQLite keeps them in a
    ``sqlite-vec`` ``vec0`` table so such a query compares only the matching vectors
    (:mod:`runstream.vector._sqlite_keys`), PostgreSQL ignores them (HNSW serves filters)."""

    type: Literal["hnsw", "ivfflat", "flat"] = "hnsw"
    m: int = 16
    ef_construction: int = 64
    lists: int = 100
    filter_keys: tuple[str, ...] = ()

    @classmethod
    def coerce(cls, value: IndexConfig | Mapping[str, object] | None) -> IndexConfig:
        """A config, or Mastra's ``indexConfig`` mapping (``{"type", "hnsw": {"m",
        "efConstruction"}, "ivf": {"lists"}, "filterKeys"}``; ``m``, ``ef_construction`` and
        ``lists`` at its top level too); an unknown or bad option is an error naming it."""
        if value is None:
            return cls()
        if isinstance(value, IndexConfig):
            return value
        given = read_dataclass(_IndexOptions, value, where="index_config")
        hnsw, ivf = given.hnsw or _Hnsw(), given.ivf or _Ivf()
        return cls(
            given.type,
            _first(hnsw.m, given.m, 16),
            _first(hnsw.ef_construction, given.ef_construction, 64),
            _first(ivf.lists, given.lists, 100),
            given.filter_keys,
        )


_Setting = Annotated[int, Field(ge=1, le=10_000, strict=True)]


@dataclass(frozen=True, slots=True)
class _Hnsw:
    """Mastra's ``indexConfig.hnsw``."""

    __pydantic_config__ = CONFIG

    m: _Setting | None = None
    ef_construction: _Setting | None = None


@dataclass(frozen=True, slots=True)
class _Ivf:
    """Mastra's ``indexConfig.ivf``."""

    __pydantic_config__ = CONFIG

    lists: _Setting | None = None


def _filter_keys(where: str, value: object) -> tuple[str, ...]:
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise InvalidTypeError(f"{where} must be a list of metadata field names")
    keys = tuple(dict.fromkeys(value))
    if len(keys) > MAX_FILTER_KEYS or not all(isinstance(k, str) and _KEY.match(k) for k in keys):
        raise InvalidInputError(
            f"{where}: at most {MAX_FILTER_KEYS} top-level field names (letters, digits and underscores)"
        )
    return keys


@dataclass(frozen=True, slots=True)
class _IndexOptions:
    """The mapping form of :class:`IndexConfig`, read by pydantic (``read_dataclass``)."""

    __pydantic_config__ = CONFIG

    type: Literal["hnsw", "ivfflat", "flat"] = "hnsw"
    hnsw: _Hnsw | None = None
    ivf: _Ivf | None = None
    m: _Setting | None = None
    ef_construction: _Setting | None = None
    lists: _Setting | None = None
    filter_keys: Annotated[tuple[str, ...], checked(_filter_keys)] = ()


def _first(*settings: int | None) -> int:
    """The first setting given (the last is the default)."""
    return next(setting for setting in settings if setting is not None)


@runtime_checkable
class VectorStore(Protocol):
    """Mastra's vector store calls. Every backend passes ``tests/vector/test_vector_contract.py``."""

    async def create_index(
        self,
        name: str,
        dimension: int,
        metric: Metric = "cosine",
        *,
        index_config: IndexConfig | Mapping[str, object] | None = None,
    ) -> None:
        """Create the index; the same name again with the same dimension and metric is a no-op,
        with another raises :class:`VectorIndexExistsError`."""
        ...

    async def upsert(
        self,
        index: str,
        vectors: Sequence[Sequence[float]],
        metadata: Sequence[JsonMapping] | None = None,
        ids: Sequence[str] | None = None,
    ) -> list[str]:
        """Insert or replace vectors (ids generated when not given); returns the ids."""
        ...

    async def query(
        self,
        index: str,
        vector: Sequence[float],
        top_k: int = 10,
        filter: JsonMapping | None = None,
        include_vector: bool = False,
        min_score: float | None = None,
    ) -> list[QueryResult]:
        """The ``top_k`` nearest vectors passing ``filter``, best first."""
        ...

    async def list_indexes(self) -> list[str]: ...

    async def describe_index(self, name: str) -> IndexStats: ...

    async def update_vector(
        self,
        index: str,
        vector_id: str,
        *,
        vector: Sequence[float] | None = None,
        metadata: JsonMapping | None = None,
    ) -> None:
        """Replace a vector and/or its metadata. Raises :class:`VectorNotFoundError`."""
        ...

    async def delete_vector(self, index: str, vector_id: str) -> None:
        """Delete one vector (a missing one is no error, as in Mastra)."""
        ...

    async def delete_vectors(
        self,
        index: str,
        ids: Sequence[str] | None = None,
        filter: JsonMapping | None = None,
    ) -> int:
        """Delete by ids or by metadata filter (exactly one of them); returns how many went."""
        ...

    async def delete_index(self, name: str) -> None:
        """Delete the index and its vectors. Raises :class:`VectorIndexNotFoundError`."""
        ...

    async def close(self) -> None: ...


# -- checks every backend shares -------------------------------------------------------------------


def check_name(name: object) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise InvalidInputError(
            f"invalid index name {name!r}: letters, digits and underscores, starting with a letter "
            "or underscore, at most 63 characters"
        )
    return name


def check_metric(metric: object) -> Metric:
    for known in _METRICS:
        if metric == known:
            return known
    raise InvalidInputError(f"metric must be 'cosine', 'euclidean' or 'dotproduct', got {metric!r}")


def check_dimension(dimension: object) -> int:
    if isinstance(dimension, bool) or not isinstance(dimension, int) or not 1 <= dimension <= MAX_DIMENSION:
        raise InvalidInputError(f"dimension must be an integer from 1 to {MAX_DIMENSION}, got {dimension!r}")
    return dimension


def check_top_k(top_k: object) -> int:
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= MAX_TOP_K:
        raise InvalidInputError(f"topK must be an integer from 1 to {MAX_TOP_K}, got {top_k!r}")
    return top_k


def check_vector(vector: object, dimension: int) -> list[float]:
    if isinstance(vector, str | bytes) or not isinstance(vector, Sequence):
        raise InvalidTypeError("a vector must be a list of numbers")
    if len(vector) != dimension:
        raise VectorDimensionError(f"vector has {len(vector)} dimensions, the index has {dimension}")
    out: list[float] = []
    for x in vector:
        if isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(x):
            raise InvalidTypeError("a vector must be a list of finite numbers")
        out.append(float(x))
    return out


def check_metadata(value: object) -> JsonObject:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidTypeError("metadata must be an object")
    return dict(value)


def check_new_index(
    name: object, dimension: object, metric: object, index_config: IndexConfig | Mapping[str, object] | None
) -> IndexConfig:
    """The checks of ``create_index`` before any SQL; the index's checked config."""
    check_name(name)
    check_dimension(dimension)
    check_metric(metric)
    return IndexConfig.coerce(index_config)


def check_same_index(name: str, found: tuple[int, str], dimension: int, metric: str) -> None:
    """``create_index`` of an existing index: a no-op when it matches, else
    :class:`VectorIndexExistsError`."""
    if found != (dimension, metric):
        raise VectorIndexExistsError(f"index {name!r} exists with dimension {found[0]} and metric {found[1]}")


def check_query(top_k: object, filter: Mapping[str, object] | None) -> Node | None:
    """The checks of ``query`` before any SQL: ``top_k`` and the parsed filter."""
    check_top_k(top_k)
    return parse_filter(filter)


def check_update(vector: Sequence[float] | None, metadata: Mapping[str, object] | None) -> None:
    if vector is None and metadata is None:
        raise InvalidInputError("update_vector needs a vector or metadata")


def check_delete(ids: Sequence[str] | None, filter: Mapping[str, object] | None) -> Node | None:
    """``delete_vectors`` takes ids or a filter, exactly one; the parsed filter."""
    node = parse_filter(filter)
    if (ids is None) == (node is None):
        raise InvalidInputError("delete_vectors takes ids or a filter (exactly one)")
    return node


def prepare_upsert(
    vectors: Sequence[Sequence[float]],
    metadata: Sequence[JsonMapping] | None,
    ids: Sequence[str] | None,
    dimension: int,
) -> list[tuple[str, list[float], JsonObject]]:
    """Checked ``(id, vector, metadata)`` rows (Mastra's ``validateUpsertInput``); a later row
    with the same id wins."""
    if isinstance(vectors, str | bytes) or not isinstance(vectors, Sequence):
        raise InvalidTypeError("vectors must be a list of vectors")
    if len(vectors) > MAX_UPSERT_BATCH:
        raise InvalidInputError(f"at most {MAX_UPSERT_BATCH} vectors per upsert")
    if metadata is not None and len(metadata) != len(vectors):
        raise InvalidInputError("metadata must have one entry per vector")
    if ids is not None and len(ids) != len(vectors):
        raise InvalidInputError("ids must have one entry per vector")
    rows: dict[str, tuple[str, list[float], JsonObject]] = {}
    for i, vector in enumerate(vectors):
        vector_id = ids[i] if ids is not None else str(uuid.uuid4())
        if not isinstance(vector_id, str) or not vector_id or len(vector_id) > 512:
            raise InvalidInputError("vector ids must be non-empty strings of at most 512 characters")
        rows[vector_id] = (
            vector_id,
            check_vector(vector, dimension),
            check_metadata(metadata[i] if metadata is not None else None),
        )
    return list(rows.values())


def score_of(metric: Metric, distance: float) -> float:
    """The score of a distance as the backends compute it (cosine and euclidean: ``1 -
    distance``); the dot product is its own score."""
    return distance if metric == "dotproduct" else 1.0 - distance


__all__ = [
    "MAX_DIMENSION",
    "MAX_FILTER_KEYS",
    "MAX_TOP_K",
    "MAX_UPSERT_BATCH",
    "IndexConfig",
    "IndexStats",
    "IndexStatsJson",
    "Metric",
    "QueryResult",
    "QueryResultJson",
    "VectorDimensionError",
    "VectorIndexExistsError",
    "VectorIndexNotFoundError",
    "VectorNotFoundError",
    "VectorStore",
    "check_delete",
    "check_dimension",
    "check_metric",
    "check_name",
    "check_new_index",
    "check_query",
    "check_same_index",
    "check_top_k",
    "check_update",
    "check_vector",
    "prepare_upsert",
]
