"""MCP client: tools from MCP servers (stdio or streamable HTTP) as runstream tools.

``MCPClient(servers={"name": StdioServer(...) | HttpServer(...)})`` connects through the official
``mcp`` SDK. Give it to an agent (``Agent(..., toolsets=[client])``): each run sees the servers'
current tools, named ``server_tool`` as Mastra's ``MCPClient.listTools()`` names them. A server's
``tools/list_changed`` notification refreshes its tools. The connections start with the runtime
(or the first run) and close with it; a connection that drops is re-opened, and a call waits
for that. Calls carry their arguments, stop when the run's abort signal fires (the SDK cancels
the request on the server), and turn the server's progress notifications into the tool's output
(``tool-output`` chunks, or ``background-task-output`` when the tool runs as a background task).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

import anyio
import mcp_types
from mcp import Client, StdioServerParameters
from mcp.client._transport import Transport
from mcp.client.session import IncomingMessage
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import CONNECTION_CLOSED
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from runstream._json import JsonValue
from runstream.abort import AbortError
from runstream.errors import ConfigurationError, RunstreamError
from runstream.mcp.convert import MCPToolError, input_schema, result_value
from runstream.tools import BackgroundToolConfig, Tool, ToolContext

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class StdioServer:
    """An MCP server started as a subprocess and spoken to over its stdin/stdout."""

    command: str
    args: Sequence[str] = ()
    env: Mapping[str, str] | None = None
    cwd: str | None = None


@dataclass(frozen=True, slots=True)
class HttpServer:
    """An MCP server reached over streamable HTTP (``url`` is its MCP endpoint, e.g. ``…/mcp``)."""

    url: str
    headers: Mapping[str, str] = field(default_factory=dict)


ServerSpec = StdioServer | HttpServer


class ServerConfig(TypedDict, total=False):
    """Mastra's shape of a server: ``{"command", "args", "env", "cwd"}`` (stdio) or
    ``{"url", "headers"}`` (streamable HTTP)."""

    command: str
    args: Sequence[str]
    env: Mapping[str, str] | None
    cwd: str | None
    url: str
    headers: Mapping[str, str]


def coerce_server(value: ServerSpec | ServerConfig) -> ServerSpec:
    """Accept a spec or Mastra's shape: ``{"command", "args", "env", "cwd"}`` or ``{"url", "headers"}``."""
    if isinstance(value, StdioServer | HttpServer):
        return value
    if "url" in value:
        return HttpServer(str(value["url"]), dict(value.get("headers") or {}))
    if "command" in value:
        return StdioServer(
            str(value["command"]), tuple(value.get("args") or ()), value.get("env"), value.get("cwd")
        )
    raise ConfigurationError("an MCP server needs a 'command' (stdio) or a 'url' (streamable HTTP)")


class MCPConnectionError(RunstreamError, ConnectionError):
    """An MCP server could not be reached (its process did not start, or its URL did not answer).

    The message names the server, where it is, and the underlying error, which is also the
    exception's ``__cause__`` (not the SDK's "unhandled errors in a TaskGroup" wrapper).
    """


