"""Generated hostile requests against every route, on SQLite and PostgreSQL: no 5xx, no hang,
and the server still answers afterwards; clients that disconnect at every point of a run leave
no shared state half-written (issue 10)."""

from __future__ import annotations

import http.client
import json
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runstream.server.studio import UNSUPPORTED
from tests.server.security_kit import BACKENDS, Secured, secured_server

QUERY_NAMES = [
    "page", "perPage", "resourceId", "threadId", "agentId", "runId", "status", "offset", "limit",
    "fromDate", "toDate", "orderBy[field]", "orderBy[direction]", "after", "resumable", "v", "fields",
]  # fmt: skip
BODY_KEYS = [
    "messages", "memory", "runId", "maxSteps", "untilIdle", "maxIdleMs", "resumeWindowMs",
    "maxContinuations", "toolChoice", "modelSettings", "structuredOutput", "clientTools", "activeTools",
    "threadId", "resourceId", "title", "metadata", "toolCallId", "resumeData", "data", "offset",
    "messageIds", "inputData", "step", "reason", "context", "instructions", "requireToolApproval",
    "workingMemory", "memoryConfig", "message", "contents", "approved", "ifIdle", "streamOptions",
    "options", "thread", "resource", "forwardedProps", "state", "tools", "template", "scope",
]  # fmt: skip
ODD_TEXT = ["", "x", "\x00", "\ud800", "a" * 5000, "../../etc", "null", "NaN", "-1", "1e309", "日本語"]
ODD_NUMBERS = [0, -1, 1, 2**63, -(2**63) - 1, 10**30, 1e308, 0.5, -0.0]

ids = st.one_of(
    st.sampled_from(["x", "t-1", "user-a", "assistant", "notes", "%00", "a%ED%A0%80", "%2e%2e", "x" * 300]),
    st.text(max_size=12),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.sampled_from(ODD_NUMBERS),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(ODD_TEXT),
    st.text(max_size=20),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.sampled_from([*BODY_KEYS, "type", "role", "text"]), inner, max_size=5),
    ),
    max_leaves=20,
)
bodies = st.one_of(
    st.dictionaries(st.sampled_from(BODY_KEYS), json_values, max_size=6).map(
        lambda d: json.dumps(d).encode()
    ),
    st.sampled_from([b"", b"{", b"[]", b"NaN", b'{"messages": Infinity}', b"\xff\xfe", b'{"a": 1e999}']),
    st.binary(max_size=64),
)
queries = st.dictionaries(
    st.sampled_from(QUERY_NAMES),
    st.one_of(st.sampled_from(ODD_TEXT[:-3]), st.text(max_size=8), st.integers().map(str)),
    max_size=4,
)
headers = st.fixed_dictionaries(
    {},
    optional={
        "last-event-id": st.one_of(
            st.sampled_from(["x:1", "1", ":", "x:-1", "x:99999999999999999999"]), st.text(max_size=10)
        ),
        "content-type": st.sampled_from(["application/json", "text/plain", "multipart/form-data"]),
    },
)


def _raw(text: str, safe: str = "") -> str:
    """Percent-encoded as bytes, lone surrogates included (a browser would refuse them; a
    hostile client need not)."""
    return quote(text.encode("utf-8", "surrogatepass"), safe=safe)


def _header_safe(values: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in values.items() if v.isascii() and v.isprintable()}


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_generated_request_reaches_a_500(backend: str, tmp_path: Path) -> None:
    with secured_server(backend, tmp_path) as server:
        routes = server.routes("{id}")
        assert len(routes) > 40

        @settings(
            max_examples=250,
            deadline=None,
            derandomize=True,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )
        @given(route=st.sampled_from(routes), path_id=ids, body=bodies, query=queries, extra=headers)
        def probe(
            route: tuple[str, str], path_id: str, body: bytes, query: dict[str, str], extra: dict[str, str]
        ) -> None:
            method, template = route
            path = template.replace("{id}", _raw(path_id, safe="%") or "x")
            status = send(server, method, path, body, query, _header_safe(extra))
            # 501 only where Mastra's server gives it too: a feature it reports as absent.
            by_design = status == 501 and path.removeprefix("/api") in UNSUPPORTED
            assert status < 500 or by_design, (method, path, body[:200], query, status)

        probe()
        assert server.a.get("/api/agents").status_code == 200
        assert server.b.get("/api/memory/threads?resourceId=user-b").status_code == 200


