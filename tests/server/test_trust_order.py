"""The order of trust for a run's options (issue 25, findings 1, 4, 5, 6): what an agent's author
set can be tightened by a request, never loosened, at every entry point that runs the agent or
its tools for someone else. One table walks the entry points with the same gated agent."""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2 as httpx
import mcp
import pytest
from starlette.requests import Request

from runstream import Agent, tool
from runstream.errors import ConfigurationError
from runstream.mcp.server import build_server
from runstream.memory import Memory
from runstream.models.base import ModelRequest, ModelSettings, ModelStream
from runstream.runtime import Runstream
from runstream.server import create_app
from runstream.server.auth import Principal
from runstream.testing import ScriptedModel
from runstream.trust import RequestPolicy
from runstream.workflows import Workflow
from runstream.workflows.agent_step import agent_step
from tests.server.agents import call_tool, say
from tests.server.conftest import BACKENDS, backend_storage, serve
from tests.server.security_kit import sse_chunks

WIPED: list[str] = []
SEEN: list[ModelRequest] = []


class GatedModel:
    """``wipe`` calls the ``wipe`` tool, ``loop`` calls ``echo`` in every step; records requests."""

    provider = "test"
    model_id = "gated-model"
    specification_version = "v2"

    async def stream(self, request: ModelRequest) -> ModelStream:
        SEEN.append(request)
        last = request.prompt[-1]
        text = "".join(p.get("text", "") for p in last["content"] if isinstance(p, dict))
        if last["role"] == "user" and text.startswith("wipe"):
            calls: Any = call_tool("wipe", {"path": "/data"})
        elif text.startswith("loop") or (last["role"] == "tool" and _looping(request)):
            calls = call_tool("echo", {"text": "again"})
        else:
            calls = say("done")
        return await ScriptedModel(calls=[calls]).stream(request)


def _looping(request: ModelRequest) -> bool:
    users = [m for m in request.prompt if m["role"] == "user"]
    return bool(users) and "loop" in json.dumps(users[-1]["content"])


@tool
async def wipe(path: str) -> dict[str, Any]:
    """Wipe a path (its agent's author requires approval for every call)."""
    WIPED.append(path)
    return {"wiped": path}


@tool
async def echo(text: str) -> str:
    """Echo."""
    return text


def gated_agent(agent_id: str = "guarded", **extra: Any) -> Agent:
    return Agent(
        agent_id,
        instructions=lambda rc: f"secret for {rc.get('tenant', 'nobody')}",
        model=GatedModel(),
        tools=[wipe, echo],
        memory=Memory(),
        default_options={
            "require_tool_approval": True,
            "max_steps": 3,
            "model_settings": ModelSettings(max_output_tokens=100),
        },
        **extra,
    )


PRINCIPALS = {
    "a": Principal("a", "tenant-a", context={"tenant": "tenant-a"}),
    "b": Principal("b", "tenant-b", context={"tenant": "tenant-b"}),
}


async def by_token(request: Request) -> Principal | None:
    return PRINCIPALS.get(request.headers.get("authorization", "").removeprefix("Bearer "))


