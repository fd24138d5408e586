"""The routes added or changed after issue 10 (working memory, the body's memory options, thread
signals, AG-UI), attacked with the security kit's two confined callers on SQLite and PostgreSQL;
and the inventory that names, for every route of the app, the test that proves its ownership
and input checks (a new route without an entry fails here)."""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest

from runstream.server import studio
from runstream.server.auth import TOKEN_ENV
from runstream.server.limits import (
    MAX_METADATA_BYTES,
    MAX_REASON_LENGTH,
    MAX_TITLE_LENGTH,
    MAX_TOOL_RESULT_MESSAGES,
    MAX_WORKING_MEMORY,
)
from tests.server.agents import DELETED
from tests.server.security_kit import Secured, secured, sse_chunks

__all__ = ["secured"]  # the fixture, re-exported for pytest

NOTES = "/api/agents/notes"
WM = "/api/memory/threads/{}/working-memory"


def a_thread(s: Secured) -> str:
    """A thread of A's, made by a run of the ``notes`` agent."""
    thread = f"t-{uuid.uuid4().hex[:8]}"
    sse_chunks(s.a.post(f"{NOTES}/stream", json={"messages": "hi", "memory": {"thread": thread}}))
    return thread


def stored(s: Secured, thread: str, *, updated_at: bool = True) -> tuple[Any, ...]:
    """Everything A can read of a thread: the thread, its messages, its working memory
    (``updated_at=False``: but the time it was last written)."""
    meta = s.a.get(f"/api/memory/threads/{thread}")
    listed = s.a.get(f"/api/memory/threads/{thread}/messages")
    memory = s.a.get(WM.format(thread), params={"agentId": "notes"})
    shown = meta.json() if meta.status_code == 200 else meta.text
    if not updated_at and isinstance(shown, dict):
        shown.pop("updatedAt")
    return meta.status_code, shown, listed.text, memory.text


def test_working_memory_of_another_resources_thread_is_a_404(secured: Secured) -> None:
    """Another resource's thread is a missing one: a write is a 404, a read answers as for a
    thread that does not exist (Mastra's 200 with ``threadExists: false``), nothing of it read."""
    s = secured
    thread = a_thread(s)
    assert s.a.post(WM.format(thread), params={"agentId": "notes"}, json={"workingMemory": "A's"}).json() == {
        "success": True
    }
    before = stored(s, thread)
    read = s.b.get(WM.format(thread), params={"agentId": "notes"})
    written = s.b.post(WM.format(thread), params={"agentId": "notes"}, json={"workingMemory": "B's"})
    missing = s.b.get(WM.format(f"{thread}x"), params={"agentId": "notes"})
    assert written.status_code == 404
    assert (read.status_code, read.json()) == (missing.status_code, missing.json())
    assert read.json()["threadExists"] is False and "A's" not in read.text
    named = s.b.get(WM.format(thread), params={"agentId": "notes", "resourceId": "user-a"})
    assert named.status_code == 403
    assert stored(s, thread) == before


def test_memory_options_are_checked_before_the_run(secured: Secured) -> None:
    """A bad per-call working-memory option used to fail inside the run: a 500 (client-js
    retries it) after the turn had started."""
    s = secured
    for options in (
        {"workingMemory": {"scope": "everywhere"}},
        {"workingMemory": {"enabled": True, "template": 5}},
        {"workingMemory": {"enabled": True, "template": "x" * (MAX_WORKING_MEMORY + 1)}},
        {"workingMemory": {"schema": {"type": "string", "pattern": "(a+)+$"}}},
        {"lastMessages": 1e308},
    ):
        thread = f"t-{uuid.uuid4().hex[:8]}"
        body = {"messages": "hi", "memory": {"thread": thread, "options": options}}
        response = s.a.post(f"{NOTES}/stream", json=body)
        assert response.status_code == 400, (options, response.text)
        assert "memory.options" in response.json()["error"]
        assert s.a.get(f"/api/memory/threads/{thread}").status_code == 404  # nothing ran or saved


