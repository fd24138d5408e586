"""Dispatching tool calls from the agent loop to the background task manager."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from runstream import _tracing as tracing
from runstream._json import JsonObject
from runstream._messages import rewrite_prompt_result
from runstream._payloads import ProviderMetadata
from runstream.abort import AbortError, AbortSignal
from runstream.chunks import (
    AgentChunk,
    BackgroundTaskProgressChunk,
    BackgroundTaskStartedChunk,
    ToolErrorChunk,
    ToolResultChunk,
)
from runstream.run._run_state import LoopConfig, RunState, ToolCall, ToolOutcome
from runstream.storage import TaskRecord
from runstream.tasks.config import BackgroundTaskError, TaskHook, TaskRequest
from runstream.tasks.coordination import TaskManager
from runstream.tasks.policy import (
    BACKGROUND_ARG,
    AgentBackgroundConfig,
    eligibility,
    placeholder_text,
    resolve,
)
from runstream.tasks.settling import RunTarget
from runstream.tools import BackgroundToolConfig, Tool, ToolArgumentsError


class BackgroundDispatcher:
    """The loop's ``dispatch_tool`` hook for an agent with background tasks."""

    def __init__(self, manager: TaskManager, config: AgentBackgroundConfig) -> None:
        self.manager = manager
        self.config = config

    def eligible_tools(self, tools: Mapping[str, Tool]) -> list[str]:
        return [name for name, tool in tools.items() if eligibility(tool, self.config) is not None]

    async def __call__(
        self, call: ToolCall, tool: Tool, cfg: LoopConfig, state: RunState, emit: Callable[[AgentChunk], None]
    ) -> ToolOutcome | None:
        override = call.args.get(BACKGROUND_ARG)
        if BACKGROUND_ARG in call.args:  # the tool never sees it; the conversation keeps it
            call.model_input = call.args
            call.args = {key: value for key, value in call.args.items() if key != BACKGROUND_ARG}
        entry = eligibility(tool, self.config)
        if entry is None:
            return None
        try:
            resolved = resolve(entry, override)
        except ToolArgumentsError as exc:
            return ToolOutcome(call, "error", exc)
        try:
            args = tool.validate_args(call.args)
        except ToolArgumentsError as exc:
            return ToolOutcome(call, "result", exc.as_result())
        if resolved.disposition == "foreground":
            return None
        try:
            record = await self.manager.enqueue(
                TaskRequest(
                    tool=tool,
                    tool_call_id=call.tool_call_id,
                    args=args,
                    agent_id=cfg.agent_id,
                    run_id=state.run_id,
                    thread_id=cfg.thread_id,
                    resource_id=cfg.resource_id,
                    timeout_ms=resolved.timeout_ms,
                    max_retries=resolved.max_retries,
                    target=RunTarget(state, cfg.memory, cfg.thread_id, cfg.resource_id),
                    metadata=tracing.traceparent(state.span),
                    on_complete=_first_hook(tool.background, "on_complete", self.config.on_task_complete),
                    on_failed=_first_hook(tool.background, "on_failed", self.config.on_task_failed),
                    disposition="awaited" if resolved.disposition == "awaited" else "deferred",
                    request_context=cfg.request_context,
                )
            )
        except BackgroundTaskError as exc:
            return ToolOutcome(call, "error", exc)
        if record is None:  # backpressure fallback-sync: run inline
            return None
        state.background_task_ids.append(record.id)
        emit(
            BackgroundTaskStartedChunk(
                state.run_id, {"taskId": record.id, "toolName": tool.name, "toolCallId": call.tool_call_id}
            )
        )
        if resolved.disposition == "awaited":
            final = await _wait_unless_aborted(self.manager, record.id, cfg.abort_signal)
            if final is None:  # the run was aborted: it stops waiting, the task goes on
                error = AbortError(cfg.abort_signal.reason)
                return ToolOutcome(call, "error", error, provider_metadata=_task_link(record.id, "running"))
            link = _task_link(record.id, final.status)
            if final.status == "completed":
                return ToolOutcome(call, "result", final.result, provider_metadata=link)
            message = (final.error or {}).get("message") or f"Background task {final.status}: {record.id}"
            return ToolOutcome(call, "error", BackgroundTaskError(message), provider_metadata=link)
        return ToolOutcome(
            call,
            "result",
            placeholder_text(record.id, tool.name),
            provider_metadata=_task_link(record.id, "running"),
        )


