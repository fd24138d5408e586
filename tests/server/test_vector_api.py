"""Mastra's vector routes: the calls client-js makes, who may make them, and bounded input
(every mistake a 4xx, never a 5xx)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from starlette.requests import Request

from runstream.runtime import Runstream
from runstream.server import create_app
from runstream.server.auth import Principal
from runstream.server.vectors_api import MAX_INDEXES_PER_RESOURCE, MAX_TENANT_NAME, tenant_prefix
from runstream.vector import SqliteVector
from tests.server.conftest import serve

PRINCIPALS = {
    "admin": Principal("admin"),
    "user-a": Principal("user-a", "user-a"),
    "user-b": Principal("user-b", "user-b"),
}


async def by_token(request: Request) -> Principal | None:
    return PRINCIPALS.get(request.headers.get("authorization", "").removeprefix("Bearer "))


@pytest.fixture
def clients(tmp_path: Path) -> Iterator[tuple[httpx.Client, httpx.Client]]:
    runtime = Runstream(vectors={"docs": SqliteVector(tmp_path / "vectors.db")})
    app = create_app(runtime, auth=by_token, heartbeat_s=None)
    with (
        serve(app) as url,
        httpx.Client(base_url=f"{url}/api", headers={"Authorization": "Bearer admin"}, timeout=20) as admin,
        httpx.Client(base_url=f"{url}/api", headers={"Authorization": "Bearer user-a"}, timeout=20) as user,
    ):
        yield admin, user


def ok(response: httpx.Response) -> Any:
    assert response.status_code == 200, response.text
    return response.json()


def test_the_client_js_calls(clients: tuple[httpx.Client, httpx.Client]) -> None:
    admin, _ = clients
    assert ok(admin.get("/vectors")) == {"vectors": [{"name": "docs", "id": "docs", "type": "SqliteVector"}]}
    assert ok(admin.get("/embedders"))["embedders"][0]["id"] == "openai/text-embedding-3-small"
    body = {"indexName": "notes", "dimension": 3, "metric": "cosine"}
    assert ok(admin.post("/vector/docs/create-index", json=body)) == {"success": True}
    upsert = {
        "indexName": "notes",
        "vectors": [[1, 0, 0], [0, 1, 0]],
        "metadata": [{"topic": "cats"}, {"topic": "dogs"}],
        "ids": ["n1", "n2"],
    }
    assert ok(admin.post("/vector/docs/upsert", json=upsert)) == {"ids": ["n1", "n2"]}
    hits = ok(
        admin.post("/vector/docs/query", json={"indexName": "notes", "queryVector": [1, 0.1, 0], "topK": 1})
    )
    assert [(h["id"], h["metadata"]) for h in hits] == [("n1", {"topic": "cats"})]
    filtered = {
        "indexName": "notes",
        "queryVector": [1, 0, 0],
        "filter": {"topic": "dogs"},
        "includeVector": True,
    }
    assert [(h["id"], h["vector"]) for h in ok(admin.post("/vector/docs/query", json=filtered))] == [
        ("n2", [0.0, 1.0, 0.0])
    ]
    assert ok(admin.get("/vector/docs/indexes")) == ["notes"]
    assert ok(admin.get("/vector/docs/indexes/notes")) == {"dimension": 3, "count": 2, "metric": "cosine"}
    assert ok(admin.delete("/vector/docs/indexes/notes")) == {"success": True}
    assert admin.get("/vector/docs/indexes/notes").status_code == 404


def test_only_registered_stores_and_no_memory_index_are_reachable(
    clients: tuple[httpx.Client, httpx.Client], tmp_path: Path
) -> None:
    admin, user = clients
    assert admin.get("/vector/other/indexes").status_code == 404
    assert admin.post("/vector/other/query", json={"indexName": "x", "queryVector": [1]}).status_code == 404
    ok(admin.post("/vector/docs/create-index", json={"indexName": "notes", "dimension": 2}))
    # semantic recall's index holds every resource's messages: never served
    memory = {"indexName": "mastra_memory_hash_256", "dimension": 2}
    assert admin.post("/vector/docs/create-index", json=memory).status_code == 404
    assert admin.get("/vector/docs/indexes/mastra_memory_hash_256").status_code == 404
    assert user.post("/vector/docs/query", json={**memory, "queryVector": [1, 0]}).status_code == 404
    assert user.post("/vector/docs/create-index", json=memory).status_code == 404
    # the application's index is not a confined caller's
    assert ok(user.get("/vector/docs/indexes")) == []
    assert (
        user.post("/vector/docs/query", json={"indexName": "notes", "queryVector": [1, 0]}).status_code == 404
    )
    assert user.delete("/vector/docs/indexes/notes").status_code == 404
    assert ok(admin.get("/vector/docs/indexes/notes"))["dimension"] == 2
    assert httpx.get(str(admin.base_url) + "/vector/docs/indexes").status_code == 401


@pytest.fixture
def tenants(tmp_path: Path) -> Iterator[tuple[httpx.Client, httpx.Client, httpx.Client]]:
    runtime = Runstream(vectors={"docs": SqliteVector(tmp_path / "vectors.db")})
    app = create_app(runtime, auth=by_token, heartbeat_s=None)
    with serve(app) as url:
        made = [
            httpx.Client(base_url=f"{url}/api", headers={"Authorization": f"Bearer {who}"}, timeout=20)
            for who in ("admin", "user-a", "user-b")
        ]
        try:
            yield made[0], made[1], made[2]
        finally:
            for client in made:
                client.close()


def test_confined_tenants_each_have_their_own_indexes(
    tenants: tuple[httpx.Client, httpx.Client, httpx.Client],
) -> None:
    admin, a, b = tenants
    assert ok(a.post("/vector/docs/create-index", json={"indexName": "notes", "dimension": 2})) == {
        "success": True
    }
    upsert = {
        "indexName": "notes",
        "vectors": [[1, 0], [0, 1]],
        "metadata": [{"t": "a1"}, {"t": "a2"}],
        "ids": ["x", "y"],
    }
    assert ok(a.post("/vector/docs/upsert", json=upsert)) == {"ids": ["x", "y"]}
    query = {"indexName": "notes", "queryVector": [1, 0], "topK": 5}
    assert [h["id"] for h in ok(a.post("/vector/docs/query", json=query))] == ["x", "y"]
    assert ok(a.get("/vector/docs/indexes")) == ["notes"]
    assert ok(a.get("/vector/docs/indexes/notes")) == {"dimension": 2, "count": 2, "metric": "cosine"}
    # the other tenant: a's index is not there, whatever it sends
    assert ok(b.get("/vector/docs/indexes")) == []
    for response in (
        b.post("/vector/docs/query", json=query),
        b.post(
            "/vector/docs/query", json={**query, "filter": {"$or": [{"t": "a1"}, {"t": {"$exists": False}}]}}
        ),
        b.post("/vector/docs/upsert", json=upsert),
        b.get("/vector/docs/indexes/notes"),
        b.delete("/vector/docs/indexes/notes"),
    ):
        assert response.status_code == 404, response.text
        assert response.json()["error"] == "Index notes not found"
    # its own index of the same name, another dimension: no clash, no sight of a's vectors
    ok(
        b.post(
            "/vector/docs/create-index", json={"indexName": "notes", "dimension": 3, "metric": "euclidean"}
        )
    )
    ok(b.post("/vector/docs/upsert", json={"indexName": "notes", "vectors": [[1, 0, 0]], "ids": ["x"]}))
    hits = ok(b.post("/vector/docs/query", json={"indexName": "notes", "queryVector": [1, 0, 0], "topK": 5}))
    assert [(h["id"], h["metadata"]) for h in hits] == [("x", {})]
    assert ok(a.get("/vector/docs/indexes/notes"))["count"] == 2
    # the application (an unconfined caller) has its own names and sees the tenants' stored ones
    assert admin.get("/vector/docs/indexes/notes").status_code == 404
    assert sorted(ok(admin.get("/vector/docs/indexes"))) == sorted(
        [f"{tenant_prefix('user-a')}notes", f"{tenant_prefix('user-b')}notes"]
    )
    # a prefixed name from a tenant is only a name in its own namespace
    stolen = {"indexName": f"{tenant_prefix('user-a')}notes", "queryVector": [1, 0]}
    assert b.post("/vector/docs/query", json=stolen).status_code == 404
    assert ok(b.delete("/vector/docs/indexes/notes")) == {"success": True}
    assert ok(a.get("/vector/docs/indexes")) == ["notes"]


def test_a_tenant_s_names_and_index_count_are_bounded(
    tenants: tuple[httpx.Client, httpx.Client, httpx.Client],
) -> None:
    _, a, _ = tenants
    long = {"indexName": "n" * (MAX_TENANT_NAME + 1), "dimension": 2}
    assert a.post("/vector/docs/create-index", json=long).status_code == 400
    ok(a.post("/vector/docs/create-index", json={"indexName": "n" * MAX_TENANT_NAME, "dimension": 2}))
    for i in range(MAX_INDEXES_PER_RESOURCE - 1):
        ok(a.post("/vector/docs/create-index", json={"indexName": f"i{i}", "dimension": 2}))
    assert a.post("/vector/docs/create-index", json={"indexName": "more", "dimension": 2}).status_code == 400
    assert ok(a.post("/vector/docs/create-index", json={"indexName": "i0", "dimension": 2})) == {
        "success": True
    }
    assert len(ok(a.get("/vector/docs/indexes"))) == MAX_INDEXES_PER_RESOURCE


@pytest.mark.parametrize(
    ("path", "body", "status"),
    [
        ("create-index", {"indexName": "n", "dimension": 0}, 400),
        ("create-index", {"indexName": "n", "dimension": 5000}, 400),
        ("create-index", {"indexName": "n", "dimension": True}, 400),
        ("create-index", {"indexName": "bad name", "dimension": 2}, 400),
        ("create-index", {"indexName": "n", "dimension": 2, "metric": "l1"}, 400),
        ("create-index", {"indexName": "base", "dimension": 3}, 409),
        ("create-index", {"dimension": 2}, 400),
        ("upsert", {"indexName": "base", "vectors": [[1, 2, 3]]}, 400),
        ("upsert", {"indexName": "base", "vectors": "x"}, 400),
        ("upsert", {"indexName": "base", "vectors": [[1, 2]] * 1001}, 400),
        ("upsert", {"indexName": "base", "vectors": [[1, "x"]]}, 400),
        ("upsert", {"indexName": "base", "vectors": [[1, 2]], "metadata": ["x"]}, 400),
        ("upsert", {"indexName": "base", "vectors": [[1, 2]], "metadata": [{}, {}]}, 400),
        ("upsert", {"indexName": "base", "vectors": [[1, 2]], "ids": [3]}, 400),
        ("upsert", {"indexName": "nope", "vectors": [[1, 2]]}, 404),
        ("query", {"indexName": "base", "queryVector": [1, 2], "topK": 0}, 400),
        ("query", {"indexName": "base", "queryVector": [1, 2], "topK": 1001}, 400),
        ("query", {"indexName": "base", "queryVector": [1, 2, 3]}, 400),
        ("query", {"indexName": "base", "queryVector": [1, 2], "filter": {"$gt": 1}}, 400),
        ("query", {"indexName": "base", "queryVector": [1, 2], "filter": {"a": {"$regex": "x"}}}, 400),
        (
            "query",
            {"indexName": "base", "queryVector": [1, 2], "filter": {"a": {"$in": list(range(2000))}}},
            400,
        ),
        ("query", {"indexName": "base", "queryVector": [1, 2], "filter": "x"}, 400),
        ("query", {"indexName": "base", "queryVector": [1, 2], "minScore": "high"}, 400),
        ("query", {"indexName": "base", "queryVector": None}, 400),
        ("query", {"indexName": "nope", "queryVector": [1, 2]}, 404),
    ],
)
def test_bad_input_is_a_4xx(
    clients: tuple[httpx.Client, httpx.Client], path: str, body: Any, status: int
) -> None:
    admin, _ = clients
    ok(admin.post("/vector/docs/create-index", json={"indexName": "base", "dimension": 2}))
    response = admin.post(f"/vector/docs/{path}", json=body)
    assert response.status_code == status, response.text


def test_malformed_bodies_are_400(clients: tuple[httpx.Client, httpx.Client]) -> None:
    admin, _ = clients
    for path in ("create-index", "upsert", "query"):
        response = admin.post(
            f"/vector/docs/{path}", content=b"{not json", headers={"content-type": "application/json"}
        )
        assert response.status_code == 400
        assert admin.post(f"/vector/docs/{path}", json=[1, 2]).status_code == 400
