"""``GET /agents/:agentId/suspended-runs`` (client-js ``agent.listSuspendedRuns``): the agent's
runs waiting for a human — a tool call to approve or a tool that suspended — read from storage,
so they survive a restart. Each lists only the calls it waits for."""

from __future__ import annotations

from datetime import datetime
from typing import Literal, NotRequired, TypedDict

from starlette.requests import Request
from starlette.responses import Response

from runstream._json import JsonObject, JsonValue
from runstream.agent import Agent
from runstream.server.auth import principal_of
from runstream.server.context import ServerContext, json_response, query_date, query_page


class SuspendedToolCall(TypedDict):
    toolCallId: str
    toolName: JsonValue
    args: JsonValue
    requiresApproval: bool
    suspendPayload: NotRequired[JsonValue]


class SuspendedRunWire(TypedDict):
    """An item of ``GET /agents/:agentId/suspended-runs``."""

    runId: JsonValue
    status: Literal["suspended"]
    suspendedAt: JsonValue
    toolCalls: list[SuspendedToolCall]
    threadId: NotRequired[JsonValue]
    resourceId: NotRequired[JsonValue]


def _object(value: JsonValue) -> JsonObject:
    return value if isinstance(value, dict) else {}


def suspended_run_json(data: JsonObject) -> SuspendedRunWire:
    """One stored snapshot (see ``runstream.agent._suspension``) as a listing item."""
    pending = _object(data.get("pending"))
    approvals = pending.get("awaitingApproval")
    awaiting = (
        {call_id for call_id in approvals if isinstance(call_id, str)}
        if isinstance(approvals, list)
        else set()
    )
    suspended = _object(pending.get("suspended"))
    calls: list[SuspendedToolCall] = []
    stored_calls = pending.get("calls")
    for call in stored_calls if isinstance(stored_calls, list) else []:
        call_id = call.get("toolCallId") if isinstance(call, dict) else None
        if not isinstance(call, dict) or not isinstance(call_id, str):
            continue
        name, args = call.get("toolName"), call.get("args")
        if call_id in awaiting:
            calls.append({"toolCallId": call_id, "toolName": name, "args": args, "requiresApproval": True})
        elif call_id in suspended:
            calls.append(
                {
                    "toolCallId": call_id,
                    "toolName": name,
                    "args": args,
                    "requiresApproval": False,
                    "suspendPayload": suspended[call_id],
                }
            )
    out: SuspendedRunWire = {
        "runId": data.get("runId"),
        "status": "suspended",
        "suspendedAt": data.get("suspendedAt"),
        "toolCalls": calls,
    }
    memory = _object(_object(data.get("options")).get("memory"))
    if memory.get("thread"):
        out["threadId"], out["resourceId"] = memory["thread"], memory.get("resource")
    return out


def _within(stamp: JsonValue, after: datetime | None, before: datetime | None) -> bool:
    if after is None and before is None:
        return True
    if not isinstance(stamp, str):
        return False
    moment = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    return (after is None or moment >= after) and (before is None or moment <= before)


async def list_suspended_runs(ctx: ServerContext, agent: Agent, request: Request) -> Response:
    """Newest first; filters ``threadId``, ``resourceId``, ``fromDate``/``toDate`` (on
    ``suspendedAt``); pages ``page``/``perPage``. A confined caller sees its resource's runs."""
    principal = principal_of(request)
    resource = principal.resource(request.query_params.get("resourceId") or None)
    thread = request.query_params.get("threadId") or None
    after, before = query_date(request, "fromDate"), query_date(request, "toDate")
    page, per_page = query_page(request)
    runs = []
    for data in await agent.suspended_runs():
        run = suspended_run_json(data)
        recorded = await ctx.owners.owner(str(run["runId"]))
        # Visible only through the server's owner record; a run started in Python code has none,
        # so only an unconfined caller sees it (filtered by its memory resource).
        owner = recorded.resource_id if recorded is not None else run.get("resourceId")
        if (
            principal.owns(recorded.resource_id if recorded is not None else None)
            and (resource is None or owner == resource)
            and (thread is None or run.get("threadId") == thread)
            and _within(run["suspendedAt"], after, before)
        ):
            runs.append(run)
    runs.sort(key=lambda r: str(r["suspendedAt"] or ""), reverse=True)
    shown = runs[page * per_page : (page + 1) * per_page] if per_page else runs
    return json_response({"runs": shown, "total": len(runs)})
