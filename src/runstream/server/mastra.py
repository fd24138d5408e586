"""Mastra's agent and tool routes, as ``@mastra/client-js`` calls them.

Agents: list, details, ``generate`` (JSON), ``stream`` / ``stream-until-idle`` (SSE),
``approve-tool-call`` / ``decline-tool-call`` / ``resume-stream`` (SSE continuations of a run that
stopped for a human), ``suspended-runs`` (those runs, listed), ``observe`` (replay of a detached
run). Tools: list, details, execute, both at ``/tools`` and under an agent. Our extensions: ``GET /runs/:runId/stream`` (resumable replay
with SSE ids) and ``POST /runs/:runId/abort``.
"""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Literal, NotRequired, TypedDict

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from runstream._json import JsonObject
from runstream.abort import AbortController
from runstream.agent import Agent
from runstream.errors import InvalidInputError
from runstream.memory import MemoryScope
from runstream.request_context import RequestContext
from runstream.run.output import RunOutput
from runstream.run.output import full_output as output_full_output
from runstream.server.auth import Principal, principal_of
from runstream.server.body import StreamRequest, parse_stream_body, resume_options, trusted_options
from runstream.server.context import ServerContext, has_memory, json_body, json_response
from runstream.server.errors import ApiError
from runstream.server.limits import MAX_OFFSET, bounded_int, check_id, check_reason, continuation_start
from runstream.server.overrides import Originals, absorb_tool_results, restore_messages
from runstream.server.run_ids import run_key
from runstream.server.streaming import (
    Run,
    owned_run,
    parse_event_id,
    reconnect,
    replay,
    reserve,
    respond,
)
from runstream.server.suspended_runs import list_suspended_runs
from runstream.server.tasks_api import resume_task_stream
from runstream.server.wire import public_error
from runstream.server.workflow_info import WorkflowInfo, workflow_info
from runstream.storage import Storage, ThreadResourceMismatchError
from runstream.tools import Tool, ToolArgumentsError, ToolContext, ToolWriter
from runstream.trust import needs_approval, trusted_context
from runstream.workflows import Workflow


def query_request_context(request: Request) -> RequestContext:
    """``?requestContext=<base64 JSON object>``, as client-js sends it with a GET."""
    raw = request.query_params.get("requestContext")
    if raw is None:
        return RequestContext()
    try:
        value = json.loads(base64.b64decode(raw, validate=True).decode())
    except (ValueError, binascii.Error, UnicodeDecodeError):
        value = None
    if not isinstance(value, dict):
        raise ApiError(
            400, "Invalid requestContext query parameter: a base64-encoded JSON object is expected"
        )
    return RequestContext(value)


def caller_context(agent: Agent, request: Request) -> RequestContext:
    """The request context a GET resolves an agent's details for: the caller's own (the keys the
    auth hook set, and those the agent's author lets a request set), never another tenant's."""
    try:
        return trusted_context(agent, query_request_context(request), principal_of(request).context)
    except InvalidInputError as exc:
        raise ApiError(400, f"Invalid requestContext query parameter: {exc}") from None


class ToolWire(TypedDict):
    """Mastra's tool shape: schemas as superjson strings (``{"json": <schema>}``)."""

    id: str
    description: str
    inputSchema: str
    requireApproval: bool
    outputSchema: NotRequired[str]


class AgentRef(TypedDict):
    id: str
    name: str


class DefaultOptions(TypedDict):
    maxSteps: int


class StudioAgentFields(TypedDict):
    """What Mastra's agent details also carry, for features runstream has none of (Studio reads them)."""

    skills: list[JsonObject]
    workspaceTools: list[JsonObject]
    browserTools: list[JsonObject]
    hasBrowser: bool
    inputProcessors: list[JsonObject]
    outputProcessors: list[JsonObject]
    defaultGenerateOptionsLegacy: JsonObject
    defaultStreamOptionsLegacy: JsonObject
    source: Literal["code"]


class AgentWire(StudioAgentFields):
    """An agent's details (``GET /agents/:agentId``, and each entry of ``GET /agents``)."""

    id: str
    name: str
    description: str
    instructions: str
    tools: dict[str, ToolWire]
    agents: dict[str, AgentRef]
    workflows: dict[str, WorkflowInfo]
    provider: str
    modelId: str
    defaultOptions: DefaultOptions
    hasMemory: bool
    modelVersion: str
    supportsMemory: bool


