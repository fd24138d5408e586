"""Mastra's memory routes: threads CRUD, a thread's messages, its working memory and an agent's
memory configuration, resource-scoped.

A thread belongs to one resource. A confined principal lists only its resource's threads, and
another resource's thread (or its messages, or its working memory) answers 404 as if it did not
exist.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import NotRequired, TypedDict, TypeGuard

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from runstream._clock import iso_datetime
from runstream._json import JsonObject, JsonValue
from runstream.memory import DEFAULT_LAST_MESSAGES, Memory
from runstream.memory.working import DEFAULT_TEMPLATE
from runstream.server.auth import principal_of
from runstream.server.body import memory_call_options
from runstream.server.context import ServerContext, has_memory, json_body, query_page
from runstream.server.errors import ApiError
from runstream.server.limits import MAX_WORKING_MEMORY, check_id, check_metadata, check_title
from runstream.storage import MessageContent, MessageRole, NotFoundError, Page, Storage, StoredMessage, Thread

MESSAGES_PER_PAGE = 40
"""Mastra's default page of a thread's messages (``GET /memory/threads/:id/messages``)."""


class ThreadWire(TypedDict):
    id: str
    title: str | None
    resourceId: str
    createdAt: str
    updatedAt: str
    metadata: NotRequired[Mapping[str, object]]


class MessageWire(TypedDict):
    """A stored message (DB format 2) as Mastra's memory routes send it."""

    id: str
    role: str
    createdAt: str
    threadId: str
    resourceId: str
    type: str
    content: Mapping[str, object]


class WorkingMemoryWire(TypedDict):
    enabled: bool
    scope: NotRequired[str]
    schema: NotRequired[JsonObject | None]
    template: NotRequired[str]
    agentManaged: NotRequired[bool]


class TitleWire(TypedDict):
    minMessages: int


class EnabledWire(TypedDict):
    enabled: bool


class MemoryConfigWire(TypedDict):
    """Mastra's merged memory config of a thread (``GET /memory/config``)."""

    lastMessages: int
    semanticRecall: bool
    generateTitle: bool | TitleWire
    workingMemory: WorkingMemoryWire
    observationalMemory: EnabledWire
    readOnly: NotRequired[bool]


def thread_wire(thread: Thread) -> ThreadWire:
    """A thread as Mastra sends it: no ``metadata`` key for a thread that has none."""
    wire: ThreadWire = {
        "id": thread.id,
        "title": thread.title,
        "resourceId": thread.resource_id,
        "createdAt": iso_datetime(thread.created_at),
        "updatedAt": iso_datetime(thread.updated_at),
    }
    if thread.metadata:
        wire["metadata"] = thread.metadata
    return wire


def message_wire(message: StoredMessage) -> MessageWire:
    return {
        "id": message.id,
        "role": message.role,
        "createdAt": iso_datetime(message.created_at),
        "threadId": message.thread_id,
        "resourceId": message.resource_id,
        "type": message.type,
        "content": message.content,
    }


