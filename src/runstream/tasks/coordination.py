"""What every background-task manager shares: :class:`TaskCoordinator`, and the
:class:`TaskManager` interface agents, the runtime and the server use.

A manager decides *where* a task's tool runs (here in asyncio tasks, or on Temporal workers);
the coordinator holds what does not depend on that:

* the task records in ``storage``, the authority: every status change is a compare-and-set on
  the expected status, so a cancel racing a completion, or a stale attempt, cannot overwrite a
  settled task;
* the requests enqueued in this process, the tools registered for tasks enqueued elsewhere,
  and the executions running here;
* how an attempt runs (:func:`~runstream.tasks.execution.run_attempt`), how its outcome is stored
  (:meth:`TaskCoordinator.store_outcome`) and announced (:meth:`TaskCoordinator.announce`: the
  result into the conversation first, then one :class:`~runstream.tasks.bus.TaskSettled` event
  carrying it and what came of that write, then the hooks);
* how a cancel and a resume are stored, and the reading side (``wait_for``, ``subscribe``,
  progress, cleanup).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Collection, Iterable
from datetime import timedelta
from typing import Any, Protocol

from runstream import _tracing as tracing
from runstream.chunks import BackgroundTaskProgressChunk
from runstream.memory import Memory
from runstream.storage import (
    InvalidArgumentError,
    Page,
    Storage,
    TaskFilter,
    TaskRecord,
    TaskStatus,
)
from runstream.storage.records import utc_now
from runstream.tasks.bus import EventBus, TaskEvent, TaskEventFilter, TaskSettled, TaskSubscription
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
from runstream.tasks.execution import SUSPENDED_RUN_KEY, Execution, Outcome, error_of, run_attempt
from runstream.tasks.lifecycle import TaskChunk, lifecycle_chunk, resumed_chunk, running_chunk
from runstream.tasks.settling import MemoryWrite
from runstream.tasks.slots import Slots
from runstream.tools import Tool, resume_schema_of

logger = logging.getLogger(__name__)

TERMINAL_STATUSES: frozenset[TaskStatus] = frozenset({"completed", "failed", "cancelled", "timed_out"})
SETTLED_STATUSES: frozenset[TaskStatus] = TERMINAL_STATUSES | {"suspended"}
"""What ``wait_for`` waits for: the task will not move again without a ``resume``."""

STALE_TASK_MESSAGE = "Worker process terminated before task completed"

Guard = dict[str, str | None] | None
"""Metadata an attempt's own writes require (``Storage.update_task(expected_metadata=...)``)."""


class TaskManager(Protocol):
    """What agents, the runtime and the server use of a task manager (in-process or Temporal)."""

    @property
    def storage(self) -> Storage: ...
    @property
    def config(self) -> BackgroundTaskConfig: ...
    @property
    def agent_concurrency(self) -> dict[str, int]: ...

    async def start(self) -> None: ...
    async def shutdown(self) -> None: ...
    def register_tool(self, agent_id: str, tool: Tool) -> None: ...
    async def enqueue(self, request: TaskRequest) -> TaskRecord | None: ...
    async def cancel(self, task_id: str) -> None: ...
    async def resume(self, task_id: str, data: object = None) -> TaskRecord: ...
    async def get_task(self, task_id: str) -> TaskRecord | None: ...
    async def list_tasks(self, task_filter: TaskFilter | None = None) -> Page[TaskRecord]: ...
    def is_active(self, task_id: str) -> bool: ...
    def running_task_ids(
        self,
        *,
        agent_id: str | None = None,
        run_id: str | None = None,
        thread_id: str | None = None,
        resource_id: str | None = None,
    ) -> list[str]: ...
    async def wait_for(self, task_id: str, timeout_ms: float | None = None) -> TaskRecord: ...
    def subscribe(
        self,
        *,
        agent_id: str | None = None,
        run_id: str | None = None,
        thread_id: str | None = None,
        resource_id: str | None = None,
        task_id: str | None = None,
        include_existing: bool = True,
    ) -> TaskSubscription: ...


