"""Background-task routes: Mastra's list / get / stream, plus our cancel and resume.

The stream (``GET /background-tasks/stream``) carries the manager's lifecycle events as
``{"type", "payload"}`` and stays open until the client leaves. Tasks are resource-scoped: a
confined principal sees only its resource's tasks.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Mapping
from typing import cast

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from runstream._json import JsonValue
from runstream.server.auth import Principal, principal_of
from runstream.server.context import ServerContext, json_body, query_date, query_page
from runstream.server.errors import ApiError
from runstream.server.run_ids import run_key
from runstream.server.sse import DONE, SSEResponse, data_frame
from runstream.server.wire import chunk_json, encode_json, redact
from runstream.storage import TaskDateField, TaskFilter, TaskRecord, TaskStatus
from runstream.storage.records import TASK_STATUSES
from runstream.tasks.config import ConcurrencyLimitError, TaskNotFoundError, TaskStateError
from runstream.tasks.coordination import TaskManager
from runstream.tools import public_task_error

_DATE_FIELDS: dict[str, TaskDateField] = {
    "createdAt": "created_at",
    "startedAt": "started_at",
    "completedAt": "completed_at",
}
SETTLED_EVENTS = frozenset(
    {
        "background-task-completed",
        "background-task-failed",
        "background-task-cancelled",
        "background-task-suspended",
    }
)


def task_filter(request: Request, principal: Principal) -> TaskFilter:
    q = request.query_params
    status = q.get("status") or None
    if status is not None and status not in TASK_STATUSES:
        raise ApiError(400, f"Query parameter 'status' must be one of {', '.join(sorted(TASK_STATUSES))}")
    date_by = q.get("dateFilterBy", "createdAt")
    if date_by not in _DATE_FIELDS:
        raise ApiError(400, f"Query parameter 'dateFilterBy' must be one of {', '.join(_DATE_FIELDS)}")
    order = q.get("orderDirection", "asc").lower()
    if order not in ("asc", "desc"):
        raise ApiError(400, "Query parameter 'orderDirection' must be 'asc' or 'desc'")
    page, per_page = query_page(request)
    return TaskFilter(
        status=cast(TaskStatus | None, status),
        agent_id=q.get("agentId") or None,
        run_id=_run(q.get("runId"), principal),
        thread_id=q.get("threadId") or None,
        resource_id=principal.resource(q.get("resourceId") or None),
        tool_call_id=q.get("toolCallId") or None,
        tool_name=q.get("toolName") or None,
        date_field=_DATE_FIELDS[date_by],
        from_date=query_date(request, "fromDate"),
        to_date=query_date(request, "toDate"),
        order="desc" if order == "desc" else "asc",
        page=page,
        per_page=per_page,
    )


def task_json(task: TaskRecord) -> Mapping[str, object]:
    """A task as callers see it: a failed task's error as :func:`public_task_error` has it
    (a tool's own exception text and stack stay in the server's log)."""
    wire: dict[str, object] = dict(task.to_wire())
    if task.error is not None:
        wire["error"] = public_task_error(task.error, task.tool_name)
    return wire


async def owned_task(manager: TaskManager, task_id: str, principal: Principal) -> TaskRecord:
    task = await manager.get_task(task_id)
    if task is None or not principal.owns(task.resource_id):
        raise ApiError(404, "Background task not found")
    return task


def _manager(ctx: ServerContext) -> TaskManager:
    if ctx.tasks is None:
        raise ApiError(404, "Background tasks are not enabled on this server")
    return ctx.tasks


async def resume_task_stream(
    ctx: ServerContext, principal: Principal, agent_id: str, run_id: str, call_id: str, data: JsonValue
) -> SSEResponse | None:
    """Resume the suspended background task of that tool call; stream its events until it settles.

    ``None`` when no such task is suspended (the call then resumes a suspended run instead).
    """
    if ctx.tasks is None:
        return None
    manager = ctx.tasks
    found = await manager.list_tasks(
        TaskFilter(agent_id=agent_id, run_id=run_id, tool_call_id=call_id, status="suspended")
    )
    if not found.items or not principal.owns(found.items[0].resource_id):
        return None
    task = found.items[0]
    subscription = manager.subscribe(task_id=task.id, include_existing=False)
    try:
        await _resume(manager, task.id, data)
    except BaseException:
        await subscription.close()
        raise

    async def frames() -> AsyncGenerator[bytes, None]:
        try:
            async for chunk in subscription:
                text = chunk_json(chunk)
                if text is not None:
                    yield data_frame(text)
                if chunk.type in SETTLED_EVENTS:
                    break
        finally:
            await subscription.close()
        yield DONE

    return SSEResponse(frames(), heartbeat_s=ctx.heartbeat_s)


async def _resume(manager: TaskManager, task_id: str, data: JsonValue) -> TaskRecord:
    try:
        return await manager.resume(task_id, data)
    except TaskNotFoundError:
        raise ApiError(404, "Background task not found") from None
    except TaskStateError as exc:
        raise ApiError(409, str(exc)) from None
    except ConcurrencyLimitError as exc:
        raise ApiError(429, str(exc), headers={"retry-after": "1"}) from None


async def _never() -> AsyncGenerator[bytes, None]:
    await asyncio.Event().wait()
    yield b""


class TaskRoutes:
    def __init__(self, ctx: ServerContext) -> None:
        self.ctx = ctx

    def routes(self) -> list[Route]:
        return [
            Route("/background-tasks", self.list_tasks),
            Route("/background-tasks/stream", self.stream),
            Route("/background-tasks/{task_id}", self.get_task),
            Route("/background-tasks/{task_id}/cancel", self.cancel, methods=["POST"]),
            Route("/background-tasks/{task_id}/resume", self.resume, methods=["POST"]),
        ]

    async def list_tasks(self, request: Request) -> Response:
        wanted = task_filter(request, principal_of(request))
        if self.ctx.tasks is None:
            return JSONResponse({"tasks": [], "total": 0})
        page = await self.ctx.tasks.list_tasks(wanted)
        return JSONResponse({"tasks": [task_json(task) for task in page.items], "total": page.total})

    async def get_task(self, request: Request) -> Response:
        task = await owned_task(_manager(self.ctx), request.path_params["task_id"], principal_of(request))
        return JSONResponse(task_json(task))

    async def stream(self, request: Request) -> Response:
        q = request.query_params
        resource = principal_of(request).resource(q.get("resourceId") or None)
        manager = self.ctx.tasks
        if manager is None:  # nothing will ever happen: heartbeats until the client leaves
            return SSEResponse(_never(), heartbeat_s=self.ctx.heartbeat_s)
        # Subscribe before answering, so events right after the response starts are not missed.
        subscription = manager.subscribe(
            agent_id=q.get("agentId") or None,
            run_id=_run(q.get("runId"), principal_of(request)),
            thread_id=q.get("threadId") or None,
            resource_id=resource,
            task_id=q.get("taskId") or None,
            include_existing=_flag(q.get("includeExisting"), "includeExisting", default=True),
        )

        async def frames() -> AsyncGenerator[bytes, None]:
            try:
                async for chunk in subscription:
                    text = encode_json(redact({"type": chunk.type, "payload": chunk.payload}))
                    if text is not None:
                        yield data_frame(text)
            finally:
                await subscription.close()

        return SSEResponse(frames(), heartbeat_s=self.ctx.heartbeat_s)

    async def cancel(self, request: Request) -> Response:
        manager = _manager(self.ctx)
        task = await owned_task(manager, request.path_params["task_id"], principal_of(request))
        await manager.cancel(task.id)
        return JSONResponse(task_json(await owned_task(manager, task.id, principal_of(request))))

    async def resume(self, request: Request) -> Response:
        manager = _manager(self.ctx)
        task = await owned_task(manager, request.path_params["task_id"], principal_of(request))
        body = await json_body(request)
        resumed = await _resume(manager, task.id, body.get("resumeData"))
        return JSONResponse(task_json(resumed))


def _run(run_id: str | None, principal: Principal) -> str | None:
    """A ``runId`` filter: the caller's run of that id (:func:`run_key`), or none."""
    return run_key(principal, run_id) if run_id else None


def _flag(value: str | None, name: str, *, default: bool) -> bool:
    """A ``true``/``false`` query parameter (Mastra's ``includeExisting`` defaults to true)."""
    if value is None:
        return default
    if value not in ("true", "false"):
        raise ApiError(400, f"Query parameter '{name}' must be 'true' or 'false'")
    return value == "true"
