"""A real MCP server for the tests, written with the official ``mcp`` SDK.

``python mcp_test_server.py stdio`` serves over stdio; ``python mcp_test_server.py http PORT``
serves streamable HTTP on 127.0.0.1:PORT/mcp.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("runstream-test-server")
cancelled_calls: list[str] = []
released = asyncio.Event()
saw_cancel = asyncio.Event()


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def shout(text: str) -> str:
    """Upper-case a text."""
    return text.upper()


@server.tool()
async def count_to(n: int, ctx: Context) -> str:
    """Count to n, reporting progress at each step."""
    for i in range(1, n + 1):
        await ctx.report_progress(i, n, f"counted {i}")
    return f"counted to {n}"


@server.tool()
def fail(reason: str) -> str:
    """Always fails with the given reason."""
    raise ToolError(reason)


@server.tool()
async def count_after_release(n: int, ctx: Context) -> dict[str, int]:
    """Waits for `release`, then counts to n reporting progress."""
    await ctx.report_progress(0, n, "waiting")
    await released.wait()
    for i in range(1, n + 1):
        await ctx.report_progress(i, n, f"counted {i}")
    return {"counted": n}


@server.tool()
def release() -> str:
    """Lets `count_after_release` go on."""
    released.set()
    return "released"


@server.tool()
async def wait_for_cancel(ctx: Context) -> str:
    """Reports that it waits, then waits until the call is cancelled (`cancelled` reports it)."""
    await ctx.report_progress(0, None, "waiting")
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        cancelled_calls.append(ctx.request_id)
        saw_cancel.set()
        raise
    return "never"


@server.tool()
async def cancelled() -> int:
    """How many calls were cancelled: waits (up to 10 s) for the first."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(saw_cancel.wait(), 10)
    return len(cancelled_calls)


@server.tool()
def pid() -> int:
    """The server's process id."""
    return os.getpid()


@server.tool()
def crash() -> str:
    """Ends the server process at once."""
    os._exit(3)


@server.tool()
async def add_multiply(ctx: Context) -> str:
    """Adds a `multiply` tool and announces the change."""

    def multiply(a: int, b: int) -> int:
        """Multiply two integers."""
        return a * b

    server.add_tool(multiply)
    if ctx.protocol_version is not None and ctx.protocol_version >= "2026":
        await ctx.notify_tools_changed()  # to subscriptions/listen streams
    else:
        await ctx.request_context.session.send_tool_list_changed()  # the handshake era's notification
    return "added"


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
