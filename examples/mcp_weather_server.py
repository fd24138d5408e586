"""A small MCP server written with the official ``mcp`` SDK, for the MCP docs.

python examples/mcp_weather_server.py              # stdio
python examples/mcp_weather_server.py --http 8000  # streamable HTTP at http://127.0.0.1:8000/mcp
"""

from __future__ import annotations

import sys

from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("weather")
FORECASTS = {"oslo": "snow, -3 °C", "lisbon": "sunny, 21 °C"}


@server.tool()
async def forecast(city: str, ctx: Context) -> str:
    """Tomorrow's weather for a city."""
    await ctx.report_progress(1, 2, f"looking up {city}")
    return FORECASTS.get(city.lower(), "no forecast")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--http"]:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run("stdio")
