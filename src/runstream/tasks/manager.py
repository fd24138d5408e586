"""The in-process background-task manager: queueing, concurrency, execution, recovery.

Behaviour follows Mastra's ``BackgroundTaskManager``. What it shares with every other manager
(records, announcing, cancel and resume in storage, reading) is its
:class:`~runstream.tasks.coordination.TaskCoordinator`; what is its own:

* Concurrency slots are counted over ``running`` rows in storage (as Mastra does), under the
  coordinator's slot lock so two dispatches in this process cannot take the same slot.
* The queue is the ``pending`` tasks this process enqueued or recovered at start, oldest first:
  a process never steals another live process's pending task (whose tool closure it lacks).
* Each running task is an asyncio task here, retrying its tool per ``default_retries``.
* On a terminal outcome or a suspension: persist, then the result into the conversation (where
  the request's ``target`` says), then publish one ``TaskSettled`` event carrying the record and
  what came of that write. A consumer woken by the event can therefore always read the result
  from memory.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Collection, Iterable
from typing import Any, Unpack

from runstream.abort import AbortController, sleep
from runstream.chunks import BackgroundTaskProgressChunk
from runstream.storage import Page, Storage, TaskFilter, TaskRecord
from runstream.storage.records import utc_now
from runstream.tasks.bus import EventBus, InProcessEventBus, TaskEventFilter, TaskSubscription
from runstream.tasks.config import (
    BackgroundTaskConfig,
    BackgroundTaskError,
    ConcurrencyLimitError,
    TaskHook,
    TaskRequest,
    TaskStateError,
)
from runstream.tasks.coordination import (
    SETTLED_STATUSES,
    STALE_TASK_MESSAGE,
    TERMINAL_STATUSES,
    TaskCoordinator,
    event_filter,
)
from runstream.tasks.execution import Execution, Outcome
from runstream.tasks.lifecycle import running_chunk
from runstream.tasks.waiting import WaitOptions, wait_for_next_task
from runstream.tools import Tool, ToolArgumentsError

__all__ = ["SETTLED_STATUSES", "STALE_TASK_MESSAGE", "TERMINAL_STATUSES", "BackgroundTaskManager"]

logger = logging.getLogger(__name__)

SHUTDOWN_TIMEOUT_S = 5.0


class BackgroundTaskManager:
    """Runs background tasks in this process (the default manager)."""

    def __init__(
        self,
        storage: Storage,
        config: BackgroundTaskConfig | None = None,
        *,
        bus: EventBus | None = None,
        on_task_complete: TaskHook | None = None,
        on_task_failed: TaskHook | None = None,
    ) -> None:
        self.tasks = TaskCoordinator(
            storage,
            config or BackgroundTaskConfig(),
            bus or InProcessEventBus(),
            on_task_complete=on_task_complete,
            on_task_failed=on_task_failed,
        )
        self._active: dict[str, TaskRecord] = {}
        self._start_lock = asyncio.Lock()
        self._started = False
        self._closing = False
        self._cleanup_task: asyncio.Task[None] | None = None

    @property
    def storage(self) -> Storage:
        return self.tasks.storage

    @property
    def config(self) -> BackgroundTaskConfig:
        return self.tasks.config

    @property
    def bus(self) -> EventBus:
        return self.tasks.bus

    @property
    def agent_concurrency(self) -> dict[str, int]:
        return self.tasks.agent_concurrency

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
                executions = list(self.tasks.executions.values())
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
            self.tasks.requests.clear()
            await self.bus.close()

    def register_tool(self, agent_id: str, tool: Tool) -> None:
        """Make ``tool`` runnable for ``agent_id``'s tasks without the enqueuing request.

        Needed for tasks recovered after a restart and for resumes in a new process.
        """
        self.tasks.register_tool(agent_id, tool)

    # -- queueing --------------------------------------------------------------------------

    async def enqueue(self, request: TaskRequest) -> TaskRecord | None:
        """Create and persist a task; dispatch it if a slot is free.

        With no free slot, backpressure ``queue`` leaves it pending, ``reject`` raises
        :class:`ConcurrencyLimitError` and ``fallback-sync`` returns ``None`` (the caller runs
        the tool inline); in both of the latter cases the record is deleted.
        """
        self._check_open()
        await self.start()
        record = self.tasks.new_record(request)
        await self.storage.save_task(record)
        self._active[record.id] = record
        async with self.tasks.slot_lock:
            await self._dispatch_pending()
            current = self._active.get(record.id)
            if current is None or current.status != "pending" or self.config.backpressure == "queue":
                return current or await self.storage.get_task(record.id)
            del self._active[record.id], self.tasks.requests[record.id]
            await self.storage.delete_tasks([record.id])
        if self.config.backpressure == "reject":
            raise ConcurrencyLimitError(
                f'Concurrency limit reached, cannot enqueue task for tool "{record.tool_name}"'
            )
        return None

    async def _drain(self) -> None:
        async with self.tasks.slot_lock:
            await self._dispatch_pending()

    async def _dispatch_pending(self) -> None:
        """Claim queued tasks oldest first while slots allow (caller holds the slot lock)."""
        if self._closing:
            return
        queued = sorted(
            (r for r in self._active.values() if r.status == "pending"), key=lambda r: r.created_at
        )
        if not queued:
            return
        slots = self.tasks.slots()
        for record in queued:
            if not await slots.take(record.agent_id):
                continue
            claimed = await self.storage.update_task(
                record.id, expected_status="pending", status="running", started_at=utc_now()
            )
            if claimed is None:  # cancelled (or deleted) meanwhile
                slots.give_back(record.agent_id)
                self._active.pop(record.id, None)
                continue
            self._launch(claimed, announce=True)

    def _launch(self, record: TaskRecord, *, announce: bool, suspend_payload: Any = None) -> None:
        self._active[record.id] = record
        execution = Execution(record, suspend_payload)
        self.tasks.executions[record.id] = execution
        execution.runner = asyncio.create_task(
            self._run(execution, announce), name=f"background-task {record.id}"
        )

    # -- execution -------------------------------------------------------------------------

    async def _run(self, ex: Execution, announce: bool) -> None:
        try:
            if announce:
                self.tasks.publish(ex.record, running_chunk(ex.record))
            outcome = await self._attempts(ex)
            if outcome is not None and not ex.stopping:
                stored = await self.tasks.store_outcome(ex.record, outcome)
                if stored is not None:
                    await self._announce(stored)
            if not ex.stopping:
                await self._drain()
        except Exception:
            logger.exception("background task %s: runner failed", ex.record.id)
        finally:
            if self.tasks.executions.get(ex.record.id) is ex:
                del self.tasks.executions[ex.record.id]
                self._active.pop(ex.record.id, None)

    async def _attempts(self, ex: Execution) -> Outcome | None:
        """Run the tool, retrying failures; ``None`` when the task was cancelled or stopped."""
        tool = self.tasks.resolve_tool(ex.record)
        if tool is None:
            message = (
                f'No executor registered for tool "{ex.record.tool_name}" (agent "{ex.record.agent_id}"): '
                "register it with BackgroundTaskManager.register_tool() in the process that runs the task"
            )
            return Outcome("error", BackgroundTaskError(message), retryable=False)
        try:
            args = tool.validate_args(ex.record.args)
        except ToolArgumentsError as exc:
            return Outcome("error", exc, retryable=False)
        while not ex.stopping:
            outcome = await self.tasks.run(ex, tool, args)
            if ex.stopping:
                break
            retry = (
                outcome.kind == "error"
                and outcome.retryable
                and self.config.default_retries.is_retryable(outcome.value)
            )
            if not retry or ex.record.retry_count >= ex.record.max_retries:
                if outcome.kind == "error":
                    _log_failure(ex.record, outcome.value)
                return outcome
            logger.warning(
                "background task %s (tool %s) failed, retry %d of %d: %s",
                ex.record.id,
                ex.record.tool_name,
                ex.record.retry_count + 1,
                ex.record.max_retries,
                outcome.value,
            )
            retried = await self.storage.update_task(
                ex.record.id,
                expected_status="running",
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

    async def _announce(self, record: TaskRecord) -> None:
        self._active.pop(record.id, None)
        await self.tasks.announce(record)

    # -- control ---------------------------------------------------------------------------

    async def cancel(self, task_id: str) -> None:
        """Cancel a pending, running or suspended task; a settled one is left as it is.

        A running task's abort signal fires; its asyncio task is cancelled if it does not stop
        within ``ABORT_GRACE_S``.
        """
        cancelled = await self.tasks.store_cancel(task_id)
        if cancelled is None:
            return
        await self.tasks.stop(task_id, "Task cancelled")
        await self._announce(cancelled)
        await self._drain()

    async def resume(self, task_id: str, data: object = None) -> TaskRecord:
        """Run a suspended task's tool again from the start with ``ctx.resume_data = data``.

        Like Mastra, a resume is not queued: with no free slot it raises
        :class:`ConcurrencyLimitError`.
        """
        self._check_open()
        await self.start()
        async with self.tasks.slot_lock:
            resumed, suspend_payload = await self.tasks.store_resume(task_id, data)
            self._launch(resumed, announce=False, suspend_payload=suspend_payload)
        return resumed

    async def restart(self, task_id: str) -> TaskRecord:
        """Run again a task that storage says is ``running`` but no process runs any more (a
        crash with ``recover_stale_tasks_on_start`` off), as Mastra's ``restart()``. Its tool
        must be registered here (``register_tool``) or enqueued here. The task keeps the slot
        its ``running`` row already holds."""
        self._check_open()
        await self.start()
        record = await self.tasks.require(task_id)
        if record.status != "running":
            raise TaskStateError(f"Cannot restart task in status '{record.status}' (expected 'running')")
        if task_id in self.tasks.executions:
            raise TaskStateError(f"Task {task_id} is running in this process")
        if self.tasks.resolve_tool(record) is None:
            raise BackgroundTaskError(
                f'No executor registered for tool "{record.tool_name}": register_tool() it first'
            )
        async with self.tasks.slot_lock:
            claimed = await self.storage.update_task(task_id, expected_status="running", started_at=utc_now())
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
        """The task's record once it is terminal or suspended (see ``TaskCoordinator.wait_for``)."""
        return await self.tasks.wait_for(task_id, timeout_ms)

    async def wait_for_next_task(self, task_ids: Iterable[str], **options: Unpack[WaitOptions]) -> TaskRecord:
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
        wanted = event_filter(agent_id, run_id, thread_id, resource_id, task_id)
        return self.tasks.subscribe(wanted, include_existing=include_existing)

    def progress_snapshot(
        self, task_ids: Iterable[str], *, run_id: str = "", since: float | None = None
    ) -> BackgroundTaskProgressChunk:
        """``background-task-progress`` for the given tasks still active in this process.

        Queued tasks count too: the caller is waiting for them as well. ``since`` is a
        ``time.monotonic()`` reading; ``elapsedMs`` is measured from it (0 without it).
        """
        return self.tasks.progress_snapshot(task_ids, self.is_active, run_id=run_id, since=since)

    def progress(
        self, task_ids: Collection[str], interval_ms: float, *, run_id: str = ""
    ) -> AsyncIterator[BackgroundTaskProgressChunk]:
        """A progress chunk at once and every ``interval_ms`` while any of the tasks is active;
        ends as soon as none is."""
        return self.tasks.progress(task_ids, interval_ms, self.is_active, run_id=run_id)

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
        failed = await self.tasks.fail_stale(record)
        if failed is not None:
            await self._announce(failed)

    async def cleanup(self) -> int:
        """Delete settled records past their TTL; returns how many were deleted."""
        return await self.tasks.cleanup()

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


def _log_failure(record: TaskRecord, error: Any) -> None:
    """A task's final failure: with its traceback when it is an exception."""
    logger.error(
        "background task %s (tool %s, agent %s) failed: %s",
        record.id,
        record.tool_name,
        record.agent_id,
        error,
        exc_info=error if isinstance(error, BaseException) else None,
    )
