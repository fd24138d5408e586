"""The application's own routes (``Runstream(api_routes=[...])``, see :mod:`runstream.api_routes`)
as Starlette routes, checked against the built-in ones at start."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route, compile_path
from starlette.types import Scope

from runstream.api_routes import ApiRoute
from runstream.errors import ConfigurationError
from runstream.runtime import Runstream
from runstream.server.context import json_response


def custom_routes(runstream: Runstream, builtin: Sequence[BaseRoute]) -> list[Route]:
    """One Starlette route per custom route; a ConfigurationError naming both routes when one
    would shadow, or be shadowed by, a built-in route for the same method."""
    out: list[Route] = []
    for api_route in runstream.api_routes:
        for route in builtin:
            clash = _clash(api_route, route)
            if clash:
                raise ConfigurationError(
                    f"API route {' '.join(api_route.methods)} {api_route.path} collides with the built-in route {clash}"
                )
        out.append(Route(api_route.path, _endpoint(runstream, api_route), methods=list(api_route.methods)))
    return out


def public_matcher(routes: Sequence[ApiRoute]) -> Callable[[Scope], bool]:
    """Whether a request is for a route registered with ``requires_auth=False``."""
    public = [(compile_path(r.path)[0], frozenset(r.methods)) for r in routes if not r.requires_auth]

    def is_public(scope: Scope) -> bool:
        method = "GET" if scope.get("method") == "HEAD" else scope.get("method")
        return any(method in methods and regex.match(scope["path"]) for regex, methods in public)

    return is_public


def _clash(api_route: ApiRoute, route: BaseRoute) -> str | None:
    if isinstance(route, Mount):
        if api_route.path == route.path or api_route.path.startswith(route.path + "/"):
            return f"{route.path}/... (the prefix is reserved for the built-in API)"
        return None
    if not isinstance(route, Route):
        return None
    methods = route.methods or {"GET"}
    if not set(api_route.methods) & methods:
        return None
    sample_ours = re.sub(r"\{[^}]*\}", "x", api_route.path)
    sample_theirs = re.sub(r"\{[^}]*\}", "x", route.path)
    if route.path_regex.match(sample_ours) or compile_path(api_route.path)[0].match(sample_theirs):
        return route.path
    return None


def _endpoint(runstream: Runstream, api_route: ApiRoute) -> Callable[[Request], Awaitable[Response]]:
    async def handler(request: Request) -> Response:
        return _response(await api_route.handler(request))

    async def endpoint(request: Request) -> Response:
        request.state.runstream = runstream
        call: Callable[[Any], Awaitable[Any]] = handler
        for middleware in reversed(api_route.middleware):
            call = _wrap(middleware, call)
        return _response(await call(request))

    return endpoint


def _wrap(middleware: Any, call_next: Callable[[Any], Awaitable[Any]]) -> Callable[[Any], Awaitable[Any]]:
    async def call(request: Any) -> Any:
        return await middleware(request, call_next)

    return call


def _response(value: Any) -> Response:
    return value if isinstance(value, Response) else json_response(value)
