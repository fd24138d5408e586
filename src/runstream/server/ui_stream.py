"""The AI SDK UI message stream (what ``useChat`` reads), at ``POST /chat/:agentId``.

Chunks map as Mastra's ``@mastra/ai-sdk`` ``chatRoute`` maps them (v5 parts by default, which
AI SDK 5, 6 and 7 clients all accept; ``?v=6`` adds the v6 approval parts). Background tasks
become ``data-background-task-*`` parts. An until-idle run is one assistant message: its turns'
``start`` and ``finish`` are merged into one pair. Mastra's v5 gap (``tool-output-denied``, which
v5 clients reject) is closed by sending a declined call as ``tool-output-error``.

The request is ``useChat``'s (``{id, messages: UIMessage[], trigger}``) plus any stream options
(``memory``, ``clientTools``, ``untilIdle`` ...). With a memory thread only the new messages
are run, since memory holds the history; results of client tools (``addToolResult``) are
written into the stored assistant message first.

A response is detached from its connection when the URL has ``?resumable=true`` (or the run is
until-idle): the run goes on if the page reloads, and ``useChat({resume: true})`` re-attaches with
``GET /chat/:agentId/:chatId/stream`` (``DefaultChatTransport.reconnectToStream``), which replays
the response in flight from its start, or answers 204 when there is none.
"""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from typing import Literal, TypedDict

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from runstream._json import JsonObject, JsonValue
from runstream.server.auth import principal_of
from runstream.server.body import parse_stream_body
from runstream.server.context import MAX_REMEMBERED_RUNS, ServerContext, json_body
from runstream.server.errors import ApiError
from runstream.server.mastra import start_stream
from runstream.server.resumable import ReplayGapError
from runstream.server.sse import DONE, UI_STREAM_HEADERS, SSEResponse, data_frame
from runstream.server.streaming import detach_run, wants_ids
from runstream.server.wire import encode_json

logger = logging.getLogger("runstream.server")

FINISH_REASONS = frozenset({"stop", "length", "content-filter", "tool-calls", "error", "other", "unknown"})
_TOOL_PARTS = {
    "tool-call-input-streaming-start": "tool-input-start",
    "tool-call-delta": "tool-input-delta",
    "tool-call": "tool-input-available",
    "tool-result": "tool-output-available",
    "tool-error": "tool-output-error",
}

WireChunk = TypedDict(
    "WireChunk",
    {
        "type": str,
        "runId": str,
        "from": str,
        "payload": JsonObject,
        "object": JsonValue,
        "data": JsonValue,
        "id": str,
        "transient": bool,
    },
    total=False,
)
"""A chunk's wire JSON as decoded (see ``Chunk.to_wire``): the envelope and payload, or the
top-level fields of ``object-result`` and ``data-*`` chunks."""
_DATA_KEYS: tuple[Literal["type", "data", "id", "transient"], ...] = ("type", "data", "id", "transient")

UIChunk = JsonObject
"""A UI message chunk (``UIMessageChunk`` of the AI SDK), as ``useChat`` reads it."""