class MemoryRoutes:
    def __init__(self, ctx: ServerContext) -> None:
        self.ctx = ctx

    @property
    def storage(self) -> Storage:
        return self.ctx.runstream.storage

    def routes(self) -> list[Route]:
        t = "/memory/threads/{thread_id}"
        return [
            Route("/memory/status", self.status),
            Route("/memory/threads", self.list_threads),
            Route("/memory/threads", self.create_thread, methods=["POST"]),
            Route(t, self.get_thread),
            Route(t, self.update_thread, methods=["PATCH"]),
            Route(t, self.delete_thread, methods=["DELETE"]),
            Route(f"{t}/messages", self.list_messages),
            Route("/memory/messages/delete", self.delete_messages, methods=["POST"]),
            Route("/memory/save-messages", self.save_messages, methods=["POST"]),
            Route("/memory/config", self.memory_config),
            Route(f"{t}/working-memory", self.working_memory),
            Route(f"{t}/working-memory", self.update_working_memory, methods=["POST"]),
        ]

    async def _owned(self, request: Request) -> Thread:
        thread_id = request.path_params["thread_id"]
        thread = await self.storage.get_thread(thread_id)
        principal = principal_of(request)
        if thread is None or not principal.owns(thread.resource_id):
            raise ApiError(404, "Thread not found")
        requested = request.query_params.get("resourceId")
        if requested and requested != thread.resource_id:
            raise ApiError(404, "Thread not found")
        return thread

    async def status(self, request: Request) -> Response:
        agent_id = request.query_params.get("agentId")
        if agent_id:
            return JSONResponse({"result": has_memory(self.ctx.agent(agent_id))})
        return JSONResponse({"result": any(has_memory(a) for a in self.ctx.runstream.agents.values())})

    async def list_threads(self, request: Request) -> Response:
        resource = principal_of(request).resource(request.query_params.get("resourceId") or None)
        if resource is None:
            raise ApiError(400, "Query parameter 'resourceId' is required")
        field = request.query_params.get("orderBy[field]", "updatedAt")
        direction = request.query_params.get("orderBy[direction]", "DESC").lower()
        if field not in ("createdAt", "updatedAt") or direction not in ("asc", "desc"):
            raise ApiError(400, "orderBy must be createdAt|updatedAt and ASC|DESC")
        page, per_page = query_page(request)
        found = await self.storage.list_threads(
            resource,
            page=page,
            per_page=per_page,
            order_by="created_at" if field == "createdAt" else "updated_at",
            order="asc" if direction == "asc" else "desc",
        )
        return JSONResponse(
            {
                "threads": [thread_wire(t) for t in found.items],
                "total": found.total,
                "page": found.page,
                "perPage": found.per_page if found.per_page is not None else False,
                "hasMore": found.has_more,
            }
        )

    async def create_thread(self, request: Request) -> Response:
        body = await json_body(request)
        principal = principal_of(request)
        requested = body.get("resourceId")
        resource = principal.resource(None if requested is None else check_id(requested, "resourceId"))
        if resource is None:
            raise ApiError(400, "Invalid request body: 'resourceId' is required")
        thread_id = check_id(body.get("threadId") or str(uuid.uuid4()), "threadId")
        title = check_title(body.get("title"), "title")
        metadata = check_metadata(body.get("metadata"), "metadata") or {}
        existing = await self.storage.get_thread(thread_id)
        if existing is not None and not principal.owns(existing.resource_id):
            raise ApiError(404, f"Thread {thread_id} not found")  # as if it did not exist: no oracle
        if existing is not None:
            raise ApiError(409, f"Thread {thread_id} already exists")
        thread = Thread(id=thread_id, resource_id=resource, title=title, metadata=metadata)
        await self.storage.save_thread(thread)
        return JSONResponse(thread_wire(thread))

    async def get_thread(self, request: Request) -> Response:
        return JSONResponse(thread_wire(await self._owned(request)))

    async def update_thread(self, request: Request) -> Response:
        thread = await self._owned(request)
        body = await json_body(request)
        if body.get("resourceId") not in (None, thread.resource_id):
            raise ApiError(400, "A thread cannot move to another resource")
        title = check_title(body.get("title"), "title")
        metadata = check_metadata(body.get("metadata"), "metadata")
        updated = await self.storage.update_thread(thread.id, title=title, metadata=metadata)
        return JSONResponse(thread_wire(updated))

    async def delete_thread(self, request: Request) -> Response:
        thread = await self._owned(request)
        await self.storage.delete_thread(thread.id)
        return JSONResponse({"result": "Thread deleted"})

    async def list_messages(self, request: Request) -> Response:
        """A page of a thread's messages as Mastra's memory route answers: ``perPage`` 40 unless
        asked, and ``uiMessages: null`` (Mastra's memory recall gives none; clients build them
        from ``messages``)."""
        thread = await self._owned(request)
        page, asked = query_page(request)
        per_page = asked if asked is not None else MESSAGES_PER_PAGE
        try:
            if _newest_first(request):
                found = await newest_page(self.storage, thread, page, per_page)
            else:
                found = await self.storage.list_messages(
                    thread.id, resource_id=thread.resource_id, page=page, per_page=per_page
                )
        except NotFoundError:
            raise ApiError(404, "Thread not found") from None
        return JSONResponse(
            {
                "messages": [message_wire(m) for m in found.items],
                "uiMessages": None,
                "total": found.total,
                "page": found.page,
                "perPage": per_page,
                "hasMore": found.has_more,
            }
        )

    async def delete_messages(self, request: Request) -> Response:
        body = await json_body(request)
        ids = _message_ids(body.get("messageIds"))
        principal = principal_of(request)
        owned = [m.id for m in await self.storage.get_messages(ids) if principal.owns(m.resource_id)]
        deleted = await self.storage.delete_messages(owned)
        return JSONResponse({"success": True, "message": f"{deleted} message(s) deleted"})

    async def save_messages(self, request: Request) -> Response:
        """Mastra's ``POST /memory/save-messages`` (client-js ``saveMessageToMemory``): messages in
        DB format 2 (or plain text content) saved into existing threads the caller owns; answers
        ``{"messages": [...]}`` as stored."""
        agent_id = request.query_params.get("agentId")
        if agent_id:
            self.ctx.agent(agent_id)
        body = await json_body(request)
        raw = body.get("messages")
        if not isinstance(raw, list) or not raw or len(raw) > MAX_SAVED_MESSAGES:
            raise ApiError(
                400, f"Invalid request body: 'messages' must be a list of 1 to {MAX_SAVED_MESSAGES} messages"
            )
        principal = principal_of(request)
        threads: dict[str, Thread] = {}
        messages: list[StoredMessage] = []
        for index, item in enumerate(raw):
            field = f"messages[{index}]"
            if not isinstance(item, dict):
                raise ApiError(400, f"Invalid request body: '{field}' must be an object")
            thread_id = check_id(item.get("threadId"), f"{field}.threadId")
            thread = threads.get(thread_id) or await self.storage.get_thread(thread_id)
            if thread is None or not principal.owns(thread.resource_id):
                raise ApiError(404, f"Thread {thread_id} not found")
            threads[thread_id] = thread
            if item.get("resourceId") not in (None, thread.resource_id):
                raise ApiError(
                    400, f"Invalid request body: '{field}.resourceId' must be the thread's resource"
                )
            named_role = item.get("role")
            role = _SAVED_ROLES.get(named_role) if isinstance(named_role, str) else None
            if role is None:
                raise ApiError(400, f"Invalid request body: '{field}.role' must be user, assistant or system")
            kind = item.get("type")
            messages.append(
                StoredMessage(
                    id=check_id(item["id"], f"{field}.id")
                    if item.get("id") is not None
                    else str(uuid.uuid4()),
                    thread_id=thread_id,
                    resource_id=thread.resource_id,
                    role=role,
                    content=_saved_content(item.get("content"), f"{field}.content"),
                    created_at=_saved_date(item.get("createdAt"), f"{field}.createdAt"),
                    type=kind if isinstance(kind, str) and len(kind) <= 32 else "v2",
                )
            )
        existing = await self.storage.get_messages([m.id for m in messages])
        if any(not principal.owns(m.resource_id) for m in existing):
            raise ApiError(409, "Invalid request body: a message id is already in use")
        await self.storage.save_messages(messages)
        return JSONResponse({"messages": [message_wire(m) for m in messages]})

    async def _memory(self, agent_id: str | None) -> Memory | None:
        if not agent_id:
            return None
        return await self.ctx.agent(agent_id).get_memory()

    async def memory_config(self, request: Request) -> Response:
        """The agent's memory options as Mastra's ``getMergedThreadConfig`` shows them."""
        agent_id = request.query_params.get("agentId")
        if not agent_id:
            raise ApiError(400, "Query parameter 'agentId' is required")
        memory = await self._memory(agent_id)
        return JSONResponse({"config": None if memory is None else memory_config_wire(memory)})

    async def working_memory(self, request: Request) -> Response:
        """Mastra's ``GET .../working-memory``: the stored text, where it lives (``source``), the
        template (Markdown, or the schema's empty document as JSON text) and whether the thread
        exists."""
        memory = await self._memory(request.query_params.get("agentId"))
        principal = principal_of(request)
        requested = request.query_params.get("resourceId") or None
        resource = principal.resource(None if requested is None else check_id(requested, "resourceId"))
        thread = await self.storage.get_thread(request.path_params["thread_id"])
        if thread is not None and (
            not principal.owns(thread.resource_id) or resource not in (None, thread.resource_id)
        ):
            thread = None  # another resource's thread answers as a missing one (nothing of it read)
        if memory is None:
            return JSONResponse(
                {
                    "workingMemory": None,
                    "source": "thread",
                    "workingMemoryTemplate": None,
                    "threadExists": False,
                }
            )
        config = memory.working_memory
        scope = config.scope if config is not None else "resource"
        source = "resource" if scope != "thread" and resource else "thread"
        text = None
        if config is not None:
            if scope == "resource" and not resource:
                raise ApiError(
                    400, "Query parameter 'resourceId' is required for resource-scoped working memory"
                )
            if thread is not None or scope != "thread":  # (a missing thread has no text of its own)
                text = await memory.get_working_memory(request.path_params["thread_id"], resource)
        return JSONResponse(
            {
                "workingMemory": text,
                "source": source,
                "workingMemoryTemplate": template_wire(memory),
                "threadExists": thread is not None,
            }
        )

    async def update_working_memory(self, request: Request) -> Response:
        """Mastra's ``POST .../working-memory``: replace the thread's (or its resource's) working
        memory with ``workingMemory``; the thread must exist and be the caller's."""
        body = await json_body(request)
        text = body.get("workingMemory")
        if not isinstance(text, str) or len(text) > MAX_WORKING_MEMORY:
            raise ApiError(
                400,
                f"Invalid request body: 'workingMemory' must be a string of at most {MAX_WORKING_MEMORY} characters",
            )
        memory = await self._memory(request.query_params.get("agentId"))
        if memory is None:
            raise ApiError(400, "Memory is not initialized")
        thread = await self._owned(request)
        principal = principal_of(request)
        requested = body.get("resourceId")
        resource = principal.resource(None if requested is None else check_id(requested, "resourceId"))
        if resource not in (None, thread.resource_id):
            raise ApiError(404, "Thread not found")
        config = body.get("memoryConfig")
        if config is not None:
            memory = memory.with_options(memory_call_options(config, where="memoryConfig"))
        if memory.working_memory is None:
            raise ApiError(400, "Working memory is not enabled for this memory instance")
        await memory.set_working_memory(thread.id, thread.resource_id, text)
        return JSONResponse({"success": True})


