"""MCP for runstream: tools from MCP servers (:class:`MCPClient`) and a runtime served as an MCP
server (``runstream mcp module:runtime``, :func:`runstream.mcp.server.build_server`).

Needs the ``mcp`` extra: ``pip install 'runstream[mcp]'``.
"""

try:
    import mcp  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError("runstream.mcp needs the 'mcp' extra: pip install 'runstream[mcp]'") from exc

from runstream.mcp.client import HttpServer, MCPClient, MCPConnectionError, StdioServer
from runstream.mcp.convert import MCPToolError

__all__ = ["HttpServer", "MCPClient", "MCPConnectionError", "MCPToolError", "StdioServer"]
