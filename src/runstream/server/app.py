"""``create_app``: the ASGI application serving a :class:`~runstream.Runstream` over HTTP.

Routes: Mastra's REST + SSE surface (agents, memory, background tasks, workflows) under ``prefix`` (``/api``), the AI SDK UI message stream at
``/chat/:agentId``, the playground at ``/playground`` and ``/health``. The app starts the runtime on startup
and, on shutdown, aborts detached runs and closes the runtime.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import BaseRoute, Mount, Route, Router
from starlette.types import Receive, Scope, Send

from runstream.errors import ConfigurationError
from runstream.runtime import Runstream
from runstream.server.auth import AuthHook, AuthMiddleware, default_auth
from runstream.server.context import ServerContext
from runstream.server.cors import LOCAL_ORIGINS, cors_middleware
from runstream.server.custom_routes import custom_routes, public_matcher
from runstream.server.errors import EXCEPTION_HANDLERS, BodyLimitMiddleware
from runstream.server.health import HEALTH_PATH, health_route
from runstream.server.limits import UrlSafetyMiddleware
from runstream.server.mastra import MastraRoutes
from runstream.server.memory_api import MemoryRoutes
from runstream.server.metrics_api import MetricsRoutes
from runstream.server.observability_api import ObservabilityRoutes
from runstream.server.playground import PLAYGROUND_PATH, playground_route
from runstream.server.rate_limit import DEFAULT_RATE, RateLimitMiddleware
from runstream.server.resumable import InMemoryReplayLog, ReplayLog, RunRegistry
from runstream.server.run_ids import RunIdMiddleware
from runstream.server.studio import ROOT_PATH, StudioRoutes, root_route
from runstream.server.tasks_api import TaskRoutes
from runstream.server.threads import ThreadRoutes
from runstream.server.ui_stream import ChatRoutes
from runstream.server.vectors_api import VectorRoutes
from runstream.server.workflows_api import WorkflowRoutes

DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024


def create_app(
    runstream: Runstream,
    *,
    auth: AuthHook | None = None,
    prefix: str = "/api",
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    heartbeat_s: float | None = 15.0,
    replay_log: ReplayLog | None = None,
    cors_origins: Sequence[str] | None = LOCAL_ORIGINS,
    rate_limit: str | None = DEFAULT_RATE,
    max_live_runs: int = 1_000,
    max_live_runs_per_resource: int = 50,
) -> Starlette:
    """Serve ``runstream``'s agents.

    ``auth`` decides who may call (default: a bearer token from ``RUNSTREAM_API_TOKEN`` when set,
    open otherwise). ``heartbeat_s`` is the idle time after which an SSE stream gets a comment
    (``None``: never). ``replay_log`` keeps the events of detached runs (default: in memory).
    ``cors_origins`` may call from a browser on another origin (default: pages served from this
    machine, ``http://localhost:*`` and the loopback addresses; ``["*"]``: any; ``None``: no
    CORS; see :mod:`runstream.server.cors`). ``rate_limit``: requests per principal
    (``"6000/minute"``; ``None``: no limit; :mod:`runstream.server.rate_limit`).
    ``max_live_runs`` / ``max_live_runs_per_resource``: runs of every kind at once (agent streams
    and generates, direct or detached, and workflow runs), in this process and per resource
    (429 beyond). Defaults and the rest of the budgets: docs/security.md.
    """
    if prefix and (not prefix.startswith("/") or prefix.endswith("/")):
        raise ConfigurationError(f"prefix must start with '/' and not end with one, got {prefix!r}")
    registry = RunRegistry(
        replay_log if replay_log is not None else InMemoryReplayLog(),
        max_live_runs=max_live_runs,
        max_live_runs_per_resource=max_live_runs_per_resource,
    )
    public_paths = frozenset({PLAYGROUND_PATH, ROOT_PATH, HEALTH_PATH})
    ctx = ServerContext(runstream, registry, heartbeat_s)
    api = [
        *ObservabilityRoutes(ctx).routes(),
        *MetricsRoutes(ctx).routes(),
        *StudioRoutes(ctx).routes(),  # first: '/agents/providers' is not an agent
        *ThreadRoutes(ctx).routes(),
        *MastraRoutes(ctx).routes(),
        *MemoryRoutes(ctx).routes(),
        *TaskRoutes(ctx).routes(),
        *WorkflowRoutes(ctx).routes(),
        *VectorRoutes(ctx).routes(),
    ]

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await runstream.start()
        try:
            yield
        finally:
            await registry.close()
            await runstream.close()

    builtin: list[BaseRoute] = [
        Mount(prefix, app=SegmentRouter(api)),
        *ChatRoutes(ctx).routes(),
        *_agui_routes(ctx),
        playground_route(prefix),
        root_route(prefix, PLAYGROUND_PATH),
        health_route(runstream),
    ]
    app = Starlette(
        routes=[*builtin, *custom_routes(runstream, builtin)],
        middleware=[
            *cors_middleware(cors_origins),
            Middleware(
                AuthMiddleware,
                hook=auth or default_auth(),
                public_paths=public_paths,
                is_public=public_matcher(runstream.api_routes) if runstream.api_routes else None,
            ),
            Middleware(RunIdMiddleware),
            *(
                [Middleware(RateLimitMiddleware, rate=rate_limit, exempt_paths=public_paths)]
                if rate_limit
                else []
            ),
            Middleware(BodyLimitMiddleware, max_bytes=max_body_bytes),
            Middleware(UrlSafetyMiddleware),
        ],
        exception_handlers=EXCEPTION_HANDLERS,
        lifespan=lifespan,
    )
    app.state.context = ctx
    return app


class SegmentRouter:
    """Starlette's routing of ``routes``, tried only among those that can match the request's
    first path segment.

    A Starlette router tries its routes in order, one regular expression each: the API has ~80
    routes, and an agent's stream is the 40th. Here the routes are split by their first segment
    (``/agents/...``, ``/memory/...``) into one router per segment, each holding, in the original
    order, the routes with that literal segment and those that start with a parameter. No route
    left out of a segment's router can match a path in that segment, so every request reaches
    the route (and the 405 or redirect) it would reach by trying all of them; a path in no known
    segment does try all of them.
    """

    def __init__(self, routes: Sequence[BaseRoute]) -> None:
        self.routes = list(routes)  # what Mount.routes and url_path_for read
        self._all = Router(routes=routes)
        segments = {_first_segment(route) for route in routes} - {None}
        self._by_segment = {
            segment: Router(routes=[r for r in routes if _first_segment(r) in (segment, None)])
            for segment in segments
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope.get("path", "")
        root_path: str = scope.get("root_path", "")
        router = self._all
        if path.startswith(root_path + "/"):  # the path below the mount, as Starlette reads it
            router = self._by_segment.get(path[len(root_path) + 1 :].partition("/")[0], self._all)
        await router(scope, receive, send)


def _first_segment(route: BaseRoute) -> str | None:
    """A route's literal first path segment; ``None`` when it could be anything (a parameter,
    or a route that is not a plain ``Route``)."""
    if not isinstance(route, Route):
        return None
    segment = route.path.lstrip("/").partition("/")[0]
    return None if "{" in segment else segment


def _agui_routes(ctx: ServerContext) -> list[Route]:
    """``/ag-ui/{agentId}`` when the ``agui`` extra (``ag-ui-protocol``) is installed."""
    try:
        from runstream.server.agui_api import AGUIRoutes
    except ImportError:
        return []
    return AGUIRoutes(ctx).routes()
