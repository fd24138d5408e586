"""CORS for browsers on another origin (Mastra Studio, web apps), with Mastra's headers.

Mastra's server allows the methods GET/POST/PUT/PATCH/DELETE/OPTIONS, the headers
``Content-Type``, ``Authorization``, ``A2A-Version``, ``x-mastra-client-type`` and
``x-mastra-dev-playground``, exposes ``Content-Length`` and ``X-Requested-With``, and lets
preflights be cached for an hour. runstream does the same and also allows any other
``x-mastra-*`` header. Credentials are allowed: Studio and ``@mastra/client-js`` in a browser
fetch with ``credentials: "include"``, which a browser only accepts when the server names the
calling origin (never ``*``), so an allowed origin is echoed back.

Which origins: by default only pages served from this machine (:data:`LOCAL_ORIGINS`:
``http://localhost``, ``http://127.0.0.1`` and ``http://[::1]`` on any port), so Studio and a
local dev server work while a web site the user visits cannot read or drive the API. Mastra's
server differs (``@mastra/deployer`` 1.69): without auth it answers ``*`` without credentials,
which lets every site read an open server and still breaks Studio on another origin; with auth it
echoes any origin with credentials. ``create_app(cors_origins=[...])`` or ``runstream serve
--cors-origin ...`` names other origins; an origin may end in ``:*`` for any port, and ``*``
alone allows every origin (Mastra's behaviour with auth).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from starlette.datastructures import Headers
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from runstream.errors import ConfigurationError
from runstream.server.errors import error_response

ALLOW_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
ALLOW_HEADERS = (
    "Content-Type",
    "Authorization",
    "A2A-Version",
    "x-mastra-client-type",
    "x-mastra-dev-playground",
    "Last-Event-ID",
)
EXPOSE_HEADERS = ("Content-Length", "X-Requested-With")
MAX_AGE_S = 3600
ANY_ORIGIN = ("*",)
LOCAL_ORIGINS = ("http://localhost:*", "http://127.0.0.1:*", "http://[::1]:*")
ANY_PORT = ":*"
MASTRA_HEADER_PREFIX = "x-mastra-"
_REQUEST_HEADERS = b"access-control-request-headers"


class MastraCORSMiddleware(CORSMiddleware):
    """Starlette's CORS middleware that also allows every ``x-mastra-*`` request header."""

    def preflight_response(self, request_headers: Headers) -> Response:
        requested = [h.strip() for h in request_headers.get("access-control-request-headers", "").split(",")]
        mastra = [
            h
            for h in requested
            if h.lower().startswith(MASTRA_HEADER_PREFIX) and h.lower() not in self.allow_headers
        ]
        if not mastra:
            return super().preflight_response(request_headers)
        others = [h for h in requested if h and h not in mastra]
        raw = [(key, value) for key, value in request_headers.raw if key != _REQUEST_HEADERS]
        if others:
            raw.append((_REQUEST_HEADERS, ", ".join(others).encode("latin-1")))
        response = super().preflight_response(Headers(raw=raw))
        allowed = response.headers.get("access-control-allow-headers")
        response.headers["access-control-allow-headers"] = ", ".join(
            [allowed, *mastra] if allowed else mastra
        )
        return response


SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class OriginCheckMiddleware:
    """403 for a browser's state-changing request from an origin that may not call.

    CORS only decides whether a page may *read* an answer: a page on any web site can still
    *send* a "simple" cross-origin POST (``text/plain`` body, ``mode: "no-cors"``) without a
    preflight, and the server would run it (an agent, its tools) before the browser hides the
    answer. Browsers name the calling page in ``Origin`` on every such request, so a POST, PATCH
    or DELETE whose ``Origin`` is neither one of ``origins`` nor the server's own (the ``Host`` it
    was sent to: the playground) is refused before anything runs. Clients that are not browsers
    (client-js in Node, curl) send no ``Origin`` and are not affected.
    """

    def __init__(self, app: ASGIApp, origins: Sequence[str] | None) -> None:
        self.app = app
        self.origins = list(origins or ())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] not in SAFE_METHODS:
            headers = Headers(scope=scope)
            origin = headers.get("origin")
            if origin is not None and not self._allowed(origin, headers.get("host")):
                await error_response(403, f"Cross-origin request from {origin} refused (see cors_origins)")(
                    scope, receive, send
                )
                return
        await self.app(scope, receive, send)

    def _allowed(self, origin: str, host: str | None) -> bool:
        if allows(self.origins, origin):
            return True
        # The server's own pages; by host only, as a TLS proxy in front changes the scheme.
        return host is not None and origin.partition("://")[2] == host


def cors_middleware(origins: Sequence[str] | None) -> list[Middleware]:
    """The CORS middleware for ``origins`` (``"*"``: any; ``scheme://host:*``: any port of that
    host), or none when ``origins`` is empty; with it, :class:`OriginCheckMiddleware`."""
    check = Middleware(OriginCheckMiddleware, origins=origins)
    if not origins:
        return [check]
    exact: list[str] = []
    patterns: list[str] = []
    for origin in origins:
        if origin != "*" and ("://" not in origin or origin.endswith("/")):
            raise ConfigurationError(
                f"a CORS origin is a scheme://host[:port] without a trailing slash, got {origin!r}"
            )
        if origin.endswith(ANY_PORT):
            patterns.append(_any_port(origin))
        else:
            exact.append(origin)
    return [
        Middleware(
            MastraCORSMiddleware,
            allow_origins=exact,
            allow_origin_regex="|".join(patterns) or None,
            allow_methods=ALLOW_METHODS,
            allow_headers=ALLOW_HEADERS,
            allow_credentials=True,
            expose_headers=EXPOSE_HEADERS,
            max_age=MAX_AGE_S,
        ),
        check,
    ]


def allows(origins: Sequence[str] | None, origin: str) -> bool:
    """Whether ``origins`` (as :func:`cors_middleware` reads them) let ``origin`` call."""
    for allowed in origins or ():
        if allowed in ("*", origin):
            return True
        if allowed.endswith(ANY_PORT) and re.fullmatch(_any_port(allowed), origin):
            return True
    return False


def _any_port(origin: str) -> str:
    """A regex for ``scheme://host:*``: that host with any port, or none."""
    return "(?:" + re.escape(origin.removesuffix(ANY_PORT)) + r"(?::[0-9]{1,5})?)"
