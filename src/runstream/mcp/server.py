"""A runtime served as an MCP server (Mastra's ``MCPServer``): its agents become tools
``ask_<agentId>`` taking ``{"message"}`` that run the agent and answer with its text, and chosen
runstream tools are offered as they are. Served over stdio or streamable HTTP by
``runstream mcp module:runtime`` (see :mod:`runstream.mcp.cli`).

While a call runs, its tool calls and tool output reach the MCP client as progress
notifications; a client's cancellation aborts the run (or the tool's abort signal).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import mcp_types
from mcp.server import Server
from mcp.server.context import ServerRequestContext

from runstream._json import JsonObject
from runstream.abort import AbortController
from runstream.agent import Agent
from runstream.agent.run_options import read_default_options
from runstream.chunks import AnyChunk
from runstream.errors import ConfigurationError
from runstream.runtime import Runstream
from runstream.tools import Tool, ToolArgumentsError, ToolContext, ToolWriter
from runstream.trust import needs_approval

AGENT_INPUT_SCHEMA: JsonObject = {
    "type": "object",
    "properties": {"message": {"type": "string", "description": "What to ask the agent"}},
    "required": ["message"],
}

Context = ServerRequestContext[None, object]


@dataclass(frozen=True, slots=True)
class _Exposed:
    """One MCP tool: an agent (``ask_<id>``) or a runstream tool."""

    name: str
    description: str
    input_schema: JsonObject
    agent: Agent | None = None
    tool: Tool | None = None

    def listing(self) -> mcp_types.Tool:
        return mcp_types.Tool(name=self.name, description=self.description, input_schema=self.input_schema)


def build_server(
    runtime: Runstream,
    *,
    agents: Iterable[str] | None = None,
    tools: Iterable[Tool] | Mapping[str, Tool] = (),
    name: str = "runstream",
    version: str = "",
) -> Server[None]:
    """An MCP server offering ``runtime``'s agents (all, or those named) and ``tools``.

    The runtime starts with the server's lifespan and closes with it.
    """
    exposed: dict[str, _Exposed] = {}
    for agent_id in agents if agents is not None else list(runtime.agents):
        agent = runtime.get_agent(agent_id)
        # (not the agent's instructions, which Mastra appends here: they are the author's, often
        # with what the agent must not reveal; tools/list is open to every MCP client)
        description = agent.description or f"Ask agent {agent.name} a question."
        exposed[f"ask_{agent.id}"] = _Exposed(f"ask_{agent.id}", description, AGENT_INPUT_SCHEMA, agent=agent)
    for tool in tools.values() if isinstance(tools, Mapping) else tools:
        if tool.name in exposed:
            raise ConfigurationError(f"two MCP tools would be named {tool.name!r}")
        owner = next((a for a in runtime.agents.values() if a.tools.get(tool.name) is tool), None)
        if tool.require_approval or (owner is not None and _always_gated(owner)):
            raise ConfigurationError(
                f"tool {tool.name!r} needs a person's approval, and an MCP client has no way to give "
                "it: it is not served as an MCP tool (offer its agent instead, whose runs stop for approval)"
            )
        exposed[tool.name] = _Exposed(
            tool.name, tool.description, tool.spec()["inputSchema"], agent=owner, tool=tool
        )

    @asynccontextmanager
    async def lifespan(_server: Server[None]) -> AsyncIterator[None]:
        await runtime.start()
        try:
            yield
        finally:
            await runtime.close()

    async def list_tools(
        _ctx: Context, _params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListToolsResult:
        return mcp_types.ListToolsResult(tools=[entry.listing() for entry in exposed.values()])

    async def call_tool(ctx: Context, params: mcp_types.CallToolRequestParams) -> mcp_types.CallToolResult:
        entry = exposed.get(params.name)
        if entry is None:
            return _error(f"Unknown tool: {params.name}")
        args = dict(params.arguments or {})
        try:
            if entry.tool is None:
                assert entry.agent is not None
                return await _ask_agent(ctx, entry.agent, args)
            if await needs_approval(entry.agent, entry.tool, entry.tool.validate_args(args)):
                return _error(
                    f"{entry.tool.name} needs a person's approval for this call, and MCP has no "
                    "way to give it: ask its agent instead"
                )
            return await _run_tool(ctx, entry.tool, args)
        except ToolArgumentsError as exc:
            return _error(str(exc))

    return Server(
        name,
        version=version,
        lifespan=lifespan,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        get_tool_input_schema=lambda tool_name: (
            exposed[tool_name].input_schema if tool_name in exposed else None
        ),
    )


def _always_gated(agent: Agent) -> bool:
    """Whether the author's ``default_options`` make every tool call of ``agent`` wait for approval."""
    defaults = agent.default_options
    return (
        isinstance(defaults, Mapping) and read_default_options(defaults).get("require_tool_approval") is True
    )