class UIStreamEncoder:
    """Turns Mastra wire chunks into UI message chunks (stateful: one per response)."""

    def __init__(self, version: int = 5, message_id: str | None = None) -> None:
        self.version = version
        self.message_id = message_id
        self.started = False
        self.finish_reason: str | None = None

    def feed(self, chunk: WireChunk) -> list[UIChunk]:
        kind = str(chunk.get("type"))
        p = chunk.get("payload") or {}
        if kind == "step-start":
            return [*self._start(p.get("messageId")), {"type": "start-step"}]
        if kind == "step-finish":
            return [{"type": "finish-step"}]
        if kind in ("text-start", "text-end"):
            return [{"type": kind, "id": p.get("id")}]
        if kind == "text-delta":
            return [{"type": "text-delta", "id": p.get("id"), "delta": p.get("text", "")}]
        if kind == "file":
            return [
                {
                    "type": "file",
                    "mediaType": p.get("mimeType"),
                    "url": f"data:{p.get('mimeType')};base64,{p.get('data')}",
                }
            ]
        if kind in _TOOL_PARTS:
            return [self._tool(kind, p)]
        if kind == "tool-call-approval":
            return self._approval(chunk, p)
        if kind == "tool-call-suspended":
            data = {**{k: p.get(k) for k in ("toolCallId", "toolName", "suspendPayload", "resumeSchema")}}
            return [
                {
                    "type": "data-tool-call-suspended",
                    "id": p.get("toolCallId"),
                    "data": {"state": "suspended", "runId": chunk.get("runId"), **data},
                }
            ]
        if kind == "tool-output-denied":
            if self.version >= 6:
                return [{"type": "tool-output-denied", "toolCallId": p.get("toolCallId")}]
            approval = p.get("approval")
            reason = (
                isinstance(approval, dict) and approval.get("reason")
            ) or "Tool call was not approved by the user"
            return [{"type": "tool-output-error", "toolCallId": p.get("toolCallId"), "errorText": reason}]
        if kind.startswith("background-task-"):
            return [self._background(kind, chunk, p)]
        if kind.startswith("data-"):
            return [{k: chunk[k] for k in _DATA_KEYS if k in chunk}]
        if kind == "object-result":
            return [{"type": "data-structured-output", "data": {"object": chunk.get("object")}}]
        if kind == "tripwire":
            keys = ("reason", "retry", "metadata", "processorId")
            self.finish_reason = self.finish_reason or "other"
            return [{"type": "data-tripwire", "data": {k: p.get(k) for k in keys}}]
        if kind == "error":
            return [{"type": "error", "errorText": _error_text(p.get("error"))}]
        if kind == "abort":
            return [{"type": "abort"}]
        if kind == "finish":
            step_result = p.get("stepResult")
            finished = step_result.get("reason") if isinstance(step_result, dict) else None
            self.finish_reason = (
                finished if isinstance(finished, str) and finished in FINISH_REASONS else "other"
            )
        return []  # start (held until step-start), reasoning, sources, raw, progress metadata ...

    def _start(self, message_id: JsonValue) -> list[UIChunk]:
        if self.started:
            return []
        self.started = True
        return [{"type": "start", "messageId": self.message_id or message_id}]

    def _tool(self, kind: str, p: JsonObject) -> UIChunk:
        part: UIChunk = {"type": _TOOL_PARTS[kind], "toolCallId": p.get("toolCallId")}
        if kind == "tool-call-input-streaming-start":
            part.update(toolName=p.get("toolName"), dynamic=False)
        elif kind == "tool-call-delta":
            part["inputTextDelta"] = p.get("argsTextDelta", "")
        elif kind == "tool-call":
            part.update(toolName=p.get("toolName"), input=p.get("args", {}))
        elif kind == "tool-result":
            part["output"] = p.get("result")
        else:
            part["errorText"] = _error_text(p.get("error"))
        return part

    def _approval(self, chunk: WireChunk, p: JsonObject) -> list[UIChunk]:
        run_id, call_id = chunk.get("runId"), p.get("toolCallId")
        data: JsonObject = {
            "state": "data-tool-call-approval",
            "runId": run_id,
            **{k: p.get(k) for k in ("toolCallId", "toolName", "args", "resumeSchema")},
        }
        parts: list[UIChunk] = [{"type": "data-tool-call-approval", "id": call_id, "data": data}]
        if self.version >= 6:
            parts.insert(
                0,
                {
                    "type": "tool-approval-request",
                    "approvalId": f"{run_id}::{call_id}",
                    "toolCallId": call_id,
                },
            )
        return parts

    def _background(self, kind: str, chunk: WireChunk, p: JsonObject) -> UIChunk:
        name = f"data-{kind}"
        part: UIChunk = {"type": name, "data": {**p, "state": name, "runId": chunk.get("runId")}}
        part_id = p.get("taskId") or p.get("toolCallId")
        if part_id:
            part["id"] = part_id
        return part

    def close(self) -> list[UIChunk]:
        """The closing chunks: one ``finish`` for the whole response (if the run got that far)."""
        if self.finish_reason is None:
            return []
        return [*self._start(None), {"type": "finish", "finishReason": self.finish_reason}]


def _error_text(error: JsonValue) -> str:
    if isinstance(error, dict):
        return str(error.get("message") or encode_json(error))
    return str(error)


async def ui_frames(events: AsyncIterator[str], encoder: UIStreamEncoder) -> AsyncGenerator[bytes, None]:
    async for text in events:
        for part in encoder.feed(json.loads(text)):
            encoded = encode_json(part)
            if encoded is not None:
                yield data_frame(encoded)
    for part in encoder.close():
        yield data_frame(encode_json(part) or "{}")
    yield DONE


