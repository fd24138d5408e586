"""CORS, the routes Mastra Studio asks for, and Mastra's thread signal routes."""

from __future__ import annotations

import contextlib
import json
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx2 as httpx
import pytest
from starlette.requests import Request

from runstream.server.auth import Principal
from runstream.server.cors import cors_middleware
from runstream.storage import Storage
from tests.server.conftest import Live, blocks, parse_block

STUDIO = "http://localhost:3000"


def test_preflight_and_responses_carry_cors(client: httpx.Client) -> None:
    preflight = client.options(
        "/api/agents/assistant/send-message",
        headers={
            "Origin": STUDIO,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type,x-mastra-dev-playground,x-mastra-anything",
        },
    )
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == STUDIO  # echoed: credentials
    assert preflight.headers["access-control-allow-credentials"] == "true"
    allowed = [h.strip().lower() for h in preflight.headers["access-control-allow-headers"].split(",")]
    assert {"content-type", "authorization", "x-mastra-dev-playground", "x-mastra-anything"} <= set(allowed)
    assert len(allowed) == len(set(allowed))
    assert "PATCH" in preflight.headers["access-control-allow-methods"]
    assert preflight.headers["access-control-max-age"] == "3600"
    for path in ("/", "/api/auth/capabilities", "/api/workflows/approval/stream", "/chat/assistant"):
        assert client.options(
            path, headers={"Origin": STUDIO, "Access-Control-Request-Method": "POST"}
        ).is_success
    answer = client.get("/api/agents", headers={"Origin": STUDIO})
    assert answer.headers["access-control-allow-origin"] == STUDIO
    assert answer.headers["access-control-allow-credentials"] == "true"
    assert "Content-Length" in answer.headers["access-control-expose-headers"]


def test_named_origins_only(app_factory: Callable[..., str]) -> None:
    url = app_factory(cors_origins=["https://studio.example.com"])
    ok = httpx.get(f"{url}/api/agents", headers={"Origin": "https://studio.example.com"})
    assert ok.headers["access-control-allow-origin"] == "https://studio.example.com"
    other = httpx.get(f"{url}/api/agents", headers={"Origin": "https://evil.example"})
    assert "access-control-allow-origin" not in other.headers
    refused = httpx.options(
        f"{url}/api/agents",
        headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "GET"},
    )
    assert refused.status_code == 400 and "access-control-allow-origin" not in refused.headers
    none = app_factory(cors_origins=None)
    assert (
        "access-control-allow-origin"
        not in httpx.get(f"{none}/api/agents", headers={"Origin": STUDIO}).headers
    )
    with pytest.raises(ValueError, match="scheme://host"):
        cors_middleware(["studio.example.com"])


def test_default_cors_is_local_pages_only(app_factory: Callable[..., str]) -> None:
    """By default only pages served from this machine may call (any port); a web site the
    user visits gets no CORS headers, so its page can neither read nor drive the API."""
    url = app_factory()
    for origin in ("http://localhost:3000", "http://127.0.0.1:5173", "http://[::1]:8080", "http://localhost"):
        answer = httpx.get(f"{url}/api/agents", headers={"Origin": origin})
        assert answer.headers["access-control-allow-origin"] == origin
        assert answer.headers["access-control-allow-credentials"] == "true"
    for origin in ("https://evil.example", "http://localhost.evil.example", "https://localhost:3000"):
        assert (
            "access-control-allow-origin"
            not in httpx.get(f"{url}/api/agents", headers={"Origin": origin}).headers
        )
        preflight = httpx.options(
            f"{url}/api/agents", headers={"Origin": origin, "Access-Control-Request-Method": "POST"}
        )
        assert preflight.status_code == 400
    anyone = app_factory(cors_origins=["*"])
    echoed = httpx.get(f"{anyone}/api/agents", headers={"Origin": "https://evil.example"})
    assert echoed.headers["access-control-allow-origin"] == "https://evil.example"
    ports = app_factory(cors_origins=["https://app.example:*"])
    port_answer = httpx.get(f"{ports}/api/agents", headers={"Origin": "https://app.example:8443"})
    assert port_answer.headers["access-control-allow-origin"] == "https://app.example:8443"


