"""Mastra's thread signal routes: how Mastra Studio chats with an agent that has memory.

Studio 1.31 opens ``POST /agents/:id/threads/subscribe`` (an SSE stream that stays open) for the
thread on screen, then sends each message with ``POST /agents/:id/send-message``; the reply
arrives on the subscription, not on the send's response. Approvals go through
``send-tool-approval``, and ``threads/abort`` stops the thread's run. As in Mastra:

- the subscription starts with a ``: connected`` comment and carries every chunk of every run on
  the thread (the runs are until-idle, so a background task's follow-up turn comes too), plus a
  transient ``data-user-message`` chunk for each accepted message, sent just before its run's chunks;
- a message sent while a run is going is accepted at once and runs after it (``queue-message``
  always queues);
- answers: ``{accepted, runId, signal}`` for a message, ``{accepted, runId, toolCallId}`` for an
  approval, ``{aborted}`` for an abort.

A thread belongs to its resource: naming another resource's thread is a 404, and a confined
principal can only use its own resource.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass, field

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from runstream._clock import iso_datetime
from runstream._json import JsonObject, JsonValue
from runstream.agent import Agent
from runstream.memory import MemoryScope
from runstream.run.output import RunOutput
from runstream.server.auth import Principal, principal_of
from runstream.server.body import parse_stream_body
from runstream.server.context import ServerContext, json_body, json_response
from runstream.server.errors import ApiError
from runstream.server.limits import MAX_TOOL_RESULT_MESSAGES, check_metadata, check_reason, continuation_start
from runstream.server.mastra import forget_new_thread, start_stream
from runstream.server.messages import to_prompt
from runstream.server.sse import SSEResponse, data_frame
from runstream.server.streaming import Run, detach_run, reserve
from runstream.server.suspended_runs import suspended_run_json
from runstream.server.wire import encode_json
from runstream.storage.records import utc_now

logger = logging.getLogger("runstream.server")

CONNECTED = b": connected\n\n"
MAX_ID_LENGTH = 256
MAX_QUEUED_FRAMES = 10_000
MAX_QUEUED_MESSAGES = 100
CLIENT_ONLY_OPTIONS = frozenset({"clientToolsResolver", "abortSignal", "onChunk", "onFinish"})
"""``streamOptions`` keys client-js keeps for itself (functions, dropped from JSON anyway)."""

ThreadKey = tuple[str, str, str]
"""(agent id, resource id, thread id)."""


@dataclass(eq=False)
class _Subscriber:
    frames: asyncio.Queue[bytes | None] = field(default_factory=lambda: asyncio.Queue(MAX_QUEUED_FRAMES + 1))

    def push(self, frame: bytes) -> bool:
        """Queue a frame; False (and the stream is ended) if the reader fell too far behind."""
        if self.frames.qsize() < MAX_QUEUED_FRAMES:
            self.frames.put_nowait(frame)
            return True
        while not self.frames.empty():
            self.frames.get_nowait()
        self.frames.put_nowait(None)
        return False


@dataclass(eq=False)
class _Channel:
    """One thread's subscribers and the chain of runs that stream into them, one at a time."""

    subscribers: set[_Subscriber] = field(default_factory=set)
    tail: asyncio.Task[None] | None = None
    queued: int = 0
    current_run: str | None = None

    def publish(self, frame: bytes) -> None:
        for subscriber in list(self.subscribers):
            if not subscriber.push(frame):
                logger.warning("thread subscriber fell %d frames behind; ending it", MAX_QUEUED_FRAMES)
                self.subscribers.discard(subscriber)

    @property
    def busy(self) -> bool:
        return self.tail is not None and not self.tail.done()


def _text_field(body: JsonObject, key: str) -> str:
    value = body.get(key)
    if not isinstance(value, str) or not value or len(value) > MAX_ID_LENGTH:
        raise ApiError(400, f"Invalid request body: '{key}' must be a non-empty string (at most 256)")
    return value


def _retrieved(future: asyncio.Future[None]) -> None:
    """Mark a start's outcome as seen (its caller answers with it, or has gone)."""
    if not future.cancelled():
        future.exception()


def _as_run(data: str, run_id: str) -> str:
    """A chunk of a follow-up turn carries the thread run's id, as on Mastra's thread stream.

    An until-idle stream gives each continuation turn a run id of its own (``agent.stream``
    does in Mastra too); Mastra's thread runtime starts the turn under the run it continues, so
    subscribers (Studio, client-js's client-tool loop, which keys a run's tools by its id) see
    one run per accepted message.
    """
    if '"runId"' not in data:
        return data
    chunk = json.loads(data)
    if not isinstance(chunk, dict) or chunk.get("runId") in (None, run_id):
        return data
    chunk["runId"] = run_id
    return encode_json(chunk) or data


