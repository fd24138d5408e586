"""The activities of the background-task workflow: one attempt of a task's tool, and the
settlement of an attempt Temporal gave up on.

An attempt claims the task with a compare-and-set that writes a fresh ``attempt`` token into
the record's metadata; its outcome is stored only under that token, so an attempt whose worker
was taken for dead (and whose successor claimed the task) cannot store anything. The tool runs
as in-process (:func:`~runstream.tasks.execution.run_attempt`: the timeout, the abort signal,
output chunks), while a side task heartbeats to Temporal. A Temporal cancellation (the workflow
was cancelled, or the worker shuts down) stops the tool through its abort signal.

The activities use the manager's :class:`~runstream.tasks.coordination.TaskCoordinator` and its
``announce`` (which records, in the Temporal manager, what this process has delivered).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from runstream.storage import TaskRecord
from runstream.storage.records import utc_now
from runstream.tasks.config import BackgroundTaskError
from runstream.tasks.coordination import STALE_TASK_MESSAGE, TERMINAL_STATUSES, Guard, TaskCoordinator
from runstream.tasks.execution import Execution, Outcome
from runstream.tasks.lifecycle import running_chunk
from runstream.tasks.temporal.settings import TemporalSettings
from runstream.tasks.temporal.workflow import RUN_TASK, SETTLE_LOST, AttemptInput, LostAttempt
from runstream.tools import ToolArgumentsError

RETRYABLE_ERROR = "TaskAttemptError"
NON_RETRYABLE_ERROR = "NonRetryableTaskError"

Announce = Callable[[TaskRecord], Awaitable[None]]


def attempt_guard(record: TaskRecord) -> Guard:
    """An attempt's writes require its own token: an attempt Temporal gave up on (its worker
    was taken for dead) cannot overwrite its successor's."""
    token = record.metadata.get("attempt")
    return {"attempt": token} if isinstance(token, str) else None


class TaskActivities:
    """The activities, bound to a manager's coordinator (storage, tools, event bus) and its
    ``announce``.

    ``global_concurrency`` attempts run at once in this worker process at most (the cluster-wide
    limits are the task workflows' slot workflow, :mod:`.slots`). An attempt waiting for a slot
    here keeps its task as it is and keeps heartbeating.
    """

    def __init__(self, tasks: TaskCoordinator, settings: TemporalSettings, announce: Announce) -> None:
        self.tasks = tasks
        self.settings = settings
        self.announce = announce
        self._slots = asyncio.Semaphore(max(tasks.config.global_concurrency, 1))
        self.identity = f"{socket.gethostname()}:{os.getpid()}"

    @activity.defn(name=RUN_TASK)
    async def run_task(self, attempt: AttemptInput) -> str:
        heartbeats = asyncio.create_task(self._heartbeat())
        try:
            async with self._slots:
                return await self._run(attempt)
        finally:
            heartbeats.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await heartbeats

    @activity.defn(name=SETTLE_LOST)
    async def settle_lost(self, lost: LostAttempt) -> str:
        """Fail a task whose last attempt was lost (its worker died or stopped) or ended in an
        error the attempt itself could not store."""
        record = await self.tasks.storage.get_task(lost.task_id)
        if record is None:
            return "missing"
        if record.status != "running":
            return record.status
        message = STALE_TASK_MESSAGE if lost.worker_lost else lost.message
        failed = await self.tasks.fail_stale(record, message, guard=attempt_guard(record))
        if failed is None:
            return await self._status(record.id)
        await self.announce(failed)
        return failed.status

    async def _heartbeat(self) -> None:
        interval_s = self.settings.heartbeat_timeout_ms / 4000
        while True:
            activity.heartbeat()
            await asyncio.sleep(interval_s)

    async def _status(self, task_id: str) -> str:
        current = await self.tasks.storage.get_task(task_id)
        return current.status if current is not None else "missing"

    async def _run(self, attempt: AttemptInput) -> str:
        number = activity.info().attempt
        record = await self.tasks.storage.get_task(attempt.task_id)
        if record is None:
            return "missing"
        if record.status in TERMINAL_STATUSES or record.status == "suspended":
            if number > 1 and record.status != "cancelled":  # stored by an attempt lost before it announced
                await self.announce(record)
            return record.status
        claimed = await self._claim(record, attempt.retry_base + number - 1, restart=number > 1)
        if claimed is None:
            return await self._status(record.id)
        if record.status == "pending":
            self.tasks.publish(claimed, running_chunk(claimed))
        outcome = await self._execute(claimed, attempt.suspend_payload)
        if outcome is None:  # stopped here: cancelled in storage meanwhile
            return await self._status(record.id)
        if outcome.kind == "error" and outcome.retryable and claimed.retry_count < claimed.max_retries:
            raise ApplicationError(str(outcome.value), type=RETRYABLE_ERROR)
        stored = await self.tasks.store_outcome(claimed, outcome, guard=attempt_guard(claimed))
        if stored is not None:
            await self.announce(stored)
        return await self._status(record.id)

    async def _claim(self, record: TaskRecord, retry_count: int, *, restart: bool) -> TaskRecord | None:
        """Make the task ``running`` under a new attempt token (from ``pending``, or from
        ``running``: a retry, a resume, or a takeover of a lost attempt)."""
        metadata = {**record.metadata, "attempt": uuid.uuid4().hex, "worker": self.identity}
        return await self.tasks.storage.update_task(
            record.id,
            expected_status=record.status,
            status="running",
            started_at=utc_now() if record.status == "pending" or restart else record.started_at,
            retry_count=retry_count,
            metadata=metadata,
        )

    async def _execute(self, record: TaskRecord, suspend_payload: Any) -> Outcome | None:
        """The tool's outcome, or ``None`` if the task was cancelled while it ran."""
        tool = self.tasks.resolve_tool(record)
        if tool is None:
            message = (
                f'No executor registered for tool "{record.tool_name}" (agent "{record.agent_id}") '
                f"in worker {self.identity}"
            )
            return Outcome("error", BackgroundTaskError(message), retryable=False)
        try:
            args = tool.validate_args(record.args)
        except ToolArgumentsError as exc:
            return Outcome("error", exc, retryable=False)
        execution = Execution(record, suspend_payload)
        self.tasks.executions[record.id] = execution
        try:
            outcome = await self.tasks.run(execution, tool, args)
        except asyncio.CancelledError:
            reason = "Worker shutting down" if activity.is_worker_shutdown() else "Task cancelled"
            await asyncio.shield(execution.stop(reason))
            raise
        finally:
            if self.tasks.executions.get(record.id) is execution:
                del self.tasks.executions[record.id]
        return None if execution.stopping else outcome
