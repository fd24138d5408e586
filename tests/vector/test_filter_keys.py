"""Filter keys (``index_config={"filter_keys": [...]}``): the same answers as without them on
every backend, and on SQLite equality filters on them answered by a ``vec0`` KNN."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiosqlite
import pytest

from runstream.errors import InvalidInputError
from runstream.storage import _sqlite_driver
from runstream.vector import SqliteVector, VectorStore
from runstream.vector import _sqlite_keys as keyed
from runstream.vector._filter_sql import matches
from runstream.vector.base import IndexConfig
from runstream.vector.filter import parse_filter
from tests.vector.test_vector_contract import DOCS, FILTERS

KEYS = {"filter_keys": ["category", "tags", "inStock"]}


async def seeded(store: VectorStore, metric: str = "cosine") -> None:
    await store.create_index("docs", 3, metric, index_config=KEYS)  # type: ignore[arg-type]
    await store.upsert("docs", [d[1] for d in DOCS], [d[2] for d in DOCS], [d[0] for d in DOCS])


async def ids(store: VectorStore, flt: dict[str, Any] | None) -> set[str]:
    return {r.id for r in await store.query("docs", [1.0, 1.0, 1.0], top_k=100, filter=flt)}


@pytest.mark.parametrize(("flt", "expected"), FILTERS, ids=[str(f) for f, _ in FILTERS])
async def test_filters_mean_the_same_with_filter_keys(
    store: VectorStore, flt: dict[str, Any], expected: set[str]
) -> None:
    await seeded(store)
    assert await ids(store, flt) == expected


@pytest.mark.parametrize("metric", ["cosine", "euclidean", "dotproduct"])
async def test_scores_match_an_index_without_filter_keys(store: VectorStore, metric: str) -> None:
    await seeded(store, metric)
    await store.create_index("plain", 3, metric)  # type: ignore[arg-type]
    await store.upsert("plain", [d[1] for d in DOCS], [d[2] for d in DOCS], [d[0] for d in DOCS])
    for flt in (None, {"category": "books"}, {"category": "music", "inStock": False}):
        keyed_hits = await store.query("docs", [0.3, 0.9, 0.1], top_k=3, filter=flt, include_vector=True)
        plain_hits = await store.query("plain", [0.3, 0.9, 0.1], top_k=3, filter=flt, include_vector=True)
        assert [(h.id, h.metadata, h.vector) for h in keyed_hits] == [
            (h.id, h.metadata, h.vector) for h in plain_hits
        ]
        for a, b in zip(keyed_hits, plain_hits, strict=True):
            assert a.score == pytest.approx(b.score, abs=1e-5)


async def test_random_string_keys_agree_with_the_reference_meaning(store: VectorStore) -> None:
    """Generated metadata where the keys mostly hold strings (now and then a number, null or,
    late, an array) and generated conjunctions of equalities: what :func:`matches` selects."""
    rng = random.Random(31)
    await store.create_index("docs", 2, index_config={"filter_keys": ["r", "t"]})
    values: list[Any] = ["a", "b", "c", "", 3, None]
    docs: dict[str, dict[str, Any]] = {}
    for i in range(60):
        docs[f"v{i}"] = {k: rng.choice(values) for k in ("r", "t", "u") if rng.random() < 0.85}
    await store.upsert("docs", [[1.0, i + 1.0] for i in range(len(docs))], list(docs.values()), list(docs))

    async def agree(rounds: int) -> None:
        for _ in range(rounds):
            flt: dict[str, Any] = {
                k: rng.choice(values[:4]) for k in rng.sample(["r", "t", "u"], rng.randrange(1, 3))
            }
            if rng.random() < 0.3:
                flt = {"$and": [flt, {"r": rng.choice(values[:4])}]}
            expected = {i for i, m in docs.items() if matches(parse_filter(flt), m)}
            found = {r.id for r in await store.query("docs", [1.0, 1.0], top_k=100, filter=flt)}
            assert found == expected, flt

    await agree(120)
    docs["v0"] = {"r": ["a", "b"], "t": "a"}  # an array under a key: "a" matches it too
    await store.upsert("docs", [[1.0, 0.5]], [docs["v0"]], ["v0"])
    await agree(120)
    assert "v0" in {r.id for r in await store.query("docs", [1.0, 1.0], top_k=100, filter={"r": "a"})}


async def test_update_and_delete_keep_the_keys_in_step(store: VectorStore) -> None:
    await seeded(store)
    await store.update_vector("docs", "c", metadata={"category": "books"})
    await store.update_vector("docs", "a", vector=[0.0, 1.0, 0.0])
    assert await ids(store, {"category": "books"}) == {"a", "b", "c"}
    [top] = await store.query("docs", [0, 1, 0], top_k=1, filter={"category": "books"})
    assert top.id in {"a", "c"} and top.score == pytest.approx(1.0)
    assert await store.delete_vectors("docs", filter={"category": "books", "inStock": True}) == 1
    assert await store.delete_vectors("docs", ids=["a"]) == 1
    assert await ids(store, {"category": "books"}) == {"c"}
    await store.upsert("docs", [[1, 0, 0]], [{"category": "music"}], ["c"])
    assert await ids(store, {"category": "books"}) == set()
    assert await ids(store, {"category": "music"}) == {"c", "e"}


@pytest.mark.parametrize(
    "config",
    [{"filter_keys": "category"}, {"filter_keys": ["a.b"]}, {"filterKeys": ["a", "b", "c", "d", "e"]}],
)
async def test_bad_filter_keys_are_refused(store: VectorStore, config: dict[str, Any]) -> None:
    with pytest.raises(InvalidInputError):
        await store.create_index("docs", 3, index_config=config)


# -- SQLite: the vec0 path ----------------------------------------------------------------------


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> AsyncIterator[SqliteVector]:
    store = SqliteVector(tmp_path / "store.db")
    yield store
    await store.close()


async def traced(store: SqliteVector) -> list[str]:
    """The SQL the store runs from now on."""
    statements: list[str] = []
    db = await store._connection()
    await db.set_trace_callback(statements.append)
    return statements


def knn_count(statements: list[str]) -> int:
    return sum("MATCH" in s for s in statements)


async def test_equalities_on_filter_keys_are_a_vec0_knn(sqlite_store: SqliteVector) -> None:
    await seeded(sqlite_store)
    statements = await traced(sqlite_store)
    await sqlite_store.query(
        "docs", [1, 0, 0], filter={"$and": [{"category": "books"}, {"category": "books"}]}
    )
    await sqlite_store.query("docs", [1, 0, 0])
    assert knn_count(statements) == 2
    await sqlite_store.query("docs", [1, 0, 0], filter={"category": {"$ne": "books"}})
    await sqlite_store.query("docs", [1, 0, 0], filter={"tags": "sale"})  # tags held arrays
    await sqlite_store.query("docs", [1, 0, 0], filter={"category": "books", "price": 10})
    assert knn_count(statements) == 2


async def test_a_hash_collision_falls_back_to_the_exact_scan(
    sqlite_store: SqliteVector, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(keyed, "key_hash", lambda value: 7)  # every value collides
    await seeded(sqlite_store)
    statements = await traced(sqlite_store)
    assert await ids(sqlite_store, {"category": "books"}) == {"a", "b"}
    assert knn_count(statements) == 1  # tried, found foreign rows, scanned


async def test_an_index_made_before_filter_keys_gets_them(tmp_path: Path) -> None:
    """A file whose registry predates filter keys: opened, its index keyed by a new
    ``create_index`` call (as semantic recall makes on first use), the old rows included."""
    path = tmp_path / "old.db"
    db = await _sqlite_driver.connect(str(path))
    try:
        await db.execute(
            "CREATE TABLE vector_indexes (name TEXT PRIMARY KEY, dimension INTEGER NOT NULL, "
            "metric TEXT NOT NULL, created_at TEXT NOT NULL)"
        )
        await db.commit()
    finally:
        await db.close()
    store = SqliteVector(path)
    try:
        await store.create_index("docs", 3)
        await store.upsert("docs", [d[1] for d in DOCS], [d[2] for d in DOCS], [d[0] for d in DOCS])
        statements = await traced(store)
        assert await ids(store, {"category": "music"}) == {"c", "e"}
        assert knn_count(statements) == 0
        await store.create_index("docs", 3, index_config=KEYS)
        assert await ids(store, {"category": "music"}) == {"c", "e"}
        assert knn_count(statements) == 1
        assert (await store.describe_index("docs")).count == len(DOCS)
        await store.delete_index("docs")
        async with aiosqlite.connect(path) as check, check.execute("SELECT name FROM sqlite_master") as cur:
            assert not [row[0] for row in await cur.fetchall() if "docs" in row[0]]
    finally:
        await store.close()


def test_index_config_reads_filter_keys() -> None:
    assert IndexConfig.coerce({"filterKeys": ["a", "b", "a"]}).filter_keys == ("a", "b")
    assert IndexConfig.coerce({"filter_keys": []}).filter_keys == ()