def _error(message: str) -> mcp_types.CallToolResult:
    return mcp_types.CallToolResult(content=[mcp_types.TextContent(text=message)], is_error=True)


def _result(value: object) -> mcp_types.CallToolResult:
    """A tool's value as MCP content: text as text, anything else as JSON text; an object is also
    the structured content (protocol versions before 2026-07-28 allow only objects there)."""
    if isinstance(value, str):
        return mcp_types.CallToolResult(content=[mcp_types.TextContent(text=value)])
    text = json.dumps(value, ensure_ascii=False, default=str)
    structured = value if isinstance(value, dict) else None
    return mcp_types.CallToolResult(content=[mcp_types.TextContent(text=text)], structured_content=structured)


class _Progress:
    """Progress notifications for one call, numbered; sent in order from the calling task."""

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx
        self._count = 0

    async def report(self, message: str) -> None:
        self._count += 1
        await self._ctx.session.report_progress(self._count, None, message)


ABORT_GRACE_S = 1.0
_winding_down: set[asyncio.Future[Any]] = set()
"""Runs of cancelled calls, finishing after their abort (their tools see the abort signal)."""


async def _ask_agent(ctx: Context, agent: Agent, args: JsonObject) -> mcp_types.CallToolResult:
    message = args.get("message")
    if not isinstance(message, str):
        raise ToolArgumentsError(f"ask_{agent.id}: 'message' must be a string")
    progress = _Progress(ctx)
    controller = AbortController()
    out = await agent.stream(message, abort_signal=controller.signal)

    async def consume() -> None:
        async for chunk in out.full_stream:
            note = _progress_note(chunk)
            if note is not None and not controller.signal.aborted:
                await progress.report(note)

    # The run is consumed in a task of its own: a cancellation of this request must reach the
    # run as an abort (its tools stop through their signal), not as a cancellation inside it.
    consuming = asyncio.ensure_future(consume())
    try:
        await asyncio.shield(consuming)
    except asyncio.CancelledError:  # the MCP client cancelled the request
        controller.abort("the MCP client cancelled the call")
        _winding_down.add(consuming)
        consuming.add_done_callback(_winding_down.discard)
        raise
    if out.state.status == "failed":
        return _error(f"agent {agent.id} failed: {out.state.error}")
    if out.state.status == "suspended":
        return _error(
            f"agent {agent.id} stopped for a person's approval (run {out.run_id}), which MCP cannot "
            "give: approve or decline it over the HTTP API"
        )
    return mcp_types.CallToolResult(content=[mcp_types.TextContent(text=out.state.text)])


def _progress_note(chunk: AnyChunk) -> str | None:
    """What an MCP client hears of a running agent: its tool calls and their outcomes."""
    payload: Any = chunk.payload
    if chunk.type == "tool-call":
        return f"calling {payload['toolName']}"
    if chunk.type in ("tool-result", "tool-error"):
        return f"{payload['toolName']} {'done' if chunk.type == 'tool-result' else 'failed'}"
    if chunk.type == "tool-output":
        return json.dumps(payload.get("output"), ensure_ascii=False, default=str)
    return None


async def _run_tool(ctx: Context, tool: Tool, given: JsonObject) -> mcp_types.CallToolResult:
    args = tool.validate_args(given)
    progress = _Progress(ctx)
    written: asyncio.Queue[AnyChunk] = asyncio.Queue()
    controller = AbortController()
    run_id = str(uuid.uuid4())
    call_id = str(ctx.request_id or uuid.uuid4())
    context = ToolContext(
        tool_call_id=call_id,
        tool_name=tool.name,
        run_id=run_id,
        agent_id="mcp",
        writer=ToolWriter(written.put_nowait, run_id, call_id, tool.name),
        abort_signal=controller.signal,
    )
    execution = asyncio.ensure_future(tool.execute(args, context))
    try:
        while not execution.done() or not written.empty():
            next_write = asyncio.ensure_future(written.get())
            await asyncio.wait({execution, next_write}, return_when=asyncio.FIRST_COMPLETED)
            if not next_write.done():
                next_write.cancel()
                continue
            note = _progress_note(next_write.result())
            if note is not None:
                await progress.report(note)
    except asyncio.CancelledError:  # the MCP client cancelled the request
        # As in a run: the tool sees its abort signal and gets a second to end, then is cancelled.
        controller.abort("the MCP client cancelled the call")
        asyncio.get_running_loop().call_later(ABORT_GRACE_S, execution.cancel)
        _winding_down.add(execution)
        execution.add_done_callback(_winding_down.discard)
        raise
    try:
        return _result(execution.result())
    except Exception as exc:
        return _error(str(exc) or type(exc).__name__)