def leaf_errors(exc: BaseException) -> list[BaseException]:
    """The exceptions inside ``exc``'s (nested) exception groups, or ``[exc]``: the SDK's anyio
    task groups wrap a transport's failure as "unhandled errors in a TaskGroup"."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in leaf_errors(inner)]
    return [exc]


def describe_failure(spec: ServerSpec, exc: BaseException) -> str:
    """What went wrong, in words: each underlying error as ``Type: message``."""
    parts: list[str] = []
    for leaf in leaf_errors(exc):
        text = f"{type(leaf).__name__}: {leaf}" if str(leaf) else type(leaf).__name__
        if isinstance(leaf, MCPError) and leaf.code == CONNECTION_CLOSED and isinstance(spec, StdioServer):
            text += " (the server process exited or closed its output before answering; its stderr says why)"
        if text not in parts:
            parts.append(text)
    return "; ".join(parts)


def _where(spec: ServerSpec) -> str:
    if isinstance(spec, HttpServer):
        return spec.url
    return " ".join([spec.command, *spec.args])


_LOST = (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream)


class MCPConnection:
    """One server's connection. A runner task owns the SDK client: the SDK's anyio scopes must be
    left by the task that entered them, while calls come from any task of the runtime."""

    def __init__(
        self,
        name: str,
        spec: ServerSpec,
        *,
        on_tools_changed: Callable[[], None],
        timeout_s: float,
        max_reconnects: int,
        protocol: str,
    ) -> None:
        self.name = name
        self.spec = spec
        self.tools: list[mcp_types.Tool] = []
        self._on_tools_changed = on_tools_changed
        self._timeout_s = timeout_s
        self._max_reconnects = max_reconnects
        self._protocol = protocol
        self._client: Client | None = None
        self._connected = asyncio.Event()
        self._closing = asyncio.Event()
        self._lost = asyncio.Event()
        self._runner: asyncio.Task[None] | None = None
        self._failure: Exception | None = None
        self._background: set[asyncio.Task[Any]] = set()
        self.connections = 0
        """How many times the connection was opened (more than one after a reconnect)."""

    async def start(self) -> None:
        if self._runner is None or self._runner.done():
            self._closing.clear()
            self._failure = None
            self._runner = asyncio.create_task(self._run(), name=f"mcp:{self.name}")
        await self._ready()

    async def close(self) -> None:
        self._closing.set()
        runner, self._runner = self._runner, None
        if runner is not None:
            await asyncio.gather(runner, return_exceptions=True)
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)

    async def _ready(self) -> Client:
        """The live SDK client, waiting for a (re)connection in progress."""
        runner = self._runner
        if runner is None:
            raise MCPConnectionError(f"MCP server {self.name!r} is not started")
        while self._client is None:
            waiter = asyncio.ensure_future(self._connected.wait())
            await asyncio.wait({waiter, runner}, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            if runner.done() and self._client is None:
                failure = self._failure
                detail = describe_failure(self.spec, failure) if failure else "it did not connect"
                cause = leaf_errors(failure)[0] if failure else None
                raise MCPConnectionError(
                    f"MCP server {self.name!r} ({_where(self.spec)}) is unreachable: {detail}"
                ) from cause
        return self._client

    def _open(self) -> Client:
        spec = self.spec
        if isinstance(spec, StdioServer):
            transport: StdioServerParameters | Transport = StdioServerParameters(
                command=spec.command,
                args=list(spec.args),
                env=dict(spec.env) if spec.env else None,
                cwd=spec.cwd,
            )
        else:
            http = create_mcp_http_client(headers=dict(spec.headers) or None)
            transport = streamable_http_client(spec.url, http_client=http)
        return Client(
            transport,
            message_handler=self._on_message,
            read_timeout_seconds=self._timeout_s,
            mode=self._protocol,
        )

    async def _run(self) -> None:
        failures = 0
        while not self._closing.is_set():
            try:
                async with self._open() as client:
                    await self._list_tools(client)
                    self._on_tools_changed()  # a new connection may bring other tools
                    self._client = client
                    self.connections += 1
                    failures = 0
                    self._lost.clear()
                    self._connected.set()
                    await self._hold(client)
            except Exception as exc:
                self._failure = exc
                logger.warning(
                    "MCP server %r: connection failed: %s", self.name, describe_failure(self.spec, exc)
                )
            finally:
                self._client = None
                self._connected.clear()
            if self._closing.is_set() or self.connections == 0:
                return
            failures += 1
            if failures > self._max_reconnects:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), min(0.1 * 2**failures, 5.0))

    async def _hold(self, client: Client) -> None:
        """Keep the connection until it is closed or found lost; on a 2026-07-28 connection a
        ``subscriptions/listen`` stream delivers tool-list changes (older ones notify unasked)."""
        listener: asyncio.Task[None] | None = None
        caps = client.server_capabilities.tools
        if client.protocol_version in MODERN_PROTOCOL_VERSIONS and caps is not None and caps.list_changed:
            listener = asyncio.create_task(self._listen(client))
        closing = asyncio.ensure_future(self._closing.wait())
        lost = asyncio.ensure_future(self._lost.wait())
        try:
            await asyncio.wait({closing, lost}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            closing.cancel()
            lost.cancel()
            if listener is not None:
                listener.cancel()
                await asyncio.gather(listener, return_exceptions=True)

    async def _listen(self, client: Client) -> None:
        with contextlib.suppress(Exception):
            async with client.listen(tools_list_changed=True) as subscription:
                async for _event in subscription:
                    await self._refresh(client)

    async def _on_message(self, message: IncomingMessage) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification):
            client = self._client
            if client is not None and client.protocol_version not in MODERN_PROTOCOL_VERSIONS:
                task = asyncio.create_task(self._refresh(client))
                self._background.add(task)
                task.add_done_callback(self._background.discard)

    async def _refresh(self, client: Client) -> None:
        try:
            await self._list_tools(client)
        except Exception as exc:
            logger.warning("MCP server %r: could not list its tools: %s", self.name, exc)
            return
        self._on_tools_changed()

    async def _list_tools(self, client: Client) -> None:
        tools: list[mcp_types.Tool] = []
        cursor: str | None = None
        for _ in range(100):
            page = await client.list_tools(cursor=cursor, cache_mode="refresh")
            tools.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                break
        self.tools = tools

    def _mark_lost(self, client: Client) -> None:
        """Stop handing out ``client``; the runner re-opens the connection."""
        if self._client is client:
            self._client = None
            self._connected.clear()
            self._lost.set()

    async def call(self, tool_name: str, args: dict[str, object], ctx: ToolContext) -> JsonValue:
        """Call a tool; the run's abort cancels the request, progress becomes tool output.

        A request the server cannot have run is sent again on a new connection, once: when the
        connection was already closed before the call (the server died while idle), or when the
        server answered that it does not know the session (it restarted), as Mastra's MCPClient
        retries session errors. A connection lost while the call was in flight is a tool error
        (the tool may have run); the connection is reopened for the next call.
        """
        client = await self._ready()
        if _known_closed(client):
            self._mark_lost(client)
            client = await self._ready()
        try:
            return await self._call_once(client, tool_name, args, ctx)
        except _SessionExpiredError:
            logger.info("MCP server %r forgot the session: reconnecting to call %r", self.name, tool_name)
            self._mark_lost(client)
            client = await self._ready()
        try:
            return await self._call_once(client, tool_name, args, ctx)
        except _SessionExpiredError as exc:
            raise MCPToolError(f"MCP server {self.name!r}: {exc}") from exc

    async def _call_once(
        self, client: Client, tool_name: str, args: dict[str, object], ctx: ToolContext
    ) -> JsonValue:
        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            await ctx.writer.write(
                {
                    "progress": progress,
                    "total": total,
                    "message": message,
                    "server": self.name,
                    "tool": tool_name,
                }
            )

        call = asyncio.ensure_future(client.call_tool(tool_name, args, progress_callback=on_progress))
        remove = ctx.abort_signal.add_listener(lambda _reason: call.cancel())
        try:
            result = await call
        except asyncio.CancelledError:
            if ctx.abort_signal.aborted:
                raise AbortError(ctx.abort_signal.reason) from None
            raise
        except _LOST as exc:
            self._mark_lost(client)
            raise MCPToolError(self._lost_message(tool_name, type(exc).__name__)) from exc
        except MCPError as exc:
            if _session_expired(exc):
                raise _SessionExpiredError(exc.message) from exc
            if exc.code == CONNECTION_CLOSED:
                self._mark_lost(client)
                raise MCPToolError(self._lost_message(tool_name, exc.message)) from exc
            raise MCPToolError(f"MCP server {self.name!r}: {exc.message}") from exc
        finally:
            remove()
        return result_value(result)

    def _lost_message(self, tool_name: str, detail: str) -> str:
        return (
            f"MCP server {self.name!r}: the connection was lost while {tool_name!r} was running "
            f"({detail}); the tool may or may not have run. The connection is reopened for the next call."
        )


class _SessionExpiredError(RunstreamError):
    """The server refused a request because it does not know the session (so it did not run)."""


def _session_expired(exc: MCPError) -> bool:
    message = exc.message.lower()
    return "session not found" in message or "no valid session" in message


def _known_closed(client: Client) -> bool:
    """Whether the SDK already saw the connection end (the server exited while idle), so a call
    could not be sent. The SDK has no public flag for it; its dispatcher's ``_closed`` is read
    defensively (``False`` when absent: the call then fails as a lost connection would)."""
    try:
        dispatcher = client.session._dispatcher
    except (AttributeError, RuntimeError):
        return False
    return getattr(dispatcher, "_closed", False) is True


class MCPClient:
    """Tools from one or more MCP servers; a toolset for :class:`~runstream.Agent`.

    ``background`` makes the named tools (``server_tool`` names, or ``"all"``) eligible to run as
    background tasks, as a ``background=`` option does for a local tool. ``protocol`` is the SDK's
    connection mode: ``"auto"`` (the newest both sides speak), ``"legacy"`` (the ``initialize``
    handshake of protocol versions before 2026-07-28) or a version.
    """

    def __init__(
        self,
        servers: Mapping[str, ServerSpec | ServerConfig],
        *,
        timeout_s: float = 60.0,
        max_reconnects: int = 5,
        background: Mapping[str, BackgroundToolConfig | bool | Mapping[str, Any]] | None = None,
        protocol: str = "auto",
    ) -> None:
        self._connections = {
            name: MCPConnection(
                name,
                coerce_server(spec),
                on_tools_changed=self._invalidate,
                timeout_s=timeout_s,
                max_reconnects=max_reconnects,
                protocol=protocol,
            )
            for name, spec in servers.items()
        }
        self._background = dict(background or {})
        self._tools: dict[str, Tool] | None = None
        self._listeners: list[Callable[[dict[str, Tool]], None]] = []
        self._start_lock = asyncio.Lock()

    def connection(self, server: str) -> MCPConnection:
        return self._connections[server]

    async def start(self) -> None:
        """Connect to every server (idempotent); raises :class:`MCPConnectionError` if one fails."""
        async with self._start_lock:
            await asyncio.gather(*(c.start() for c in self._connections.values()))

    async def close(self) -> None:
        await asyncio.gather(*(c.close() for c in self._connections.values()))

    async def __aenter__(self) -> MCPClient:
        await self.start()
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

    def on_tools_changed(self, listener: Callable[[dict[str, Tool]], None]) -> None:
        """Call ``listener(tools)`` whenever a server's tool list changed (e.g. to register them)."""
        self._listeners.append(listener)

    def tools(self) -> dict[str, Tool]:
        """The servers' current tools, as runstream tools named ``server_tool``."""
        if self._tools is None:
            self._tools = {}
            for connection in self._connections.values():
                for remote in connection.tools:
                    local = self._convert(connection, remote)
                    self._tools[local.name] = local
        return self._tools

    def _invalidate(self) -> None:
        self._tools = None
        tools = self.tools()
        for listener in self._listeners:
            listener(tools)

    def _convert(self, connection: MCPConnection, remote: mcp_types.Tool) -> Tool:
        name = f"{connection.name}_{remote.name}"
        remote_name = remote.name

        async def execute(args: dict[str, object], ctx: ToolContext) -> JsonValue:
            return await connection.call(remote_name, args, ctx)

        background = self._background.get(name, self._background.get("all"))
        return Tool(
            name,
            execute,
            description=remote.description or "",
            input_schema=input_schema(remote),
            background=background,
        )
