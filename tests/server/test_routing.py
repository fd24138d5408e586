"""The API's routing by first path segment reaches exactly the route Starlette's router would."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.testclient import TestClient

from runstream import Agent
from runstream.runtime import Runstream
from runstream.server import create_app
from runstream.server.app import SegmentRouter
from runstream.server.auth import open_access
from runstream.testing import ScriptedModel


def _api_routes() -> list[Route]:
    """The API's route table (paths and methods), each route answering with its own path."""
    runtime = Runstream(agents=[Agent("assistant", model=ScriptedModel.text("Hi!"))])
    api = create_app(runtime, auth=open_access).routes[0]
    assert isinstance(api, Mount) and api.path == "/api"

    def named(path: str) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            return PlainTextResponse(f"{path} {sorted(request.path_params.items())}")

        return endpoint

    routes = [route for route in api.routes if isinstance(route, Route)]
    assert len(routes) == len(api.routes)
    return [Route(r.path, named(r.path), methods=r.methods) for r in routes]


def _paths(routes: list[Route]) -> list[str]:
    """A concrete path for every route, plus near misses (unknown segments and suffixes,
    trailing slashes, a parameter that looks like a literal segment)."""
    concrete = [re.sub(r"\{[^}]+\}", "x", r.path) for r in routes]
    literal_params = [re.sub(r"\{[^}]+\}", "providers", r.path) for r in routes]
    misses = ["/", "/nope", "/agents", "/agents/", "/agents/x/nope", "/memory/threads/", "//agents"]
    return sorted({*concrete, *literal_params, *(p + "/" for p in concrete), *misses})


@pytest.mark.parametrize("method", ["GET", "POST", "DELETE", "PATCH", "PUT"])
def test_each_request_reaches_the_route_a_plain_router_would(method: str) -> None:
    routes = _api_routes()
    mounted: list[BaseRoute] = [Mount("/api", app=SegmentRouter(list(routes)))]
    indexed = TestClient(Starlette(routes=mounted))
    plain = TestClient(Starlette(routes=[Mount("/api", routes=list(routes))]))
    for path in _paths(routes):
        got = indexed.request(method, "/api" + path, follow_redirects=False)
        want = plain.request(method, "/api" + path, follow_redirects=False)
        assert (got.status_code, got.text, got.headers.get("location")) == (
            want.status_code,
            want.text,
            want.headers.get("location"),
        ), (method, path)