def serialize_tool(tool: Tool) -> ToolWire:
    """Mastra's tool shape: schemas as superjson strings (``{"json": <schema>}``), as Mastra sends."""
    out: ToolWire = {
        "id": tool.name,
        "description": tool.description,
        "inputSchema": json.dumps({"json": tool.input_schema}),
        "requireApproval": tool.require_approval,
    }
    if tool.output_schema is not None:
        out["outputSchema"] = json.dumps({"json": tool.output_schema})
    return out


STUDIO_AGENT_FIELDS: StudioAgentFields = {
    "skills": [],
    "workspaceTools": [],
    "browserTools": [],
    "hasBrowser": False,
    "inputProcessors": [],
    "outputProcessors": [],
    "defaultGenerateOptionsLegacy": {},
    "defaultStreamOptionsLegacy": {},
    "source": "code",
}


async def serialize_agent(agent: Agent, context: RequestContext | None = None) -> AgentWire:
    """An agent's details; dynamic instructions, model and tools as they resolve for the
    request context client-js sends in the query (empty without one)."""
    model = await agent.get_model(context)
    return {
        "id": agent.id,
        "name": agent.name,
        "description": agent.description,
        "instructions": await agent.get_instructions(context),
        "tools": {name: serialize_tool(tool) for name, tool in (await agent.get_tools(context)).items()},
        "agents": {key: {"id": sub.id, "name": sub.name} for key, sub in agent.agents.items()},
        "workflows": {
            key: workflow_info(w, partial=True)
            for key, w in agent.workflows.items()
            if isinstance(w, Workflow)
        },
        "provider": model.provider,
        "modelId": model.model_id,
        "defaultOptions": {"maxSteps": agent.max_steps},
        "hasMemory": has_memory(agent),
        **STUDIO_AGENT_FIELDS,
        "modelVersion": getattr(model, "specification_version", "v2"),
        "supportsMemory": has_memory(agent),  # Studio chats over thread signals only then
    }


async def start_stream(ctx: ServerContext, agent: Agent, request: StreamRequest, principal: Principal) -> Run:
    """Start a run for a generate/stream body, owned by ``principal``.

    In this order, so a refused request changes nothing: the memory thread must be the caller's
    resource's (another resource's thread is a 404, as a missing one), the run takes a place
    under the live-run caps (429 when the process or the resource is full), the run id is claimed
    for the caller in its namespace (409 if another caller of it owns the id; see run_ids.py), and only then are client tool results
    written into the thread and the run started. Caller mistakes are 4xx.
    """
    if request.memory is not None and not has_memory(agent):
        request.memory = None  # as Mastra: an agent without memory streams and saves nothing
    options = await trusted_options(agent, {**request.options, "memory": request.memory}, principal)
    messages, scope = request.messages, request.memory
    thread = None if scope is None else await ctx.runstream.storage.get_thread(scope.thread_id)
    if scope is not None and thread is not None and thread.resource_id != scope.resource_id:
        raise ApiError(404, f"Thread {scope.thread_id} not found")
    owner_resource = scope.resource_id if scope is not None else principal.resource_id
    slot = reserve(ctx, owner_resource)  # (429 when the process or the resource is full)
    try:
        request.run_id = await ctx.owners.claim(request.run_id, principal, owner_resource)
        originals: Originals = []
        if scope is not None:
            messages = await absorb_tool_results(agent, scope, messages, originals)
        try:
            out = await agent.stream(
                messages, run_id=request.run_id, until_idle=request.until_idle, **options
            )
        except (ThreadResourceMismatchError, InvalidInputError) as exc:
            if scope is not None:  # the run did not start: leave the thread as it was
                await restore_messages(ctx.runstream.storage, originals)
                if thread is None:
                    await forget_new_thread(ctx.runstream.storage, scope)
            if isinstance(exc, ThreadResourceMismatchError):
                raise ApiError(404, f"Thread {scope.thread_id if scope else ''} not found") from None
            raise ApiError(400, str(exc)) from None
    except BaseException:
        slot.release()
        raise
    return Run(out, agent, slot, scope)


