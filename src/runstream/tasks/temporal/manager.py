"""Background tasks on Temporal: a drop-in for the in-process :class:`BackgroundTaskManager`.

Every background task is a Temporal workflow (:mod:`.workflow`) whose attempts are activities
run by runstream workers (:mod:`.worker`). The task record in ``storage`` stays the authority,
as in-process: every status change is a compare-and-set, so a cancel racing a completion, or a
worker that lost its attempt, cannot overwrite a settled task. What Temporal adds is the part
that was hard to get right by hand: queueing, retries with backoff, noticing a dead worker
(heartbeats, no clocks compared) and handing its attempt to another, and waiting durably for a
resume. What this manager shares with the in-process one is its
:class:`~runstream.tasks.coordination.TaskCoordinator`.

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
  ``queue``) or are refused (``reject``, ``fallback-sync``). Attempts run under cluster-wide
  limits: each holds a slot of the task queue's slots workflow (:mod:`.slots`), at most
  ``global_concurrency`` in all and the agent's limit of one agent, across every worker.
* events: with ``redis_url`` every process's subscribers see every task's events (Redis pub/sub,
  :class:`RedisEventBus`); the worker writes a result into memory before publishing its event,
  and the process that enqueued the task writes it where its request's target says (its live run)
  before delivering it (:mod:`.settlements`). Without Redis only this process's events are seen (a local worker:
  ``run_worker=True``), and the enqueuer learns of other processes' outcomes by re-reading.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Collection, Iterable
from typing import TYPE_CHECKING, Any, Unpack

from temporalio.client import Client, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError

from runstream.chunks import BackgroundTaskProgressChunk
from runstream.errors import ConfigurationError
from runstream.storage import Page, Storage, TaskFilter, TaskRecord
from runstream.storage.records import utc_now
from runstream.tasks.bus import EventBus, InProcessEventBus, TaskEvent, TaskSubscription
from runstream.tasks.config import (
    BackgroundTaskConfig,
    BackgroundTaskError,
    ConcurrencyLimitError,
    TaskHook,
    TaskRequest,
)
from runstream.tasks.coordination import TaskCoordinator, event_filter
from runstream.tasks.lifecycle import running_chunk
from runstream.tasks.temporal.settings import TemporalSettings
from runstream.tasks.temporal.settlements import ANNOUNCED_KEY, Settlements, announced_mark, is_announced
from runstream.tasks.temporal.slots import (
    ACQUIRE_SIGNAL,
    SlotRequest,
    SlotsState,
    SlotsWorkflow,
    slots_workflow_id,
)
from runstream.tasks.temporal.workflow import RESUME_SIGNAL, BackgroundTaskWorkflow, ResumeSignal, TaskPlan
from runstream.tasks.waiting import WaitOptions, wait_for_next_task
from runstream.tools import Tool

if TYPE_CHECKING:
    from runstream.tasks.temporal.worker import TaskWorker

__all__ = ["TemporalSettings", "TemporalTaskManager"]

logger = logging.getLogger(__name__)

RECONCILE_RETRY_S = 0.25
"""How soon a subscriber reconciliation looks again for a settled state not yet announced."""


class TemporalTaskManager:
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
        config = config or BackgroundTaskConfig()
        if run_worker and config.mode == "producer":
            raise ConfigurationError(
                'run_worker=True contradicts the config\'s mode "producer" (it runs no tool)'
            )
        bus: EventBus
        if redis_url is not None:
            from runstream.tasks.redis_bus import RedisEventBus

            bus = RedisEventBus(
                redis_url,
                channel_prefix=channel_prefix,
                before_delivery=self._before_delivery,
                on_reconnect=self._recheck_soon,
            )
        else:
            bus = InProcessEventBus()
        self.tasks = TaskCoordinator(
            storage, config, bus, on_task_complete=on_task_complete, on_task_failed=on_task_failed
        )
        self.settlements = Settlements(self.tasks)
        self.temporal = temporal or TemporalSettings()
        self.run_worker = run_worker
        self._client = client
        self._worker: TaskWorker | None = None
        self._pending: dict[str, TaskRecord] = {}
        """Tasks enqueued here and refused a slot, until backpressure decides."""
        self._loops: list[asyncio.Task[None]] = []
        self._background: set[asyncio.Task[None]] = set()
        self._recheck = asyncio.Event()
        self._start_lock = asyncio.Lock()
        self._started = False
        self._closing = False

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

    @property
    def client(self) -> Client:
        if self._client is None:
            raise BackgroundTaskError("TemporalTaskManager is not started (no Temporal client yet)")
        return self._client

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect to Temporal (and Redis), start the local worker if asked, the slots workflow
        and the re-read loop, and start the workflows of tasks left pending without one."""
        if self._started:
            return
        async with self._start_lock:
            if self._started:
                return
            self._check_open()
            await self._connect()
            await self._ensure_slots()
            if self.config.recover_stale_tasks_on_start:
                await self._recover()
            self._started = True

    async def _connect(self) -> None:
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

            self._worker = TaskWorker(self.client, self.temporal, self.tasks, self.announce)
            await self._worker.start()
        if not self._loops:
            self._loops.append(asyncio.create_task(self._recheck_loop()))

    async def _ensure_slots(self) -> None:
        """The slots workflow of the task queue (cluster-wide limits), started once."""
        if self.temporal.cluster_limits:
            await self._slots_workflow()

    async def _slots_workflow(self, **signal: Any) -> None:
        """Start the slots workflow unless it runs (with ``start_signal``: signal it, either way)."""
        try:
            await self.client.start_workflow(
                SlotsWorkflow.run,
                SlotsState(),
                id=slots_workflow_id(self.temporal.task_queue),
                task_queue=self.temporal.task_queue,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                **signal,
            )
        except RPCError as exc:
            raise BackgroundTaskError(f"Cannot reach the slots workflow on Temporal: {exc}") from exc

    def worker_queues(self) -> list[str]:
        """The task queues the local worker polls (empty without one)."""
        return [] if self._worker is None else self._worker.queues()

    async def shutdown(self) -> None:
        """Stop the local worker (gracefully: its attempts finish or go to another worker), end
        subscriptions and close the bus. Tasks go on in Temporal."""
        if self._closing:
            return
        self._closing = True
        if self._worker is not None:
            await self._worker.shutdown()
        for task in (*self._loops, *self._background):
            task.cancel()
        await asyncio.gather(*self._loops, *self._background, return_exceptions=True)
        self._pending.clear()
        self.tasks.requests.clear()
        await self.bus.close()

    def register_tool(self, agent_id: str, tool: Tool) -> None:
        """Make ``tool`` runnable for ``agent_id``'s tasks on this process's worker."""
        self.tasks.register_tool(agent_id, tool)

    async def _recover(self) -> None:
        """Start the workflow of every pending task (one whose enqueuing process died between
        storing it and starting its workflow); a workflow that exists is left alone."""
        pending = await self.storage.list_tasks(TaskFilter(status="pending"))
        for record in pending.items:
            await self._start_workflow(record)

    # -- enqueue: every task is a workflow -------------------------------------------------

    async def enqueue(self, request: TaskRequest) -> TaskRecord | None:
        """Create and persist a task and start its workflow. With a free slot (counted over
        ``running`` records, as in-process) it is claimed ``running`` at once; without one,
        backpressure ``queue`` leaves it ``pending`` until its attempt gets a slot, ``reject``
        raises :class:`ConcurrencyLimitError` and ``fallback-sync`` returns ``None`` (the
        record is then deleted)."""
        self._check_open()
        await self.start()
        record = self.tasks.new_record(request)
        await self.storage.save_task(record)
        self._pending[record.id] = record
        try:
            async with self.tasks.slot_lock:
                free = await self.tasks.slots().take(record.agent_id)
                if free:
                    claimed = await self.storage.update_task(
                        record.id, expected_status="pending", status="running", started_at=utc_now()
                    )
                    record = claimed or record
        finally:
            self._pending.pop(record.id, None)
        if not free and self.config.backpressure != "queue":
            del self.tasks.requests[record.id]
            await self.storage.delete_tasks([record.id])
            if self.config.backpressure == "reject":
                raise ConcurrencyLimitError(
                    f'Concurrency limit reached, cannot enqueue task for tool "{record.tool_name}"'
                )
            return None
        try:
            await self._start_workflow(record, request_slot=True)
        except BackgroundTaskError:  # the tool call fails; no task stays
            self.tasks.requests.pop(record.id, None)
            await self.storage.delete_tasks([record.id])
            raise
        if record.status == "running":  # after the enqueuer's own chunks, as the in-process runner
            asyncio.get_running_loop().call_soon(self.tasks.publish, record, running_chunk(record))
        return record

    def plan(self, record: TaskRecord, *, slot_requested: bool = False) -> TaskPlan:
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
            agent_id=record.agent_id,
            global_limit=max(self.config.global_concurrency, 1) if self.temporal.cluster_limits else 0,
            agent_limit=self.agent_concurrency.get(record.agent_id, self.config.per_agent_concurrency),
            slots_queue=self.temporal.task_queue,
            slot_requested=slot_requested and self.temporal.cluster_limits,
        )

    async def _start_workflow(self, record: TaskRecord, *, request_slot: bool = False) -> None:
        """Start the task's workflow. ``request_slot``: also ask the slots workflow for its first
        attempt's slot from here (a signal-with-start, once the workflow exists to be granted
        it), which spares the workflow a round trip through Temporal before its attempt."""
        plan = self.plan(record, slot_requested=request_slot)
        workflow_id = self.temporal.workflow_id(record.id)
        try:
            await self.client.start_workflow(
                BackgroundTaskWorkflow.run,
                plan,
                id=workflow_id,
                task_queue=self.temporal.task_queue,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            )
        except WorkflowAlreadyStartedError:
            return
        except RPCError as exc:
            raise BackgroundTaskError(f"Could not start task {record.id} on Temporal: {exc}") from exc
        if not plan.slot_requested:
            return
        request = SlotRequest(workflow_id, plan.agent_id, plan.global_limit, max(plan.agent_limit, 1))
        try:
            await self._slots_workflow(start_signal=ACQUIRE_SIGNAL, start_signal_args=[request])
        except BackgroundTaskError:  # the workflow would wait for a slot nobody asked for
            await self.workflow_handle(record.id).terminate("its slot could not be requested")
            raise

    def workflow_handle(self, task_id: str) -> WorkflowHandle[BackgroundTaskWorkflow, str]:
        """The Temporal workflow of a task."""
        return self.client.get_workflow_handle(self.temporal.workflow_id(task_id))

    # -- control ---------------------------------------------------------------------------

    async def cancel(self, task_id: str) -> None:
        """Cancel in storage and announce (as in-process), then cancel the workflow, which
        reaches the running attempt's abort signal wherever it runs."""
        cancelled = await self.tasks.store_cancel(task_id)
        if cancelled is None:
            return
        await self.tasks.stop(task_id, "Task cancelled")
        await self.announce(cancelled)
        try:
            await self.workflow_handle(task_id).cancel()
        except RPCError as exc:  # already closed, or never started (cancelled while pending)
            logger.debug("task %s: workflow not cancelled: %s", task_id, exc)

    async def resume(self, task_id: str, data: object = None) -> TaskRecord:
        """Store the resume (with a free slot, as in-process), then signal the task's workflow
        to run the tool again with ``ctx.resume_data = data``."""
        self._check_open()
        await self.start()
        async with self.tasks.slot_lock:
            resumed, suspend_payload = await self.tasks.store_resume(task_id, data)
        self.settlements.resumed(task_id)
        signal = ResumeSignal(retry_base=resumed.retry_count, suspend_payload=suspend_payload)
        try:
            await self.workflow_handle(task_id).signal(RESUME_SIGNAL, signal)
        except RPCError as exc:
            raise BackgroundTaskError(
                f"Could not signal the resume of task {task_id} to Temporal: {exc}"
            ) from exc
        return resumed

    # -- announcing: memory first, then the event ------------------------------------------

    async def announce(self, record: TaskRecord) -> None:
        """Announce a settled state stored in this process (see ``TaskCoordinator.announce``),
        then mark it announced in storage, for :meth:`wait_for` in every process."""
        self.settlements.announced_here(record)
        await self.tasks.announce(record)
        token = record.metadata.get("attempt")
        try:
            await self.storage.update_task(
                record.id,
                expected_status=record.status,
                expected_metadata={"attempt": token if isinstance(token, str) else None},
                metadata={**record.metadata, ANNOUNCED_KEY: announced_mark(record)},
            )
        except Exception:  # the waiters fall back on ANNOUNCE_GRACE_S
            logger.exception("task %s: could not mark its %s state announced", record.id, record.status)

    async def _before_delivery(self, event: TaskEvent) -> bool:
        """Another process's event, before this process's subscribers see it: a cancel stops
        the attempt if it runs here; a settled state of a task enqueued here runs its hook."""
        record = event.record
        if record.status == "cancelled" and record.id in self.tasks.executions:
            self._spawn(self.tasks.stop(record.id, "Task cancelled"))
        return await self.settlements.before_delivery(event)

    def _spawn(self, coroutine: Any) -> None:
        task = asyncio.create_task(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _recheck_soon(self) -> None:
        self._recheck.set()

    async def _recheck_loop(self) -> None:
        """Deliver the settled states whose events never arrived: of tasks enqueued here (every
        ``recheck_interval_ms`` and after a reconnect), and, after a gap in the bus's
        subscription, of every task a subscriber here follows (again every
        :data:`RECONCILE_RETRY_S` while some state found is not announced yet)."""
        interval_s = self.temporal.recheck_interval_ms / 1000
        wait_s = interval_s
        while True:
            try:
                async with asyncio.timeout(wait_s):
                    await self._recheck.wait()
            except TimeoutError:
                pass
            self._recheck.clear()
            for event in await self.settlements.recheck():
                deliver = getattr(self.bus, "deliver_locally", None)
                (deliver or self.bus.publish)(event)
            waiting = await self._reconcile_subscribers()
            wait_s = min(RECONCILE_RETRY_S, interval_s) if waiting else interval_s

    async def _reconcile_subscribers(self) -> bool:
        """Hand the subscribers here what a gap in the bus's subscription lost (see
        :meth:`RedisEventBus.reconcile`); whether to look again shortly."""
        reconcile = getattr(self.bus, "reconcile", None)
        if reconcile is None:
            return False
        try:
            return bool(await reconcile(self.settlements.missed))
        except Exception:  # storage unreachable: the gap stays, the next pass retries
            logger.exception("reconciling task subscribers after a Redis gap failed")
            return False

    # -- reading ---------------------------------------------------------------------------

    async def get_task(self, task_id: str) -> TaskRecord | None:
        return await self.storage.get_task(task_id)

    async def list_tasks(self, task_filter: TaskFilter | None = None) -> Page[TaskRecord]:
        return await self.storage.list_tasks(task_filter)

    def is_active(self, task_id: str) -> bool:
        """Enqueued here and, as far as this process has heard, pending or running somewhere."""
        return task_id in self._pending or self.settlements.is_active(task_id)

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
            for task_id, request in self.tasks.requests.items()
            if self.is_active(task_id)
            and all(value is None or getattr(request, key) == value for key, value in wanted.items())
        ]

    async def wait_for(self, task_id: str, timeout_ms: float | None = None) -> TaskRecord:
        """The task's record once it is terminal or suspended and announced (its outcome is in
        memory: a caller that reads memory next finds it); re-read after
        ``recheck_interval_ms`` without an event (an event may be lost, or come from a process
        this one cannot hear). The status is stored before the announcement, maybe by another
        process, so a settled record read from storage counts once marked announced
        (:func:`.settlements.is_announced`)."""
        return await self.tasks.wait_for(
            task_id, timeout_ms, recheck_ms=self.temporal.recheck_interval_ms, announced=is_announced
        )

    async def wait_for_next_task(self, task_ids: Iterable[str], **options: Unpack[WaitOptions]) -> TaskRecord:
        """The first of ``task_ids`` to end (Mastra's ``waitForNextTask``; storage is re-read at
        each progress interval): see :func:`runstream.tasks.waiting.wait_for_next_task`."""
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
        """Lifecycle chunks of the matching tasks (of every process, with Redis); the running
        ones first, unless ``include_existing=False`` (Mastra's default is true)."""
        wanted = event_filter(agent_id, run_id, thread_id, resource_id, task_id)
        return self.tasks.subscribe(wanted, include_existing=include_existing)

    def progress_snapshot(
        self, task_ids: Iterable[str], *, run_id: str = "", since: float | None = None
    ) -> BackgroundTaskProgressChunk:
        return self.tasks.progress_snapshot(task_ids, self.is_active, run_id=run_id, since=since)

    def progress(
        self, task_ids: Collection[str], interval_ms: float, *, run_id: str = ""
    ) -> AsyncIterator[BackgroundTaskProgressChunk]:
        return self.tasks.progress(task_ids, interval_ms, self.is_active, run_id=run_id)

    async def cleanup(self) -> int:
        """Delete settled records past their TTL; returns how many were deleted."""
        return await self.tasks.cleanup()

    def _check_open(self) -> None:
        if self._closing:
            raise BackgroundTaskError("Background task manager is shutting down")