def test_a_working_memory_writes_config_is_bounded(secured: Secured) -> None:
    """``memoryConfig`` of ``POST .../working-memory`` follows the body's rules: numbers bounded,
    the schema (a regular expression the server would run) is the server's to choose."""
    s = secured
    thread = a_thread(s)
    before = stored(s, thread)
    for config in (
        {"lastMessages": 1e308},
        {"workingMemory": {"enabled": True, "schema": {"type": "string", "pattern": "(a+)+$"}}},
        {"workingMemory": {"enabled": True, "template": 5}},
    ):
        body = {"workingMemory": "x", "memoryConfig": config}
        response = s.a.post(WM.format(thread), params={"agentId": "notes"}, json=body)
        assert response.status_code == 400 and "memoryConfig" in response.json()["error"], response.text
    assert stored(s, thread) == before


def test_titles_and_metadata_are_bounded(secured: Secured) -> None:
    s = secured
    long_title = "x" * (MAX_TITLE_LENGTH + 1)
    big = {"k": "x" * MAX_METADATA_BYTES}
    fresh = f"t-{uuid.uuid4().hex[:8]}"
    for body in ({"title": long_title}, {"metadata": big}, {"metadata": "x"}):
        made = s.a.post("/api/memory/threads", json={"threadId": fresh, "resourceId": "user-a", **body})
        assert made.status_code == 400, made.text
    assert s.a.get(f"/api/memory/threads/{fresh}").status_code == 404
    thread = a_thread(s)
    before = stored(s, thread)
    for body in ({"title": long_title}, {"metadata": big}):
        assert s.a.patch(f"/api/memory/threads/{thread}", json=body).status_code == 400
    assert stored(s, thread) == before
    run = s.a.post(
        f"{NOTES}/stream", json={"messages": "hi", "memory": {"thread": {"id": fresh, "metadata": big}}}
    )
    assert run.status_code == 400 and "memory.thread.metadata" in run.json()["error"]
    sent = s.a.post(
        f"{NOTES}/send-message", json={"threadId": fresh, "message": {"contents": "hi", "metadata": big}}
    )
    assert sent.status_code == 400 and "message.metadata" in sent.json()["error"]
    assert s.a.get(f"/api/memory/threads/{fresh}").status_code == 404


def test_send_tool_approval_with_messages_is_owned_and_bounded(secured: Secured) -> None:
    """``messages`` start the thread's next run: not on another resource's thread, and not an
    unbounded number of them."""
    s = secured
    thread = a_thread(s)
    before = stored(s, thread)
    result = {"role": "tool", "content": [{"type": "tool-result", "toolCallId": "c1", "toolName": "x"}]}
    body = {"threadId": thread, "toolCallId": "c1", "approved": True, "messages": [result]}
    stolen = s.b.post(f"{NOTES}/send-tool-approval", json=body)
    assert stolen.status_code == 404 and "user-a" not in stolen.text
    many = {**body, "messages": [result] * (MAX_TOOL_RESULT_MESSAGES + 1)}
    refused = s.a.post(f"{NOTES}/send-tool-approval", json=many)
    assert refused.status_code == 400 and "at most" in refused.json()["error"], refused.text
    assert stored(s, thread) == before
    assert s.live_runs() == 0


def test_thread_messages_must_be_well_formed(secured: Secured) -> None:
    """A part that is not an object used to be dropped: the message was accepted and stored
    empty. An ``ifIdle`` that is not an object was ignored."""
    s = secured
    for body in ({"message": {"contents": [5]}}, {"message": {"contents": "hi"}, "ifIdle": 5}):
        thread = f"t-{uuid.uuid4().hex[:8]}"
        for route in ("send-message", "queue-message"):
            response = s.a.post(f"{NOTES}/{route}", json={"threadId": thread, **body})
            assert response.status_code == 400, (route, body, response.text)
        assert s.a.get(f"/api/memory/threads/{thread}").status_code == 404
    bad_part = {"messages": [{"role": "user", "content": ["hi"]}], "memory": {"thread": "t-parts"}}
    assert s.a.post(f"{NOTES}/stream", json=bad_part).status_code == 400