def _new_messages(messages: JsonValue, with_memory: bool) -> JsonValue:
    """With memory, only what follows the last assistant message is new (memory has the rest);
    a trailing assistant message carries client tool results and is kept."""
    if not with_memory or not isinstance(messages, list):
        return messages
    last = max(
        (i for i, m in enumerate(messages) if isinstance(m, dict) and m.get("role") == "assistant"),
        default=-1,
    )
    if last == len(messages) - 1:
        return messages[last:]
    return messages[last + 1 :]


@dataclass(frozen=True, slots=True)
class ChatStream:
    """A chat's detached response: its run and how its UI stream is encoded."""

    run_id: str
    version: int
    message_id: str | None


class ChatRoutes:
    def __init__(self, ctx: ServerContext) -> None:
        self.ctx = ctx
        self._active: OrderedDict[tuple[str, str], ChatStream] = OrderedDict()
        """(agent id, chat id) → the chat's latest detached response."""

    def routes(self) -> list[Route]:
        return [
            Route("/chat/{agent_id}", self.chat, methods=["POST"]),
            Route("/chat/{agent_id}/{chat_id}/stream", self.reconnect, methods=["GET"]),
        ]

    async def chat(self, request: Request) -> Response:
        agent = self.ctx.agent(request.path_params["agent_id"])
        version = request.query_params.get("v", "5")
        if version not in ("5", "6", "7"):
            raise ApiError(400, "Query parameter 'v' must be 5, 6 or 7")
        body = await json_body(request)
        if body.get("trigger") == "regenerate-message" and isinstance(given := body.get("messages"), list):
            messages = list(given)
            if messages and isinstance(messages[-1], dict) and messages[-1].get("role") == "assistant":
                messages.pop()
            body["messages"] = messages
        continuation_id = _continued_message_id(body.get("messages"))
        body["messages"] = _new_messages(body.get("messages"), body.get("memory") is not None)
        principal = principal_of(request)
        parsed = parse_stream_body(body, principal)
        parsed.run_id = None  # useChat's ids are chat/message ids, not run ids
        if continuation_id is not None and parsed.memory is not None:
            parsed.messages = [m for m in parsed.messages if m["role"] == "tool"]  # the rest is in memory
        detached = wants_ids(request) or parsed.until_idle is not False
        run = await start_stream(self.ctx, agent, parsed, principal)
        if not detached:
            return SSEResponse(
                ui_frames(run.events(str), UIStreamEncoder(int(version), continuation_id)),
                heartbeat_s=self.ctx.heartbeat_s,
                headers=UI_STREAM_HEADERS,
                on_disconnect=run.abandon,
            )
        await detach_run(self.ctx, run, principal)
        stream = ChatStream(run.run_id, int(version), continuation_id)
        chat_id = body.get("id")
        if isinstance(chat_id, str) and chat_id:
            self._active[(agent.id, chat_id)] = stream
            self._active.move_to_end((agent.id, chat_id))
            while len(self._active) > MAX_REMEMBERED_RUNS:
                self._active.popitem(last=False)
        return self._follow(stream)

    async def reconnect(self, request: Request) -> Response:
        """``useChat``'s resume: the chat's response in flight, replayed from its start; 204 when
        there is none (it ended, or was never resumable)."""
        agent = self.ctx.agent(request.path_params["agent_id"])
        stream = self._active.get((agent.id, request.path_params["chat_id"]))
        if stream is None or not self.ctx.registry.is_live(stream.run_id):
            return Response(status_code=204)
        info = await self.ctx.registry.log.info(stream.run_id)
        if info is None or not principal_of(request).owns(info.resource_id):
            return Response(status_code=204)
        return self._follow(stream)

    def _follow(self, stream: ChatStream) -> SSEResponse:
        """Read the run's replay log from the start: a reconnect gets the very same stream."""

        async def events() -> AsyncIterator[str]:
            try:
                async for _, data in self.ctx.registry.log.read(stream.run_id, 0):
                    yield data
            except ReplayGapError as exc:
                logger.warning("chat stream of run %s cannot be replayed: %s", stream.run_id, exc)

        encoder = UIStreamEncoder(stream.version, stream.message_id)
        return SSEResponse(
            ui_frames(events(), encoder), heartbeat_s=self.ctx.heartbeat_s, headers=UI_STREAM_HEADERS
        )


def _continued_message_id(messages: JsonValue) -> str | None:
    """A request ending with an assistant message continues it (client tool results)."""
    if isinstance(messages, list) and messages and isinstance(messages[-1], dict):
        last = messages[-1]
        if last.get("role") == "assistant" and isinstance(message_id := last.get("id"), str):
            return message_id
    return None