class TaskCoordinator:
    """The shared part of a task manager (see the module's docstring)."""

    def __init__(
        self,
        storage: Storage,
        config: BackgroundTaskConfig,
        bus: EventBus,
        *,
        on_task_complete: TaskHook | None = None,
        on_task_failed: TaskHook | None = None,
    ) -> None:
        self.storage = storage
        self.config = config
        self.bus = bus
        self.on_task_complete = on_task_complete or config.on_task_complete
        self.on_task_failed = on_task_failed or config.on_task_failed
        self.agent_concurrency: dict[str, int] = {}
        """Per-agent slot limits overriding ``per_agent_concurrency`` (an agent's
        ``background_tasks={"concurrency": n}``)."""
        self.tools: dict[tuple[str, str], Tool] = {}
        """Tools runnable without the enqueuing request: (agent id, tool name) -> tool."""
        self.requests: dict[str, TaskRequest] = {}
        """The requests of the tasks enqueued in this process and not yet terminal."""
        self.executions: dict[str, Execution] = {}
        """The attempts running in this process."""
        self.slot_lock = asyncio.Lock()
        """Held while free slots are counted and taken, so two dispatches here cannot take one."""
        self.memory = Memory(storage=storage)

    # -- tools and records -----------------------------------------------------------------

    def register_tool(self, agent_id: str, tool: Tool) -> None:
        self.tools[(agent_id, tool.name)] = tool

    def agent_ids(self) -> list[str]:
        """The agents with registered tools."""
        return sorted({agent_id for agent_id, _ in self.tools})

    def resolve_tool(self, record: TaskRecord) -> Tool | None:
        request = self.requests.get(record.id)
        if request is not None and request.tool.name == record.tool_name:
            return request.tool
        return self.tools.get((record.agent_id, record.tool_name))

    def new_record(self, request: TaskRequest) -> TaskRecord:
        """A ``pending`` record for ``request`` (defaults from the config), remembered with it."""
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
        self.requests[record.id] = request
        return record

    def slots(self) -> Slots:
        """Free slots for one dispatch pass (take them under ``slot_lock``)."""
        return Slots(self.storage, self.config, self.agent_concurrency)

    async def require(self, task_id: str) -> TaskRecord:
        record = await self.storage.get_task(task_id)
        if record is None:
            raise TaskNotFoundError(f"Task not found: {task_id}")
        return record

    # -- running, storing, announcing ------------------------------------------------------

    async def run(self, ex: Execution, tool: Tool, args: dict[str, Any]) -> Outcome:
        """One attempt of ``ex``'s tool (see :func:`run_attempt`)."""
        return await run_attempt(
            ex,
            tool,
            args,
            publish=self.publish,
            request=self.requests.get(ex.record.id),
            progress_throttle_ms=self.config.progress_throttle_ms,
        )

    async def store_outcome(
        self, record: TaskRecord, outcome: Outcome, *, guard: Guard = None
    ) -> TaskRecord | None:
        """Store how a running task's attempt ended (a compare-and-set on ``running`` and the
        ``guard``); the stored record, or ``None`` if the task moved on meanwhile."""
        update = outcome.update()
        if outcome.kind == "suspended" and outcome.run_id is not None:
            update["metadata"] = {**record.metadata, SUSPENDED_RUN_KEY: outcome.run_id}
        traced = tracing.task_span_metadata(record.id)
        if traced:  # where the task's span is, for continuation turns in other processes
            update["metadata"] = {**update.get("metadata", record.metadata), **traced}
        try:
            return await self.storage.update_task(
                record.id, expected_status="running", expected_metadata=guard, **update
            )
        except InvalidArgumentError as exc:  # a result or suspend payload that is not JSON
            return await self.storage.update_task(
                record.id,
                expected_status="running",
                expected_metadata=guard,
                status="failed",
                error=error_of(exc),
                completed_at=utc_now(),
            )

    async def announce(self, record: TaskRecord) -> None:
        """After a settled state is stored: the state into the conversation
        (:meth:`write_outcome`), the request's own hooks, the :class:`TaskSettled` event, then
        the global hooks."""
        request = self.requests.get(record.id)
        if record.status in TERMINAL_STATUSES:
            self.requests.pop(record.id, None)
        written = await self.write_outcome(record, request)
        failed = record.status in ("failed", "timed_out")
        if request is not None:  # the tool's or agent's own hook, before the event (as Mastra)
            own = (
                request.on_complete if record.status == "completed" else request.on_failed if failed else None
            )
            await call_hook(own, record)
        self.bus.publish(TaskSettled(lifecycle_chunk(record), record, written))
        hooks = {"completed": self.on_task_complete, "cancelled": self.config.on_task_cancelled}
        await call_hook(self.on_task_failed if failed else hooks.get(record.status), record)

    async def write_outcome(self, record: TaskRecord, request: TaskRequest | None) -> MemoryWrite:
        """The settled state where the conversation holds the task's call: where the enqueuing
        request says (:class:`~runstream.tasks.settling.RunTarget`: its live run, else its
        thread's memory), or, when the request is not in this process, into the message holding
        the call in the memory kept in ``storage`` (:meth:`Memory.apply_task_outcome`, which
        the run's target uses too). A failed write is logged: the event still goes out."""
        try:
            suspended = record.status == "suspended"
            if request is not None:
                if request.target is None:
                    return "none"
                return await request.target.write(
                    record, resume_schema_of(request.tool) if suspended else None
                )
            resume_schema = resume_schema_of(self.resolve_tool(record)) if suspended else None
            return "memory" if await self.memory.apply_task_outcome(record, resume_schema) else "none"
        except Exception:
            logger.exception("task %s: could not write its %s state into memory", record.id, record.status)
            return "failed"

    def publish(self, record: TaskRecord, chunk: TaskChunk) -> None:
        self.bus.publish(TaskEvent(chunk, record))

    async def fail_stale(
        self, record: TaskRecord, message: str = STALE_TASK_MESSAGE, *, guard: Guard = None
    ) -> TaskRecord | None:
        """Fail a ``running`` task whose attempt was lost (its process died); the failed
        record (to announce), or ``None`` if the task moved on meanwhile."""
        return await self.storage.update_task(
            record.id,
            expected_status="running",
            expected_metadata=guard,
            status="failed",
            error={"message": message},
            completed_at=utc_now(),
        )

    # -- control ---------------------------------------------------------------------------

    async def store_cancel(self, task_id: str) -> TaskRecord | None:
        """Store a cancel of a pending, running or suspended task; ``None`` if it was settled."""
        while True:
            record = await self.require(task_id)
            if record.status in TERMINAL_STATUSES:
                return None
            cancelled = await self.storage.update_task(
                task_id, expected_status=record.status, status="cancelled", completed_at=utc_now()
            )
            if cancelled is not None:
                return cancelled

    async def stop(self, task_id: str, reason: str) -> None:
        """Abort the task's attempt if it runs here."""
        execution = self.executions.get(task_id)
        if execution is not None:
            await execution.stop(reason)

    async def store_resume(self, task_id: str, data: object) -> tuple[TaskRecord, object]:
        """Store the resume of a suspended task (``running``, with ``resume_data``) if a slot
        is free, and publish ``background-task-resumed``; the record and the payload it was
        suspended with. Call under ``slot_lock``. Like Mastra, a resume is not queued."""
        record = await self.require(task_id)
        if record.status == "suspended" and not await self.slots().take(record.agent_id):
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
        )
        if resumed is None:
            current = await self.storage.get_task(task_id)
            status = current.status if current is not None else record.status
            raise TaskStateError(f"Cannot resume task in status '{status}' (expected 'suspended')")
        self.publish(resumed, resumed_chunk(resumed))
        return resumed, record.suspend_payload

    # -- reading ---------------------------------------------------------------------------

    async def wait_for(
        self,
        task_id: str,
        timeout_ms: float | None = None,
        *,
        recheck_ms: float | None = None,
        announced: Callable[[TaskRecord], bool] | None = None,
    ) -> TaskRecord:
        """The task's record once it is terminal or suspended; with ``recheck_ms``, re-read
        after that long without an event (events from other processes can be lost).

        An event is published once its state is announced (in memory); a settled record read
        from storage may not be yet, where another process stores and announces: with
        ``announced`` (and ``recheck_ms``), such a record is returned only once that says so.

        Raises :class:`TaskNotFoundError`, ``TimeoutError`` after ``timeout_ms``, or
        :class:`BackgroundTaskError` if the manager shuts down first.
        """
        subscription = self.bus.subscribe(TaskEventFilter(task_ids=frozenset({task_id})))
        recheck_s = None if recheck_ms is None else recheck_ms / 1000

        def waits(record: TaskRecord) -> bool:  # a record read from storage
            return record.status not in SETTLED_STATUSES or (announced is not None and not announced(record))

        try:
            async with asyncio.timeout(None if timeout_ms is None else timeout_ms / 1000):
                record = await self.require(task_id)
                while waits(record):
                    try:
                        record = (await asyncio.wait_for(anext(subscription), recheck_s)).record
                    except TimeoutError:
                        record = await self.require(task_id)
                        continue
                    except StopAsyncIteration:
                        raise BackgroundTaskError(
                            "Background task manager shut down during wait_for"
                        ) from None
                    if record.status in SETTLED_STATUSES:
                        break
                return record
        finally:
            await subscription.close()

    def subscribe(self, wanted: TaskEventFilter, *, include_existing: bool = False) -> TaskSubscription:
        """Lifecycle chunks of the matching tasks, from now on, in publish order;
        ``include_existing`` first yields a ``background-task-running`` snapshot of the
        matching tasks running at that moment."""
        source = self.bus.subscribe(wanted)

        async def snapshot() -> list[TaskEvent]:
            running = await self.storage.list_tasks(
                TaskFilter(
                    status="running",
                    agent_id=wanted.agent_id,
                    run_id=wanted.run_id,
                    thread_id=wanted.thread_id,
                    resource_id=wanted.resource_id,
                )
            )
            return [TaskEvent(running_chunk(r), r) for r in running.items if wanted.matches(r)]

        return TaskSubscription(source, snapshot if include_existing else None)

    def progress_snapshot(
        self,
        task_ids: Iterable[str],
        is_active: Callable[[str], bool],
        *,
        run_id: str = "",
        since: float | None = None,
    ) -> BackgroundTaskProgressChunk:
        """``background-task-progress`` for the given tasks still active (``is_active``)."""
        active = [task_id for task_id in task_ids if is_active(task_id)]
        elapsed = 0 if since is None else round((time.monotonic() - since) * 1000)
        return BackgroundTaskProgressChunk(
            run_id, {"taskIds": active, "runningCount": len(active), "elapsedMs": elapsed}
        )

    async def progress(
        self,
        task_ids: Collection[str],
        interval_ms: float,
        is_active: Callable[[str], bool],
        *,
        run_id: str = "",
    ) -> AsyncIterator[BackgroundTaskProgressChunk]:
        """A progress chunk at once and every ``interval_ms`` while any of the tasks is active;
        ends as soon as none is."""
        ids = frozenset(task_ids)
        since = time.monotonic()
        subscription = self.bus.subscribe(TaskEventFilter(task_ids=ids))
        try:
            while any(is_active(task_id) for task_id in ids):
                yield self.progress_snapshot(task_ids, is_active, run_id=run_id, since=since)
                deadline = time.monotonic() + interval_ms / 1000
                while any(is_active(task_id) for task_id in ids):
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    try:
                        await asyncio.wait_for(anext(subscription), remaining)
                    except (TimeoutError, StopAsyncIteration):
                        break
        finally:
            await subscription.close()

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


async def call_hook(hook: TaskHook | None, record: TaskRecord) -> None:
    """A user callback on a settled task; its failure is logged, never the task's."""
    if hook is None:
        return
    try:
        result = hook(record)
        if inspect.isawaitable(result):
            await result
    except Exception:
        logger.exception("background task %s: %s callback failed", record.id, record.status)


def event_filter(
    agent_id: str | None = None,
    run_id: str | None = None,
    thread_id: str | None = None,
    resource_id: str | None = None,
    task_id: str | None = None,
) -> TaskEventFilter:
    return TaskEventFilter(
        agent_id, run_id, thread_id, resource_id, None if task_id is None else frozenset({task_id})
    )
