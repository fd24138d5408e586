"""A server with two confined callers, A and B, on SQLite or PostgreSQL, for the attack tests.

Agents: the shared test agents (``assistant``, ``plain``) and ``notes``, whose memory has
thread-scoped working memory.

``user-a`` and ``user-b`` are bearer tokens; each principal is confined to the resource of the
same name. The storage is a fresh SQLite file or a fresh PostgreSQL schema (dropped afterwards);
under ``CI=true`` PostgreSQL must be reachable.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Mount, Route

from runstream import Agent, ToolError, tool
from runstream.api_routes import register_api_route
from runstream.memory import Memory, WorkingMemory
from runstream.models.base import ModelRequest, ModelStream
from runstream.runtime import Runstream
from runstream.server import create_app
from runstream.server.auth import Principal, principal_of
from runstream.server.context import ServerContext, json_body
from runstream.storage import Storage
from runstream.testing import ScriptedModel
from tests.server.agents import Gates, PromptModel, build_runstream, call_tool, say
from tests.server.conftest import BACKENDS, backend_storage, serve

PRINCIPALS = {"user-a": Principal("user-a", "user-a"), "user-b": Principal("user-b", "user-b")}


async def by_token(request: Request) -> Principal | None:
    return PRINCIPALS.get(request.headers.get("authorization", "").removeprefix("Bearer "))


@dataclass
class Secured:
    url: str
    app: Starlette
    a: httpx.Client
    b: httpx.Client

    @property
    def context(self) -> ServerContext:
        context: ServerContext = self.app.state.context
        return context

    def live_runs(self) -> int:
        return sum(self.context.registry.is_live(run) for run in list(self.context.registry._aborts))

    def routes(self, fill: str) -> list[tuple[str, str]]:
        """``(method, path)`` of every route of the app, path parameters replaced by ``fill``."""
        out: list[tuple[str, str]] = []
        for route in self.app.routes:
            inner = route.routes if isinstance(route, Mount) else [route]
            prefix = route.path if isinstance(route, Mount) else ""
            for leaf in inner:
                if isinstance(leaf, Route):
                    path = re.sub(r"\{[^}]+\}", fill, prefix + leaf.path)
                    out.extend(
                        (method, path) for method in sorted(leaf.methods or {"GET"}) if method != "HEAD"
                    )
        return out


@contextmanager
def serve_secured(runtime: Runstream) -> Iterator[Secured]:
    """``runtime`` served with the two confined callers' clients."""
    app = create_app(runtime, auth=by_token, heartbeat_s=None)
    with serve(app) as url:
        headers = {name: {"Authorization": f"Bearer {name}"} for name in PRINCIPALS}
        with (
            httpx.Client(base_url=url, headers=headers["user-a"], timeout=20) as a,
            httpx.Client(base_url=url, headers=headers["user-b"], timeout=20) as b,
        ):
            yield Secured(url, app, a, b)


async def app_note(request: Request) -> dict[str, Any]:
    """A custom route's handler: the caller and the JSON body it sent (400 when malformed)."""
    body = await json_body(request) if request.method in ("POST", "PUT", "PATCH") else {}
    return {"principal": principal_of(request).id, "keys": sorted(body)}


SECRET = "password=hunter2 in /srv/keys/prod.pem"
"""What ``configs``' tool puts in the exception it raises (a tool's own error text)."""


class ConfigModel:
    """``configs``' model: asks its tool for config ``<name>`` (the prompt's text), then says
    only "done" (it does not repeat the tool's error); ``seen`` keeps every tool output it got."""

    provider = "test"
    model_id = "config-model"
    specification_version = "v2"

    def __init__(self) -> None:
        self.seen: list[Any] = []

    async def stream(self, request: ModelRequest) -> ModelStream:
        last = request.prompt[-1]
        if last["role"] == "tool":
            self.seen += [part.get("output") for part in last["content"]]
            script: Any = say("done")
        else:
            name = "".join(part.get("text", "") for part in last["content"]).strip()
            script = call_tool("read_config", {"name": name})
        return await ScriptedModel(calls=[script]).stream(request)


@tool
async def read_config(name: str) -> str:
    """Read a config (there are none): a public refusal for ``public``, else an error of its own."""
    if name == "public":
        raise ToolError("there is no config named public")
    raise RuntimeError(f"cannot open {SECRET}")


def secured_runtime(storage: Storage) -> Runstream:
    """The shared test agents and workflows, plus ``notes`` and an app route, on ``storage``."""
    runtime = build_runstream(Gates(), storage)
    # Thread-scoped working memory, for the working-memory routes and the body's memory options.
    runtime.add_agent(
        Agent("notes", model=PromptModel(), memory=Memory(working_memory=WorkingMemory(scope="thread")))
    )
    # A tool that raises: its exception's text reaches the model, not memory nor callers.
    runtime.add_agent(Agent("configs", model=ConfigModel(), tools=[read_config], memory=Memory()))
    # An app-registered route (Runstream(api_routes=...)): in the inventory and the hostile requests.
    runtime.api_routes.append(register_api_route("/app/notes/:noteId", method="ALL", handler=app_note))
    return runtime


@contextmanager
def secured_server(backend: str, tmp_path: Path) -> Iterator[Secured]:
    with backend_storage(backend, tmp_path) as storage, serve_secured(secured_runtime(storage)) as server:
        yield server


@pytest.fixture(params=BACKENDS)
def secured(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Secured]:
    with secured_server(request.param, tmp_path) as server:
        yield server


def sse_chunks(response: httpx.Response) -> list[dict[str, Any]]:
    assert response.status_code == 200, response.text
    return [
        json.loads(block[len("data: ") :])
        for block in response.text.split("\n\n")
        if block.startswith("data: ") and block != "data: [DONE]"
    ]
