"""The vector store contract: every backend (SQLite with sqlite-vec, PostgreSQL with pgvector)
answers Mastra's calls the same way, filters included."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from runstream.errors import InvalidInputError, NotFoundError
from runstream.vector import (
    InvalidFilterError,
    PgVector,
    VectorDimensionError,
    VectorIndexExistsError,
    VectorIndexNotFoundError,
    VectorNotFoundError,
    VectorStore,
)
from runstream.vector._filter_sql import matches
from runstream.vector.filter import parse_filter

DOCS: list[tuple[str, list[float], dict[str, Any]]] = [
    (
        "a",
        [1.0, 0.0, 0.0],
        {"category": "books", "price": 10, "tags": ["new", "sale"], "user": {"name": "Ada"}},
    ),
    ("b", [0.9, 0.1, 0.0], {"category": "books", "price": 25.5, "tags": ["old"], "inStock": True}),
    ("c", [0.0, 1.0, 0.0], {"category": "music", "price": 5, "tags": [], "inStock": False, "note": None}),
    (
        "d",
        [0.0, 0.0, 1.0],
        {"category": "games", "price": "n/a", "items": [{"price": 60, "ok": True}, {"price": 5}]},
    ),
    ("e", [0.5, 0.5, 0.0], {"category": "music", "rating": 4, "user": {"name": "Bob", "age": 30}}),
]


async def seeded(store: VectorStore, metric: str = "cosine") -> None:
    await store.create_index("docs", 3, metric)  # type: ignore[arg-type]
    await store.upsert("docs", [d[1] for d in DOCS], [d[2] for d in DOCS], [d[0] for d in DOCS])


async def ids(store: VectorStore, flt: dict[str, Any] | None) -> set[str]:
    return {r.id for r in await store.query("docs", [1.0, 1.0, 1.0], top_k=100, filter=flt)}


async def test_indexes_are_created_listed_described_and_deleted(store: VectorStore) -> None:
    assert await store.list_indexes() == []
    await store.create_index("docs", 3)
    await store.create_index("docs", 3)  # the same again: a no-op
    await store.create_index("other", 2, "euclidean")
    assert await store.list_indexes() == ["docs", "other"]
    stats = await store.describe_index("docs")
    assert stats.to_json() == {"dimension": 3, "count": 0, "metric": "cosine"}
    with pytest.raises(VectorIndexExistsError):
        await store.create_index("docs", 4)
    await store.upsert("docs", [[1, 2, 3]])
    assert (await store.describe_index("docs")).count == 1
    await store.delete_index("docs")
    assert await store.list_indexes() == ["other"]
    with pytest.raises(VectorIndexNotFoundError):
        await store.describe_index("docs")
    with pytest.raises(NotFoundError):
        await store.query("docs", [1, 2, 3])
    with pytest.raises(VectorIndexNotFoundError):
        await store.delete_index("docs")


@pytest.mark.parametrize(
    ("name", "dimension", "metric"),
    [
        ("bad-name", 3, "cosine"),
        ('x"; drop', 3, "cosine"),
        ("ok", 0, "cosine"),
        ("ok", 5000, "cosine"),
        ("ok", 3, "l1"),
    ],
)
async def test_bad_index_settings_are_refused(
    store: VectorStore, name: str, dimension: int, metric: str
) -> None:
    with pytest.raises(InvalidInputError):
        await store.create_index(name, dimension, metric)  # type: ignore[arg-type]


async def test_upsert_inserts_replaces_and_checks_dimensions(store: VectorStore) -> None:
    await store.create_index("docs", 3)
    generated = await store.upsert("docs", [[1, 0, 0], [0, 1, 0]], [{"n": 1}, {"n": 2}])
    assert len(set(generated)) == 2
    assert await store.upsert("docs", [[0, 0, 1]], [{"n": 3}], ids=[generated[0]]) == [generated[0]]
    [hit] = await store.query("docs", [0, 0, 1], top_k=1, include_vector=True)
    assert (hit.id, hit.metadata, hit.vector) == (generated[0], {"n": 3}, [0.0, 0.0, 1.0])
    assert (await store.describe_index("docs")).count == 2
    with pytest.raises(VectorDimensionError):
        await store.upsert("docs", [[1, 2]])
    with pytest.raises(InvalidInputError):
        await store.upsert("docs", [[1, 2, math.nan]])
    with pytest.raises(InvalidInputError):
        await store.upsert("docs", [[1, 2, 3]], [{"a": 1}, {"b": 2}])
    with pytest.raises(VectorDimensionError):
        await store.query("docs", [1, 2])


@pytest.mark.parametrize(
    ("metric", "expected"),
    [
        ("cosine", [("a", 1.0), ("b", 0.99388), ("e", 0.70711)]),
        ("euclidean", [("a", 1.0), ("b", 1 - math.sqrt(0.02)), ("e", 1 - math.sqrt(0.5))]),
        ("dotproduct", [("a", 1.0), ("b", 0.9), ("e", 0.5)]),
    ],
)
async def test_query_orders_by_score_for_each_metric(
    store: VectorStore, metric: str, expected: list[tuple[str, float]]
) -> None:
    await seeded(store, metric)
    hits = await store.query("docs", [1.0, 0.0, 0.0], top_k=3)
    assert [h.id for h in hits] == [e[0] for e in expected]
    for hit, (_, score) in zip(hits, expected, strict=True):
        assert hit.score == pytest.approx(score, abs=1e-4)
        assert hit.vector is None
    assert hits[0].metadata == DOCS[0][2]


async def test_top_k_min_score_and_include_vector(store: VectorStore) -> None:
    await seeded(store)
    assert len(await store.query("docs", [1, 0, 0], top_k=1)) == 1
    kept = await store.query("docs", [1, 0, 0], min_score=0.7)
    assert [h.id for h in kept] == ["a", "b", "e"]
    [hit] = await store.query("docs", [0, 0, 1], top_k=1, include_vector=True)
    assert hit.vector == [0.0, 0.0, 1.0]
    for bad in (0, -1, 1001, 2.5, True):
        with pytest.raises(InvalidInputError):
            await store.query("docs", [1, 0, 0], top_k=bad)  # type: ignore[arg-type]


FILTERS: list[tuple[dict[str, Any], set[str]]] = [
    ({"category": "books"}, {"a", "b"}),
    ({"category": {"$eq": "music"}}, {"c", "e"}),
    ({"category": {"$ne": "books"}}, {"c", "d", "e"}),
    ({"price": {"$gt": 5}}, {"a", "b"}),
    ({"price": {"$gte": 5, "$lt": 25.5}}, {"a", "c"}),
    ({"price": {"$lte": 10}}, {"a", "c"}),
    ({"price": {"$gt": "m"}}, {"d"}),
    ({"category": {"$in": ["books", "games"]}}, {"a", "b", "d"}),
    ({"category": ["books", "games"]}, {"a", "b", "d"}),
    ({"category": {"$nin": ["books", "games"]}}, {"c", "e"}),
    ({"tags": "sale"}, {"a"}),
    ({"tags": {"$in": ["old", "sale"]}}, {"a", "b"}),
    ({"tags": {"$all": ["new", "sale"]}}, {"a"}),
    ({"tags": {"$all": ["new", "old"]}}, set()),
    ({"tags": {"$size": 0}}, {"c"}),
    ({"tags": {"$size": 1}}, {"b"}),
    ({"inStock": True}, {"b"}),
    ({"inStock": False}, {"c"}),
    ({"inStock": {"$exists": True}}, {"b", "c"}),
    ({"rating": {"$exists": False}}, {"a", "b", "c", "d"}),
    ({"note": None}, {"a", "b", "c", "d", "e"}),
    ({"note": {"$exists": True}}, {"c"}),
    ({"user.name": "Ada"}, {"a"}),
    ({"user": {"name": "Bob"}}, {"e"}),
    ({"user.age": {"$gte": 30}}, {"e"}),
    ({"items": {"$elemMatch": {"price": {"$gt": 50}, "ok": True}}}, {"d"}),
    ({"items": {"$elemMatch": {"price": {"$gt": 50}, "ok": False}}}, set()),
    ({"tags": {"$elemMatch": {"$in": ["old"]}}}, {"b"}),
    ({"$and": [{"category": "books"}, {"price": {"$gt": 20}}]}, {"b"}),
    ({"$or": [{"category": "games"}, {"rating": 4}]}, {"d", "e"}),
    ({"$nor": [{"category": "books"}, {"category": "music"}]}, {"d"}),
    ({"$not": {"category": "books"}}, {"c", "d", "e"}),
    ({"price": {"$not": {"$gt": 5}}}, {"c", "d", "e"}),
    ({"category": "music", "rating": 4}, {"e"}),
    ({"$or": []}, set()),
    ({"$and": []}, {"a", "b", "c", "d", "e"}),
    ({"$or": [{"$and": [{"category": "books"}, {"inStock": True}]}, {"price": 5}]}, {"b", "c"}),
]


@pytest.mark.parametrize(("flt", "expected"), FILTERS, ids=[str(f) for f, _ in FILTERS])
async def test_metadata_filters(store: VectorStore, flt: dict[str, Any], expected: set[str]) -> None:
    await seeded(store)
    assert await ids(store, flt) == expected
    assert {d[0] for d in DOCS if matches(parse_filter(flt), d[2])} == expected


@pytest.mark.parametrize(
    "flt",
    [
        {"$gt": 5},
        {"price": {"$regex": "x"}},
        {"price": {"$and": [{"a": 1}]}},
        {"$not": {}},
        {"$and": [{"$gt": 1}]},
        {"price": {"$size": -1}},
        {"price": {"$exists": "yes"}},
        {"price": {"$gt": True}},
        {"items": {"$elemMatch": 3}},
        {"a..b": 1},
        {'a"b': 1},
        {"price": {"$in": list(range(1001))}},
        {"price": {"$eq": 1, "name": 2}},
    ],
)
async def test_bad_filters_are_refused(store: VectorStore, flt: dict[str, Any]) -> None:
    await seeded(store)
    with pytest.raises(InvalidFilterError):
        await store.query("docs", [1, 0, 0], filter=flt)


async def test_update_and_delete_vectors(store: VectorStore) -> None:
    await seeded(store)
    await store.update_vector("docs", "c", metadata={"category": "books"})
    await store.update_vector("docs", "d", vector=[1, 0, 0])
    assert await ids(store, {"category": "books"}) == {"a", "b", "c"}
    top = await store.query("docs", [1, 0, 0], top_k=2)
    assert {h.id for h in top} == {"a", "d"}
    with pytest.raises(VectorNotFoundError):
        await store.update_vector("docs", "zz", metadata={})
    with pytest.raises(VectorDimensionError):
        await store.update_vector("docs", "a", vector=[1])
    await store.delete_vector("docs", "a")
    await store.delete_vector("docs", "a")  # gone already: no error
    assert await store.delete_vectors("docs", ids=["b", "zz"]) == 1
    assert await store.delete_vectors("docs", filter={"category": "music"}) == 1
    assert await ids(store, None) == {"c", "d"}
    with pytest.raises(InvalidInputError):
        await store.delete_vectors("docs")


def random_value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(8 if depth < 2 else 5)
    return [
        lambda: rng.choice(["x", "y", "z", "ab"]),
        lambda: rng.randrange(-3, 4),
        lambda: rng.choice([True, False]),
        lambda: None,
        lambda: rng.choice([0.5, 2.5]),
        lambda: [random_value(rng, depth + 1) for _ in range(rng.randrange(3))],
        lambda: {"k": random_value(rng, depth + 1)},
        lambda: [{"k": random_value(rng, depth + 1)} for _ in range(rng.randrange(3))],
    ][kind]()


def random_filter(rng: random.Random, depth: int = 0) -> dict[str, Any]:
    field = rng.choice(["f", "g", "f.k", "h"])
    roll = rng.randrange(14 if depth < 2 else 11)
    scalar = rng.choice(["x", "y", 1, 0, -2, True, False, None, 2.5])
    comparable = rng.choice(["x", "ab", 0, 1, 2.5])
    if roll == 0:
        return {field: scalar}
    if roll == 1:
        return {field: {"$ne": scalar}}
    if roll == 2:
        return {field: {rng.choice(["$gt", "$gte", "$lt", "$lte"]): comparable}}
    if roll == 3:
        return {
            field: {
                rng.choice(["$in", "$nin"]): [
                    rng.choice(["x", 1, None, True]) for _ in range(rng.randrange(3))
                ]
            }
        }
    if roll == 4:
        return {field: {"$all": [rng.choice(["x", "y", 1]) for _ in range(rng.randrange(1, 3))]}}
    if roll == 5:
        return {field: {"$size": rng.randrange(3)}}
    if roll == 6:
        return {field: {"$exists": rng.choice([True, False])}}
    if roll == 7:
        return {field: {"$elemMatch": {"k": {"$in": ["x", 1]}}}}
    if roll == 8:
        return {field: {"$elemMatch": {rng.choice(["$gt", "$lte"]): 0}}}
    if roll == 9:
        return {field: {"$not": {rng.choice(["$eq", "$gt"]): comparable}}}
    if roll == 10:
        return (
            {field: rng.choice([[1, 2], {"k": "x"}, ["x"]])}
            if rng.random() < 0.5
            else {field: {"$eq": ["x"]}}
        )
    op = ["$and", "$or", "$nor", "$not"][roll - 10]
    if op == "$not":
        return {"$not": random_filter(rng, depth + 1)}
    return {op: [random_filter(rng, depth + 1) for _ in range(rng.randrange(1, 3))]}


async def test_random_filters_agree_with_the_reference_meaning(store: VectorStore) -> None:
    """Hundreds of generated filters over generated metadata: the backend's SQL selects exactly
    what :func:`matches` (the language's meaning in Python) selects."""
    rng = random.Random(30)
    docs = {f"v{i}": {k: random_value(rng) for k in ("f", "g", "h") if rng.random() < 0.7} for i in range(40)}
    await store.create_index("docs", 2)
    await store.upsert("docs", [[1.0, i + 1.0] for i in range(len(docs))], list(docs.values()), list(docs))
    for _ in range(250):
        flt = random_filter(rng)
        expected = {i for i, m in docs.items() if matches(parse_filter(flt), m)}
        found = {r.id for r in await store.query("docs", [1.0, 1.0], top_k=100, filter=flt)}
        assert found == expected, flt


@pytest.mark.parametrize("config", [None, {"filter_keys": ["k"]}])
async def test_a_zero_vector_scores_0_on_a_cosine_index(store: VectorStore, config: Any) -> None:
    """Its cosine is undefined: it scores 0 (no likeness) and ranks as such, never an error (or,
    on pgvector's HNSW index, which leaves zero vectors out of a cosine index, is not found)."""
    await store.create_index("docs", 2, index_config=config)
    await store.upsert("docs", [[0, 0], [1, 0], [-1, 0]], [{"k": "a"}] * 3, ["zero", "same", "opposite"])
    for flt in (None, {"k": "a"}):
        hits = await store.query("docs", [1, 0], top_k=3, filter=flt)
        found = [(h.id, round(h.score, 4)) for h in hits]
        assert found in (
            [("same", 1.0), ("zero", 0.0), ("opposite", -1.0)],
            [("same", 1.0), ("opposite", -1.0)],
        )
        assert found[1][0] == "zero" or isinstance(store, PgVector)
