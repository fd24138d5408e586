"""``runstream mcp module:attr``: serve a runtime's agents and chosen tools to MCP clients.

``attr`` names a :class:`~runstream.Runstream` (or a function returning one). Over stdio by
default (what Claude Desktop and the MCP inspector start); ``--http`` serves streamable HTTP at
``http://HOST:PORT/mcp``, behind the same bearer token as ``runstream serve``
(``RUNSTREAM_API_TOKEN``) when it is set.
"""

from __future__ import annotations

import argparse

import anyio
import uvicorn
from mcp.server import Server
from mcp.server.stdio import stdio_server

from runstream._telemetry import setup_from_environment
from runstream.errors import ConfigurationError
from runstream.mcp.server import build_server
from runstream.runtime import Runstream
from runstream.server.auth import AuthMiddleware, default_auth
from runstream.server.cli import import_target
from runstream.tools import Tool


def load_runtime(target: str) -> Runstream:
    obj = import_target(target, "mcp")
    if callable(obj) and not isinstance(obj, Runstream):
        obj = obj()
    if not isinstance(obj, Runstream):
        raise SystemExit(f"runstream mcp: {target} is not a Runstream")
    return obj


def chosen_tools(runtime: Runstream, names: list[str]) -> list[Tool]:
    """``AGENT.TOOL`` names picked from the runtime's agents."""
    tools: list[Tool] = []
    for name in names:
        agent_id, _, tool_name = name.partition(".")
        agent = runtime.agents.get(agent_id)
        if agent is None or tool_name not in agent.tools:
            raise SystemExit(f"runstream mcp: no tool {name!r} (expected AGENT.TOOL)")
        tools.append(agent.tools[tool_name])
    return tools


def http_app(server: Server[None], host: str) -> AuthMiddleware:
    """The server's streamable HTTP app behind runstream's auth (bearer token when configured)."""
    app = server.streamable_http_app(host=host)
    return AuthMiddleware(app, default_auth(), frozenset())


async def _serve_stdio(server: Server[None]) -> None:
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def mcp_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="runstream mcp", description="Serve agents and tools over MCP.")
    parser.add_argument("target", help="module:attr naming a Runstream or a function returning one")
    parser.add_argument("--http", action="store_true", help="serve streamable HTTP instead of stdio")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=4112)
    parser.add_argument("--agent", action="append", help="expose only these agents (repeatable)")
    parser.add_argument("--no-agents", action="store_true", help="expose no agent, only --tool")
    parser.add_argument("--tool", action="append", default=[], help="also expose AGENT.TOOL (repeatable)")
    parser.add_argument("--name", default="runstream", help="the server name MCP clients see")
    args = parser.parse_args(argv)
    runtime = load_runtime(args.target)
    agents = [] if args.no_agents else args.agent
    try:
        server = build_server(runtime, agents=agents, tools=chosen_tools(runtime, args.tool), name=args.name)
    except ConfigurationError as exc:
        raise SystemExit(f"runstream mcp: {exc}") from None
    provider = setup_from_environment()  # OTLP export when OTEL_* asks for it
    try:
        if args.http:
            uvicorn.run(http_app(server, args.host), host=args.host, port=args.port, log_level="info")
        else:
            anyio.run(_serve_stdio, server)
    finally:
        if provider is not None:
            provider.shutdown()
    return 0
