"""What every route handler shares: the runtime, the run registry, and request helpers."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from starlette.requests import Request
from starlette.responses import Response

from runstream._json import JsonObject
from runstream.agent import Agent
from runstream.runtime import Runstream
from runstream.server.errors import ApiError
from runstream.server.limits import MAX_PAGE, MAX_PER_PAGE, parse_json
from runstream.server.resumable import RunRegistry
from runstream.server.run_owners import RunOwners
from runstream.server.wire import encode_json
from runstream.tasks.coordination import TaskManager

MAX_REMEMBERED_RUNS = 10_000


@dataclass(slots=True)
class ServerContext:
    runstream: Runstream
    registry: RunRegistry
    heartbeat_s: float | None
    owners: RunOwners = field(init=False)
    """Who owns each run the server started (kept in the runtime's storage)."""

    def __post_init__(self) -> None:
        self.owners = RunOwners(self.runstream.storage)

    def agent(self, agent_id: str) -> Agent:
        agent = self.runstream.agents.get(agent_id)
        if agent is None:
            raise ApiError(404, f"Agent with id {agent_id} not found")
        return agent

    @property
    def tasks(self) -> TaskManager | None:
        return self.runstream.task_manager


async def json_body(request: Request) -> JsonObject:
    """The request's JSON object body (400 if it is not one; an empty body is ``{}``), parsed
    strictly and checked as :mod:`runstream.server.limits` says."""
    raw = await request.body()
    if not raw.strip():
        return {}
    body = parse_json(raw)
    if not isinstance(body, dict):
        raise ApiError(400, "Invalid request body: expected a JSON object")
    return body


def query_int(
    request: Request, name: str, default: int | None, *, minimum: int = 0, maximum: int = MAX_PAGE
) -> int | None:
    """An integer query parameter in ``[minimum, maximum]`` (400 naming it otherwise)."""
    value = request.query_params.get(name)
    if value is None or value == "":
        return default
    if not (value.isascii() and value.lstrip("-").isdigit()) or len(value) > 12:
        raise ApiError(400, f"Query parameter {name!r} must be an integer from {minimum} to {maximum}")
    number = int(value)
    if not minimum <= number <= maximum:
        raise ApiError(400, f"Query parameter {name!r} must be an integer from {minimum} to {maximum}")
    return number


def query_page(request: Request) -> tuple[int, int | None]:
    """``page`` (from 0) and ``perPage`` (1 to :data:`MAX_PER_PAGE`, absent: everything)."""
    page = query_int(request, "page", 0) or 0
    return page, query_int(request, "perPage", None, minimum=1, maximum=MAX_PER_PAGE)


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


def json_response(value: object, status: int = 200) -> Response:
    text = encode_json(value)
    if text is None:
        raise ApiError(500, "The response could not be encoded as JSON")
    return Response(text, status_code=status, media_type="application/json")


def has_memory(agent: Agent) -> bool:
    """Whether the agent has memory: a ``Memory``, or a function of the request context."""
    return agent.memory is not None or agent.memory_resolver is not None