async def forget_new_thread(storage: Storage, scope: MemoryScope) -> None:
    """Delete the thread a refused request created, if nothing was written to it since."""
    thread = await storage.get_thread(scope.thread_id)
    if thread is None or thread.resource_id != scope.resource_id:
        return
    if not await storage.latest_messages(scope.thread_id, 1):
        await storage.delete_thread(scope.thread_id)


async def full_output(run: Run) -> dict[str, Any]:
    """Mastra's ``generate`` response, with ChunkType-style ``toolCalls`` (client-js reads ``payload``)."""
    out = run.out
    await out.consume()
    result = output_full_output(out.state)  # a failed run's error is in the body, as Mastra's server sends it
    full: dict[str, object] = dict(result)  # (reshaped for the wire below)
    state = out.state
    full["toolCalls"] = [chunk.to_wire() for chunk in state.tool_calls]
    full["toolResults"] = [chunk.to_wire() for chunk in state.tool_results]
    full["finishReason"] = state.finish_reason
    full["response"] = {"id": state.message_id, "messages": full.pop("messages")}
    full["steps"] = [{k: v for k, v in step.items() if k != "request"} for step in result["steps"]]
    if out.scoring_data is not None:  # (returnScorerData)
        full["scoringData"] = out.scoring_data
    return full


Continuation = Callable[[Agent, str, JsonObject], Awaitable[RunOutput]]