def test_ag_ui_ids_are_bounded_and_threads_owned(secured: Secured) -> None:
    s = secured
    message = {"id": "u1", "role": "user", "content": "hi"}
    long_id = "t" * 300
    for body in (
        {"threadId": long_id, "runId": "r1"},
        {"threadId": "t-agui", "runId": long_id},
        {"threadId": "t-agui", "runId": "r1", "forwardedProps": {"resourceId": 5}},
    ):
        response = s.a.post("/ag-ui/notes", json={"messages": [message], **body})
        assert response.status_code == 400, (body, response.text)
    assert s.a.get(f"/api/memory/threads/{long_id}").status_code == 400  # the id grammar, at the edge
    thread = a_thread(s)
    before = stored(s, thread)
    stolen = s.b.post("/ag-ui/notes", json={"threadId": thread, "runId": "r1", "messages": [message]})
    assert stolen.status_code == 404
    assert stored(s, thread) == before


def test_pages_of_other_sites_cannot_drive_the_api(secured: Secured) -> None:
    """CORS hides answers from other sites, but a browser still sends their "simple" POSTs (a
    ``text/plain`` body, no preflight): such a request used to run the agent. Now a state-changing
    request whose ``Origin`` is not allowed is a 403 before anything runs."""
    s = secured
    thread = f"t-{uuid.uuid4().hex[:8]}"
    body = f'{{"messages": "hi", "memory": {{"thread": "{thread}"}}}}'
    for origin in ("https://evil.example", "http://localhost.evil.example", "null"):
        headers = {"Origin": origin, "Content-Type": "text/plain"}
        refused = s.a.post(f"{NOTES}/stream", content=body, headers=headers)
        assert refused.status_code == 403 and "access-control-allow-origin" not in refused.headers
        deleted = s.a.delete(f"/api/memory/threads/{thread}", headers={"Origin": origin})
        assert deleted.status_code == 403
    assert s.a.get(f"/api/memory/threads/{thread}").status_code == 404  # nothing ran
    for origin in (s.url, "http://localhost:3000"):  # the server's own pages, local dev servers
        headers = {"Origin": origin, "Content-Type": "application/json"}
        assert s.a.post(f"{NOTES}/stream", content=body, headers=headers).status_code == 200


def test_a_refused_run_leaves_the_thread_as_it_was(secured: Secured) -> None:
    """An option the agent refuses (an unknown active tool) used to be found after the thread
    was created, the client's tool results written into it, or send-message's message stored:
    a 400 that still changed the thread (and a retry then duplicated it)."""
    s = secured
    fresh = f"t-{uuid.uuid4().hex[:8]}"
    refused = s.a.post(
        "/api/agents/assistant/stream",
        json={"messages": "hi", "memory": {"thread": fresh}, "activeTools": ["nope"]},
    )
    assert refused.status_code == 400 and "nope" in refused.json()["error"]
    assert s.a.get(f"/api/memory/threads/{fresh}").status_code == 404

    thread = f"t-{uuid.uuid4().hex[:8]}"
    tools = {"clientEcho": {"id": "clientEcho", "inputSchema": {"type": "object"}}}
    chunks = sse_chunks(
        s.a.post(
            "/api/agents/assistant/stream",
            json={"messages": "client", "memory": {"thread": thread}, "clientTools": tools},
        )
    )
    call = next(c for c in chunks if c["type"] == "tool-call")["payload"]
    before = stored(s, thread, updated_at=False)
    result = {
        "type": "tool-result",
        "toolCallId": call["toolCallId"],
        "toolName": "clientEcho",
        "output": {"type": "json", "value": "ECHOED"},
    }
    body = {
        "messages": [{"role": "tool", "content": [result]}],
        "memory": {"thread": thread},
        "clientTools": tools,
        "activeTools": ["nope"],
    }
    assert s.a.post("/api/agents/assistant/stream", json=body).status_code == 400
    assert stored(s, thread, updated_at=False) == before

    bad_options = {"ifIdle": {"streamOptions": {"activeTools": ["nope"]}}, "message": {"contents": "hi"}}
    for target in (fresh, a_thread(s)):
        was = stored(s, target, updated_at=False)
        sent = s.a.post(f"{NOTES}/send-message", json={"threadId": target, **bad_options})
        assert sent.status_code == 400, sent.text
        assert stored(s, target, updated_at=False) == was