def memory_config_wire(memory: Memory) -> MemoryConfigWire:
    """Mastra's merged thread config for Studio (functions, e.g. a title model, are left out)."""
    working: WorkingMemoryWire = {"enabled": False}
    config = memory.working_memory
    if config is not None:
        working = {"enabled": True, "scope": config.scope}
        if config.schema is not None:
            working["schema"] = config.json_schema()
        else:
            working["template"] = config.template or DEFAULT_TEMPLATE
        if not config.agent_managed:
            working["agentManaged"] = False
    title = memory.generate_title
    wire: MemoryConfigWire = {
        "lastMessages": memory.last_messages if memory.last_messages is not None else DEFAULT_LAST_MESSAGES,
        "semanticRecall": False,
        "generateTitle": False
        if title is None
        else ({"minMessages": title.min_messages} if title.min_messages != 1 else True),
        "workingMemory": working,
        "observationalMemory": {"enabled": False},
    }
    if memory.read_only:
        wire["readOnly"] = True
    return wire


def template_wire(memory: Memory) -> dict[str, str] | None:
    """Mastra's ``workingMemoryTemplate`` of the route: ``None`` without working memory."""
    config = memory.working_memory
    if config is None:
        return None
    if config.format == "json":
        return {"format": "json", "content": json.dumps(config.empty_document(), separators=(",", ":"))}
    return {"format": "markdown", "content": config.template_content()}


