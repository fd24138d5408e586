"""What every route handler shares: the runtime, the run registry, and request helpers."""

from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from runstream.agent import Agent
from runstream.memory import MemoryScope
from runstream.runtime import Runstream
from runstream.server.auth import Principal
from runstream.server.errors import ApiError
from runstream.server.resumable import RunRegistry
from runstream.server.wire import encode_json
from runstream.tasks.manager import BackgroundTaskManager

MAX_REMEMBERED_RUNS = 10_000


@dataclass(slots=True)
class ServerContext:
    runstream: Runstream
    registry: RunRegistry
    heartbeat_s: float | None
    run_owners: OrderedDict[str, str | None] = field(default_factory=OrderedDict)
    """Run id → owning resource, for runs started here (approvals must come from the owner)."""

    def remember_owner(self, run_id: str, principal: Principal, scope: MemoryScope | None) -> None:
        self.run_owners[run_id] = scope.resource_id if scope is not None else principal.resource_id
        self.run_owners.move_to_end(run_id)
        while len(self.run_owners) > MAX_REMEMBERED_RUNS:
            self.run_owners.popitem(last=False)

    def agent(self, agent_id: str) -> Agent:
        agent = self.runstream.agents.get(agent_id)
        if agent is None:
            raise ApiError(404, f"Agent with id {agent_id} not found")
        return agent

    @property
    def tasks(self) -> BackgroundTaskManager | None:
        return self.runstream.task_manager


async def json_body(request: Request) -> dict[str, Any]:
    """The request's JSON object body (400 if it is not one; an empty body is ``{}``)."""
    raw = await request.body()
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except ValueError as exc:
        raise ApiError(400, f"Invalid JSON body: {exc}") from None
    if not isinstance(body, dict):
        raise ApiError(400, "Invalid request body: expected a JSON object")
    return body


def query_int(request: Request, name: str, default: int | None, *, minimum: int = 0) -> int | None:
    value = request.query_params.get(name)
    if value is None or value == "":
        return default
    try:
        number = int(value)
    except ValueError:
        raise ApiError(400, f"Query parameter {name!r} must be an integer, got {value!r}") from None
    if number < minimum:
        raise ApiError(400, f"Query parameter {name!r} must be at least {minimum}")
    return number


def query_date(request: Request, name: str) -> datetime | None:
    """An ISO 8601 query parameter (naive means UTC); 400 if malformed."""
    value = request.query_params.get(name)
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise ApiError(400, f"Query parameter {name!r} must be an ISO 8601 date, got {value!r}") from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def json_response(value: Any, status: int = 200) -> Response:
    text = encode_json(value)
    if text is None:
        raise ApiError(500, "The response could not be encoded as JSON")
    return Response(text, status_code=status, media_type="application/json")