@pytest.fixture(params=BACKENDS)
def client(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[httpx.Client]:
    """Tenant A's client of a server on SQLite or PostgreSQL (issue 25: every finding on both)."""
    with backend_storage(request.param, tmp_path) as storage:
        runtime = Runstream(agents=[gated_agent(), gated_agent("durable", durable=True)], storage=storage)
        app = create_app(runtime, auth=by_token, heartbeat_s=None)
        with (
            serve(app) as url,
            httpx.Client(base_url=url, headers={"Authorization": "Bearer a"}, timeout=20) as c,
        ):
            yield c


def thread() -> dict[str, Any]:
    return {"thread": f"t-{uuid.uuid4().hex[:8]}"}


def ui_message(text: str) -> dict[str, Any]:
    return {"id": uuid.uuid4().hex, "role": "user", "parts": [{"type": "text", "text": text}]}


def agui(text: str) -> dict[str, Any]:
    return {
        "threadId": f"t-{uuid.uuid4().hex[:8]}",
        "runId": uuid.uuid4().hex,
        "messages": [{"id": "m1", "role": "user", "content": text}],
        "tools": [],
        "context": [],
        "state": {},
        "forwardedProps": {},
    }


LOOSEN = {"requireToolApproval": False}


def post(path: str, body: Callable[[], dict[str, Any]]) -> Callable[[httpx.Client], str]:
    def run(client: httpx.Client) -> str:
        response = client.post(path, json=body())
        assert response.status_code == 200, response.text
        return response.text

    return run


def send_message(client: httpx.Client) -> str:
    """A thread message starts a detached run; its events are read back from the replay log."""
    body = {
        "threadId": f"t-{uuid.uuid4().hex[:8]}",
        "message": {"contents": "wipe"},
        "ifIdle": {"streamOptions": LOOSEN},
    }
    accepted = client.post("/api/agents/guarded/send-message", json=body)
    assert accepted.status_code == 200, accepted.text
    return client.get(f"/api/runs/{accepted.json()['runId']}/stream").text


ENTRY_POINTS: dict[str, Callable[[httpx.Client], str]] = {
    "stream": post("/api/agents/guarded/stream", lambda: {"messages": "wipe", **LOOSEN}),
    "generate": post("/api/agents/guarded/generate", lambda: {"messages": "wipe", **LOOSEN}),
    "stream with memory": post(
        "/api/agents/guarded/stream", lambda: {"messages": "wipe", "memory": thread(), **LOOSEN}
    ),
    "resumable stream": post(
        "/api/agents/guarded/stream?resumable=true", lambda: {"messages": "wipe", **LOOSEN}
    ),
    "stream-until-idle": post(
        "/api/agents/guarded/stream-until-idle", lambda: {"messages": "wipe", "memory": thread(), **LOOSEN}
    ),
    "durable agent": post("/api/agents/durable/stream", lambda: {"messages": "wipe", **LOOSEN}),
    "thread send-message": send_message,
    "ai-sdk chat": post("/chat/guarded", lambda: {"messages": [ui_message("wipe")], **LOOSEN}),
    "ag-ui": post("/ag-ui/guarded", lambda: agui("wipe")),
}


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
def test_no_entry_point_runs_a_tool_its_author_gated(client: httpx.Client, entry: str) -> None:
    WIPED.clear()
    text = ENTRY_POINTS[entry](client)
    assert "wipe" in text  # the model called it ...
    assert WIPED == []  # ... and it waits for approval


def test_direct_execution_of_a_gated_tool_is_refused(client: httpx.Client) -> None:
    WIPED.clear()
    for path in ("/api/tools/wipe/execute", "/api/agents/guarded/tools/wipe/execute"):
        refused = client.post(path, json={"data": {"path": "/data"}})
        assert refused.status_code == 403 and "approval" in refused.text
    assert WIPED == []
    assert (
        client.post("/api/agents/guarded/tools/echo/execute", json={"data": {"text": "x"}}).status_code == 403
    )


def test_a_continuation_cannot_loosen_the_run(client: httpx.Client) -> None:
    WIPED.clear()
    chunks = sse_chunks(client.post("/api/agents/guarded/stream", json={"messages": "wipe"}))
    approval = next(c for c in chunks if c["type"] == "tool-call-approval")
    body = {"runId": approval["runId"], "toolCallId": approval["payload"]["toolCallId"]}
    outside = client.post(
        "/api/agents/guarded/approve-tool-call",
        json={**body, "modelSettings": {"headers": {"OpenAI-Project": "p"}}},
    )
    assert outside.status_code == 400 and "modelSettings.headers.OpenAI-Project" in outside.text
    approved = sse_chunks(
        client.post("/api/agents/guarded/approve-tool-call", json={**body, "maxSteps": 1000})
    )
    assert WIPED == ["/data"] and any(c["type"] == "tool-result" for c in approved)


def test_max_steps_and_output_tokens_are_at_most_the_authors(client: httpx.Client) -> None:
    SEEN.clear()
    body = {"messages": "loop", "maxSteps": 1000, "modelSettings": {"maxOutputTokens": 1_000_000}}
    response = client.post("/api/agents/guarded/generate", json={**body, "requireToolApproval": False})
    assert response.status_code == 200, response.text
    assert len(SEEN) <= 3  # the author's max_steps
    assert {r.settings.max_output_tokens for r in SEEN} == {100}
    SEEN.clear()
    lower = client.post(
        "/api/agents/guarded/generate", json={"messages": "hi", "modelSettings": {"maxOutputTokens": 7}}
    )
    assert lower.status_code == 200 and SEEN[-1].settings.max_output_tokens == 7  # tightening is fine


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"providerOptions": {"openai": {"model": "gpt-5-pro"}}}, "providerOptions.openai.model"),
        (
            {"modelSettings": {"headers": {"OpenAI-Organization": "org-x"}}},
            "modelSettings.headers.OpenAI-Organization",
        ),
        ({"modelSettings": {"headers": {"openai-project": "p"}}}, "modelSettings.headers.openai-project"),
        ({"activeTools": ["nope"]}, "nope"),
        ({"requestContext": {"tenant": "tenant-b"}}, None),
        ({"requestContext": {"user": "alice"}}, "requestContext.user"),
    ],
)
def test_what_only_the_server_chooses_is_refused(
    client: httpx.Client, settings: dict[str, Any], field: str | None
) -> None:
    SEEN.clear()
    response = client.post("/api/agents/guarded/generate", json={"messages": "hi", **settings})
    if field is None:  # a reserved key: the auth hook's value wins
        assert response.status_code == 200
        assert SEEN[-1].prompt[0]["content"] == "secret for tenant-a"
        return
    assert response.status_code == 400 and field in response.text, response.text
    assert SEEN == []


