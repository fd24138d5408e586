"""The MCP client against real MCP servers (official SDK) over stdio and streamable HTTP."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
from collections.abc import Callable
from typing import Any

import httpx2 as httpx
import mcp

from runstream import AbortController, Agent
from runstream.chunks import AnyChunk
from runstream.errors import RunstreamError
from runstream.mcp import HttpServer, MCPClient, MCPConnectionError, StdioServer
from runstream.mcp.client import _known_closed
from runstream.memory import Memory
from runstream.runtime import Runstream
from runstream.storage import InMemoryStorage
from runstream.tasks.manager import BackgroundTaskManager
from runstream.testing import ScriptedModel
from tests.mcp.conftest import SERVER, start_http_server, stdio_command

USAGE = {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2}


def call(name: str, args: str, call_id: str = "c1") -> list[dict[str, Any]]:
    return [
        {"type": "tool-call", "toolCallId": call_id, "toolName": name, "input": args},
        {"type": "finish", "finishReason": "tool-calls", "usage": USAGE},
    ]


def say(text: str) -> list[dict[str, Any]]:
    return [
        {"type": "text-start", "id": "t"},
        {"type": "text-delta", "id": "t", "delta": text},
        {"type": "text-end", "id": "t"},
        {"type": "finish", "finishReason": "stop", "usage": USAGE},
    ]


def stdio_client(**options: Any) -> MCPClient:
    command, args = stdio_command()
    return MCPClient({"tests": StdioServer(command, args)}, **options)


async def run_tool(client: MCPClient, name: str, args: str) -> list[AnyChunk]:
    agent = Agent("a", model=ScriptedModel(calls=[call(name, args), say("ok")]), toolsets=[client])
    out = await agent.stream("go")
    return [chunk async for chunk in out.full_stream]


def only(chunks: list[AnyChunk], kind: str) -> Any:
    (chunk,) = [c for c in chunks if c.type == kind]
    return chunk.payload


async def test_tools_are_listed_and_converted() -> None:
    async with stdio_client() as client:
        tools = client.tools()
        assert {"tests_add", "tests_shout", "tests_count_to", "tests_fail"} <= set(tools)
        add = tools["tests_add"]
        assert add.description == "Add two integers."
        assert add.input_schema["properties"]["a"]["type"] == "integer"
        assert add.input_schema["required"] == ["a", "b"]
        spec = add.spec()
        assert spec["name"] == "tests_add" and spec["inputSchema"] == add.input_schema


async def test_structured_and_text_results_and_the_model_sees_them() -> None:
    async with stdio_client() as client:
        added = await run_tool(client, "tests_add", '{"a": 2, "b": 5}')
        assert only(added, "tool-result")["result"] == {"result": 7}
        shouted = await run_tool(client, "tests_shout", '{"text": "hi"}')
        assert only(shouted, "tool-result")["result"] == {"result": "HI"}


async def test_text_only_result_is_a_string() -> None:
    from runstream.mcp.convert import result_value

    text = mcp.types.TextContent(type="text", text="plain")
    assert result_value(mcp.types.CallToolResult(content=[text])) == "plain"


async def test_a_failing_tool_is_a_tool_error() -> None:
    async with stdio_client() as client:
        chunks = await run_tool(client, "tests_fail", '{"reason": "disk full"}')
        error = only(chunks, "tool-error")
        assert error["toolName"] == "tests_fail"
        assert "disk full" in str(error["error"])


async def test_invalid_arguments_are_rejected_before_the_call() -> None:
    async with stdio_client() as client:
        chunks = await run_tool(client, "tests_add", '{"a": "two"}')
        result = only(chunks, "tool-result")["result"]
        assert result["error"] is True and "Tool input validation failed for tests_add" in result["message"]


async def test_progress_notifications_become_tool_output() -> None:
    async with stdio_client() as client:
        chunks = await run_tool(client, "tests_count_to", '{"n": 3}')
        outputs = [c.payload["output"] for c in chunks if c.type == "tool-output"]
        assert [(o["progress"], o["total"], o["message"]) for o in outputs] == [
            (1, 3, "counted 1"),
            (2, 3, "counted 2"),
            (3, 3, "counted 3"),
        ]
        assert all(c.payload["toolCallId"] == "c1" for c in chunks if c.type == "tool-output")
        assert only(chunks, "tool-result")["result"] == {"result": "counted to 3"}


async def test_abort_cancels_the_call_on_the_server() -> None:
    async with stdio_client() as client:
        controller = AbortController()
        agent = Agent(
            "a", model=ScriptedModel(calls=[call("tests_wait_for_cancel", "{}")]), toolsets=[client]
        )
        out = await agent.stream("go", abort_signal=controller.signal)
        kinds = []
        async for chunk in out.full_stream:
            kinds.append(chunk.type)
            if chunk.type == "tool-output":  # the call reached the server
                controller.abort()
        assert "abort" in kinds
        # The server saw the cancellation: its own count says so (asked over the same connection).
        count = await run_tool(client, "tests_cancelled", "{}")
        assert only(count, "tool-result")["result"] == {"result": 1}


async def test_a_crashed_server_is_reconnected() -> None:
    async with stdio_client() as client:
        first = only(await run_tool(client, "tests_pid", "{}"), "tool-result")["result"]["result"]
        crashed = await run_tool(client, "tests_crash", "{}")
        assert "connection" in str(only(crashed, "tool-error")["error"]).lower()
        second = only(await run_tool(client, "tests_pid", "{}"), "tool-result")["result"]["result"]
        assert second != first
        assert client.connection("tests").connections == 2


async def test_tool_list_changes_are_picked_up() -> None:
    async with stdio_client() as client:
        changed = asyncio.Event()
        client.on_tools_changed(lambda tools: changed.set() if "tests_multiply" in tools else None)
        assert "tests_multiply" not in client.tools()
        await run_tool(client, "tests_add_multiply", "{}")
        await changed.wait()
        chunks = await run_tool(client, "tests_multiply", '{"a": 6, "b": 7}')
        assert only(chunks, "tool-result")["result"] == {"result": 42}


async def start_failure(name: str, spec: StdioServer | HttpServer) -> MCPConnectionError:
    """The error ``start()`` raises for a server that cannot be reached."""
    client = MCPClient({name: spec}, max_reconnects=0)
    try:
        await client.start()
    except MCPConnectionError as exc:
        return exc
    else:
        raise AssertionError("start() should have failed")
    finally:
        await client.close()


async def test_an_unreachable_server_fails_start() -> None:
    exc = await start_failure("nowhere", StdioServer("/nonexistent/mcp-server"))
    assert isinstance(exc, RunstreamError) and isinstance(exc, ConnectionError)
    assert "MCP server 'nowhere' (/nonexistent/mcp-server) is unreachable: FileNotFoundError" in str(exc)
    assert isinstance(exc.__cause__, FileNotFoundError)


async def test_a_server_process_that_exits_names_the_cause_not_a_task_group() -> None:
    """The SDK's anyio task groups wrap the transport's failure in nested exception groups; the
    error shows the failure itself (here: the process ended, as ``python missing.py`` does)."""
    exc = await start_failure("gone", StdioServer(sys.executable, ["/nonexistent/server.py"]))
    message = str(exc)
    assert "TaskGroup" not in message and "sub-exception" not in message
    assert f"MCP server 'gone' ({sys.executable} /nonexistent/server.py) is unreachable" in message
    assert "MCPError: Connection closed (the server process exited" in message
    assert isinstance(exc.__cause__, mcp.MCPError)


async def test_an_http_server_that_refuses_names_the_connect_error() -> None:
    with socket.socket() as bound:  # bound, not listening: connections to it are refused
        bound.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{bound.getsockname()[1]}/mcp"
        exc = await start_failure("web", HttpServer(url))
    assert (
        str(exc) == f"MCP server 'web' ({url}) is unreachable: ConnectError: All connection attempts failed"
    )
    assert isinstance(exc.__cause__, httpx.ConnectError)


async def test_streamable_http_server(http_server_url: str) -> None:
    async with MCPClient({"web": HttpServer(http_server_url)}) as client:
        assert "web_add" in client.tools()
        chunks = await run_tool(client, "web_count_to", '{"n": 2}')
        assert [c.payload["output"]["progress"] for c in chunks if c.type == "tool-output"] == [1, 2]
        assert only(chunks, "tool-result")["result"] == {"result": "counted to 2"}
        failed = await run_tool(client, "web_fail", '{"reason": "nope"}')
        assert "nope" in str(only(failed, "tool-error")["error"])


async def test_runtime_starts_and_closes_the_servers() -> None:
    client = stdio_client()
    agent = Agent("a", model=ScriptedModel(calls=[say("hi")]), toolsets=[client])
    runtime = Runstream(agents=[agent], background_tasks={"enabled": True})
    async with runtime:
        assert "tests_add" in client.tools()
        assert isinstance(runtime.task_manager, BackgroundTaskManager)
        assert ("a", "tests_add") in runtime.task_manager.tasks.tools
    assert client.connection("tests")._client is None


async def test_background_mcp_tool_in_an_until_idle_stream(http_server_url: str) -> None:
    client = MCPClient({"web": HttpServer(http_server_url)}, background={"web_count_after_release": True})
    model = ScriptedModel(
        calls=[call("web_count_after_release", '{"n": 2}'), say("Started."), say("Counted.")]
    )
    agent = Agent("bg", model=model, toolsets=[client], memory=Memory())
    runtime = Runstream(agents=[agent], storage=InMemoryStorage(), background_tasks={"enabled": True})
    chunks: list[AnyChunk] = []
    async with runtime, mcp.Client(http_server_url) as releaser:
        out = await agent.stream("count", memory={"thread": "t", "resource": "u"}, until_idle=True)
        async for chunk in out.full_stream:
            chunks.append(chunk)
            if chunk.type == "finish" and len([c for c in chunks if c.type == "finish"]) == 1:
                await releaser.call_tool("release", {})
    kinds = [c.type for c in chunks]
    assert kinds.count("start") == 2 and kinds.count("finish") == 2
    progress = [
        c.payload["payload"]["payload"]["output"] for c in chunks if c.type == "background-task-output"
    ]
    assert [(p["progress"], p["message"]) for p in progress] == [
        (0, "waiting"),
        (1, "counted 1"),
        (2, "counted 2"),
    ]
    completed = only(chunks, "background-task-completed")
    assert completed["result"] == {"counted": 2}
    assert kinds.index("background-task-completed") < kinds.index("start", 1)
    assert await out.text == "Started."


async def test_a_legacy_connection_picks_up_tool_list_changes_too() -> None:
    """Before 2026-07-28 a server announces changes unasked (``notifications/tools/list_changed``)."""
    async with stdio_client(protocol="legacy") as client:
        assert client.connection("tests")._client is not None
        assert client.connection("tests")._client.protocol_version < "2026"
        changed = asyncio.Event()
        client.on_tools_changed(lambda tools: changed.set() if "tests_multiply" in tools else None)
        await run_tool(client, "tests_add_multiply", "{}")
        await changed.wait()
        chunks = await run_tool(client, "tests_multiply", '{"a": 3, "b": 5}')
        assert only(chunks, "tool-result")["result"] == {"result": 15}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _run_until_output(client: MCPClient, tool: str, on_output: Callable[[], None]) -> list[AnyChunk]:
    """Run ``tool`` (one that reports progress, then waits) and call ``on_output`` once the call
    is in flight on the server."""
    agent = Agent("a", model=ScriptedModel(calls=[call(tool, "{}"), say("ok")]), toolsets=[client])
    chunks = []
    async for chunk in (await agent.stream("go")).full_stream:
        chunks.append(chunk)
        if chunk.type == "tool-output":
            on_output()
    return chunks


async def test_a_server_killed_mid_call_fails_the_call_clearly_and_is_reconnected() -> None:
    async with stdio_client() as client:
        pid = only(await run_tool(client, "tests_pid", "{}"), "tool-result")["result"]["result"]
        chunks = await _run_until_output(
            client, "tests_wait_for_cancel", lambda: os.kill(pid, signal.SIGKILL)
        )
        error = str(only(chunks, "tool-error")["error"])
        assert "the connection was lost while 'wait_for_cancel' was running" in error
        assert "may or may not have run" in error
        assert chunks[-1].type == "finish"  # the model saw the error and answered
        again = only(await run_tool(client, "tests_pid", "{}"), "tool-result")["result"]["result"]
        assert again != pid and client.connection("tests").connections == 2


async def test_a_server_that_died_while_idle_is_reopened_before_the_call() -> None:
    """Nothing was sent to a server the client already saw exit: the call goes to a new one."""
    async with stdio_client() as client:
        pid = only(await run_tool(client, "tests_pid", "{}"), "tool-result")["result"]["result"]
        os.kill(pid, signal.SIGKILL)
        connection = client.connection("tests")
        # Until the SDK has read the end of the server's output (it has no event to wait on).
        async with asyncio.timeout(10):
            while connection._client is not None and not _known_closed(connection._client):  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        again = only(await run_tool(client, "tests_pid", "{}"), "tool-result")["result"]["result"]
        assert again != pid and connection.connections == 2


async def test_a_restarted_http_server_gets_the_call_again() -> None:
    """A legacy (session) connection to a server that restarted: the server refuses the old
    session before running anything, so the client reconnects and sends the call again (as
    Mastra's MCPClient does); killed mid-call, the call is a clear tool error."""
    port = _free_port()
    process, base = start_http_server(str(SERVER), "http", str(port))
    try:
        async with MCPClient({"web": HttpServer(f"{base}/mcp")}, protocol="legacy") as client:
            first = only(await run_tool(client, "web_pid", "{}"), "tool-result")["result"]["result"]
            chunks = await _run_until_output(client, "web_wait_for_cancel", process.kill)
            assert "the connection was lost while 'wait_for_cancel' was running" in str(
                only(chunks, "tool-error")["error"]
            )
            process.wait(10)
            process, _ = start_http_server(str(SERVER), "http", str(port))
            second = only(await run_tool(client, "web_pid", "{}"), "tool-result")["result"]["result"]
            third = only(await run_tool(client, "web_pid", "{}"), "tool-result")["result"]["result"]
            assert first != second == third
            assert client.connection("web").connections == 2
    finally:
        process.kill()
        process.wait(10)
