"""The routes Mastra Studio asks for beyond client-js's core, answered as Mastra's server does.

Studio (the ``mastra`` CLI's prebuilt UI, 1.31) loads these on its agents, tools, workflows,
memory and observability pages. Each answer below was recorded from a real Mastra server
(``createHonoServer``, what ``mastra dev`` runs) over the same agents: features runstream has
(providers of the agents' models, memory config, working memory of a thread) get their real
answer; features it lacks (the agent builder, processors, workspaces, MCP registry,
voice, datasets, logs and metrics storage) get the empty or disabled answer Mastra gives when
they are not configured, so Studio shows an empty panel instead of an error or a retry loop.

These routes must come before ``/agents/{agent_id}`` (``/agents/providers`` is not an agent).
"""

from __future__ import annotations

import html
import os
from collections.abc import Awaitable, Callable, Sequence

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from runstream._json import JsonValue
from runstream.agent import Agent
from runstream.runtime import Runstream
from runstream.scoring import Scorer
from runstream.server.context import ServerContext, json_body, json_response

STUDIO_VERSION = "1.31.0"
"""The Mastra Studio (npm package ``mastra``) these answers were recorded against."""

_EMPTY_PAGE = {"total": 0, "page": 0, "hasMore": False}


Handler = Callable[[Request], Awaitable[Response]]


def _constant(value: JsonValue) -> Handler:
    """Always ``value``."""

    async def answer(request: Request) -> Response:
        return json_response(value)

    return answer


def _per_page(request: Request, default: int) -> int:
    raw = request.query_params.get("perPage", "")
    return int(raw) if raw.isdigit() and 0 < int(raw) <= 1000 else default


def _paged(key: str, default_per_page: int) -> Handler:
    """An empty list with Mastra's ``pagination`` block and delta cursor (``perPage`` echoed)."""

    async def answer(request: Request) -> Response:
        pagination = {**_EMPTY_PAGE, "perPage": _per_page(request, default_per_page)}
        return json_response({key: [], "pagination": pagination, "deltaCursor": "0"})

    return answer


def _unsupported(code: str, message: str) -> Handler:
    """Mastra's 501 when its observability store cannot answer a query."""

    async def answer(request: Request) -> Response:
        await json_body(request)
        return json_response({"code": code, "message": message}, status=501)

    return answer


# Answers Mastra gives when the feature is not configured (recorded from Mastra's server).
EMPTY_GET: dict[str, JsonValue] = {
    "/auth/capabilities": {"enabled": False, "login": None},
    "/editor/builder/settings": {"enabled": False, "modelPolicy": {"active": False}},
    "/editor/builder/models/available": {"providers": []},
    "/processors": {},
    "/workspaces": {"workspaces": []},
    "/mcp/v0/servers": {"servers": [], "total_count": 0, "next": None},
    "/channels/platforms": [],
    "/schedules": {"schedules": []},
    "/experiments/review-summary": {"counts": []},
}
UNSUPPORTED: dict[str, tuple[str, str]] = {
    "/observability/traces/query/fields": (
        "TRACE_QUERY_DISCOVERY_UNSUPPORTED",
        "Trace query discovery is not supported by the configured observability store",
    ),
}
"""Mastra's 501 for a store without trace-query discovery (Studio then offers no metadata fields)."""
EMPTY_PAGED: dict[str, tuple[str, int]] = {
    "/datasets": ("datasets", 20),
    "/experiments": ("experiments", 10),
}


def scorer_entry(
    scorer: Scorer, agents: Sequence[Agent] = (), *, registered: bool = True
) -> dict[str, object]:
    """Mastra's scorer entry: the scorer's config, the agents using it (their ``scorers``; no
    workflow has any), and whether it is registered on the app (``Runstream(scorers=...)``)."""
    config = {"id": scorer.id, "name": scorer.name or scorer.id, "description": scorer.description}
    return {
        "scorer": {**config, "config": config},
        "agentIds": [agent.id for agent in agents],
        "agentNames": [agent.name for agent in agents],
        "workflowIds": [],
        "isRegistered": registered,
        "source": "code",
    }


def scorer_entries(runtime: Runstream) -> dict[str, dict[str, object]]:
    """Every scorer of the app by id: the registered ones, then those only agents have."""
    users: dict[str, list[Agent]] = {}
    found: dict[str, Scorer] = {}
    for agent in runtime.agents.values():
        for entry in agent.scorers.values():
            found.setdefault(entry.scorer.id, entry.scorer)
            if agent not in users.setdefault(entry.scorer.id, []):
                users[entry.scorer.id].append(agent)
    entries = {id: scorer_entry(s, users.get(id, ())) for id, s in runtime.scorers.items()}
    for id, scorer in found.items():
        entries.setdefault(id, scorer_entry(scorer, users[id], registered=False))
    return entries


