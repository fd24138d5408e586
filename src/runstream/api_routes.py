"""An application's own HTTP routes, served by ``runstream serve`` beside the built-in API
(Mastra's ``registerApiRoute`` / ``server.apiRoutes``).

    from runstream.api_routes import register_api_route

    async def hello(request):                      # a Starlette request
        principal = request.state.principal       # who called (the server's auth ran first)
        runtime = request.state.runstream         # the Runstream: agents, workflows, storage
        return {"hello": principal.id}            # a Response, or a JSON value

    runtime = Runstream(agents=[...], api_routes=[register_api_route("/hello", method="GET", handler=hello)])

A path is served from the server's root, may name parameters as ``:name`` (or ``{name}``) and
must not collide with a built-in route: ``create_app`` refuses, at start, a route under the API's
prefix (``/api``, reserved as in Mastra) or one a built-in route would shadow (``/chat/:id``...). The server's auth
(``requires_auth=False``: open), body-size limit, CORS and rate limit apply; an error the handler
raises is answered as the built-in routes answer it (``runstream.server.errors``).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from runstream.errors import ConfigurationError

Method = Literal["GET", "POST", "PUT", "PATCH", "DELETE", "ALL"]
METHODS: tuple[str, ...] = ("GET", "POST", "PUT", "PATCH", "DELETE")

Handler = Callable[[Any], Awaitable[Any]]
"""``async def handler(request) -> Response | JSON value``."""
Middleware = Callable[[Any, Callable[[Any], Awaitable[Any]]], Awaitable[Any]]
"""``async def middleware(request, call_next) -> Response``: runs before the handler (in order)."""

_PARAM = re.compile(r":([A-Za-z_][A-Za-z0-9_]*)")
_PATH = re.compile(r"^/[A-Za-z0-9_\-./~{}:]*$")


@dataclass(frozen=True, slots=True)
class ApiRoute:
    """One custom route; build it with :func:`register_api_route`."""

    path: str
    """In Starlette's form (``/items/{itemId}``)."""
    methods: tuple[str, ...]
    handler: Handler
    requires_auth: bool = True
    middleware: tuple[Middleware, ...] = ()


def register_api_route(
    path: str,
    *,
    method: Method,
    handler: Handler,
    requires_auth: bool = True,
    middleware: Middleware | Sequence[Middleware] = (),
) -> ApiRoute:
    """A route for ``Runstream(api_routes=[...])``: Mastra's ``registerApiRoute(path, {method,
    handler, requiresAuth, middleware})``. ``method="ALL"`` answers GET, POST, PUT, PATCH and DELETE."""
    if not isinstance(path, str) or not _PATH.match(path):
        raise ConfigurationError(
            f"an API route's path must start with '/' and be a plain URL path, got {path!r}"
        )
    if method not in (*METHODS, "ALL"):
        raise ConfigurationError(
            f"API route {path!r}: method must be one of {', '.join((*METHODS, 'ALL'))}, got {method!r}"
        )
    if not callable(handler):
        raise ConfigurationError(f"API route {path!r}: handler must be an async function of the request")
    chain = (middleware,) if callable(middleware) else tuple(middleware)
    return ApiRoute(
        path=_PARAM.sub(r"{\1}", path),
        methods=METHODS if method == "ALL" else (method,),
        handler=handler,
        requires_auth=requires_auth,
        middleware=chain,
    )


def check_api_routes(routes: Sequence[ApiRoute]) -> list[ApiRoute]:
    """``routes`` as a list, refusing anything but :class:`ApiRoute` and the same method and path twice."""
    seen: set[tuple[str, str]] = set()
    for route in routes:
        if not isinstance(route, ApiRoute):
            raise ConfigurationError(f"api_routes takes routes made by register_api_route, got {route!r}")
        for method in route.methods:
            key = (method, re.sub(r"\{[^}]*\}", "{}", route.path))
            if key in seen:
                raise ConfigurationError(f"API route {method} {route.path} is registered twice")
            seen.add(key)
    return list(routes)