def test_preflight_needs_no_token_and_401_is_readable(app_factory: Callable[..., str]) -> None:
    async def token(request: Request) -> Principal | None:
        return Principal("p") if request.headers.get("authorization") == "Bearer t" else None

    url = app_factory(auth=token)
    preflight = httpx.options(
        f"{url}/api/agents",
        headers={
            "Origin": STUDIO,
            "Access-Control-Request-Method": "GET",
            "Access-Control-Request-Headers": "authorization",
        },
    )
    assert preflight.status_code == 200
    refused = httpx.get(f"{url}/api/agents", headers={"Origin": STUDIO})
    assert refused.status_code == 401 and refused.headers["access-control-allow-origin"] == STUDIO
    assert httpx.get(f"{url}/", headers={"Origin": STUDIO}).status_code == 200  # the page is public
    assert httpx.get(f"{url}/api/auth/capabilities").status_code == 401


def test_root_points_to_playground_and_studio(client: httpx.Client, monkeypatch: pytest.MonkeyPatch) -> None:
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert 'href="/playground"' in page.text and "npx mastra@1.31.0 studio" in page.text
    assert f"--server-port {client.base_url.port}" in page.text
    monkeypatch.setenv("RUNSTREAM_STUDIO_URL", "http://localhost:3000")
    assert 'href="http://localhost:3000"' in client.get("/").text


def test_studio_answers_as_mastra(client: httpx.Client) -> None:
    assert client.get("/api/auth/capabilities").json() == {"enabled": False, "login": None}
    providers = client.get("/api/agents/providers").json()["providers"]
    assert [(p["id"], p["models"], p["connected"]) for p in providers] == [("test", ["prompt-model"], True)]
    assert client.get("/api/editor/builder/settings").json() == {
        "enabled": False,
        "modelPolicy": {"active": False},
    }
    assert client.get("/api/editor/builder/models/available").json() == {"providers": []}
    assert client.get("/api/processors").json() == {} and client.get("/api/scores/scorers").json() == {}
    assert client.get("/api/workspaces").json() == {"workspaces": []}
    assert client.get("/api/mcp/v0/servers").json() == {"servers": [], "total_count": 0, "next": None}
    feedback = client.get("/api/observability/feedback", params={"perPage": "1"}).json()
    assert feedback == {"feedback": [], "pagination": {"total": 0, "page": 0, "perPage": 1, "hasMore": False}}
    assert client.get("/api/observability/logs").json()["pagination"]["perPage"] == 10  # Mastra's default
    assert client.get("/api/observability/logs", params={"perPage": "1e999"}).status_code == 400
    # Without a span store (this server has none) a valid trace query is Mastra's 501.
    week = {"from": "2026-01-01T00:00:00Z", "to": "2026-01-08T00:00:00Z"}
    unsupported = client.post("/api/observability/traces/query", json={"timeRange": week})
    assert unsupported.status_code == 501 and unsupported.json()["code"] == "TRACE_QUERY_UNSUPPORTED"
    discovery = client.post("/api/observability/traces/query/fields", json={})
    assert discovery.status_code == 501 and discovery.json()["code"] == "TRACE_QUERY_DISCOVERY_UNSUPPORTED"
    assert client.get("/api/agents/assistant/voice/speakers").json() == []
    assert client.get("/api/agents/nope/voice/speakers").status_code == 404
    details = client.get("/api/agents/assistant").json()
    assert (
        details["supportsMemory"] is True and details["modelVersion"] == "v2" and details["source"] == "code"
    )
    assert client.get("/api/agents/plain").json()["supportsMemory"] is False


def test_memory_config_and_working_memory(client: httpx.Client) -> None:
    config = client.get("/api/memory/config", params={"agentId": "assistant"}).json()["config"]
    assert config["lastMessages"] == 40 and config["workingMemory"] == {"enabled": False}
    assert client.get("/api/memory/config", params={"agentId": "plain"}).json() == {"config": None}
    assert client.get("/api/memory/config").status_code == 400
    assert client.get("/api/memory/config", params={"agentId": "nope"}).status_code == 404
    fresh = client.get(
        "/api/memory/threads/never-used/working-memory", params={"agentId": "assistant", "resourceId": "u"}
    ).json()
    assert fresh == {
        "workingMemory": None,
        "source": "resource",
        "workingMemoryTemplate": None,
        "threadExists": False,
    }