class StudioRoutes:
    def __init__(self, ctx: ServerContext) -> None:
        self.ctx = ctx

    def routes(self) -> list[Route]:
        routes = [
            *(
                Route(path, _unsupported(code, message), methods=["POST"])
                for path, (code, message) in UNSUPPORTED.items()
            ),
            Route("/agents/providers", self.providers),
            Route("/system/packages", self.packages),
            Route("/agents/{agent_id}/voice/speakers", self.speakers),
            Route("/scores/scorers", self.scorers),
            Route("/scores/scorers/{scorer_id}", self.scorer),
        ]
        routes += [Route(path, _constant(value)) for path, value in EMPTY_GET.items()]
        routes += [Route(path, _paged(*spec)) for path, spec in EMPTY_PAGED.items()]
        return routes

    async def providers(self, request: Request) -> Response:
        """The providers of the agents' models (Mastra lists its model router's catalogue)."""
        models: dict[str, list[str]] = {}
        for agent in self.ctx.runstream.agents.values():
            model = await agent.get_model()  # a per-request model function, for no context
            ids = models.setdefault(model.provider, [])
            if model.model_id not in ids:
                ids.append(model.model_id)
        return json_response(
            {
                "providers": [
                    {
                        "id": provider,
                        "name": provider,
                        "label": provider,
                        "description": "",
                        "envVar": "",
                        "connected": True,
                        "docUrl": "",
                        "models": ids,
                    }
                    for provider, ids in models.items()
                ]
            }
        )

    async def packages(self, request: Request) -> Response:
        store = self.ctx.runstream.observability
        return json_response(
            {
                "packages": [],
                "isDev": False,
                "cmsEnabled": False,
                "liveKitConnectionRouteEnabled": False,
                "observabilityEnabled": store is not None,
                "storageType": type(self.ctx.runstream.storage).__name__,
                # What Studio's Metrics and Logs pages check before asking for them.
                **(
                    {
                        "observabilityStorageType": type(store).__name__,
                        "observabilityStorageCapabilities": {
                            "metrics": True,
                            "logs": True,
                            "traceQueryDiscovery": False,
                        },
                    }
                    if store is not None
                    else {}
                ),
            }
        )

    async def scorers(self, request: Request) -> Response:
        """The app's scorers in Mastra's entries: the registered ones (``Runstream(scorers=...)``,
        offered by Studio's "Score trace") and the agents' own (``Agent(scorers=...)``)."""
        return json_response(scorer_entries(self.ctx.runstream))

    async def scorer(self, request: Request) -> Response:
        """One scorer's entry; ``null`` for an unknown id, as Mastra answers."""
        return json_response(scorer_entries(self.ctx.runstream).get(request.path_params["scorer_id"]))

    async def speakers(self, request: Request) -> Response:
        self.ctx.agent(request.path_params["agent_id"])
        return json_response([])


STUDIO_URL_ENV = "RUNSTREAM_STUDIO_URL"
ROOT_PATH = "/"
_ROOT_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>runstream server</title>
<style>body{{font:16px system-ui,sans-serif;max-width:44rem;margin:3rem auto;padding:0 1rem}}
code{{background:#f2f2f2;padding:.1rem .3rem;border-radius:3px}}</style></head>
<body><h1>runstream server</h1>
<p>This server speaks Mastra's HTTP API under <code>{prefix}</code>.</p>
<ul>
<li><a href="{playground}">Playground</a>: chat with an agent, watch its chunks and background tasks.</li>
<li>{studio}</li>
</ul></body></html>
"""


def root_route(api_prefix: str, playground_path: str) -> Route:
    """``GET /``: Studio checks that it answers; a person finds the playground and Studio."""

    async def root(request: Request) -> Response:
        studio_url = os.environ.get(STUDIO_URL_ENV)
        port = request.url.port or (443 if request.url.scheme == "https" else 80)
        studio = (
            f'<a href="{html.escape(studio_url)}">Mastra Studio</a>, connected to this server.'
            if studio_url
            else "Mastra Studio: <code>runstream studio module:attr</code>, or with Node.js "
            f"<code>npx mastra@{STUDIO_VERSION} studio --server-host {html.escape(request.url.hostname or '')} "
            f"--server-port {port} --server-api-prefix {html.escape(api_prefix)}</code>."
        )
        page = _ROOT_PAGE.format(prefix=html.escape(api_prefix), playground=playground_path, studio=studio)
        return HTMLResponse(page)

    return Route(ROOT_PATH, root)
