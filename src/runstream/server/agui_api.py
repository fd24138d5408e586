"""``POST /ag-ui/{agentId}``: an agent for AG-UI clients (``@ag-ui/client``'s ``HttpAgent``,
CopilotKit), with the ``ag-ui-protocol`` package's models; the mapping is :mod:`runstream.agui`.

The request is a ``RunAgentInput``; the answer an SSE stream of AG-UI events. An agent with memory
keeps the conversation in the thread ``threadId`` of the caller's resource (a confined principal's
own, else ``forwardedProps.resourceId``, else the thread id): only the messages after the last
assistant message are new, and client tool results complete the stored calls. A thread of another
resource is a 404. Such an agent's run stays open until its background tasks are done, their
follow-up turns included (an until-idle stream). Without memory the client's messages are the
conversation. The route sits behind the app's auth like every other.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator

from ag_ui.core import BaseEvent, RunAgentInput
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from runstream._json import JsonObject
from runstream.agent import Agent
from runstream.agui import EventMapper, client_tools, context_messages, prompt_messages
from runstream.memory import MemoryScope
from runstream.server.auth import Principal, principal_of
from runstream.server.body import StreamRequest
from runstream.server.context import ServerContext, json_body
from runstream.server.errors import ApiError
from runstream.server.limits import check_id
from runstream.server.mastra import start_stream
from runstream.server.sse import SSE_HEADERS, SSEResponse, data_frame
from runstream.server.wire import public_chunk

MAX_MESSAGES = 1_000
MAX_TOOLS = 128


class AGUIRoutes:
    def __init__(self, ctx: ServerContext) -> None:
        self.ctx = ctx

    def routes(self) -> list[Route]:
        return [Route("/ag-ui/{agent_id}", self.run, methods=["POST"])]

    async def run(self, request: Request) -> Response:
        agent = self.ctx.agent(request.path_params["agent_id"])
        run_input = _parse(await json_body(request))
        principal = principal_of(request)
        try:
            tools = client_tools(run_input)
        except ValueError as exc:
            raise ApiError(400, f"Invalid tool in 'tools': {exc}") from None
        scope = self._scope(agent, run_input, principal)
        # The runstream run gets an id of its own (the client's runId only names the AG-UI run);
        # start_stream checks the thread's owner, claims the run for the caller and writes the
        # client's tool results into the thread, as for every other route.
        parsed = StreamRequest(
            messages=prompt_messages(run_input, only_new=scope is not None),
            memory=scope,
            until_idle=scope is not None,
            options={"context": context_messages(run_input), "client_tools": tools},
        )
        run = await start_stream(self.ctx, agent, parsed, principal)
        mapper = EventMapper(run_input, frozenset(tool.name for tool in tools))

        async def frames() -> AsyncGenerator[bytes, None]:
            for event in mapper.start():
                yield _frame(event)
            async for chunk in run.chunks():  # (its end frees the run's slot)
                for event in mapper.map(public_chunk(chunk)):
                    yield _frame(event)
            for event in mapper.finish():
                yield _frame(event)

        return SSEResponse(
            frames(), heartbeat_s=self.ctx.heartbeat_s, headers=SSE_HEADERS, on_disconnect=run.abandon
        )

    def _scope(self, agent: Agent, run_input: RunAgentInput, principal: Principal) -> MemoryScope | None:
        """The memory scope of the run (``None`` for an agent without memory)."""
        if agent.memory_resolver is None and (agent.memory is None or agent.memory.storage is None):
            return None  # (a memory function gets the runtime's storage per run)
        props = run_input.forwarded_props if isinstance(run_input.forwarded_props, dict) else {}
        requested = props.get("resourceId")
        if requested is not None:
            check_id(requested, "forwardedProps.resourceId")
        resource = principal.resource(requested) or run_input.thread_id
        return MemoryScope(run_input.thread_id, resource)


def _parse(body: JsonObject) -> RunAgentInput:
    try:
        run_input = RunAgentInput.model_validate(body)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()[:5])
        raise ApiError(400, f"Invalid AG-UI RunAgentInput: {problems}") from None
    if not run_input.thread_id or not run_input.run_id:
        raise ApiError(400, "Invalid AG-UI RunAgentInput: 'threadId' and 'runId' must not be empty")
    check_id(run_input.thread_id, "threadId")
    check_id(run_input.run_id, "runId")
    if len(run_input.messages) > MAX_MESSAGES or len(run_input.tools or []) > MAX_TOOLS:
        raise ApiError(400, f"At most {MAX_MESSAGES} messages and {MAX_TOOLS} tools per run")
    return run_input


def _frame(event: BaseEvent) -> bytes:
    return data_frame(event.model_dump_json(by_alias=True, exclude_none=True))