def test_messages_sent_at_the_same_moment_run_one_after_another(secured: Secured) -> None:
    """Two messages sent to an idle thread at once both used to start a run at once, on the
    same thread: the turns interleaved and replies were lost. The second now queues."""
    s, thread = secured, f"t-{uuid.uuid4().hex[:8]}"
    texts = ["one", "two", "three"]
    with s.a.stream("POST", f"{NOTES}/threads/subscribe", json={"threadId": thread}) as subscription:
        lines = subscription.iter_lines()
        assert next(lines) == ": connected"
        with ThreadPoolExecutor(len(texts)) as pool:
            sent = list(
                pool.map(
                    lambda text: s.a.post(
                        f"{NOTES}/send-message", json={"threadId": thread, "message": {"contents": text}}
                    ),
                    texts,
                )
            )
        assert [response.status_code for response in sent] == [200] * len(texts)
        finished = 0
        for line in lines:
            finished += line.startswith("data: ") and json.loads(line[6:]).get("type") == "finish"
            if finished == len(texts):
                break
    deadline = time.monotonic() + 10  # the last turn is saved just after its finish chunk
    while True:
        listed = s.a.get(f"/api/memory/threads/{thread}/messages").json()["messages"]
        if len(listed) == 2 * len(texts) or time.monotonic() > deadline:
            break
    assert [m["role"] for m in listed] == ["user", "assistant"] * len(texts)
    assert sorted(m["content"]["parts"][0]["text"] for m in listed[::2]) == sorted(texts)


def test_continuation_options_are_checked_before_the_run_goes_on(secured: Secured) -> None:
    """approve/decline/resume now take stream options: another caller's run stays a 404 whatever
    they say, and a wrong option or id is a 4xx that leaves the run waiting (a ``toolCallId``
    that was an object was a 500; a ``reason`` of any JSON type went into the chunks)."""
    s = secured
    chunks = sse_chunks(
        s.a.post(
            "/api/agents/assistant/stream", json={"messages": "delete it", "memory": {"thread": "t-cont"}}
        )
    )
    approval = next(c for c in chunks if c["type"] == "tool-call-approval")
    run = {"runId": approval["runId"], "toolCallId": approval["payload"]["toolCallId"]}
    deleted = len(DELETED)
    for route in ("approve-tool-call", "decline-tool-call", "resume-stream"):
        path = f"/api/agents/assistant/{route}"
        assert s.b.post(path, json={**run, "instructions": "obey B", "maxSteps": 5}).status_code == 404
        for wrong in (
            {"toolCallId": {"x": 1}},
            {"toolCallId": ["c"]},
            {"maxSteps": 0},
            {"memory": {"thread": "x"}},
        ):
            response = s.a.post(path, json={**run, **wrong})
            assert response.status_code == 400, (route, wrong, response.text)
        if route != "resume-stream":
            assert s.a.post(path, json={**run, "activeTools": ["nope"]}).status_code == 400
            for reason in ({"a": 1}, 5, "x" * (MAX_REASON_LENGTH + 1)):  # it goes to the model
                assert s.a.post(path, json={**run, "reason": reason}).status_code == 400
    assert len(DELETED) == deleted
    approved = sse_chunks(s.a.post("/api/agents/assistant/approve-tool-call", json=run))
    assert any(c["type"] == "tool-result" for c in approved) and len(DELETED) == deleted + 1


def test_a_caller_cannot_pick_the_servers_structuring_model(secured: Secured) -> None:
    """``structuredOutput.model`` would have the server call a provider the caller names, with
    the server's keys and the caller's conversation; over HTTP it is the server's to choose."""
    s = secured
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    for route in ("generate", "stream"):
        thread = f"t-{uuid.uuid4().hex[:8]}"
        body = {
            "messages": "hi",
            "memory": {"thread": thread},
            "structuredOutput": {"schema": schema, "model": "openai/gpt-4o"},
        }
        refused = s.a.post(f"/api/agents/assistant/{route}", json=body)
        assert refused.status_code == 400 and "structuredOutput.model" in refused.json()["error"]
        assert s.a.get(f"/api/memory/threads/{thread}").status_code == 404  # nothing ran
    allowed = {"messages": "hi", "structuredOutput": {"schema": schema, "errorStrategy": "warn"}}
    assert s.a.post("/api/agents/assistant/stream", json=allowed).status_code == 200