class MastraRoutes:
    def __init__(self, ctx: ServerContext) -> None:
        self.ctx = ctx

    def routes(self) -> list[Route]:
        a = "/agents/{agent_id}"
        return [
            Route("/agents", self.list_agents),
            Route(a, self.agent_details),
            Route(f"{a}/generate", self.generate, methods=["POST"]),
            Route(f"{a}/stream", self.stream, methods=["POST"]),
            Route(f"{a}/stream-until-idle", self.stream_until_idle, methods=["POST"]),
            Route(f"{a}/approve-tool-call", self.approve, methods=["POST"]),
            Route(f"{a}/decline-tool-call", self.decline, methods=["POST"]),
            Route(f"{a}/resume-stream", self.resume_stream, methods=["POST"]),
            Route(f"{a}/observe", self.observe, methods=["POST"]),
            Route(f"{a}/suspended-runs", self.suspended_runs),
            Route(f"{a}/tools/{{tool_id}}", self.agent_tool),
            Route(f"{a}/tools/{{tool_id}}/execute", self.execute_agent_tool, methods=["POST"]),
            Route("/tools", self.list_tools),
            Route("/tools/{tool_id}", self.tool_details),
            Route("/tools/{tool_id}/execute", self.execute_tool, methods=["POST"]),
            Route("/runs/{run_id}/stream", self.run_stream),
            Route("/runs/{run_id}/abort", self.abort_run, methods=["POST"]),
        ]

    # -- agents -------------------------------------------------------------------------------------
    async def list_agents(self, request: Request) -> Response:
        agents = self.ctx.runstream.agents.items()
        return json_response(
            {agent_id: await serialize_agent(a, caller_context(a, request)) for agent_id, a in agents}
        )

    async def agent_details(self, request: Request) -> Response:
        agent = self.ctx.agent(request.path_params["agent_id"])
        return json_response(await serialize_agent(agent, caller_context(agent, request)))

    async def _body(self, request: Request, *, until_idle: bool = False) -> tuple[Agent, StreamRequest]:
        agent = self.ctx.agent(request.path_params["agent_id"])
        body = await json_body(request)
        return agent, parse_stream_body(body, principal_of(request), until_idle=until_idle)

    async def generate(self, request: Request) -> Response:
        agent, body = await self._body(request)
        body.until_idle = False
        run = await start_stream(self.ctx, agent, body, principal_of(request))
        try:
            full = await full_output(run)
        except BaseException:  # cancelled: the client went away
            run.abandon()
            raise
        run.release()
        return json_response(full)

    async def stream(self, request: Request) -> Response:
        return await self._stream(request, until_idle=False)

    async def stream_until_idle(self, request: Request) -> Response:
        return await self._stream(request, until_idle=True)

    async def _stream(self, request: Request, *, until_idle: bool) -> Response:
        principal = principal_of(request)
        resumed = await reconnect(self.ctx, request, principal)
        if resumed is not None:
            return resumed
        agent, body = await self._body(request, until_idle=until_idle)
        detach = body.until_idle is not False
        run = await start_stream(self.ctx, agent, body, principal)
        return await respond(self.ctx, request, run, principal, detach=detach)

    # -- continuations of a run that stopped for a human ---------------------------------------------
    async def _continue(self, request: Request, body: JsonObject, start: Continuation) -> Response:
        principal = principal_of(request)
        agent = self.ctx.agent(request.path_params["agent_id"])
        run_id = run_key(principal, check_id(body.get("runId"), "runId"))
        _optional_id(body, "toolCallId")
        check_reason(body.get("reason"))
        owner = await self.ctx.owners.check(run_id, principal)
        slot = reserve(self.ctx, owner.resource_id if owner is not None else principal.resource_id)
        with continuation_start(slot):
            out = await start(agent, run_id, body)
        return await respond(self.ctx, request, Run(out, agent, slot), principal)

    async def approve(self, request: Request) -> Response:
        async def start(agent: Agent, run_id: str, body: JsonObject) -> RunOutput:
            options = await resume_options(agent, body, principal_of(request))
            return await agent.approve_tool_call(
                run_id=run_id, tool_call_id=_optional_id(body, "toolCallId"), **options
            )

        return await self._continue(request, await json_body(request), start)

    async def decline(self, request: Request) -> Response:
        async def start(agent: Agent, run_id: str, body: JsonObject) -> RunOutput:
            options = await resume_options(agent, body, principal_of(request))
            return await agent.decline_tool_call(
                run_id=run_id,
                tool_call_id=_optional_id(body, "toolCallId"),
                reason=check_reason(body.get("reason")),
                **options,
            )

        return await self._continue(request, await json_body(request), start)

    async def resume_stream(self, request: Request) -> Response:
        """Resume a suspended tool of a run, or (Mastra's remote path) a suspended background task."""
        body = await json_body(request)
        agent = self.ctx.agent(request.path_params["agent_id"])
        run_id, call_id = body.get("runId"), body.get("toolCallId")
        if isinstance(run_id, str) and isinstance(call_id, str):
            principal = principal_of(request)
            task_stream = await resume_task_stream(
                self.ctx, principal, agent.id, run_key(principal, run_id), call_id, body.get("resumeData")
            )
            if task_stream is not None:
                return task_stream

        async def start(agent: Agent, run_id: str, body: JsonObject) -> RunOutput:
            options = await resume_options(agent, body, principal_of(request))
            return await agent.resume_stream(
                body.get("resumeData"),
                run_id=run_id,
                tool_call_id=_optional_id(body, "toolCallId"),
                **options,
            )

        return await self._continue(request, body, start)

    async def suspended_runs(self, request: Request) -> Response:
        return await list_suspended_runs(self.ctx, self.ctx.agent(request.path_params["agent_id"]), request)

    # -- replays of detached runs ----------------------------------------------------------------------
    async def observe(self, request: Request) -> Response:
        """Mastra's ``observe``: the run's events from index ``offset`` (no SSE ids: client-js)."""
        self.ctx.agent(request.path_params["agent_id"])
        body = await json_body(request)
        principal = principal_of(request)
        run_id = run_key(principal, check_id(body.get("runId"), "runId"))
        offset = bounded_int(body.get("offset", 0), "offset", minimum=0, maximum=MAX_OFFSET)
        await owned_run(self.ctx, run_id, principal)
        return replay(self.ctx, run_id, offset, ids=False)

    async def run_stream(self, request: Request) -> Response:
        """Our resumable replay: ``Last-Event-ID`` or ``?after=<seq>``; events carry ``id:``."""
        named_run = request.path_params["run_id"]
        principal = principal_of(request)
        run_id = run_key(principal, named_run)
        await owned_run(self.ctx, run_id, principal)
        after = 0
        header = request.headers.get("last-event-id") or request.query_params.get("after")
        if header:
            named, after = parse_event_id(header)
            if named not in (None, named_run):
                raise ApiError(400, f"Last-Event-ID {header!r} belongs to another run")
        return replay(self.ctx, run_id, after, ids=True)

    async def abort_run(self, request: Request) -> Response:
        principal = principal_of(request)
        run_id = run_key(principal, request.path_params["run_id"])
        await owned_run(self.ctx, run_id, principal)
        return json_response({"runId": run_id, "aborted": self.ctx.registry.abort(run_id)})

    # -- tools -------------------------------------------------------------------------------------------
    def _all_tools(self) -> dict[str, Tool]:
        return {
            name: tool for agent in self.ctx.runstream.agents.values() for name, tool in agent.tools.items()
        }

    def _tool(self, tools: dict[str, Tool], tool_id: str) -> Tool:
        tool = tools.get(tool_id)
        if tool is None:
            raise ApiError(404, "Tool not found")  # Mastra's answer
        return tool

    async def list_tools(self, request: Request) -> Response:
        return json_response({name: serialize_tool(tool) for name, tool in self._all_tools().items()})

    async def tool_details(self, request: Request) -> Response:
        return json_response(serialize_tool(self._tool(self._all_tools(), request.path_params["tool_id"])))

    async def agent_tool(self, request: Request) -> Response:
        agent = self.ctx.agent(request.path_params["agent_id"])
        return json_response(serialize_tool(self._tool(agent.tools, request.path_params["tool_id"])))

    async def execute_tool(self, request: Request) -> Response:
        tool = self._tool(self._all_tools(), request.path_params["tool_id"])
        return await self._execute(request, tool, "")

    async def execute_agent_tool(self, request: Request) -> Response:
        agent = self.ctx.agent(request.path_params["agent_id"])
        return await self._execute(request, self._tool(agent.tools, request.path_params["tool_id"]), agent.id)

    async def _execute(self, request: Request, tool: Tool, agent_id: str) -> Response:
        """Run one tool directly (Mastra's ``tool.execute``), confined to the caller's resource.

        A tool that needs approval never runs this way: approval belongs to a person looking at
        a run, and this route has no run to stop (403; call it through an agent instead). The
        tool sees the caller's resource, and a thread only if that resource owns it. A tool that
        fails answers 422, not 500: client-js re-sends a request that got a 5xx, which would run
        the tool again. Arguments that do not match the input schema answer 200 with Mastra's
        ``{"error": true, "message", "validationErrors"}`` (client-js reads it as the result).
        """
        if tool.require_approval:
            raise ApiError(403, f"Tool {tool.name} requires approval: run it through an agent")
        body = await json_body(request)
        principal = principal_of(request)
        resource = principal.resource(_optional_id(body, "resourceId"))
        thread_id = _optional_id(body, "threadId")
        if thread_id is not None:
            thread = await self.ctx.runstream.storage.get_thread(thread_id)
            if thread is None or thread.resource_id != resource:
                raise ApiError(404, f"Thread {thread_id} not found")
        try:
            args = tool.validate_args(body.get("data", {}))
        except ToolArgumentsError as exc:  # Mastra: a 200 whose body says what to fix
            return json_response(exc.as_result())
        agents = self.ctx.runstream.agents
        owners = (
            [agents[agent_id]] if agent_id else [a for a in agents.values() if a.tools.get(tool.name) is tool]
        )
        for owner in owners:
            if await needs_approval(owner, tool, args, principal.context):
                raise ApiError(403, f"Tool {tool.name} requires approval: run it through agent {owner.id}")
        run_id = request.query_params.get("runId") or body.get("runId") or str(uuid.uuid4())
        run_id = run_key(principal, check_id(run_id, "runId"))
        call_id = str(uuid.uuid4())
        ctx = ToolContext(
            tool_call_id=call_id,
            tool_name=tool.name,
            run_id=run_id,
            agent_id=agent_id,
            writer=ToolWriter(lambda chunk: None, run_id, call_id, tool.name),
            abort_signal=AbortController().signal,
            thread_id=thread_id,
            resource_id=resource,
        )
        try:
            result = await tool.execute(args, ctx)
        except Exception as exc:
            public = public_error(exc, tool.name, run_id)  # (the whole error goes to the log)
            message = str(public["message"] if isinstance(public, dict) else public)
            raise ApiError(422, f"Tool {tool.name} failed: {message}" if public is exc else message) from exc
        return json_response(result)


def _optional_id(body: JsonObject, field: str) -> str | None:
    value = body.get(field)
    return None if value is None else check_id(value, field)