def _as_tool_messages(messages: JsonValue) -> JsonValue:
    """client-js sends each client tool's outcome as an assistant message holding the call and
    its ``tool-result``; the call is already stored in the thread, so keep only the result, as a
    ``tool`` message (Mastra's message list merges them the same way)."""
    if not isinstance(messages, list):
        return messages
    out: list[JsonValue] = []
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if (
            not isinstance(message, dict)
            or not isinstance(content, list)
            or message.get("role") != "assistant"
        ):
            out.append(message)
            continue
        results: list[JsonValue] = [
            p for p in content if isinstance(p, dict) and p.get("type") == "tool-result"
        ]
        answered = [p.get("toolCallId") for p in results if isinstance(p, dict)]
        rest = [
            p
            for p in content
            if not (
                isinstance(p, dict) and (p.get("type") == "tool-result" or p.get("toolCallId") in answered)
            )
        ]
        if rest:
            out.append({**message, "content": rest})
        if results:
            out.append({"role": "tool", "content": results})
    return out


class ThreadRoutes:
    def __init__(self, ctx: ServerContext) -> None:
        self.ctx = ctx
        self.channels: dict[ThreadKey, _Channel] = {}

    def routes(self) -> list[Route]:
        a = "/agents/{agent_id}"
        return [
            Route(f"{a}/threads/subscribe", self.subscribe, methods=["POST"]),
            Route(f"{a}/threads/abort", self.abort, methods=["POST"]),
            Route(f"{a}/send-message", self.send_message, methods=["POST"]),
            Route(f"{a}/queue-message", self.queue_message, methods=["POST"]),
            Route(f"{a}/send-tool-approval", self.send_tool_approval, methods=["POST"]),
        ]

    async def _thread(
        self,
        request: Request,
        body: JsonObject,
        *,
        foreign: Callable[[Agent, str], ApiError] | None = None,
    ) -> tuple[Agent, ThreadKey]:
        """The agent and the caller's thread named by the body (404 for another's thread: the
        route's answer for a thread it does not know, ``foreign``'s, so the two look alike)."""
        agent = self.ctx.agent(request.path_params["agent_id"])
        thread_id = _text_field(body, "threadId")
        requested = body.get("resourceId")
        if requested is not None:
            requested = _text_field(body, "resourceId")
        resource = principal_of(request).resource(requested)
        if resource is None:
            raise ApiError(400, "Invalid request body: 'resourceId' is required")
        thread = await self.ctx.runstream.storage.get_thread(thread_id)
        if thread is not None and thread.resource_id != resource:
            raise foreign(agent, thread_id) if foreign is not None else ApiError(404, "Thread not found")
        return agent, (agent.id, resource, thread_id)

    def _channel(self, key: ThreadKey) -> _Channel:
        channel = self.channels.get(key)
        if channel is None:
            channel = self.channels[key] = _Channel()
        return channel

    def _forget_if_idle(self, key: ThreadKey) -> None:
        channel = self.channels.get(key)
        if channel is not None and not channel.subscribers and not channel.busy:
            del self.channels[key]

    # -- the subscription --------------------------------------------------------------------------
    async def subscribe(self, request: Request) -> Response:
        _, key = await self._thread(request, await json_body(request))
        subscriber = _Subscriber()
        self._channel(key).subscribers.add(subscriber)

        async def frames() -> AsyncGenerator[bytes, None]:
            try:
                yield CONNECTED
                while (frame := await subscriber.frames.get()) is not None:
                    yield frame
            finally:
                channel = self.channels.get(key)
                if channel is not None:
                    channel.subscribers.discard(subscriber)
                self._forget_if_idle(key)

        return SSEResponse(frames(), heartbeat_s=self.ctx.heartbeat_s)

    # -- messages ----------------------------------------------------------------------------------
    async def send_message(self, request: Request) -> Response:
        return await self._message(request, queue=False)

    async def queue_message(self, request: Request) -> Response:
        return await self._message(request, queue=True)

    async def _message(self, request: Request, *, queue: bool) -> Response:
        body = await json_body(request)
        agent, key = await self._thread(request, body)
        if agent.memory is None:
            raise ApiError(400, f"Agent {agent.id} has no memory: thread messages need one")
        message = body.get("message")
        contents = message.get("contents") if isinstance(message, dict) else None
        if not isinstance(message, dict) or not isinstance(contents, str | list):
            raise ApiError(400, "Invalid request body: 'message.contents' must be a string or parts")
        metadata = check_metadata(message.get("metadata"), "message.metadata")
        if_idle = body.get("ifIdle") or {}
        if not isinstance(if_idle, dict):
            raise ApiError(400, "Invalid request body: 'ifIdle' must be an object")
        options = if_idle.get("streamOptions") or {}
        if not isinstance(options, dict):
            raise ApiError(400, "Invalid request body: 'ifIdle.streamOptions' must be an object")
        run_id = str(uuid.uuid4())
        stream_body: JsonObject = {
            **options,
            "memory": {"thread": key[2], "resource": key[1]},
            "runId": run_id,
        }
        principal = principal_of(request)
        parsed = parse_stream_body(stream_body, principal, until_idle=True, need_messages=False)
        user_message = to_prompt([{"role": "user", "content": contents}])[0]
        accepted = utc_now()
        signal_id = str(uuid.uuid4())
        signal = {
            "contents": contents,
            "metadata": metadata or {},
            "type": "user",
            "tagName": "user",
            "id": signal_id,
            "acceptedAt": iso_datetime(accepted),
            "createdAt": iso_datetime(accepted),
        }
        notice = encode_json(
            {"type": "data-user-message", "data": signal, "transient": True, "runId": run_id}
        )
        memory, scope = agent.memory, MemoryScope(key[2], key[1])

        async def start() -> RunOutput:
            # Stored under the signal's id before the run (which then has no input), as Mastra
            # does: Studio matches the message it showed with the stored one by that id.
            storage = self.ctx.runstream.storage
            existed = await storage.get_thread(scope.thread_id) is not None
            await memory.save_message(scope, signal_id, user_message)
            try:
                run = await start_stream(self.ctx, agent, parsed, principal)
            except ApiError:  # refused: the message was not accepted, so it is not kept either
                await storage.delete_messages([signal_id])
                if not existed:
                    await forget_new_thread(storage, scope)
                raise
            await detach_run(self.ctx, run, principal)
            return run.out

        await self._enqueue(key, start, notice, wait_for_start=not queue)
        return json_response({"accepted": True, "runId": run_id, "signal": signal})

    async def _enqueue(
        self,
        key: ThreadKey,
        start: Callable[[], Awaitable[RunOutput]],
        notice: str | None,
        *,
        wait_for_start: bool,
    ) -> None:
        """Run ``start`` after the thread's current run, streaming its events to subscribers.

        When the thread is idle and ``wait_for_start``, this returns once the run has started,
        so a bad request is the caller's 4xx rather than an error on the subscription. The slot
        is taken before anything is awaited: a message sent at the same moment queues behind
        this one instead of running beside it on the same thread.
        """
        channel = self._channel(key)
        if channel.queued >= MAX_QUEUED_MESSAGES:
            raise ApiError(429, "Too many messages are waiting on this thread", headers={"retry-after": "1"})
        started = asyncio.get_running_loop().create_future() if wait_for_start and not channel.busy else None
        previous = channel.tail
        channel.queued += 1
        channel.tail = asyncio.create_task(self._stream(key, previous, start, notice, started))
        channel.tail.add_done_callback(lambda _: self._forget_if_idle(key))
        if started is not None:
            started.add_done_callback(_retrieved)  # also when the caller has gone
            await asyncio.shield(started)

    async def _stream(
        self,
        key: ThreadKey,
        previous: asyncio.Task[None] | None,
        start: Callable[[], Awaitable[RunOutput]],
        notice: str | None,
        started: asyncio.Future[None] | None,
    ) -> None:
        channel = self._channel(key)
        if previous is not None:
            await asyncio.gather(previous, return_exceptions=True)
        channel.queued -= 1
        try:
            out = await start()
        except Exception as exc:
            if started is not None:  # the request that waits for the start answers with it
                started.set_exception(exc)
                return
            logger.warning("thread %s: a queued message could not start: %s", key[2], exc)
            error = {"type": "error", "from": "AGENT", "payload": {"error": {"message": str(exc)}}}
            channel.publish(data_frame(encode_json(error) or "{}"))
            return
        if started is not None:
            started.set_result(None)
        channel.current_run = out.run_id
        if notice is not None:
            # Before the run's ``start`` (Mastra sends it just after): Studio 1.31 drops the empty
            # assistant message ``start`` opened when this echo arrives after it, splits the reply
            # into two messages, and merges them out of order once it refetches the stored turn.
            channel.publish(data_frame(notice))
        try:
            async for _, data in self.ctx.registry.log.read(out.run_id, 0):
                channel.publish(data_frame(_as_run(data, out.run_id)))
        finally:
            channel.current_run = None

    # -- approvals and aborts ----------------------------------------------------------------------
    async def send_tool_approval(self, request: Request) -> Response:
        body = await json_body(request)
        agent, key = await self._thread(request, body, foreign=_no_waiting_run)
        call_id = _text_field(body, "toolCallId")
        approved = body.get("approved")
        if not isinstance(approved, bool):
            raise ApiError(400, "Invalid request body: 'approved' must be a boolean")
        reason = check_reason(body.get("reason"))
        messages = body.get("messages")
        if isinstance(messages, list) and len(messages) > MAX_TOOL_RESULT_MESSAGES:
            raise ApiError(
                400, f"Invalid request body: 'messages' may hold at most {MAX_TOOL_RESULT_MESSAGES} messages"
            )
        principal = principal_of(request)
        if messages and approved:
            run_id = await self._continue_with_messages(agent, key, body, principal)
            return json_response({"accepted": True, "runId": run_id, "toolCallId": call_id})
        run_id = await self._waiting_run(agent, key, call_id)
        await self.ctx.owners.check(run_id, principal)

        async def start() -> RunOutput:
            slot = reserve(self.ctx, key[1])
            with continuation_start(slot):
                if approved:
                    out = await agent.approve_tool_call(run_id=run_id, tool_call_id=call_id)
                else:
                    out = await agent.decline_tool_call(run_id=run_id, tool_call_id=call_id, reason=reason)
            await detach_run(self.ctx, Run(out, agent, slot, MemoryScope(key[2], key[1])), principal)
            return out

        await self._enqueue(key, start, None, wait_for_start=True)
        return json_response({"accepted": True, "runId": run_id, "toolCallId": call_id})

    async def _continue_with_messages(
        self, agent: Agent, key: ThreadKey, body: JsonObject, principal: Principal
    ) -> str:
        """Client-side tool results (``messages``): a new until-idle run on the thread that
        continues from them, after the thread's current run, as Mastra's ``continueWithMessages``.

        client-js sends them when a run on the subscription stopped for its client tools; the
        results are written into the stored assistant message that holds the calls.
        """
        if agent.memory is None:
            raise ApiError(400, f"Agent {agent.id} has no memory: thread messages need one")
        options = body.get("streamOptions") or {}
        if not isinstance(options, dict):
            raise ApiError(400, "Invalid request body: 'streamOptions' must be an object")
        run_id = str(uuid.uuid4())
        stream_body: JsonObject = {
            **{k: v for k, v in options.items() if k not in CLIENT_ONLY_OPTIONS},
            "messages": _as_tool_messages(body["messages"]),
            "memory": {"thread": key[2], "resource": key[1]},
            "runId": run_id,
        }
        parsed = parse_stream_body(stream_body, principal, until_idle=True)

        async def start() -> RunOutput:
            run = await start_stream(self.ctx, agent, parsed, principal)
            await detach_run(self.ctx, run, principal)
            return run.out

        await self._enqueue(key, start, None, wait_for_start=True)
        return run_id

    async def _waiting_run(self, agent: Agent, key: ThreadKey, call_id: str) -> str:
        """The run on this thread that waits for a decision on ``call_id`` (from storage)."""
        for data in await agent.suspended_runs():
            run = suspended_run_json(data)
            if (run.get("threadId"), run.get("resourceId")) != (key[2], key[1]):
                continue
            if any(c["toolCallId"] == call_id and c["requiresApproval"] for c in run["toolCalls"]):
                return str(run["runId"])
        raise _no_waiting_run(agent, key[2])

    async def abort(self, request: Request) -> Response:
        _, key = await self._thread(request, await json_body(request))
        channel = self.channels.get(key)
        run_id = channel.current_run if channel is not None else None
        return json_response({"aborted": run_id is not None and self.ctx.registry.abort(run_id)})


def _no_waiting_run(agent: Agent, thread_id: str) -> ApiError:
    """Mastra's 404 when no run on the thread waits for a decision (and for another's thread)."""
    return ApiError(
        404,
        f'Agent "{agent.name}" sendToolApproval() could not find an active or suspended run for '
        f'thread "{thread_id}". The run may have already completed or been resumed.',
    )