class Thread:
    """The chunks a thread subscription received so far, appended by a reader thread."""

    def __init__(self) -> None:
        self.chunks: list[dict[str, Any]] = []
        self.changed = threading.Condition()

    def add(self, chunk: dict[str, Any]) -> None:
        with self.changed:
            self.chunks.append(chunk)
            self.changed.notify_all()

    def kinds(self) -> list[str]:
        return [c["type"] for c in self.chunks]

    def wait_for(self, check: Callable[[list[str]], bool], what: str) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: check(self.kinds()), 15), f"no {what}: {self.kinds()}"


@contextmanager
def subscription(
    url: str, agent: str, body: dict[str, Any], headers: dict[str, str] | None = None
) -> Iterator[Thread]:
    """Subscribe to a thread for the duration of the block."""
    thread = Thread()
    connected = threading.Event()
    client = httpx.Client(base_url=url, timeout=30, headers=headers)

    def read() -> None:
        with (
            contextlib.suppress(httpx.TransportError),  # the test or the server ended it
            client.stream("POST", f"/api/agents/{agent}/threads/subscribe", json=body) as response,
        ):
            assert response.status_code == 200
            for block in blocks(response):
                connected.set()
                _, data = parse_block(block)
                if data is not None:
                    thread.add(json.loads(data))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert connected.wait(10), "the subscription did not open"
    try:
        yield thread
    finally:
        client.close()


def test_send_message_streams_to_the_thread(live: Live, client: httpx.Client) -> None:
    thread, resource = f"t-{uuid.uuid4().hex[:8]}", "studio-user"
    where = {"threadId": thread, "resourceId": resource}
    with subscription(live.url, "assistant", where) as thread_stream:
        sent = client.post(
            "/api/agents/assistant/send-message",
            json={
                **where,
                "message": {"contents": "research octopus", "metadata": {"clientMessageId": "c1"}},
            },
        ).json()
        assert sent["accepted"] is True and sent["signal"]["metadata"] == {"clientMessageId": "c1"}
        thread_stream.wait_for(lambda kinds: kinds.count("finish") == 2, "second turn")
    chunks, kinds = thread_stream.chunks, thread_stream.kinds()
    # The echo of the message comes just before its run (Mastra sends it just after ``start``,
    # which makes Studio split the reply; see threads.py).
    assert kinds[:2] == ["data-user-message", "start"] and chunks[0]["data"]["id"] == sent["signal"]["id"]
    # Every turn of the message's run, the follow-up turn too, carries its run id (as Mastra's
    # thread stream; the follow-up turn has a message id of its own).
    assert {c.get("runId") for c in chunks} == {sent["runId"]}
    starts = [c for c in chunks if c["type"] == "start"]
    assert len(starts) == 2 and starts[0]["payload"]["messageId"] != starts[1]["payload"]["messageId"]
    assert (
        kinds.index("background-task-running")
        < kinds.index("background-task-completed")
        < kinds.index("start", 2)
    )
    running = next(c for c in chunks if c["type"] == "background-task-running")
    assert running["payload"]["startedAt"] and running["payload"]["toolCallId"]
    stored = client.get(f"/api/memory/threads/{thread}/messages", params={"resourceId": resource}).json()[
        "messages"
    ]
    assert [m["role"] for m in stored] == ["user", "assistant"] and stored[0]["id"] == sent["signal"]["id"]
    stamps = [m["createdAt"] for m in stored]
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)
    newest = client.get(
        f"/api/memory/threads/{thread}/messages",
        params={"perPage": "1", "orderBy": json.dumps({"field": "createdAt", "direction": "DESC"})},
    ).json()
    assert [m["role"] for m in newest["messages"]] == ["assistant"] and newest["hasMore"] is True
    bad = client.get(f"/api/memory/threads/{thread}/messages", params={"orderBy": "{nope"})
    assert bad.status_code == 400