def send(
    server: Secured, method: str, path: str, body: bytes, query: dict[str, str], extra: dict[str, str]
) -> int:
    """One request over a raw connection (so the URL's bytes go out exactly as generated); a
    streamed answer is read only as far as its status, then the client leaves."""
    raw_query = "&".join(f"{quote(k)}={_raw(v)}" for k, v in query.items())
    connection = http.client.HTTPConnection(urlsplit(server.url).netloc, timeout=15)
    try:
        connection.request(
            method,
            f"{path}?{raw_query}" if raw_query else path,
            body=body if method in ("POST", "PATCH", "PUT") else None,
            headers={"Authorization": "Bearer user-a", **extra},
        )
        return connection.getresponse().status
    finally:
        connection.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_clients_leaving_at_every_point_of_a_run_leave_the_server_working(
    backend: str, tmp_path: Path
) -> None:
    """The client disconnects after 0, 1, 2, ... chunks of a run that stops for approval (at the
    approval chunk itself too); afterwards every storage-backed route still answers and a new
    run can be approved."""
    with secured_server(backend, tmp_path) as server:
        total = len(read_run(server, "t-full", stop_after=None))
        assert total > 5
        for stop_after in range(total):
            read_run(server, f"t-cut-{stop_after}", stop_after=stop_after)
        assert server.a.get("/api/memory/threads", params={"resourceId": "user-a"}).status_code == 200
        for stop_after in range(total):
            thread = server.a.get(f"/api/memory/threads/t-cut-{stop_after}")
            assert thread.status_code in (200, 404), thread.text
        chunks = read_run(server, "t-after", stop_after=None)
        approval = next(c for c in chunks if c["type"] == "tool-call-approval")
        body = {"runId": approval["runId"], "toolCallId": approval["payload"]["toolCallId"]}
        approved = server.a.post("/api/agents/assistant/approve-tool-call", json=body)
        assert approved.status_code == 200 and '"tool-result"' in approved.text


def read_run(server: Secured, thread: str, stop_after: int | None) -> list[dict[str, Any]]:
    """Stream a run that stops for approval; leave after ``stop_after`` chunks (``None``: all)."""
    body = {"messages": "delete it", "memory": {"thread": thread}}
    chunks: list[dict[str, Any]] = []
    with server.a.stream("POST", "/api/agents/assistant/stream", json=body) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            if stop_after is not None and len(chunks) >= stop_after:
                break
            chunks.append(json.loads(line[len("data: ") :]))
    return chunks


NEW_FIELD_BODIES: list[dict[str, Any]] = [
    {"messages": "hi", "memory": {"thread": "t-h", "options": {"workingMemory": {"scope": "x"}}}},
    {"messages": "hi", "memory": {"thread": "t-h", "options": {"workingMemory": {"template": 5}}}},
    {"messages": "hi", "memory": {"thread": {"id": "t-h", "title": 5, "metadata": [1]}}},
    {
        "threadId": "t-h",
        "message": {"contents": [5], "metadata": []},
        "ifIdle": {"streamOptions": {"memory": {"options": {"workingMemory": {"template": 5}}}}},
    },
    {
        "threadId": "t-h",
        "toolCallId": "c",
        "approved": True,
        "messages": [[]],
        "streamOptions": {"maxSteps": 1e308},
    },
    {"workingMemory": 5, "memoryConfig": {"workingMemory": {"scope": 5}, "lastMessages": -1}},
    {"title": ["x"], "metadata": {"a": {"b": []}}, "threadId": "t-h", "resourceId": "user-a"},
    {"threadId": "t-h", "runId": "r", "messages": [{"id": "u", "role": "user", "content": 5}], "state": 5},
]
"""Wrong values for the fields the routes added after issue 10 read (working memory, memory
options, thread titles and metadata, thread signals, AG-UI input)."""


@pytest.mark.parametrize("backend", BACKENDS)
def test_wrong_new_fields_are_4xx_on_every_route(backend: str, tmp_path: Path) -> None:
    """Each body of :data:`NEW_FIELD_BODIES` to every POST/PATCH route, with the path's ids an
    agent with working memory and a thread: never a 5xx."""
    with secured_server(backend, tmp_path) as server:
        routes = [(m, p) for m, p in server.routes("{id}") if m in ("POST", "PATCH")]
        for method, template in routes:
            path = template.replace("{id}", "notes", 1).replace("{id}", "t-h")
            for body in NEW_FIELD_BODIES:
                status = send(server, method, path, json.dumps(body).encode(), {"agentId": "notes"}, {})
                by_design = status == 501 and path.removeprefix("/api") in UNSUPPORTED
                assert status < 500 or by_design, (method, path, body, status)
        assert server.a.get("/api/agents").status_code == 200