def _newest_first(request: Request) -> bool:
    """``orderBy`` (JSON ``{"field": "createdAt", "direction": "ASC"|"DESC"}``) asks for DESC."""
    raw = request.query_params.get("orderBy")
    if not raw:
        return False
    try:
        order = json.loads(raw)
    except ValueError:
        raise ApiError(400, "Query parameter 'orderBy' must be JSON {field, direction}") from None
    if not isinstance(order, dict) or order.get("field", "createdAt") != "createdAt":
        raise ApiError(400, "Query parameter 'orderBy' can only order messages by createdAt")
    direction = str(order.get("direction", "ASC")).upper()
    if direction not in ("ASC", "DESC"):
        raise ApiError(400, "orderBy.direction must be ASC or DESC")
    return direction == "DESC"


async def newest_page(storage: Storage, thread: Thread, page: int, per_page: int) -> Page[StoredMessage]:
    """Page ``page`` of the thread's messages, newest first (Studio loads the latest ones)."""
    if page * per_page > 10_000_000:
        raise ApiError(400, "Query parameter 'page' is too large")
    newest = await storage.list_messages(
        thread.id, resource_id=thread.resource_id, last=(page + 1) * per_page
    )
    kept = newest.items[: max(0, len(newest.items) - page * per_page)]
    items = list(reversed(kept[-per_page:]))
    return Page(items, newest.total, page, per_page, newest.total > (page + 1) * per_page)


