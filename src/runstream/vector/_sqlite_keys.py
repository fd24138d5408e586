"""Filter keys on SQLite: a ``sqlite-vec`` ``vec0`` table beside an index's table, so a query
filtering by equality on chosen metadata fields (semantic recall's ``resource_id`` and
``thread_id``) compares only the vectors that match instead of every row.

Why: without it, such a query tests the JSON metadata of every row and scans the survivors
exactly (a recall on a 10,000-message thread took some 90 ms, most of it the JSON).

The table, ``"<index>:vec0"`` (``:`` cannot occur in an index name, so no index's table or
``vec0``'s own shadow tables can clash with it), holds, by the index table's ``rowid``:

* ``bucket``: the ``vec0`` *partition key*, a hash of the first key's value modulo
  :data:`BUCKETS`. A query with that key reads only its bucket's chunks. Not one partition
  per value: ``vec0`` preallocates a chunk (:data:`CHUNK_SIZE` vectors) per partition, which
  for a resource with three messages would be hundreds of kilobytes.
* ``k0``...: a ``vec0`` *metadata column* per key, a 64-bit hash of the key's value (a string
  and the same text as JSON hash apart), tested inside the KNN;
* the embedding, with the index's metric (``cosine`` or ``l2``; ``sqlite-vec`` has no dot
  product, so ``dotproduct`` indexes get no table and always scan).

Mastra's filter meaning is kept: a filter is pushed into the KNN only when it is a conjunction
of ``{key: "a string"}`` equalities on filter keys that never held an array (``$eq`` also
matches an array holding the value; the registry records the keys that have held one). Every
hit is then checked against the filter (:func:`~runstream.vector._filter_sql.matches`): a hash
collision fails the check and the query runs as an exact scan. Any other filter is an exact
scan over the index's table, as without filter keys.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from runstream.vector.base import Metric
from runstream.vector.filter import All, Condition, Node

BUCKETS = 16
CHUNK_SIZE = 128
_MISSING = "m"


def table(index: str) -> str:
    return f'"{index}:vec0"'


def has_table(metric: Metric, keys: tuple[str, ...]) -> bool:
    return bool(keys) and metric != "dotproduct"


def create_sql(index: str, dimension: int, metric: Metric, keys: tuple[str, ...]) -> str:
    columns = ", ".join(f"k{i} integer" for i in range(len(keys)))
    distance = "cosine" if metric == "cosine" else "l2"
    return (
        f"CREATE VIRTUAL TABLE {table(index)} USING vec0(bucket integer partition key, {columns}, "
        f"embedding float[{dimension}] distance_metric={distance}, chunk_size={CHUNK_SIZE})"
    )


def key_hash(value: Any) -> int:
    """A signed 64-bit hash of a metadata value (``vec0`` compares integers in its chunks; a
    long text column would be read row by row)."""
    if isinstance(value, str):
        data = b"s" + value.encode("utf-8", "surrogatepass")
    elif value is _MISSING:
        data = b"m"
    else:
        data = b"j" + orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big", signed=True)


def bucket_of(first_key_hash: int) -> int:
    return first_key_hash % BUCKETS


def insert_sql(index: str, keys: tuple[str, ...]) -> str:
    names = "".join(f", k{i}" for i in range(len(keys)))
    marks = ", ?" * len(keys)
    return f"INSERT INTO {table(index)} (rowid, bucket{names}, embedding) VALUES (?, ?{marks}, ?)"


def insert_row(
    rowid: int, embedding: bytes, metadata: Mapping[str, Any], keys: tuple[str, ...]
) -> tuple[Any, ...]:
    hashes = [key_hash(metadata.get(k, _MISSING)) for k in keys]
    return (rowid, bucket_of(hashes[0]), *hashes, embedding)


def array_keys(metadata: Iterable[Mapping[str, Any]], keys: tuple[str, ...]) -> set[str]:
    """The keys that hold an array in some of ``metadata`` (not to be pushed from then on)."""
    return {k for m in metadata for k in keys if isinstance(m.get(k), list)}


def pushable(node: Node | None, keys: tuple[str, ...]) -> dict[str, str] | None:
    """``{key: value}`` when ``node`` is a conjunction of string equalities on filter keys
    (``{}`` for no filter); ``None`` when it is anything else, or asks one key for two values
    (nothing matches; the scan answers that)."""
    if node is None:
        return {}
    wanted: dict[str, str] = {}
    stack: list[Node] = [node]
    while stack:
        match stack.pop():
            case All(children):
                stack.extend(children)
            case Condition((key,), "eq", str() as value) if key in keys:
                if wanted.setdefault(key, value) != value:
                    return None
            case _:
                return None
    return wanted


def knn_sql(
    index: str, keys: tuple[str, ...], wanted: Mapping[str, str], include_vector: bool
) -> tuple[str, list[Any]]:
    """The KNN over the ``vec0`` table (``?1`` the query vector, ``?2`` k), joined to the index
    table: ``(id, metadata, distance[, embedding])`` rows, nearest first."""
    clauses: list[str] = []
    params: list[Any] = []
    for i, key in enumerate(keys):
        if key in wanted:
            value = key_hash(wanted[key])
            if i == 0:
                clauses.append(f"bucket = ?{len(params) + 3}")
                params.append(bucket_of(value))
            clauses.append(f"k{i} = ?{len(params) + 3}")
            params.append(value)
    where = "".join(f" AND {c}" for c in clauses)
    sql = (
        f"SELECT m.id, m.metadata, knn.distance{', m.embedding' if include_vector else ''} FROM (SELECT rowid, distance FROM {table(index)} "
        f'WHERE embedding MATCH ?1 AND k = ?2{where}) AS knn JOIN "vectors_{index}" AS m ON m.rowid = knn.rowid '
        "ORDER BY knn.distance"
    )
    return sql, params


def encode_keys(keys: Iterable[str]) -> str:
    return orjson.dumps(list(keys)).decode()


def decode_keys(text: str | None) -> tuple[str, ...]:
    return tuple(orjson.loads(text)) if text else ()