async def _wait_unless_aborted(manager: TaskManager, task_id: str, signal: AbortSignal) -> TaskRecord | None:
    """The task's settled record, or ``None`` if the run is aborted first."""
    settled = asyncio.ensure_future(manager.wait_for(task_id))
    aborted = asyncio.ensure_future(signal.wait())
    try:
        done, _ = await asyncio.wait({settled, aborted}, return_when=asyncio.FIRST_COMPLETED)
        return settled.result() if settled in done else None
    finally:
        aborted.cancel()
        settled.cancel()


DURABLE_WAIT_MS = 1000
"""How long a durable loop waits for the next of its tasks (Mastra's default)."""


async def wait_in_loop(
    manager: TaskManager,
    state: RunState,
    task_ids: list[str],
    abort_signal: AbortSignal,
    *,
    wait_timeout_ms: int | None = None,
) -> AsyncIterator[BackgroundTaskProgressChunk | ToolResultChunk | ToolErrorChunk]:
    """Durable agents wait for their background tasks inside the loop, as Mastra's durable loop.

    While none of ``task_ids`` has settled: a ``background-task-progress`` snapshot at once and
    every progress interval, for at most ``DURABLE_WAIT_MS``. Then each settled task's real
    outcome as a ``tool-result`` (or ``tool-error``), its id added to ``state.waited_task_ids``
    (the loop goes on with another step when one settled: recorded in ``x-pt03``). The task's
    terminal hook has already put the result into the run's messages, so the next model step
    sees it; the tasks still running are waited for after the next step. An abort ends the
    wait (the tasks go on).

    With a ``wait_timeout_ms`` configured (the agent's, else the manager's), the loop does not
    wait at all, as Mastra's durable loop: its check step only waits on a retry, which never
    comes (recorded in ``x-pt01``/``x-pt02``); the tasks' results reach memory as usual.
    """
    if wait_timeout_ms:
        return
    started = time.monotonic()
    deadline = started + DURABLE_WAIT_MS / 1000
    interval = manager.config.progress_interval_ms / 1000
    waits = {task_id: asyncio.ensure_future(manager.wait_for(task_id)) for task_id in task_ids}
    aborted = asyncio.ensure_future(abort_signal.wait())
    try:
        while not any(wait.done() for wait in waits.values()):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            running = list(waits)
            elapsed = round((time.monotonic() - started) * 1000)
            yield BackgroundTaskProgressChunk(
                state.run_id, {"taskIds": running, "runningCount": len(running), "elapsedMs": elapsed}
            )
            watched: list[asyncio.Future[Any]] = [*waits.values(), aborted]
            await asyncio.wait(watched, timeout=min(interval, remaining), return_when=asyncio.FIRST_COMPLETED)
            if abort_signal.aborted:
                return
        settled = [(task_id, wait.result()) for task_id, wait in waits.items() if _settled(wait)]
    finally:
        aborted.cancel()
        for wait in waits.values():
            wait.cancel()
    for task_id, record in settled:
        state.waited_task_ids.add(task_id)
        rewrite_prompt_result(state.messages, record)  # idempotent with the task's terminal hook
        chunk = _outcome_chunk(state, record)
        if chunk is not None:
            yield chunk


def _settled(wait: asyncio.Future[TaskRecord]) -> bool:
    return wait.done() and not wait.cancelled() and wait.exception() is None


def _outcome_chunk(state: RunState, record: TaskRecord) -> ToolResultChunk | ToolErrorChunk | None:
    """A settled task's outcome as the loop reports it (none for a suspension)."""
    if record.status == "completed":
        result = ToolResultChunk(
            state.run_id,
            {
                "toolCallId": record.tool_call_id,
                "toolName": record.tool_name,
                "args": record.args,
                "result": record.result,
            },
        )
        state.tool_results.append(result)
        return result
    if record.status in ("failed", "timed_out", "cancelled"):
        message = (record.error or {}).get("message") or f"Background task {record.status}"
        return ToolErrorChunk(
            state.run_id,
            {
                "toolCallId": record.tool_call_id,
                "toolName": record.tool_name,
                "args": record.args,
                "error": BackgroundTaskError(message),
            },
        )
    return None


def _first_hook(own: BackgroundToolConfig | None, name: str, agent_hook: TaskHook | None) -> TaskHook | None:
    """The tool's own callback, else the agent's (Mastra calls one of them, not both)."""
    hook: TaskHook | None = getattr(own, name, None)
    return hook if hook is not None else agent_hook


def _task_link(task_id: str, status: str) -> ProviderMetadata:
    """Mastra's link from a tool result to its background task; a settled task's result, as
    Mastra writes it, also records that there is no model-output override."""
    mastra: JsonObject = {"backgroundTask": {"taskId": task_id, "status": status}}
    if status != "running":
        mastra["modelOutput"] = None
    return {"mastra": mastra}
