"""The playground page: pick an agent, chat, and watch the chunk stream and background tasks.

One static HTML file with plain JavaScript (no build step) that talks to the SSE routes; the
page itself needs no credentials (it asks for the token and sends it with every API call).
"""

from __future__ import annotations

import json
from importlib.resources import files

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

PLAYGROUND_PATH = "/playground"


def playground_route(api_prefix: str) -> Route:
    page = (files("runstream.server") / "static" / "playground.html").read_text(encoding="utf-8")
    html = page.replace("__API_PREFIX__", json.dumps(api_prefix))

    async def playground(request: Request) -> Response:
        return HTMLResponse(html, headers={"cache-control": "no-cache"})

    return Route(PLAYGROUND_PATH, playground)
