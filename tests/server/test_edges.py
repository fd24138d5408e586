"""Ids at the edge and tool errors to callers (issue 25, findings 7, 8, 10): one id grammar
(printable, at most 256 characters) for every id a request names; another tenant's workflow run
id answers like one the caller cannot see; a tool's exception text reaches HTTP callers only when
the tool raises :class:`runstream.ToolError`. On SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any
from urllib.parse import quote

import httpx2 as httpx
import pytest

from runstream import Agent, ToolError, tool
from runstream.runtime import Runstream
from runstream.server import create_app
from runstream.server.auth import open_access
from runstream.server.sse import data_frame
from runstream.testing import ScriptedModel
from tests.server.agents import call_tool, say
from tests.server.security_kit import Secured, secured, sse_chunks

__all__ = ["secured"]  # the fixture, re-exported for pytest

STREAM = "/api/agents/assistant/stream"


@pytest.mark.parametrize("bad", ["a\r\nid: forged", "a\nb", "tab\there", "x" * 257, "bell\x07"])
def test_ids_with_control_characters_or_too_long_are_refused(secured: Secured, bad: str) -> None:
    s = secured
    assert s.a.post(STREAM, json={"messages": "hi", "runId": bad}).status_code == 400
    assert s.a.post(STREAM, json={"messages": "hi", "memory": {"thread": bad}}).status_code == 400
    assert s.a.get(f"/api/runs/{quote(bad, safe='')}/stream").status_code == 400
    assert s.a.post("/api/workflows/gated/create-run", params={"runId": bad}, json={}).status_code == 400
    assert s.a.get("/api/memory/threads", params={"resourceId": bad}).status_code == 400


def test_a_path_id_with_a_line_break_is_refused(secured: Secured) -> None:
    assert secured.a.get("/api/runs/a%0D%0Aid:%20x/stream").status_code == 400
    assert secured.a.get("/api/memory/threads/" + "t" * 300).status_code == 400


def test_sse_ids_cannot_break_the_frame() -> None:
    frame = data_frame("{}", "run\r\nevent: forged:3")
    assert frame.count(b"\n") == 3 and b"event: forged" not in frame.split(b"\n")[1]


def test_another_tenants_workflow_run_id_is_not_revealed(secured: Secured) -> None:
    """Run ids are per tenant: B's create-run of A's id makes B's own run, as for an unused id
    (it was a 404, where an unused id is a 200: that told B the id exists)."""
    s = secured
    run_id = s.a.post("/api/workflows/approval/create-run", json={}).json()["runId"]
    for chosen in (run_id, str(uuid.uuid4())):
        made = s.b.post("/api/workflows/gated/create-run", params={"runId": chosen}, json={})
        assert (made.status_code, made.json()) == (200, {"runId": chosen})
    assert s.a.get(f"/api/workflows/gated/runs/{run_id}").status_code == 404  # A's is elsewhere
    assert s.a.get(f"/api/workflows/approval/runs/{run_id}").json()["resourceId"] == "user-a"
    mine = s.a.post("/api/workflows/gated/create-run", params={"runId": run_id}, json={})
    assert mine.status_code == 409  # the owner is told why


def test_ids_the_server_makes_are_random(secured: Secured) -> None:
    """A thread, workflow run or agent run the caller does not name gets a random (version 4)
    UUID: nothing in one id tells another caller the next one."""
    s = secured
    made = [
        s.a.post("/api/memory/threads", json={"resourceId": "user-a"}).json()["id"],
        s.a.post("/api/memory/threads", json={"resourceId": "user-a"}).json()["id"],
        s.a.post("/api/workflows/gated/create-run", json={}).json()["runId"],
        s.a.post("/api/workflows/gated/create-run", json={}).json()["runId"],
        *{chunk["runId"] for chunk in sse_chunks(s.a.post(STREAM, json={"messages": "hi"}))},
    ]
    assert len(made) == len(set(made)) == 5
    assert all(uuid.UUID(made_id).version == 4 for made_id in made), made


@tool
async def leaky(path: str) -> str:
    """Fails with a secret in its message."""
    raise RuntimeError(f"password=hunter2 while reading {path}")


@tool
async def quota(path: str) -> str:
    """Fails with a message meant for the caller."""
    raise ToolError("quota exceeded, try tomorrow")


def failing_agent() -> Agent:
    model = ScriptedModel(
        calls=[
            call_tool("leaky", {"path": "/etc/app.env"}),
            say("sorry"),
            call_tool("quota", {"path": "x"}),
            say("ok"),
        ]
    )
    return Agent("failing", model=model, tools=[leaky, quota])


def test_a_tools_exception_text_stays_in_the_log(caplog: pytest.LogCaptureFixture) -> None:
    app = create_app(Runstream(agents=[failing_agent()]), auth=open_access, heartbeat_s=None)

    async def run() -> tuple[list[httpx.Response], list[dict[str, Any]], list[dict[str, Any]]]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            direct = [
                await client.post(f"/api/tools/{name}/execute", json={"data": {"path": "/etc/app.env"}})
                for name in ("leaky", "quota")
            ]
            leaked = sse_chunks(await client.post("/api/agents/failing/stream", json={"messages": "go"}))
            public = sse_chunks(await client.post("/api/agents/failing/stream", json={"messages": "go"}))
            return direct, leaked, public

    with caplog.at_level(logging.WARNING, logger="runstream.server"):
        (secret, told), leaked, public = asyncio.run(run())
    assert secret.status_code == 422 and "hunter2" not in secret.text and "leaky" in secret.text
    assert told.status_code == 422 and "quota exceeded, try tomorrow" in told.text
    [error] = [c for c in leaked if c["type"] == "tool-error"]
    assert error["payload"]["error"] == {"message": "Tool leaky failed", "name": "Error"}
    assert "hunter2" not in str(leaked)
    [error] = [c for c in public if c["type"] == "tool-error"]
    assert error["payload"]["error"]["message"] == "quota exceeded, try tomorrow"
    assert "password=hunter2" in caplog.text  # the log keeps the whole error


def test_the_in_process_chunk_keeps_the_error() -> None:
    async def run() -> list[Any]:
        out = await failing_agent().stream("go")
        return [chunk async for chunk in out.full_stream if chunk.type == "tool-error"]

    [chunk] = asyncio.run(run())
    assert "hunter2" in str(chunk.payload["error"])  # Mastra's shape, in process
