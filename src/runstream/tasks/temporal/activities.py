"""The activities of the background-task workflow: one attempt of a task's tool, and the
settlement of an attempt Temporal gave up on.

An attempt claims the task with a compare-and-set that writes a fresh ``attempt`` token into
the record's metadata; its outcome is stored only under that token, so an attempt whose worker
was taken for dead (and whose successor claimed the task) cannot store anything. The tool runs
as in-process (:meth:`BackgroundTaskManager._attempt`: the timeout, the abort signal, output
chunks), while a side task heartbeats to Temporal. A Temporal cancellation (the workflow was
cancelled, or the worker shuts down) stops the tool through its abort signal.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import uuid
from typing import TYPE_CHECKING, Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from runstream.chunks import BackgroundTaskRunningChunk
from runstream.storage import TaskRecord
from runstream.storage.records import utc_now
from runstream.tasks.config import BackgroundTaskError
from runstream.tasks.manager import (
    STALE_TASK_MESSAGE,
    TERMINAL_STATUSES,
    _Execution,
    _Outcome,
    _running_payload,
)
from runstream.tasks.temporal.workflow import RUN_TASK, SETTLE_LOST, AttemptInput, LostAttempt
from runstream.tools import ToolArgumentsError

if TYPE_CHECKING:
    from runstream.tasks.temporal.manager import TemporalTaskManager

RETRYABLE_ERROR = "TaskAttemptError"
NON_RETRYABLE_ERROR = "NonRetryableTaskError"


class TaskActivities:
    """The activities, bound to the manager whose storage, tools and event bus they use.

    ``global_concurrency`` attempts run at once in this worker process at most (across agents;
    the per-agent limit is each agent queue's worker limit). An attempt waiting for a slot
    keeps its task ``pending`` and keeps heartbeating.
    """

    def __init__(self, manager: TemporalTaskManager) -> None:
        self.manager = manager
        self._slots = asyncio.Semaphore(max(manager.config.global_concurrency, 1))
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
        manager = self.manager
        record = await manager.storage.get_task(lost.task_id)
        if record is None:
            return "missing"
        if record.status != "running":
            return record.status
        message = STALE_TASK_MESSAGE if lost.worker_lost else lost.message
        failed = await manager.storage.update_task(
            record.id,
            expected_status="running",
            expected_metadata=manager._lease_guard(record),
            status="failed",
            error={"message": message},
            completed_at=utc_now(),
        )
        if failed is None:
            current = await manager.storage.get_task(record.id)
            return current.status if current is not None else "missing"
        await manager._announce(failed)
        return failed.status

    async def _heartbeat(self) -> None:
        interval_s = self.manager.temporal.heartbeat_timeout_ms / 4000
        while True:
            activity.heartbeat()
            await asyncio.sleep(interval_s)

    async def _run(self, attempt: AttemptInput) -> str:
        manager = self.manager
        number = activity.info().attempt
        record = await manager.storage.get_task(attempt.task_id)
        if record is None:
            return "missing"
        if record.status in TERMINAL_STATUSES or record.status == "suspended":
            if number > 1 and record.status != "cancelled":  # stored by an attempt lost before it announced
                await manager._announce(record)
            return record.status
        claimed = await self._claim(record, attempt.retry_base + number - 1, restart=number > 1)
        if claimed is None:
            current = await manager.storage.get_task(record.id)
            return current.status if current is not None else "missing"
        if record.status == "pending":
            manager._publish(claimed, BackgroundTaskRunningChunk(claimed.run_id, _running_payload(claimed)))
        outcome = await self._execute(claimed, attempt.suspend_payload)
        if outcome is None:  # stopped here: cancelled in storage meanwhile
            current = await manager.storage.get_task(record.id)
            return current.status if current is not None else "missing"
        if outcome.kind == "error" and outcome.retryable and claimed.retry_count < claimed.max_retries:
            raise ApplicationError(str(outcome.value), type=RETRYABLE_ERROR)
        await manager._conclude(claimed, outcome)
        current = await manager.storage.get_task(record.id)
        return current.status if current is not None else "missing"

    async def _claim(self, record: TaskRecord, retry_count: int, *, restart: bool) -> TaskRecord | None:
        """Make the task ``running`` under a new attempt token (from ``pending``, or from
        ``running``: a retry, a resume, or a takeover of a lost attempt)."""
        metadata = {**record.metadata, "attempt": uuid.uuid4().hex, "worker": self.identity}
        return await self.manager.storage.update_task(
            record.id,
            expected_status=record.status,
            status="running",
            started_at=utc_now() if record.status == "pending" or restart else record.started_at,
            retry_count=retry_count,
            metadata=metadata,
        )

    async def _execute(self, record: TaskRecord, suspend_payload: Any) -> _Outcome | None:
        """The tool's outcome, or ``None`` if the task was cancelled while it ran."""
        manager = self.manager
        tool = manager._resolve_tool(record)
        if tool is None:
            message = (
                f'No executor registered for tool "{record.tool_name}" (agent "{record.agent_id}") '
                f"in worker {self.identity}"
            )
            return _Outcome("error", BackgroundTaskError(message), retryable=False)
        try:
            args = tool.validate_args(record.args)
        except ToolArgumentsError as exc:
            return _Outcome("error", exc, retryable=False)
        execution = _Execution(record, suspend_payload)
        manager._executions[record.id] = execution
        try:
            outcome = await manager._attempt(execution, tool, args)
        except asyncio.CancelledError:
            reason = "Worker shutting down" if activity.is_worker_shutdown() else "Task cancelled"
            await asyncio.shield(execution.stop(reason))
            raise
        finally:
            if manager._executions.get(record.id) is execution:
                del manager._executions[record.id]
        return None if execution.stopping else outcome
