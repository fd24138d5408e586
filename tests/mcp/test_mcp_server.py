"""``runstream mcp``: a runtime's agents and chosen tools, called by the official MCP client."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Iterator

import httpx2
import mcp
import pytest
from mcp import StdioServerParameters

from runstream import Agent
from runstream.mcp import HttpServer, MCPClient, MCPConnectionError
from runstream.testing import ScriptedModel
from tests.mcp.conftest import ROOT, start_http_server

SERVE = ["-m", "runstream", "mcp", "examples.ecosystem:runtime", "--tool", "calc.divide"]
TOKEN = "mcp-test-token"


def stdio_client() -> mcp.Client:
    """A client that starts ``runstream mcp`` as its subprocess (entered in the test's own task:
    the SDK's scopes cannot cross tasks, as a fixture's setup and teardown would)."""
    return mcp.Client(StdioServerParameters(command=sys.executable, args=SERVE, cwd=str(ROOT)))


@pytest.fixture
def http_url() -> Iterator[str]:
    process, base = start_http_server(*SERVE, "--http", "--port", "0", env={"RUNSTREAM_API_TOKEN": TOKEN})
    try:
        yield f"{base}/mcp"
    finally:
        process.terminate()
        process.wait(10)


def text_of(result: mcp.types.CallToolResult) -> str:
    return "".join(block.text for block in result.content if isinstance(block, mcp.types.TextContent))


async def test_agents_and_chosen_tools_are_listed() -> None:
    async with stdio_client() as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools) == {"ask_calc", "divide"}
        ask = tools["ask_calc"]
        assert ask.input_schema["required"] == ["message"]
        assert "Divides numbers" in (ask.description or "")
        assert "You divide numbers." not in (ask.description or "")  # instructions are the author's
        assert tools["divide"].input_schema["properties"]["a"]["type"] == "number"


async def test_asking_an_agent_runs_it_and_reports_its_tool_calls() -> None:
    async with stdio_client() as client:
        notes: list[tuple[float, str | None]] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            notes.append((progress, message))

        result = await client.call_tool("ask_calc", {"message": "divide 6 3"}, progress_callback=on_progress)
        assert not result.is_error
        assert text_of(result) == "The result is 2.0."
        assert notes == [(1, "calling divide"), (2, "divide done")]
        echoed = await client.call_tool("ask_calc", {"message": "hello"})
        assert text_of(echoed) == "You said: hello"


async def test_tools_answer_and_fail_as_mcp_results() -> None:
    async with stdio_client() as client:
        quarter = await client.call_tool("divide", {"a": 1, "b": 4})
        assert not quarter.is_error and text_of(quarter) == "0.25"
        by_zero = await client.call_tool("divide", {"a": 1, "b": 0})
        assert by_zero.is_error and "division by zero" in text_of(by_zero)
        invalid = await client.call_tool("divide", {"a": "x"})
        assert invalid.is_error and "Tool input validation failed for divide" in text_of(invalid)
        missing = await client.call_tool("ask_calc", {})
        assert missing.is_error and "message" in text_of(missing)


async def test_streamable_http_with_the_runtime_token(http_url: str) -> None:
    refused = httpx2.post(http_url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert refused.status_code == 401
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"})
    from mcp.client.streamable_http import streamable_http_client

    async with mcp.Client(streamable_http_client(http_url, http_client=http)) as client:
        assert {t.name for t in (await client.list_tools()).tools} == {"ask_calc", "divide"}
        result = await client.call_tool("ask_calc", {"message": "divide 9 3"})
        assert text_of(result) == "The result is 3.0."


async def test_a_client_cancellation_aborts_the_agents_run() -> None:
    args = [*SERVE[:4], "--tool", "calc.was_aborted"]
    params = StdioServerParameters(command=sys.executable, args=args, cwd=str(ROOT))
    async with mcp.Client(params) as client:
        waiting = asyncio.Event()

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            if message and "waiting" in message:  # the pause tool runs
                waiting.set()

        call = asyncio.ensure_future(
            client.call_tool("ask_calc", {"message": "pause 60"}, progress_callback=on_progress)
        )
        await waiting.wait()
        call.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await call
        answer = await client.call_tool("was_aborted", {})
        assert text_of(answer) == "true"


async def test_runstreams_mcp_client_uses_runstreams_mcp_server_with_a_token(http_url: str) -> None:
    refused = MCPClient({"calc": HttpServer(http_url)}, max_reconnects=0)
    with pytest.raises(MCPConnectionError):
        await refused.start()
    await refused.close()
    remote = MCPClient({"calc": HttpServer(http_url, {"Authorization": f"Bearer {TOKEN}"})})
    model = ScriptedModel(
        calls=[
            [
                {
                    "type": "tool-call",
                    "toolCallId": "c1",
                    "toolName": "calc_ask_calc",
                    "input": '{"message": "divide 3 4"}',
                },
                {
                    "type": "finish",
                    "finishReason": "tool-calls",
                    "usage": {"inputTokens": 1, "outputTokens": 1},
                },
            ],
            [{"type": "finish", "finishReason": "stop", "usage": {"inputTokens": 1, "outputTokens": 1}}],
        ]
    )
    async with remote:
        out = await Agent("front", model=model, toolsets=[remote]).stream("ask calc")
        chunks = [chunk async for chunk in out.full_stream]
    (result,) = [c.payload["result"] for c in chunks if c.type == "tool-result"]
    assert result == "The result is 0.75."
    notes = [c.payload["output"]["message"] for c in chunks if c.type == "tool-output"]
    assert notes and notes == ["calling divide", "divide done"][: len(notes)]


async def test_a_client_cancellation_reaches_a_tool_as_its_abort_signal() -> None:
    args = [*SERVE[:4], "--no-agents", "--tool", "calc.pause", "--tool", "calc.was_aborted"]
    params = StdioServerParameters(command=sys.executable, args=args, cwd=str(ROOT))
    async with mcp.Client(params) as client:
        assert {t.name for t in (await client.list_tools()).tools} == {"pause", "was_aborted"}
        waiting = asyncio.Event()

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            waiting.set()

        call = asyncio.ensure_future(
            client.call_tool("pause", {"seconds": 60}, progress_callback=on_progress)
        )
        await waiting.wait()
        call.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await call
        assert text_of(await client.call_tool("was_aborted", {})) == "true"
