"""The background-task manager: queueing, concurrency, execution, lifecycle events, recovery.

Behaviour follows Mastra's ``BackgroundTaskManager``. The points that shape this code:

* Storage is the authority. Every status change is a compare-and-set on the expected status,
  so a cancel racing a completion, or a stale runner, cannot overwrite a settled task.
* Concurrency slots are counted over ``running`` rows in storage (as Mastra does), under one
  asyncio lock so two dispatches in this process cannot take the same slot.
* The queue is the ``pending`` tasks this process enqueued or recovered at start, oldest first:
  a process never steals another live process's pending task (whose tool closure it lacks).
* On a terminal outcome or a suspension: persist, then the request's ``on_terminal`` hook
  (the agent writes the real result into memory), then publish the lifecycle event. A consumer
  woken by the event can therefore always read the result from memory.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
import traceback
import uuid
from collections.abc import AsyncIterator, Collection, Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal

from runstream import _tracing as tracing
from runstream.abort import AbortController, AbortError, sleep
from runstream.chunks import (
    AnyChunk,
    BackgroundTaskCancelledChunk,
    BackgroundTaskCompletedChunk,
    BackgroundTaskFailedChunk,
    BackgroundTaskOutputChunk,
    BackgroundTaskProgressChunk,
    BackgroundTaskResumedChunk,
    BackgroundTaskRunningChunk,
    BackgroundTaskSuspendedChunk,
)
from runstream.storage import (
    InvalidArgumentError,
    Page,
    Storage,
    TaskError,
    TaskFilter,
    TaskRecord,
    TaskStatus,
    TaskUpdate,
)
from runstream.storage.records import utc_now
from runstream.tasks.adoption import BackgroundTaskAdoption
from runstream.tasks.bus import EventBus, InProcessEventBus, TaskEvent, TaskEventFilter, TaskSubscription
from runstream.tasks.config import (
    BackgroundTaskConfig,
    BackgroundTaskError,
    CleanupConfig,
    ConcurrencyLimitError,
    TaskHook,
    TaskNotFoundError,
    TaskRequest,
    TaskStateError,
)
from runstream.tasks.slots import Slots
from runstream.tasks.waiting import wait_for_next_task
from runstream.tools import Tool, ToolArgumentsError, ToolContext, ToolSuspended, ToolWriter

logger = logging.getLogger(__name__)

TERMINAL_STATUSES: frozenset[TaskStatus] = frozenset({"completed", "failed", "cancelled", "timed_out"})
SETTLED_STATUSES: frozenset[TaskStatus] = TERMINAL_STATUSES | {"suspended"}
SUSPENDED_RUN_KEY = "suspendedToolRunId"
"""Task metadata: the delegated run a suspended task waits on (Mastra's ``suspendedToolRunId``)."""
"""What ``wait_for`` waits for: the task will not move again without a ``resume``."""

STALE_TASK_MESSAGE = "Worker process terminated before task completed"
ABORT_GRACE_S = 0.1
"""How long an aborted tool may take to stop on its own before its asyncio task is cancelled."""
SHUTDOWN_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class _Outcome:
    kind: Literal["result", "error", "suspended", "timeout"]
    value: Any = None
    retryable: bool = True
    run_id: str | None = None
    """A suspension's delegated run (``ctx.suspend(run_id=)``), kept as the task's
    ``metadata.suspendedToolRunId`` for its resumed execution."""


@dataclass(eq=False)
class _Execution:
    """One running task in this process: the runner, its current attempt and abort controller."""

    record: TaskRecord
    suspend_payload: Any = None
    controller: AbortController = field(default_factory=AbortController)
    runner: asyncio.Task[None] | None = None
    attempt: asyncio.Task[_Outcome] | None = None
    context: ToolContext | None = None
    stopping: bool = False

    async def stop(self, reason: str) -> None:
        """Abort the tool and wait (bounded) until the runner has let go of the task."""
        self.stopping = True
        self.controller.abort(AbortError(reason))
        await _settle(self.attempt)
        await _settle(self.runner)


async def _settle(task: asyncio.Task[Any] | None) -> None:
    if task is None or task.done() or task is asyncio.current_task():
        return
    done, _ = await asyncio.wait({task}, timeout=ABORT_GRACE_S)
    if not done:
        task.cancel()
        await asyncio.wait({task}, timeout=ABORT_GRACE_S)


class BackgroundTaskManager:
    def __init__(
        self,
        storage: Storage,
        config: BackgroundTaskConfig | None = None,
        *,
        bus: EventBus | None = None,
        on_task_complete: TaskHook | None = None,
        on_task_failed: TaskHook | None = None,
    ) -> None:
        self.storage = storage
        self.config = config or BackgroundTaskConfig()
        self.bus: EventBus = bus or InProcessEventBus()
        self._on_task_complete = on_task_complete or self.config.on_task_complete
        self._on_task_failed = on_task_failed or self.config.on_task_failed
        self.agent_concurrency: dict[str, int] = {}
        """Per-agent slot limits overriding ``per_agent_concurrency`` (an agent's
        ``background_tasks={"concurrency": n}``)."""
        self._registry: dict[tuple[str, str], Tool] = {}
        self._requests: dict[str, TaskRequest] = {}
        self._active: dict[str, TaskRecord] = {}
        self._executions: dict[str, _Execution] = {}
        self._dispatch_lock = asyncio.Lock()
        self._start_lock = asyncio.Lock()
        self._started = False
        self._closing = False
        self._cleanup_task: asyncio.Task[None] | None = None

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Recover stale tasks (if configured), dispatch pending ones, start the cleanup loop.

        Idempotent; ``enqueue`` and ``resume`` call it, so explicit starting is optional.
        """
        if self._started:
            return
        async with self._start_lock:
            if self._started:
                return
            self._check_open()
            if self.config.recover_stale_tasks_on_start:
                await self._recover()
            self._started = True
            if self.config.cleanup is not None:
                self._cleanup_task = asyncio.create_task(
                    self._cleanup_loop(self.config.cleanup.cleanup_interval_ms)
                )
        await self._drain()

    async def shutdown(self) -> None:
        """Abort local executions and end subscriptions, within about ``SHUTDOWN_TIMEOUT_S``.

        A running task with retries left stays ``running`` for the next process's recovery;
        one without fails now with the message recovery would give it. Pending and suspended
        tasks are left for the next process.
        """
        if self._closing:
            return
        self._closing = True
        if self._cleanup_task is not None:
            self._cleanup_task.cancel()
            await asyncio.wait({self._cleanup_task})
        try:
            async with asyncio.timeout(SHUTDOWN_TIMEOUT_S):
                executions = list(self._executions.values())
                await asyncio.gather(
                    *(ex.stop("Background task manager is shutting down") for ex in executions)
                )
                for ex in executions:
                    if ex.record.retry_count >= ex.record.max_retries:
                        await self._settle_stale(ex.record)
        except TimeoutError:
            logger.warning("background task manager shutdown timed out")
        finally:
            self._active.clear()
            self._requests.clear()
            await self.bus.close()

    def register_tool(self, agent_id: str, tool: Tool) -> None:
        """Make ``tool`` runnable for ``agent_id``'s tasks without the enqueuing request.

        Needed for tasks recovered after a restart and for resumes in a new process.
        """
        self._registry[(agent_id, tool.name)] = tool

    # -- queueing --------------------------------------------------------------------------

    async def enqueue(self, request: TaskRequest) -> TaskRecord | None:
        """Create and persist a task; dispatch it if a slot is free.

        With no free slot, backpressure ``queue`` leaves it pending, ``reject`` raises
        :class:`ConcurrencyLimitError` and ``fallback-sync`` returns ``None`` (the caller runs
        the tool inline); in both of the latter cases the record is deleted.
        """
        self._check_open()
        await self.start()
        record = TaskRecord(
            id=str(uuid.uuid4()),
            status="pending",
            tool_name=request.tool.name,
            tool_call_id=request.tool_call_id,
            args=request.args,
            agent_id=request.agent_id,
            run_id=request.run_id,
            thread_id=request.thread_id,
            resource_id=request.resource_id,
            max_retries=request.max_retries
            if request.max_retries is not None
            else self.config.default_retries.max_retries,
            timeout_ms=request.timeout_ms
            if request.timeout_ms is not None
            else self.config.default_timeout_ms,
            metadata=dict(request.metadata),
        )
        await self.storage.save_task(record)
        self._requests[record.id] = request
        self._active[record.id] = record
        async with self._dispatch_lock:
            await self._dispatch_pending()
            current = self._active.get(record.id)
            if current is None or current.status != "pending" or self.config.backpressure == "queue":
                return current or await self.storage.get_task(record.id)
            del self._active[record.id], self._requests[record.id]
            await self.storage.delete_tasks([record.id])
        if self.config.backpressure == "reject":
            raise ConcurrencyLimitError(
                f'Concurrency limit reached, cannot enqueue task for tool "{record.tool_name}"'
            )
        return None

    async def _drain(self) -> None:
        async with self._dispatch_lock:
            await self._dispatch_pending()

    async def _dispatch_pending(self) -> None:
        """Claim queued tasks oldest first while slots allow (caller holds the dispatch lock)."""
        if self._closing:
            return
        queued = sorted(
            (r for r in self._active.values() if r.status == "pending"), key=lambda r: r.created_at
        )
        if not queued:
            return
        slots = Slots(self.storage, self.config, self.agent_concurrency)
        for record in queued:
            if not await slots.take(record.agent_id):
                continue
            claimed = await self.storage.update_task(
                record.id,
                expected_status="pending",
                status="running",
                started_at=utc_now(),
                metadata=self._claim_metadata(record),
            )
            if claimed is None:  # cancelled (or deleted) meanwhile
                slots.give_back(record.agent_id)
                self._active.pop(record.id, None)
                continue
            self._launch(claimed, announce=True)

    def _launch(self, record: TaskRecord, *, announce: bool, suspend_payload: Any = None) -> None:
        self._active[record.id] = record
        execution = _Execution(record, suspend_payload)
        self._executions[record.id] = execution
        execution.runner = asyncio.create_task(
            self._run(execution, announce), name=f"background-task {record.id}"
        )

    # -- execution -------------------------------------------------------------------------

    async def _run(self, ex: _Execution, announce: bool) -> None:
        try:
            if announce:
                self._publish(
                    ex.record, BackgroundTaskRunningChunk(ex.record.run_id, _running_payload(ex.record))
                )
            outcome = await self._attempts(ex)
            if outcome is not None and not ex.stopping:
                await self._conclude(ex.record, outcome)
            if not ex.stopping:
                await self._drain()
        except Exception:
            logger.exception("background task %s: runner failed", ex.record.id)
        finally:
            if self._executions.get(ex.record.id) is ex:
                del self._executions[ex.record.id]
                self._active.pop(ex.record.id, None)

    async def _attempts(self, ex: _Execution) -> _Outcome | None:
        """Run the tool, retrying failures; ``None`` when the task was cancelled or stopped."""
        tool = self._resolve_tool(ex.record)
        if tool is None:
            message = (
                f'No executor registered for tool "{ex.record.tool_name}" (agent "{ex.record.agent_id}"): '
                "register it with BackgroundTaskManager.register_tool() in the process that runs the task"
            )
            return _Outcome("error", BackgroundTaskError(message), retryable=False)
        try:
            args = tool.validate_args(ex.record.args)
        except ToolArgumentsError as exc:
            return _Outcome("error", exc, retryable=False)
        while not ex.stopping:
            outcome = await self._attempt(ex, tool, args)
            if ex.stopping:
                break
            retry = (
                outcome.kind == "error"
                and outcome.retryable
                and self.config.default_retries.is_retryable(outcome.value)
            )
            if not retry or ex.record.retry_count >= ex.record.max_retries:
                return outcome
            retried = await self.storage.update_task(
                ex.record.id,
                expected_status="running",
                expected_metadata=self._lease_guard(ex.record),
                retry_count=ex.record.retry_count + 1,
                started_at=utc_now(),
            )
            if retried is None:  # cancelled meanwhile
                break
            ex.record = self._active[retried.id] = retried
            ex.controller = AbortController()
            delay_s = self.config.default_retries.delay_ms(retried.retry_count) / 1000
            if delay_s > 0:
                await sleep(delay_s, ex.controller.signal)
        return None

    async def _attempt(self, ex: _Execution, tool: Tool, args: dict[str, Any]) -> _Outcome:
        record = ex.record
        throttle_s = (self.config.progress_throttle_ms or 0) / 1000
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
            payload: Any = {**_base_payload(record), "payload": chunk.to_wire()}
            self._publish(record, BackgroundTaskOutputChunk(record.run_id, payload))

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
            suspended_tool_run_id=record.metadata.get(SUSPENDED_RUN_KEY)
            if record.resume_data is not None
            else None,
        )
        request = self._requests.get(record.id)
        disposition = request.disposition if request is not None else "deferred"
        ctx.background = BackgroundTaskAdoption(record.id, disposition, ex.controller.signal)
        if request is not None:
            ctx.request_context = request.request_context
        ex.context = ctx
        ex.attempt = asyncio.ensure_future(tracing.traced_task(record, _call_tool(tool, args, ctx)))
        try:
            timeout_s = record.timeout_ms / 1000 if record.timeout_ms > 0 else None
            done, _ = await asyncio.wait({ex.attempt}, timeout=timeout_s)
            if not done:
                message = f"Task timed out after {record.timeout_ms}ms"
                ex.controller.abort(AbortError(message))
                await _settle(ex.attempt)
                return _Outcome("timeout", message)
            if ex.attempt.cancelled():
                return _Outcome("error", AbortError("Task cancelled"), retryable=False)
            return ex.attempt.result()
        finally:
            ex.context = None

    def _claim_metadata(self, record: TaskRecord) -> dict[str, Any]:
        """The metadata written by the compare-and-set that makes a task ``running`` here (a
        claim or a resume): unchanged here; the distributed manager takes a lease with it."""
        return record.metadata

    def _lease_guard(self, record: TaskRecord) -> dict[str, str | None] | None:
        """Metadata the runner's own writes (retry, outcome) require: none here; the distributed
        manager requires its lease, so a runner that lost the task cannot overwrite it."""
        return None

    def _resolve_tool(self, record: TaskRecord) -> Tool | None:
        request = self._requests.get(record.id)
        if request is not None and request.tool.name == record.tool_name:
            return request.tool
        return self._registry.get((record.agent_id, record.tool_name))

    async def _conclude(self, record: TaskRecord, outcome: _Outcome) -> None:
        """Store the outcome of a running task, then announce it."""
        now = utc_now()
        update: TaskUpdate
        if outcome.kind == "result":
            update = {"status": "completed", "result": outcome.value, "completed_at": now}
        elif outcome.kind == "suspended":
            update = {"status": "suspended", "suspend_payload": outcome.value, "suspended_at": now}
            if outcome.run_id is not None:
                update["metadata"] = {**record.metadata, SUSPENDED_RUN_KEY: outcome.run_id}
        elif outcome.kind == "timeout":
            update = {"status": "timed_out", "error": {"message": outcome.value}, "completed_at": now}
        else:
            update = {"status": "failed", "error": _error_of(outcome.value), "completed_at": now}
        traced = tracing.task_span_metadata(record.id)
        if traced:  # where the task's span is, for continuation turns in other processes
            update["metadata"] = {**update.get("metadata", record.metadata), **traced}
        guard = self._lease_guard(record)
        try:
            stored = await self.storage.update_task(
                record.id, expected_status="running", expected_metadata=guard, **update
            )
        except InvalidArgumentError as exc:  # a result or suspend payload that is not JSON
            stored = await self.storage.update_task(
                record.id,
                expected_status="running",
                expected_metadata=guard,
                status="failed",
                error=_error_of(exc),
                completed_at=now,
            )
        if stored is not None:
            await self._announce(stored)

    async def _announce(self, record: TaskRecord) -> None:
        """After a settled state is stored: ``on_terminal`` hook, lifecycle event, global hooks."""
        self._active.pop(record.id, None)
        request = self._requests.get(record.id)
        if record.status in TERMINAL_STATUSES:
            self._requests.pop(record.id, None)
        if request is not None and request.on_terminal is not None:
            try:
                await request.on_terminal(record)
            except Exception:
                logger.exception("background task %s: on_terminal hook failed", record.id)
        failed = record.status in ("failed", "timed_out")
        if request is not None:  # the tool's or agent's own hook, before the event (as Mastra)
            own = (
                request.on_complete if record.status == "completed" else request.on_failed if failed else None
            )
            await _call_hook(own, record)
        self._publish(record, _lifecycle_chunk(record))
        hooks = {"completed": self._on_task_complete, "cancelled": self.config.on_task_cancelled}
        await _call_hook(self._on_task_failed if failed else hooks.get(record.status), record)

    def _publish(self, record: TaskRecord, chunk: AnyChunk) -> None:
        self.bus.publish(TaskEvent(chunk, record))

    # -- control ---------------------------------------------------------------------------

    async def cancel(self, task_id: str) -> None:
        """Cancel a pending, running or suspended task; a settled one is left as it is.

        A running task's abort signal fires; its asyncio task is cancelled if it does not stop
        within ``ABORT_GRACE_S``.
        """
        while True:
            record = await self.storage.get_task(task_id)
            if record is None:
                raise TaskNotFoundError(f"Task not found: {task_id}")
            if record.status in TERMINAL_STATUSES:
                return
            cancelled = await self.storage.update_task(
                task_id, expected_status=record.status, status="cancelled", completed_at=utc_now()
            )
            if cancelled is not None:
                break
        execution = self._executions.get(task_id)
        if execution is not None:
            await execution.stop("Task cancelled")
        await self._announce(cancelled)
        await self._drain()

    async def resume(self, task_id: str, data: Any = None) -> TaskRecord:
        """Run a suspended task's tool again from the start with ``ctx.resume_data = data``.

        Like Mastra, a resume is not queued: with no free slot it raises
        :class:`ConcurrencyLimitError`.
        """
        self._check_open()
        await self.start()
        record = await self.storage.get_task(task_id)
        if record is None:
            raise TaskNotFoundError(f"Task not found: {task_id}")
        async with self._dispatch_lock:
            if record.status == "suspended" and not await Slots(
                self.storage, self.config, self.agent_concurrency
            ).take(record.agent_id):
                raise ConcurrencyLimitError(
                    f'Concurrency limit reached, cannot resume task for tool "{record.tool_name}"'
                )
            resumed = await self.storage.update_task(
                task_id,
                expected_status="suspended",
                status="running",
                started_at=utc_now(),
                suspend_payload=None,
                suspended_at=None,
                resume_data=data,
                metadata=self._claim_metadata(record),
            )
            if resumed is None:
                current = await self.storage.get_task(task_id)
                status = current.status if current is not None else record.status
                raise TaskStateError(f"Cannot resume task in status '{status}' (expected 'suspended')")
            self._publish(resumed, BackgroundTaskResumedChunk(resumed.run_id, _running_payload(resumed)))
            self._launch(resumed, announce=False, suspend_payload=record.suspend_payload)
        return resumed

    async def restart(self, task_id: str) -> TaskRecord:
        """Run again a task that storage says is ``running`` but no process runs any more (a
        crash with ``recover_stale_tasks_on_start`` off), as Mastra's ``restart()``. Its tool
        must be registered here (``register_tool``) or enqueued here. The task keeps the slot
        its ``running`` row already holds."""
        self._check_open()
        await self.start()
        record = await self.storage.get_task(task_id)
        if record is None:
            raise TaskNotFoundError(f"Task not found: {task_id}")
        if record.status != "running":
            raise TaskStateError(f"Cannot restart task in status '{record.status}' (expected 'running')")
        if task_id in self._executions:
            raise TaskStateError(f"Task {task_id} is running in this process")
        if self._resolve_tool(record) is None:
            raise BackgroundTaskError(
                f'No executor registered for tool "{record.tool_name}": register_tool() it first'
            )
        async with self._dispatch_lock:
            claimed = await self.storage.update_task(
                task_id,
                expected_status="running",
                started_at=utc_now(),
                metadata=self._claim_metadata(record),
            )
            if claimed is None:
                raise TaskStateError(f"Task {task_id} changed while restarting")
            self._launch(claimed, announce=True)
        return claimed

    # -- reading ---------------------------------------------------------------------------

    async def get_task(self, task_id: str) -> TaskRecord | None:
        return await self.storage.get_task(task_id)

    async def list_tasks(self, task_filter: TaskFilter | None = None) -> Page[TaskRecord]:
        return await self.storage.list_tasks(task_filter)

    def is_active(self, task_id: str) -> bool:
        """Whether the task is pending or running in this process."""
        return task_id in self._active

    def running_task_ids(
        self,
        *,
        agent_id: str | None = None,
        run_id: str | None = None,
        thread_id: str | None = None,
        resource_id: str | None = None,
    ) -> list[str]:
        """Ids of the matching tasks running in this process."""
        wanted = TaskEventFilter(agent_id, run_id, thread_id, resource_id)
        return [r.id for r in self._active.values() if r.status == "running" and wanted.matches(r)]

    async def wait_for(self, task_id: str, timeout_ms: float | None = None) -> TaskRecord:
        """The task's record once it is terminal or suspended.

        Raises :class:`TaskNotFoundError`, ``TimeoutError`` after ``timeout_ms``, or
        :class:`BackgroundTaskError` if the manager shuts down first.
        """
        subscription = self.bus.subscribe(TaskEventFilter(task_ids=frozenset({task_id})))
        try:
            async with asyncio.timeout(None if timeout_ms is None else timeout_ms / 1000):
                record = await self.storage.get_task(task_id)
                if record is None:
                    raise TaskNotFoundError(f"Task not found: {task_id}")
                while record.status not in SETTLED_STATUSES:
                    try:
                        record = (await anext(subscription)).record
                    except StopAsyncIteration:
                        raise BackgroundTaskError(
                            "Background task manager shut down during wait_for"
                        ) from None
                return record
        finally:
            await subscription.close()

    async def wait_for_next_task(self, task_ids: Iterable[str], **options: Any) -> TaskRecord:
        """The first of ``task_ids`` to end (Mastra's ``waitForNextTask``): see
        :func:`runstream.tasks.waiting.wait_for_next_task` for the options."""
        return await wait_for_next_task(self, task_ids, **options)

    def subscribe(
        self,
        *,
        agent_id: str | None = None,
        run_id: str | None = None,
        thread_id: str | None = None,
        resource_id: str | None = None,
        task_id: str | None = None,
        include_existing: bool = True,
    ) -> TaskSubscription:
        """Lifecycle chunks of the matching tasks, from now on, in publish order.

        ``include_existing`` (default true, as Mastra's ``stream()``) first yields a
        ``background-task-running`` snapshot of the matching tasks running at that moment
        (running ones only, as Mastra: a pending or suspended task shows up with its next event).
        """
        wanted = TaskEventFilter(
            agent_id, run_id, thread_id, resource_id, None if task_id is None else frozenset({task_id})
        )
        source = self.bus.subscribe(wanted)

        async def snapshot() -> list[AnyChunk]:
            running = await self.storage.list_tasks(
                TaskFilter(
                    status="running",
                    agent_id=agent_id,
                    run_id=run_id,
                    thread_id=thread_id,
                    resource_id=resource_id,
                )
            )
            return [
                BackgroundTaskRunningChunk(r.run_id, _running_payload(r))
                for r in running.items
                if wanted.matches(r)
            ]

        return TaskSubscription(source, snapshot if include_existing else None)

    # -- progress --------------------------------------------------------------------------

    def progress_snapshot(
        self, task_ids: Iterable[str], *, run_id: str = "", since: float | None = None
    ) -> BackgroundTaskProgressChunk:
        """``background-task-progress`` for the given tasks still active in this process.

        Queued tasks count too: the caller is waiting for them as well. ``since`` is a
        ``time.monotonic()`` reading; ``elapsedMs`` is measured from it (0 without it).
        """
        active = [task_id for task_id in task_ids if self.is_active(task_id)]
        elapsed = 0 if since is None else round((time.monotonic() - since) * 1000)
        return BackgroundTaskProgressChunk(
            run_id, {"taskIds": active, "runningCount": len(active), "elapsedMs": elapsed}
        )

    async def progress(
        self, task_ids: Collection[str], interval_ms: float, *, run_id: str = ""
    ) -> AsyncIterator[BackgroundTaskProgressChunk]:
        """A progress chunk at once and every ``interval_ms`` while any of the tasks is active;
        ends as soon as none is."""
        ids = frozenset(task_ids)
        since = time.monotonic()
        subscription = self.bus.subscribe(TaskEventFilter(task_ids=ids))
        try:
            while any(self.is_active(task_id) for task_id in ids):
                yield self.progress_snapshot(task_ids, run_id=run_id, since=since)
                deadline = time.monotonic() + interval_ms / 1000
                while any(self.is_active(task_id) for task_id in ids):
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    try:
                        await asyncio.wait_for(anext(subscription), remaining)
                    except (TimeoutError, StopAsyncIteration):
                        break
        finally:
            await subscription.close()

    # -- recovery and cleanup --------------------------------------------------------------

    async def _recover(self) -> None:
        """Tasks a dead process left ``running`` go back to ``pending`` if they have retries left
        (the lost attempt counts as one), else fail. Then every pending task joins the queue."""
        stale = await self.storage.list_tasks(TaskFilter(status="running"))
        for record in stale.items:
            if record.retry_count < record.max_retries:
                await self.storage.update_task(
                    record.id, expected_status="running", status="pending", started_at=None,
                    retry_count=record.retry_count + 1,
                )  # fmt: skip
            else:
                await self._settle_stale(record)
        pending = await self.storage.list_tasks(TaskFilter(status="pending"))
        for record in pending.items:
            self._active.setdefault(record.id, record)

    async def _settle_stale(self, record: TaskRecord) -> None:
        failed = await self.storage.update_task(
            record.id,
            expected_status="running",
            expected_metadata=self._lease_guard(record),
            status="failed",
            error={"message": STALE_TASK_MESSAGE},
            completed_at=utc_now(),
        )
        if failed is not None:
            await self._announce(failed)

    async def cleanup(self) -> int:
        """Delete settled records past their TTL; returns how many were deleted."""
        ttl = self.config.cleanup or CleanupConfig()
        now = utc_now()
        completed = await self.storage.delete_tasks_older_than(
            "completed", now - timedelta(milliseconds=ttl.completed_ttl_ms)
        )
        failed = await self.storage.delete_tasks_older_than(
            ("failed", "timed_out", "cancelled"), now - timedelta(milliseconds=ttl.failed_ttl_ms)
        )
        return completed + failed

    async def _cleanup_loop(self, interval_ms: int) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                await self.cleanup()
            except Exception:
                logger.exception("background task cleanup failed")

    def _check_open(self) -> None:
        if self._closing:
            raise BackgroundTaskError("Background task manager is shutting down")


async def _call_tool(tool: Tool, args: dict[str, Any], ctx: ToolContext) -> _Outcome:
    """Classify how one execution ended, as the loop's ``run_tool`` does."""
    try:
        result = await tool.execute(args, ctx)
        if ctx.background is not None:
            result = await ctx.background.result(result)
    except ToolSuspended as suspended:
        return _Outcome("suspended", suspended.payload, run_id=ctx.suspend_run_id)
    except Exception as exc:
        if ctx.suspended:
            return _Outcome("suspended", ctx.suspended_with, run_id=ctx.suspend_run_id)
        if ctx.background is not None:
            await ctx.background.failed(exc)
        return _Outcome("error", exc)
    if ctx.suspended:
        return _Outcome("suspended", ctx.suspended_with, run_id=ctx.suspend_run_id)
    return _Outcome("result", result)


async def _call_hook(hook: TaskHook | None, record: TaskRecord) -> None:
    """A user callback on a settled task; its failure is logged, never the task's."""
    if hook is None:
        return
    try:
        result = hook(record)
        if inspect.isawaitable(result):
            await result
    except Exception:
        logger.exception("background task %s: %s callback failed", record.id, record.status)


def _error_of(exc: BaseException) -> TaskError:
    return {"message": str(exc), "stack": "".join(traceback.format_exception(exc))}


def _base_payload(record: TaskRecord) -> dict[str, Any]:
    return {
        "taskId": record.id,
        "toolName": record.tool_name,
        "toolCallId": record.tool_call_id,
        "runId": record.run_id,
        "agentId": record.agent_id,
    }


def _running_payload(record: TaskRecord) -> Any:
    return {**_base_payload(record), "startedAt": record.started_at, "args": record.args}


def _lifecycle_chunk(record: TaskRecord) -> AnyChunk:
    """The event announcing a stored settled state (``timed_out`` is published as failed)."""
    payload: Any = _base_payload(record)
    if record.status == "completed":
        payload.update(result=record.result, completedAt=record.completed_at)
        return BackgroundTaskCompletedChunk(record.run_id, payload)
    if record.status == "suspended":
        payload.update(
            args=record.args, suspendPayload=record.suspend_payload, suspendedAt=record.suspended_at
        )
        return BackgroundTaskSuspendedChunk(record.run_id, payload)
    payload["completedAt"] = record.completed_at
    if record.status == "cancelled":
        return BackgroundTaskCancelledChunk(record.run_id, payload)
    payload["error"] = dict(record.error or {"message": "Unknown error"})
    return BackgroundTaskFailedChunk(record.run_id, payload)