def test_an_allowlist_lets_the_author_open_a_setting() -> None:
    agent = gated_agent()
    agent.request_policy = RequestPolicy(
        provider_options={"openai": {"reasoningEffort"}}, headers={"x-trace"}, request_context={"locale"}
    )
    from runstream.trust import request_options

    options = asyncio.run(
        request_options(
            agent,
            {
                "model_settings": ModelSettings(
                    provider_options={"openai": {"reasoningEffort": "low"}}, headers={"X-Trace": "1"}
                ),
                "request_context": {"locale": "fr", "tenant": "forged"},
            },
            reserved={"tenant": "tenant-a"},
        )
    )
    assert options["model_settings"].provider_options == {"openai": {"reasoningEffort": "low"}}
    assert options["model_settings"].max_output_tokens == 100  # the author's, kept
    assert options["request_context"] == {"locale": "fr", "tenant": "tenant-a"}


def test_agent_details_resolve_only_the_callers_own_context(client: httpx.Client) -> None:
    forged = base64.b64encode(json.dumps({"tenant": "tenant-b"}).encode()).decode()
    details = client.get("/api/agents/guarded", params={"requestContext": forged})
    assert details.status_code == 200 and details.json()["instructions"] == "secret for tenant-a"
    listed = client.get("/api/agents", params={"requestContext": forged})
    assert "tenant-b" not in listed.text
    other = base64.b64encode(json.dumps({"user": "alice"}).encode()).decode()
    refused = client.get("/api/agents/guarded", params={"requestContext": other})
    assert refused.status_code == 400 and "requestContext.user" in refused.text


def test_a_workflow_agent_step_keeps_the_authors_approval() -> None:
    WIPED.clear()
    flow = Workflow("wf").then(agent_step(gated_agent())).commit()

    async def run() -> None:
        runtime = Runstream(agents=[], workflows=[flow])
        await runtime.start()
        try:
            out = await (await flow.create_run()).stream(input_data={"prompt": "wipe"})
            await out.consume()
        finally:
            await runtime.close()

    asyncio.run(run())
    assert WIPED == []


def test_mcp_does_not_serve_a_gated_tool_and_asking_reports_the_wait() -> None:
    WIPED.clear()
    runtime = Runstream(agents=[gated_agent()])
    with pytest.raises(ConfigurationError, match="approval"):
        build_server(runtime, tools=[runtime.agents["guarded"].tools["wipe"]])
    with pytest.raises(ConfigurationError, match="approval"):
        build_server(runtime, tools=[runtime.agents["guarded"].tools["echo"]])
    server = build_server(runtime)

    async def ask() -> tuple[mcp.types.ListToolsResult, mcp.types.CallToolResult]:
        async with mcp.Client(server) as session:
            listed = await session.list_tools()
            return listed, await session.call_tool("ask_guarded", {"message": "wipe"})

    listed, result = asyncio.run(ask())
    assert "secret" not in json.dumps([t.model_dump() for t in listed.tools])  # instructions not exposed
    assert result.is_error and "approval" in str(result.content)
    assert WIPED == []
