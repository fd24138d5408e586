"""One attempt of a background task's tool, wherever it runs: its context (writer, abort
signal, resume data), its timeout, and how it ended (:class:`Outcome`).

The in-process manager runs attempts in asyncio tasks of its own; the Temporal manager runs
them inside activities. Both call :func:`run_attempt`, so a tool sees the same context and its
output becomes the same chunks.
"""

from __future__ import annotations

import asyncio
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from runstream import _tracing as tracing
from runstream.abort import AbortController, AbortError
from runstream.chunks import AnyChunk, error_to_wire
from runstream.storage import TaskError, TaskRecord, TaskUpdate
from runstream.storage.records import utc_now
from runstream.tasks.adoption import BackgroundTaskAdoption
from runstream.tasks.config import TaskRequest
from runstream.tasks.lifecycle import TaskChunk, output_chunk
from runstream.tools import Tool, ToolContext, ToolSuspended, ToolWriter, private_error_text

T = TypeVar("T")

ABORT_GRACE_S = 0.1
"""How long an aborted tool may take to stop on its own before its asyncio task is cancelled."""

Publish = Callable[[TaskRecord, TaskChunk], None]
SUSPENDED_RUN_KEY = "suspendedToolRunId"
"""Task metadata: the delegated run a suspended task waits on (Mastra's ``suspendedToolRunId``)."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """How one attempt ended: a result, an error (``retryable`` or not), a suspension, a timeout."""

    kind: Literal["result", "error", "suspended", "timeout"]
    value: Any = None
    retryable: bool = True
    run_id: str | None = None
    """A suspension's delegated run (``ctx.suspend(run_id=)``), kept as the task's
    ``metadata.suspendedToolRunId`` for its resumed execution (Mastra's ``suspendedToolRunId``)."""

    def update(self) -> TaskUpdate:
        """The fields that store this outcome in the task's record."""
        now = utc_now()
        if self.kind == "result":
            return {"status": "completed", "result": self.value, "completed_at": now}
        if self.kind == "suspended":
            return {"status": "suspended", "suspend_payload": self.value, "suspended_at": now}
        if self.kind == "timeout":
            error: TaskError = {"message": self.value, "name": "TimeoutError"}  # (runstream's text)
            return {"status": "timed_out", "error": error, "completed_at": now}
        return {"status": "failed", "error": error_of(self.value), "completed_at": now}


@dataclass(eq=False)
class Execution:
    """One task running in this process: its record, current attempt and abort controller."""

    record: TaskRecord
    suspend_payload: Any = None
    controller: AbortController = field(default_factory=AbortController)
    runner: asyncio.Task[None] | None = None
    attempt: asyncio.Task[Outcome] | None = None
    context: ToolContext | None = None
    stopping: bool = False

    async def stop(self, reason: str) -> None:
        """Abort the tool and wait (bounded) until the runner has let go of the task."""
        self.stopping = True
        self.controller.abort(AbortError(reason))
        await settle(self.attempt)
        await settle(self.runner)


async def settle(task: asyncio.Task[T] | None) -> None:
    """Wait ``ABORT_GRACE_S`` for ``task`` to end, then cancel it (and wait as long again)."""
    if task is None or task.done() or task is asyncio.current_task():
        return
    done, _ = await asyncio.wait({task}, timeout=ABORT_GRACE_S)
    if not done:
        task.cancel()
        await asyncio.wait({task}, timeout=ABORT_GRACE_S)


async def run_attempt(
    ex: Execution,
    tool: Tool,
    args: dict[str, Any],
    *,
    publish: Publish,
    request: TaskRequest | None,
    progress_throttle_ms: int | None = None,
) -> Outcome:
    """Run the tool once for ``ex.record`` (its ``timeout_ms`` enforced through the abort
    signal); what it writes is published as ``background-task-output``."""
    record = ex.record
    throttle_s = (progress_throttle_ms or 0) / 1000
    last_output = -throttle_s

    def emit(chunk: AnyChunk) -> None:
        nonlocal last_output
        if ex.context is not ctx or ex.stopping:
            return
        if throttle_s:  # Mastra's progressThrottleMs: drop outputs that come too soon
            now = time.monotonic()
            if now - last_output < throttle_s:
                return
            last_output = now
        publish(record, output_chunk(record, chunk))

    suspended_run = record.metadata.get(SUSPENDED_RUN_KEY) if record.resume_data is not None else None
    ctx = ToolContext(
        tool_call_id=record.tool_call_id,
        tool_name=record.tool_name,
        run_id=record.run_id,
        agent_id=record.agent_id,
        writer=ToolWriter(emit, record.run_id, record.tool_call_id, record.tool_name),
        abort_signal=ex.controller.signal,
        resume_data=record.resume_data,
        suspend_payload=ex.suspend_payload,
        thread_id=record.thread_id,
        resource_id=record.resource_id,
        is_background_task=True,
        attempt=record.retry_count + 1,
        suspended_tool_run_id=suspended_run if isinstance(suspended_run, str) else None,
    )
    disposition = request.disposition if request is not None else "deferred"
    ctx.background = BackgroundTaskAdoption(record.id, disposition, ex.controller.signal)
    if request is not None:
        ctx.request_context = request.request_context
    ex.context = ctx
    ex.attempt = asyncio.ensure_future(tracing.traced_task(record, call_tool(tool, args, ctx)))
    try:
        timeout_s = record.timeout_ms / 1000 if record.timeout_ms > 0 else None
        done, _ = await asyncio.wait({ex.attempt}, timeout=timeout_s)
        if not done:
            message = f"Task timed out after {record.timeout_ms}ms"
            ex.controller.abort(AbortError(message))
            await settle(ex.attempt)
            return Outcome("timeout", message)
        if ex.attempt.cancelled():
            return Outcome("error", AbortError("Task cancelled"), retryable=False)
        return ex.attempt.result()
    finally:
        ex.context = None


async def call_tool(tool: Tool, args: dict[str, Any], ctx: ToolContext) -> Outcome:
    """Classify how one execution ended, as the loop's ``run_tool`` does."""
    try:
        result = await tool.execute(args, ctx)
        if ctx.background is not None:
            result = await ctx.background.result(result)
    except ToolSuspended as suspended:
        return Outcome("suspended", suspended.payload, run_id=ctx.suspend_run_id)
    except Exception as exc:
        if ctx.suspended:
            return Outcome("suspended", ctx.suspended_with, run_id=ctx.suspend_run_id)
        if ctx.background is not None:
            await ctx.background.failed(exc)
        return Outcome("error", exc)
    if ctx.suspended:
        return Outcome("suspended", ctx.suspended_with, run_id=ctx.suspend_run_id)
    return Outcome("result", result)


def error_of(exc: BaseException) -> TaskError:
    """How a task's error is stored: Mastra's ``{message, stack}``, with the error's ``name``
    when its text is public (:func:`~runstream.tools.private_error_text`): only then do the
    server and memory show the text (:func:`~runstream.tools.public_task_error`)."""
    error: TaskError = {"message": str(exc), "stack": "".join(traceback.format_exception(exc))}
    if private_error_text(exc, "") is None:
        error["name"] = error_to_wire(exc)["name"]
    return error
