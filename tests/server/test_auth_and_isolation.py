"""Who may call, and what one resource can never see of another's."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import httpx2 as httpx
import pytest
from starlette.requests import Request

from runstream.server.auth import TOKEN_ENV, Principal, bearer_auth
from runstream.storage import Storage
from tests.server.conftest import chunks_of

PRINCIPALS = {
    "alice": Principal("alice", "alice"),
    "bob": Principal("bob", "bob"),
    "admin": Principal("admin"),
}


async def by_token(request: Request) -> Principal | None:
    return PRINCIPALS.get(request.headers.get("authorization", "").removeprefix("Bearer "))


def test_bearer_token(app_factory: Callable[..., str]) -> None:
    url = app_factory(auth=bearer_auth("s3cret"))
    refused = httpx.get(f"{url}/api/agents")
    assert refused.status_code == 401 and refused.json() == {"error": "Unauthorized"}
    assert refused.headers["www-authenticate"] == "Bearer"
    assert httpx.get(f"{url}/api/agents", headers={"Authorization": "Bearer nope"}).status_code == 401
    assert httpx.get(f"{url}/api/agents", headers={"Authorization": "Bearer s3cret"}).status_code == 200
    assert httpx.post(f"{url}/chat/assistant", json={"messages": []}).status_code == 401
    assert httpx.get(f"{url}/playground").status_code == 200  # the page itself holds no data


def test_token_from_the_environment(app_factory: Callable[..., str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOKEN_ENV, "from-env")
    url = app_factory()
    assert httpx.get(f"{url}/api/agents").status_code == 401
    assert httpx.get(f"{url}/api/agents", headers={"Authorization": "Bearer from-env"}).status_code == 200
    monkeypatch.delenv(TOKEN_ENV)
    assert httpx.get(f"{app_factory()}/api/agents").status_code == 200  # no token configured: open


@pytest.fixture
def as_user(
    backend_store: Storage, app_factory: Callable[..., str]
) -> Iterator[Callable[[str], httpx.Client]]:
    """Clients of a server confined by bearer names, on SQLite and on PostgreSQL."""
    url = app_factory(auth=by_token, storage=backend_store)
    clients: list[httpx.Client] = []

    def client(name: str) -> httpx.Client:
        c = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {name}"}, timeout=20)
        clients.append(c)
        return c

    yield client
    for c in clients:
        c.close()


def test_threads_and_messages_are_confined(as_user: Callable[[str], httpx.Client]) -> None:
    alice, bob, admin = as_user("alice"), as_user("bob"), as_user("admin")
    thread = f"t-{uuid.uuid4().hex[:6]}"
    # The resource is forced to the caller's: alice need not (and may not) name another.
    assert (
        alice.post(
            "/api/agents/assistant/stream", json={"messages": "hi", "memory": {"thread": thread}}
        ).status_code
        == 200
    )
    other = alice.post(
        "/api/agents/assistant/stream", json={"messages": "hi", "memory": {"thread": "x", "resource": "bob"}}
    )
    assert other.status_code == 403
    for method, path in [
        ("GET", f"/api/memory/threads/{thread}"),
        ("GET", f"/api/memory/threads/{thread}/messages"),
        ("PATCH", f"/api/memory/threads/{thread}"),
        ("DELETE", f"/api/memory/threads/{thread}"),
    ]:
        response = bob.request(method, path, json={} if method == "PATCH" else None)
        assert response.status_code == 404, (method, path)
        assert response.json() == {"error": "Thread not found"}
    stolen = bob.post("/api/agents/assistant/stream", json={"messages": "hi", "memory": {"thread": thread}})
    assert stolen.status_code == 404 and "alice" not in stolen.text
    assert bob.get("/api/memory/threads", params={"resourceId": "alice"}).status_code == 403
    assert bob.get("/api/memory/threads").json()["threads"] == []
    assert [t["id"] for t in alice.get("/api/memory/threads").json()["threads"]] == [thread]
    messages = alice.get(f"/api/memory/threads/{thread}/messages").json()["messages"]
    deleted = bob.post("/api/memory/messages/delete", json={"messageIds": [m["id"] for m in messages]})
    assert deleted.json()["message"] == "0 message(s) deleted"
    assert admin.get(f"/api/memory/threads/{thread}/messages").json()["total"] == 2


def test_tasks_and_runs_are_confined(as_user: Callable[[str], httpx.Client]) -> None:
    alice, bob = as_user("alice"), as_user("bob")
    body = {"messages": "research eels", "memory": {"thread": f"t-{uuid.uuid4().hex[:6]}"}}
    chunks = chunks_of(alice.post("/api/agents/assistant/stream-until-idle", json=body).content)
    run_id = chunks[0]["runId"]
    task_id = next(c["payload"]["taskId"] for c in chunks if c["type"] == "background-task-started")
    assert alice.get(f"/api/background-tasks/{task_id}").json()["resourceId"] == "alice"
    assert bob.get(f"/api/background-tasks/{task_id}").status_code == 404
    assert bob.post(f"/api/background-tasks/{task_id}/cancel").status_code == 404
    assert bob.get("/api/background-tasks").json() == {"tasks": [], "total": 0}
    assert bob.get("/api/background-tasks", params={"runId": run_id}).json()["total"] == 0
    assert bob.get("/api/background-tasks/stream", params={"resourceId": "alice"}).status_code == 403
    assert bob.get(f"/api/runs/{run_id}/stream").status_code == 404
    assert bob.post("/api/agents/assistant/observe", json={"runId": run_id}).status_code == 404
    assert alice.post("/api/agents/assistant/observe", json={"runId": run_id}).status_code == 200


def test_approvals_come_from_the_run_owner(as_user: Callable[[str], httpx.Client]) -> None:
    alice, bob = as_user("alice"), as_user("bob")
    body = {"messages": "delete it", "memory": {"thread": f"t-{uuid.uuid4().hex[:6]}"}}
    approval = chunks_of(alice.post("/api/agents/assistant/stream", json=body).content)[-1]
    assert approval["type"] == "tool-call-approval"
    ids = {"runId": approval["runId"], "toolCallId": approval["payload"]["toolCallId"]}
    assert bob.post("/api/agents/assistant/approve-tool-call", json=ids).status_code == 404
    approved = chunks_of(alice.post("/api/agents/assistant/approve-tool-call", json=ids).content)
    assert approved[-1]["type"] == "finish"