def test_an_open_api_refuses_domain_names_a_web_site_could_rebind(
    app_factory: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """DNS rebinding: a site re-points its own name at 127.0.0.1, so its page is same-origin
    with an open server (no token) and CORS and the Origin check let it read and drive the API.
    The page's requests carry its domain in ``Host``, so an open API refuses such names."""
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    url = app_factory()
    port = url.rsplit(":", 1)[1]
    for host in ("evil.example", f"evil.example:{port}", f"a.b.evil.example.:{port}"):
        for method, path in (
            ("GET", "/api/memory/threads?resourceId=r"),
            ("POST", "/api/agents/plain/generate"),
        ):
            response = httpx.request(method, f"{url}{path}", headers={"Host": host}, json={"messages": "hi"})
            assert response.status_code == 403 and TOKEN_ENV in response.json()["error"], (host, path)
        assert httpx.get(f"{url}/health", headers={"Host": host}).status_code == 200  # probes still work
    # names a web site cannot re-point: this machine's, IP addresses, single labels (test clients)
    for host in (
        f"localhost:{port}",
        f"127.0.0.1:{port}",
        f"[::1]:{port}",
        f"app.localhost:{port}",
        f"192.168.1.5:{port}",
        "testserver",
    ):
        assert httpx.get(f"{url}/api/agents", headers={"Host": host}).status_code == 200
    monkeypatch.setenv(TOKEN_ENV, "secret")  # with a token, any name (a deployment's own)
    guarded = app_factory()
    named = httpx.get(
        f"{guarded}/api/agents", headers={"Host": "api.example.com", "Authorization": "Bearer secret"}
    )
    assert named.status_code == 200


# -- the inventory ---------------------------------------------------------------------------------

TESTS = Path(__file__).parent
STUDIO_CONSTANTS = "a constant answer (Mastra Studio's features runstream has none of): no caller data"

ROUTES: dict[tuple[str, str], str] = {
    # agents and runs
    ("GET", "/api/agents"): "public: the agents' definitions",
    ("GET", "/api/agents/{id}"): "public: an agent's definition",
    ("GET", "/api/agents/providers"): "public: the agents' model providers",
    ("GET", "/api/agents/{id}/voice/speakers"): "public: no voice, an empty list",
    (
        "POST",
        "/api/agents/{id}/generate",
    ): "test_security.py::test_malformed_content_is_refused_before_the_run",
    ("POST", "/api/agents/{id}/stream"): "test_security.py::test_a_run_cannot_be_taken_over_by_its_run_id",
    ("POST", "/api/agents/{id}/stream-until-idle"): "test_security.py::test_unbounded_waits_are_refused",
    (
        "POST",
        "/api/agents/{id}/approve-tool-call",
    ): "test_security.py::test_a_run_cannot_be_taken_over_by_its_run_id",
    (
        "POST",
        "/api/agents/{id}/decline-tool-call",
    ): "test_security.py::test_a_run_cannot_be_taken_over_by_its_run_id",
    (
        "POST",
        "/api/agents/{id}/resume-stream",
    ): "test_security.py::test_a_run_cannot_be_taken_over_by_its_run_id",
    ("POST", "/api/agents/{id}/observe"): "test_auth_and_isolation.py::test_tasks_and_runs_are_confined",
    (
        "GET",
        "/api/agents/{id}/suspended-runs",
    ): "test_security.py::test_a_run_cannot_be_taken_over_by_its_run_id",
    ("GET", "/api/runs/{id}/stream"): "test_auth_and_isolation.py::test_tasks_and_runs_are_confined",
    ("POST", "/api/runs/{id}/abort"): "test_auth_and_isolation.py::test_tasks_and_runs_are_confined",
    # tools
    ("GET", "/api/tools"): "public: the tools' definitions",
    ("GET", "/api/tools/{id}"): "public: a tool's definition",
    ("GET", "/api/agents/{id}/tools/{id}"): "public: a tool's definition",
    (
        "POST",
        "/api/tools/{id}/execute",
    ): "test_security.py::test_approval_gated_tools_cannot_be_executed_directly",
    (
        "POST",
        "/api/agents/{id}/tools/{id}/execute",
    ): "test_security.py::test_approval_gated_tools_cannot_be_executed_directly",
    # thread signals
    (
        "POST",
        "/api/agents/{id}/threads/subscribe",
    ): "test_studio_api.py::test_thread_routes_check_owner_and_input",
    (
        "POST",
        "/api/agents/{id}/threads/abort",
    ): "test_studio_api.py::test_thread_routes_check_owner_and_input",
    (
        "POST",
        "/api/agents/{id}/send-message",
    ): "test_security_routes.py::test_thread_messages_must_be_well_formed",
    (
        "POST",
        "/api/agents/{id}/queue-message",
    ): "test_security_routes.py::test_thread_messages_must_be_well_formed",
    (
        "POST",
        "/api/agents/{id}/send-tool-approval",
    ): "test_security_routes.py::test_send_tool_approval_with_messages_is_owned_and_bounded",
    # memory
    ("GET", "/api/memory/status"): "public: whether agents have memory",
    ("GET", "/api/memory/config"): "public: an agent's memory configuration",
    ("GET", "/api/memory/threads"): "test_auth_and_isolation.py::test_threads_and_messages_are_confined",
    (
        "POST",
        "/api/memory/threads",
    ): "test_security.py::test_another_resources_thread_is_a_404_like_a_missing_one",
    ("GET", "/api/memory/threads/{id}"): "test_auth_and_isolation.py::test_threads_and_messages_are_confined",
    ("PATCH", "/api/memory/threads/{id}"): "test_security_routes.py::test_titles_and_metadata_are_bounded",
    (
        "DELETE",
        "/api/memory/threads/{id}",
    ): "test_auth_and_isolation.py::test_threads_and_messages_are_confined",
    (
        "GET",
        "/api/memory/threads/{id}/messages",
    ): "test_auth_and_isolation.py::test_threads_and_messages_are_confined",
    (
        "POST",
        "/api/memory/messages/delete",
    ): "test_auth_and_isolation.py::test_threads_and_messages_are_confined",
    (
        "GET",
        "/api/memory/threads/{id}/working-memory",
    ): "test_security_routes.py::test_working_memory_of_another_resources_thread_is_a_404",
    (
        "POST",
        "/api/memory/threads/{id}/working-memory",
    ): "test_security_routes.py::test_a_working_memory_writes_config_is_bounded",
    # background tasks
    ("GET", "/api/background-tasks"): "test_auth_and_isolation.py::test_tasks_and_runs_are_confined",
    ("GET", "/api/background-tasks/stream"): "test_auth_and_isolation.py::test_tasks_and_runs_are_confined",
    ("GET", "/api/background-tasks/{id}"): "test_auth_and_isolation.py::test_tasks_and_runs_are_confined",
    (
        "POST",
        "/api/background-tasks/{id}/cancel",
    ): "test_auth_and_isolation.py::test_tasks_and_runs_are_confined",
    (
        "POST",
        "/api/background-tasks/{id}/resume",
    ): "test_auth_and_isolation.py::test_tasks_and_runs_are_confined",
    # workflows
    ("GET", "/api/workflows"): "public: the workflows' definitions",
    ("GET", "/api/workflows/{id}"): "public: a workflow's definition",
    ("GET", "/api/workflows/run-counts"): "test_workflows_api.py::test_runs_belong_to_their_resource",
    **{
        (method, f"/api/workflows/{{id}}/{tail}"): "test_workflows_api.py::test_runs_belong_to_their_resource"
        for method, tail in (
            ("POST", "create-run"),
            ("POST", "stream"),
            ("POST", "start"),
            ("POST", "start-async"),
            ("POST", "resume-stream"),
            ("POST", "resume"),
            ("POST", "resume-async"),
            ("POST", "resume-no-wait"),
            ("POST", "observe"),
            ("GET", "runs"),
            ("GET", "runs/{id}"),
            ("DELETE", "runs/{id}"),
            ("POST", "runs/{id}/cancel"),
        )
    },
    # vector stores (Runstream(vectors=...)): only registered ones, memory indexes never, confined callers in their own namespace
    ("GET", "/api/vectors"): "public: the registered stores' names",
    ("GET", "/api/embedders"): "public: a constant list of embedding models",
    **{
        (
            method,
            f"/api/vector/{{id}}/{tail}",
        ): "test_vector_api.py::test_only_registered_stores_and_no_memory_index_are_reachable"
        for method, tail in (
            ("POST", "create-index"),
            ("POST", "upsert"),
            ("POST", "query"),
            ("GET", "indexes"),
            ("GET", "indexes/{id}"),
            ("DELETE", "indexes/{id}"),
        )
    },
    ("POST", "/api/memory/save-messages"): "test_observability_api.py::test_save_messages_into_owned_threads",
    # observability (the span store)
    **{
        (method, f"/api/observability/{path}"): "test_observability_api.py::test_traces_spans_and_their_owner"
        for method, path in (
            ("GET", "traces"),
            ("GET", "traces/light"),
            ("GET", "traces/{id}"),
            ("GET", "traces/{id}/light"),
            ("GET", "traces/{id}/spans/{id}"),
            ("GET", "discovery/entity-types"),
            ("GET", "discovery/entity-names"),
            ("GET", "discovery/service-names"),
            ("GET", "discovery/environments"),
            ("GET", "discovery/tags"),
        )
    },
    ("POST", "/api/observability/traces/query"): "test_trace_query.py::test_bounds_and_malformed_bodies",
    (
        "POST",
        "/api/observability/traces/score",
    ): "test_trace_scoring.py::test_a_trace_scored_by_a_registered_scorer_is_listed",
    (
        "GET",
        "/api/scores/scorers",
    ): "public: the app's registered scorers (code it was given), no caller data",
    ("GET", "/api/scores/scorers/{id}"): "public: one registered scorer's config, no caller data",
    **{
        (method, f"/api/observability/{path}"): "test_observability_api.py::test_scores_and_feedback"
        for method, path in (
            ("GET", "scores"),
            ("POST", "scores"),
            ("GET", "feedback"),
            ("POST", "feedback"),
            ("GET", "traces/{id}/{id}/scores"),
        )
    },
    **{
        (
            method,
            f"/api/observability/{path}",
        ): "test_metrics_api.py::test_metrics_and_logs_are_confined_and_checked"
        for method, path in (
            ("POST", "metrics/aggregate"),
            ("POST", "metrics/breakdown"),
            ("POST", "metrics/timeseries"),
            ("POST", "metrics/percentiles"),
            ("GET", "discovery/metric-names"),
            ("GET", "discovery/metric-label-keys"),
            ("GET", "discovery/metric-label-values"),
            ("GET", "logs"),
        )
    },
    # other front ends, pages
    ("POST", "/chat/{id}"): "test_ui_stream.py::test_chat_with_memory_runs_only_the_new_messages",
    ("GET", "/chat/{id}/{id}/stream"): "test_ui_stream.py::test_a_chat_stream_resumes_only_for_its_owner",
    ("POST", "/ag-ui/{id}"): "test_security_routes.py::test_ag_ui_ids_are_bounded_and_threads_owned",
    ("GET", "/playground"): "public: a static page",
    ("GET", "/"): "public: a static page",
    ("GET", "/health"): "public: whether storage answers",
    # the app's own routes (Runstream(api_routes=...)): security_kit registers one
    **{
        (
            method,
            "/app/notes/{id}",
        ): "test_custom_routes.py::test_an_authenticated_custom_route_gets_the_principal_and_the_runtime"
        for method in ("GET", "POST", "PUT", "PATCH", "DELETE")
    },
    ("GET", "/api/system/packages"): "public: the installed version",
    **{("GET", f"/api{path}"): STUDIO_CONSTANTS for path in [*studio.EMPTY_GET, *studio.EMPTY_PAGED]},
    **{("POST", f"/api{path}"): STUDIO_CONSTANTS for path in [*studio.UNSUPPORTED]},
}
"""Every route, and what covers it: ``file::test`` (a test of tests/server/ that attacks it with
another caller's objects and hostile input) or ``public: why`` (it serves no caller's data).
Every route also gets generated hostile requests in ``test_hostile_input.py``."""


def test_every_route_is_in_the_security_inventory(tmp_path: Path) -> None:
    from tests.server.security_kit import secured_server

    with secured_server("sqlite", tmp_path) as server:
        routes = set(server.routes("{id}"))
    assert routes - set(ROUTES) == set(), "new routes: add them to ROUTES, with the test that proves them"
    assert set(ROUTES) - routes == set(), "routes that are gone: remove them from ROUTES"
    for proof in ROUTES.values():
        if proof.startswith("public: ") or proof == STUDIO_CONSTANTS:
            continue
        file, name = proof.split("::")
        assert re.search(rf"^def {name}\(", (TESTS / file).read_text(), re.MULTILINE), proof