def test_messages_queue_behind_the_running_one(live: Live, client: httpx.Client) -> None:
    where = {"threadId": f"t-{uuid.uuid4().hex[:8]}", "resourceId": "queue-user"}
    with subscription(live.url, "assistant", where) as thread_stream:
        first = client.post(
            "/api/agents/assistant/send-message", json={**where, "message": {"contents": "slow"}}
        )
        second = client.post(
            "/api/agents/assistant/queue-message", json={**where, "message": {"contents": "hi"}}
        )
        thread_stream.wait_for(lambda kinds: kinds.count("finish") == 2, "second run")
    runs = [c["runId"] for c in thread_stream.chunks if c["type"] == "finish"]
    assert runs == [first.json()["runId"], second.json()["runId"]]
    stored = client.get(f"/api/memory/threads/{where['threadId']}/messages").json()["messages"]
    assert [m["role"] for m in stored] == ["user", "assistant", "user", "assistant"]


def test_send_tool_approval_continues_on_the_thread(live: Live, client: httpx.Client) -> None:
    where = {"threadId": f"t-{uuid.uuid4().hex[:8]}", "resourceId": "approver"}
    with subscription(live.url, "assistant", where) as thread_stream:
        client.post(
            "/api/agents/assistant/send-message", json={**where, "message": {"contents": "delete it"}}
        )
        thread_stream.wait_for(lambda kinds: "tool-call-approval" in kinds, "approval request")
        chunks = thread_stream.chunks
        call = next(c for c in chunks if c["type"] == "tool-call-approval")["payload"]["toolCallId"]
        answer = client.post(
            "/api/agents/assistant/send-tool-approval", json={**where, "toolCallId": call, "approved": True}
        )
        assert answer.json() == {"accepted": True, "runId": chunks[0]["runId"], "toolCallId": call}
        thread_stream.wait_for(lambda kinds: "tool-result" in kinds and kinds[-1] == "finish", "reply")
    assert '"deleted"' in "".join(c["payload"].get("text", "") for c in chunks if c["type"] == "text-delta")
    again = client.post(
        "/api/agents/assistant/send-tool-approval", json={**where, "toolCallId": call, "approved": True}
    )
    assert again.status_code == 404 and "could not find an active or suspended run" in again.json()["error"]
    assert client.post("/api/agents/assistant/threads/abort", json=where).json() == {"aborted": False}


def test_thread_routes_check_owner_and_input(backend_store: Storage, app_factory: Callable[..., str]) -> None:
    people = {"alice": Principal("alice", "alice"), "bob": Principal("bob", "bob")}

    async def who(request: Request) -> Principal | None:
        return people.get(request.headers.get("authorization", "").removeprefix("Bearer "))

    url = app_factory(auth=who, storage=backend_store)
    alice, bob = ({"Authorization": f"Bearer {name}"} for name in people)
    where = {"threadId": "alice-thread"}
    with subscription(url, "assistant", where, alice) as thread_stream:
        sent = httpx.post(
            f"{url}/api/agents/assistant/send-message",
            json={**where, "message": {"contents": "hi"}},
            headers=alice,
        )
        assert sent.status_code == 200
        thread_stream.wait_for(lambda kinds: "finish" in kinds, "reply")
    for route in ("threads/subscribe", "send-message", "send-tool-approval", "threads/abort"):
        body = {**where, "message": {"contents": "x"}, "toolCallId": "c", "approved": True}
        stolen = httpx.post(f"{url}/api/agents/assistant/{route}", json=body, headers=bob)
        assert stolen.status_code == 404, route
        forced = httpx.post(
            f"{url}/api/agents/assistant/{route}", json={**body, "resourceId": "alice"}, headers=bob
        )
        assert forced.status_code == 403, route
    post = lambda body: httpx.post(f"{url}/api/agents/assistant/send-message", json=body, headers=alice)  # noqa: E731
    assert post({"threadId": "x" * 300, "message": {"contents": "hi"}}).status_code == 400
    assert post({"threadId": "t", "message": {"contents": 5}}).status_code == 400
    assert (
        post(
            {"threadId": "t", "message": {"contents": "hi"}, "ifIdle": {"streamOptions": {"maxSteps": 0}}}
        ).status_code
        == 400
    )
    assert (
        httpx.post(
            f"{url}/api/agents/plain/send-message",
            json={"threadId": "t", "message": {"contents": "hi"}},
            headers=alice,
        ).status_code
        == 400
    )
