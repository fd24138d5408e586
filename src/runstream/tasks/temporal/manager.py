"""Background tasks on Temporal: a drop-in for the in-process :class:`BackgroundTaskManager`.

Every background task is a Temporal workflow (:mod:`.workflow`) whose attempts are activities
run by runstream workers (:mod:`.worker`). The task record in ``storage`` stays the authority,
as in-process: every status change is a compare-and-set, so a cancel racing a completion, or a
worker that lost its attempt, cannot overwrite a settled task. What Temporal adds is the part
that was hard to get right by hand: queueing, retries with backoff, noticing a dead worker
(heartbeats, no clocks compared) and handing its attempt to another, and waiting durably for a
resume.

How the task semantics map:

* ``timeoutMs``: the attempt enforces it and stores ``timed_out``; Temporal's start-to-close
  timeout backs it up. ``maxRetries``: the activity retry policy (``default_retries`` gives its
  backoff). A worker killed mid-attempt: its heartbeats stop and Temporal retries the attempt on
  another worker within ``heartbeat_timeout_ms`` (the lost attempt counts as a retry, as a
  crashed process's does in-process); without retries left the task fails.
* cancel: stored here, announced, then the workflow is cancelled; the attempt's cancellation
  fires the tool's abort signal (at once when the tool runs in this process or hears the
  cancelled event over Redis, else at its next heartbeat).
* suspend/resume: the workflow waits for the ``resume`` signal, then runs the tool again with
  ``ctx.resume_data``. Any API process can resume, at any later time.
* concurrency: a task enqueued while the ``running`` records (all processes) leave a slot is
  claimed ``running`` at once, as in-process; the others stay ``pending`` (backpressure
  ``queue``: Temporal queues them until a worker slot frees) or are refused (``reject``,
  ``fallback-sync``). Each worker process runs at most ``global_concurrency`` attempts, and at
  most ``per_agent_concurrency`` of one agent (one activity task queue per agent).
* events: with ``redis_url`` every process's subscribers see every task's events (Redis pub/sub,
  :class:`RedisEventBus`); the worker writes a result into memory before publishing its event,
  and the process that enqueued the task runs its ``on_terminal`` hook before delivering it.
  Without Redis only this process's events are seen (a local worker: ``run_worker=True``).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from temporalio.client import Client, WorkflowHandle
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError

from runstream.chunks import BackgroundTaskRunningChunk
from runstream.memory import Memory
from runstream.storage import Storage, TaskFilter, TaskRecord
from runstream.storage.records import utc_now
from runstream.tasks.bus import EventBus, InProcessEventBus, TaskEvent, TaskEventFilter
from runstream.tasks.config import (
    BackgroundTaskConfig,
    BackgroundTaskError,
    TaskHook,
    TaskNotFoundError,
    TaskRequest,
)
from runstream.tasks.manager import (
    SETTLED_STATUSES,
    TERMINAL_STATUSES,
    BackgroundTaskManager,
    _lifecycle_chunk,
    _running_payload,
)
from runstream.tasks.slots import Slots
from runstream.tasks.temporal.workflow import (
    RESUME_SIGNAL,
    BackgroundTaskWorkflow,
    ResumeSignal,
    TaskPlan,
)
from runstream.tools import resume_schema_of

logger = logging.getLogger(__name__)

FINISHED_REMEMBERED = 10_000


@dataclass(frozen=True, slots=True)
class TemporalSettings:
    """Where Temporal is and how its tasks are scheduled."""

    address: str = "localhost:7233"
    namespace: str = "default"
    tls: bool = False
    """TLS to the server (Temporal Cloud needs it; so does an ``api_key``)."""
    api_key: str | None = None
    """A Temporal Cloud API key (or pass a connected ``client`` for mTLS and other options)."""
    task_queue: str = "runstream"
    """The workflows' queue; each agent's attempts go to ``<task_queue>@<agent id>``."""
    heartbeat_timeout_ms: int = 10_000
    """A worker silent this long is taken for dead and its attempt runs elsewhere."""
    recheck_interval_ms: int = 5_000
    """Without an event for this long, ``wait_for`` and the enqueuing process re-read the
    records they wait for (Redis pub/sub can lose events)."""
    graceful_shutdown_ms: int = 10_000
    """How long a stopping worker lets running attempts finish before cancelling them (they
    are then retried on another worker)."""

    def activity_queue(self, agent_id: str) -> str:
        return f"{self.task_queue}@{agent_id}"

    def workflow_id(self, task_id: str) -> str:
        return f"runstream-task-{task_id}"


class TemporalTaskManager(BackgroundTaskManager):
    """A task manager whose tasks run as Temporal workflows on runstream workers.

    ``run_worker=True`` runs a worker in this process too (tools run here and elsewhere); an
    API process without it runs no tool. ``client`` reuses a connected Temporal client.
    """

    def __init__(
        self,
        storage: Storage,
        config: BackgroundTaskConfig | None = None,
        *,
        temporal: TemporalSettings | None = None,
        client: Client | None = None,
        redis_url: str | None = None,
        channel_prefix: str = "runstream",
        run_worker: bool = False,
        on_task_complete: TaskHook | None = None,
        on_task_failed: TaskHook | None = None,
    ) -> None:
        bus: EventBus
        if redis_url is not None:
            from runstream.tasks.redis_bus import RedisEventBus

            bus = RedisEventBus(
                redis_url,
                channel_prefix=channel_prefix,
                before_delivery=self._on_remote_event,
                on_reconnect=self._recheck_soon,
            )
        else:
            bus = InProcessEventBus()
        super().__init__(
            storage, config, bus=bus, on_task_complete=on_task_complete, on_task_failed=on_task_failed
        )
        if run_worker and self.config.mode == "producer":
            raise ValueError('run_worker=True contradicts the config\'s mode "producer" (it runs no tool)')
        self.temporal = temporal or TemporalSettings()
        self.run_worker = run_worker
        self._client = client
        self._worker: Any = None  # a TaskWorker, imported lazily (it imports the activities)
        self._suspended_here: set[str] = set()
        """Tasks enqueued here whose last state heard here is ``suspended``."""
        self._delivered: dict[str, tuple[str, str]] = {}
        self._finished: OrderedDict[str, None] = OrderedDict()
        self._loops: list[asyncio.Task[None]] = []
        self._signals: set[asyncio.Task[None]] = set()
        self._recheck = asyncio.Event()
        self._connect_lock = asyncio.Lock()
        self._handed: dict[str, TaskRecord] = {}
        """Tasks handed to Temporal by the last dispatch, whose workflows are not started yet."""

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def client(self) -> Client:
        if self._client is None:
            raise BackgroundTaskError("TemporalTaskManager is not started (no Temporal client yet)")
        return self._client

    async def start(self) -> None:
        if self._started:
            return
        async with self._connect_lock:
            await self._connect()
        await super().start()

    async def _connect(self) -> None:
        """The Temporal client, the event bus, the local worker and the re-read loop (once)."""
        if self._client is None:
            try:
                settings = self.temporal
                self._client = await Client.connect(
                    settings.address,
                    namespace=settings.namespace,
                    tls=settings.tls or settings.api_key is not None,
                    api_key=settings.api_key,
                )
            except RuntimeError as exc:
                raise BackgroundTaskError(f"Cannot reach Temporal at {self.temporal.address}: {exc}") from exc
        connect = getattr(self.bus, "connect", None)
        if connect is not None and not await connect():
            logger.warning("Redis not reachable yet: events of other processes wait for it")
        if self.run_worker and self._worker is None:
            from runstream.tasks.temporal.worker import TaskWorker

            self._worker = TaskWorker(self)
            await self._worker.start()
        if not self._loops:
            self._loops.append(asyncio.create_task(self._recheck_loop()))

    async def shutdown(self) -> None:
        """Stop the local worker (gracefully: its attempts finish or go to another worker),
        then the base manager's shutdown (subscriptions end, the bus closes)."""
        if self._closing:
            return
        if self._worker is not None:
            await self._worker.shutdown()
        for task in (*self._loops, *self._signals):
            task.cancel()
        await asyncio.gather(*self._loops, *self._signals, return_exceptions=True)
        await super().shutdown()

    async def _recover(self) -> None:
        """Start the workflow of every pending task (one whose enqueuing process died between
        storing it and starting its workflow); a workflow that exists is left alone."""
        pending = await self.storage.list_tasks(TaskFilter(status="pending"))
        for record in pending.items:
            await self._start_workflow(record)

    # -- dispatch: every task is a workflow ------------------------------------------------

    async def enqueue(self, request: TaskRequest) -> TaskRecord | None:
        """As in-process; the task's workflow is started before this returns (outside the
        dispatch lock, so that concurrent enqueues wait on Temporal together)."""
        record = await super().enqueue(request)
        if record is not None:
            await self._start_handed([record.id])
        return record

    async def _drain(self) -> None:
        await super()._drain()
        await self._start_handed()

    async def _dispatch_pending(self) -> None:
        """Hand the tasks queued here to Temporal, oldest first (under the dispatch lock; their
        workflows are started by :meth:`_start_handed`). A task with a free slot (counted over
        ``running`` records, as in-process) is claimed ``running`` here; one without stays
        ``pending`` until a worker slot frees, or, with backpressure other than ``queue``, stays
        here to be refused."""
        if self._closing:
            return
        queued = sorted(
            (r for r in self._active.values() if r.status == "pending"), key=lambda r: r.created_at
        )
        slots = Slots(self.storage, self.config, self.agent_concurrency)
        for record in queued:
            free = await slots.take(record.agent_id)
            if not free and self.config.backpressure != "queue":
                continue
            claimed: TaskRecord | None = record
            if free:
                claimed = await self.storage.update_task(
                    record.id, expected_status="pending", status="running", started_at=utc_now()
                )
            del self._active[record.id]
            if claimed is None:  # cancelled meanwhile
                slots.give_back(record.agent_id)
            else:
                self._handed[record.id] = claimed

    async def _start_handed(self, task_ids: Collection[str] | None = None) -> None:
        """Start the workflows of the tasks handed over (those of ``task_ids``, or all); announce
        the ones claimed ``running`` (after the enqueuer's own chunks, as the in-process runner
        does). A task whose workflow cannot start is deleted and the error raised: the tool call
        fails, no task stays."""
        wanted = list(self._handed) if task_ids is None else [i for i in task_ids if i in self._handed]
        handed = {task_id: self._handed.pop(task_id) for task_id in wanted}
        results = await asyncio.gather(
            *(self._start_workflow(record) for record in handed.values()), return_exceptions=True
        )
        failure: BaseException | None = None
        for record, result in zip(handed.values(), results, strict=True):
            if isinstance(result, BaseException):
                self._requests.pop(record.id, None)
                await self.storage.delete_tasks([record.id])
                failure = failure or result
            elif record.status == "running":
                running = BackgroundTaskRunningChunk(record.run_id, _running_payload(record))
                asyncio.get_running_loop().call_soon(self._publish, record, running)
        if failure is not None:
            raise failure

    def plan(self, record: TaskRecord) -> TaskPlan:
        retries = self.config.default_retries
        return TaskPlan(
            task_id=record.id,
            activity_queue=self.temporal.activity_queue(record.agent_id),
            timeout_ms=record.timeout_ms,
            max_retries=record.max_retries,
            retry_delay_ms=retries.retry_delay_ms,
            backoff_multiplier=retries.backoff_multiplier,
            max_retry_delay_ms=retries.max_retry_delay_ms,
            heartbeat_timeout_ms=self.temporal.heartbeat_timeout_ms,
        )

    async def _start_workflow(self, record: TaskRecord) -> None:
        try:
            await self.client.start_workflow(
                BackgroundTaskWorkflow.run,
                self.plan(record),
                id=self.temporal.workflow_id(record.id),
                task_queue=self.temporal.task_queue,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            )
        except WorkflowAlreadyStartedError:
            pass
        except RPCError as exc:
            raise BackgroundTaskError(f"Could not start task {record.id} on Temporal: {exc}") from exc

    def _handle(self, task_id: str) -> WorkflowHandle[Any, Any]:
        return self.client.get_workflow_handle(self.temporal.workflow_id(task_id))

    # -- control ---------------------------------------------------------------------------

    async def cancel(self, task_id: str) -> None:
        """Cancel in storage and announce (as in-process), then cancel the workflow, which
        reaches the running attempt's abort signal wherever it runs."""
        await super().cancel(task_id)
        record = await self.storage.get_task(task_id)
        if record is not None and record.status == "cancelled":
            try:
                await self._handle(task_id).cancel()
            except RPCError as exc:  # already closed, or never started (cancelled while pending)
                logger.debug("task %s: workflow not cancelled: %s", task_id, exc)

    def _launch(self, record: TaskRecord, *, announce: bool, suspend_payload: Any = None) -> None:
        """A resume stored here (the base ``resume``): signal the task's workflow to run it."""
        self._suspended_here.discard(record.id)
        signal = ResumeSignal(retry_base=record.retry_count, suspend_payload=suspend_payload)
        task = asyncio.create_task(self._signal_resume(record, signal))
        self._signals.add(task)
        task.add_done_callback(self._signals.discard)

    async def _signal_resume(self, record: TaskRecord, signal: ResumeSignal) -> None:
        try:
            await self._handle(record.id).signal(RESUME_SIGNAL, signal)
        except RPCError:
            logger.exception("task %s: could not signal its resume to Temporal", record.id)

    # -- announcing: memory first, then the event ------------------------------------------

    def _lease_guard(self, record: TaskRecord) -> dict[str, str | None] | None:
        """An attempt's writes require its own token: an attempt Temporal gave up on (its worker
        was taken for dead) cannot overwrite its successor's."""
        token = record.metadata.get("attempt")
        return {"attempt": token} if isinstance(token, str) else None

    async def _announce(self, record: TaskRecord) -> None:
        """As the base manager; without the enqueuing request here (a worker), first write the
        settled state into memory, as the agent's hook would."""
        if record.id in self._requests:
            self._delivered[record.id] = _settled_key(record)
            if record.status == "suspended":
                self._suspended_here.add(record.id)
        else:
            await self._write_outcome(record)
        await super()._announce(record)

    async def _write_outcome(self, record: TaskRecord) -> None:
        memory = Memory(storage=self.storage)
        try:
            resume_schema = (
                resume_schema_of(self._resolve_tool(record)) if record.status == "suspended" else None
            )
            await memory.apply_task_outcome(record, resume_schema)
        except Exception:
            logger.exception("task %s: could not write its %s state into memory", record.id, record.status)

    async def _on_remote_event(self, event: TaskEvent) -> bool:
        """Before another process's event is delivered here: a settled state of a task enqueued
        here runs its request's hook first (once); a cancel stops the attempt if it runs here."""
        record = event.record
        if record.status == "cancelled" and record.id in self._executions:
            self._stop_soon(record.id)
        if record.status not in SETTLED_STATUSES:
            if record.status == "running":
                self._suspended_here.discard(record.id)
            return True
        if record.id in self._requests:
            return await self._settled_elsewhere(record)
        return not (record.status in TERMINAL_STATUSES and record.id in self._finished)

    def _stop_soon(self, task_id: str) -> None:
        execution = self._executions.get(task_id)
        if execution is not None:
            task = asyncio.create_task(execution.stop("Task cancelled"))
            self._signals.add(task)
            task.add_done_callback(self._signals.discard)

    async def _settled_elsewhere(self, record: TaskRecord) -> bool:
        """Run the request's hook for a settled state stored by another process; whether that
        state is new here."""
        request = self._requests.get(record.id)
        key = _settled_key(record)
        if request is None or self._delivered.get(record.id) == key:
            return False
        self._delivered[record.id] = key
        if record.status in TERMINAL_STATUSES:
            del self._requests[record.id]
            self._delivered.pop(record.id, None)
            self._suspended_here.discard(record.id)
            self._finished[record.id] = None
            if len(self._finished) > FINISHED_REMEMBERED:
                self._finished.popitem(last=False)
        else:
            self._suspended_here.add(record.id)
        if request.on_terminal is not None:
            try:
                await request.on_terminal(record)
            except Exception:
                logger.exception("background task %s: on_terminal hook failed", record.id)
        return True

    def _recheck_soon(self) -> None:
        self._recheck.set()

    async def _recheck_loop(self) -> None:
        """Deliver the settled states of tasks enqueued here whose events never arrived."""
        interval_s = self.temporal.recheck_interval_ms / 1000
        while True:
            try:
                async with asyncio.timeout(interval_s):
                    await self._recheck.wait()
            except TimeoutError:
                pass
            self._recheck.clear()
            for task_id in list(self._requests):
                try:
                    record = await self.storage.get_task(task_id)
                except Exception:
                    logger.exception("re-reading task %s failed", task_id)
                    continue
                if record is None:
                    self._requests.pop(task_id, None)
                elif record.status in SETTLED_STATUSES and await self._settled_elsewhere(record):
                    logger.info("task %s: %s found in storage, its event was lost", task_id, record.status)
                    self._deliver_locally(TaskEvent(_lifecycle_chunk(record), record))

    def _deliver_locally(self, event: TaskEvent) -> None:
        deliver = getattr(self.bus, "deliver_locally", None)
        (deliver or self.bus.publish)(event)

    # -- reading ---------------------------------------------------------------------------

    def is_active(self, task_id: str) -> bool:
        """Enqueued here and, as far as this process has heard, pending or running somewhere."""
        return task_id in self._active or (task_id in self._requests and task_id not in self._suspended_here)

    def running_task_ids(
        self,
        *,
        agent_id: str | None = None,
        run_id: str | None = None,
        thread_id: str | None = None,
        resource_id: str | None = None,
    ) -> list[str]:
        """The matching tasks enqueued here that are still active (wherever they run)."""
        wanted = {"agent_id": agent_id, "run_id": run_id, "thread_id": thread_id, "resource_id": resource_id}
        return [
            task_id
            for task_id, request in self._requests.items()
            if self.is_active(task_id)
            and all(value is None or getattr(request, key) == value for key, value in wanted.items())
        ]

    async def wait_for(self, task_id: str, timeout_ms: float | None = None) -> TaskRecord:
        """As the base manager, but re-reads the record after ``recheck_interval_ms`` without an
        event (an event may be lost, or come from a process this one cannot hear)."""
        subscription = self.bus.subscribe(TaskEventFilter(task_ids=frozenset({task_id})))
        try:
            async with asyncio.timeout(None if timeout_ms is None else timeout_ms / 1000):
                record = await self._existing(task_id)
                while record.status not in SETTLED_STATUSES:
                    try:
                        event = await asyncio.wait_for(
                            anext(subscription), self.temporal.recheck_interval_ms / 1000
                        )
                    except TimeoutError:
                        record = await self._existing(task_id)
                    except StopAsyncIteration:
                        raise BackgroundTaskError(
                            "Background task manager shut down during wait_for"
                        ) from None
                    else:
                        record = event.record
                return record
        finally:
            await subscription.close()

    async def _existing(self, task_id: str) -> TaskRecord:
        record = await self.storage.get_task(task_id)
        if record is None:
            raise TaskNotFoundError(f"Task not found: {task_id}")
        return record


def _settled_key(record: TaskRecord) -> tuple[str, str]:
    moment = record.suspended_at if record.status == "suspended" else record.completed_at
    return (record.status, moment.isoformat() if moment else "")