MAX_SAVED_MESSAGES = 100
_SAVED_ROLES: dict[str, MessageRole] = {"user": "user", "assistant": "assistant", "system": "system"}


def _saved_content(value: JsonValue, field: str) -> MessageContent:
    """A saved message's content: Mastra's format 2 object, or text."""
    if isinstance(value, str):
        return {"format": 2, "parts": [{"type": "text", "text": value}], "content": value}
    if _is_format_2(value):
        return value
    raise ApiError(
        400, f"Invalid request body: '{field}' must be text or a format 2 content object with parts"
    )


def _is_format_2(value: JsonValue) -> TypeGuard[MessageContent]:
    """Mastra's format 2 object: ``format: 2`` and a list of typed parts (other keys are kept)."""
    if not isinstance(value, dict) or value.get("format") != 2:
        return False
    parts = value.get("parts")
    return isinstance(parts, list) and all(_typed(part) for part in parts)


def _typed(part: JsonValue) -> bool:
    return isinstance(part, dict) and isinstance(part.get("type"), str)


def _saved_date(value: JsonValue, field: str) -> datetime:
    if value is None:
        return datetime.now(UTC)
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00")) if isinstance(value, str) else None
    except ValueError:
        parsed = None
    if parsed is None:
        raise ApiError(400, f"Invalid request body: '{field}' must be an ISO 8601 date")
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def _message_ids(value: JsonValue) -> list[str]:
    items = value if isinstance(value, list) else [value]
    ids = [item.get("id") if isinstance(item, dict) else item for item in items]
    if not ids or not all(isinstance(i, str) and i for i in ids):
        raise ApiError(400, "Invalid request body: 'messageIds' must be an id, an {id}, or an array of them")
    return [str(i) for i in ids]
