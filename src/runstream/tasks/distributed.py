"""Background tasks over several processes: one shared storage, Redis for events and control.

:class:`DistributedTaskManager` is a :class:`BackgroundTaskManager` whose

* lifecycle events travel on a :class:`RedisEventBus`, so every process's subscribers (and
  ``wait_for``) see every task;
* ``cancel`` and ``resume`` reach the process that runs (or ran) the task over the control
  channel ``<prefix>:control``: a cancel aborts the tool where it runs; a resume is carried out
  by the task's owner if it is alive, else here if this process can run the tool, else by
  another live worker;
* workers (``worker=True``) take pending tasks from the shared storage, whoever enqueued them.
  A producer (``worker=False``) enqueues, reads, cancels and resumes, and runs nothing.

Ownership is a lease in the record's metadata: ``owner`` (the worker id), ``lease`` (a token
new with every claim, resume or reclaim) and ``lease_until``. The compare-and-set that makes a
task ``running`` writes all three, so a claim is exclusive and names its owner at once. Every
later write of the runner (renewal, retry, outcome) requires its token
(``Storage.update_task(expected_metadata=...)``), and a reclaim requires the token *and* the
lapsed ``lease_until`` it read: of racing reclaims exactly one wins, a renewal landing first
makes the reclaim fail, and an owner that lost the task cannot write over its new owner. The
owner renews every ``renew_interval_ms``; one that could not renew in time stops the tool.
Every process reclaims lapsed leases (workers at each sweep, producers at each re-read), so a
dead worker's task is re-queued, or failed without retries left, even if no worker is left.

Results reach memory before their event is published, in every process: the process that
settles a task runs the enqueuing request's ``on_terminal`` hook if it holds the request, and
else writes the result over the placeholder (or records the suspension) in the shared storage
itself (the agents' memory is assumed to live in ``storage``, as :class:`~runstream.Runstream`
wires it). The process holding the request runs its hook on the remote event before handing it
to its own subscribers (the hook may rewrite a run still streaming there). Redis pub/sub can lose events, so each process
re-reads the tasks it enqueued after a reconnect and every ``recheck_interval_ms``, and delivers
a settled state it missed (hook first, as for an event).

Limits: leases compare wall clocks of different hosts (keep them synchronised, with leases far
longer than the skew); concurrency limits count ``running`` rows, so they hold for the whole
cluster but two workers dispatching at the same instant may overshoot by one; a task whose tool
no live worker registered stays ``pending``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import socket
import time
import uuid
from collections import OrderedDict
from collections.abc import Coroutine
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from redis.exceptions import RedisError

from runstream.chunks import dumps, iso_datetime
from runstream.memory import Memory
from runstream.storage import Storage, TaskFilter, TaskRecord
from runstream.storage.records import utc_now
from runstream.tasks.bus import TaskEvent, TaskEventFilter
from runstream.tasks.config import (
    BackgroundTaskConfig,
    BackgroundTaskError,
    ConcurrencyLimitError,
    TaskHook,
    TaskNotFoundError,
    TaskStateError,
)
from runstream.tasks.manager import (
    SETTLED_STATUSES,
    STALE_TASK_MESSAGE,
    TERMINAL_STATUSES,
    BackgroundTaskManager,
    _Execution,
    _lifecycle_chunk,
    _Outcome,
)
from runstream.tasks.redis_bus import RedisChannel, RedisEventBus, record_from_wire
from runstream.tools import resume_schema_of

logger = logging.getLogger(__name__)

LEASE_KEYS = ("owner", "lease", "lease_until")
FINISHED_REMEMBERED = 10_000

_REMOTE_ERRORS: dict[str, type[BackgroundTaskError]] = {
    cls.__name__: cls
    for cls in (BackgroundTaskError, TaskNotFoundError, TaskStateError, ConcurrencyLimitError)
}


@dataclass(frozen=True, slots=True)
class ScaleOutConfig:
    """Timings of the cross-process machinery."""

    lease_ms: int = 30_000
    renew_interval_ms: int = 10_000
    poll_interval_ms: int = 2_000
    """How often a worker sweeps: lapsed leases, pending tasks (in case a notice was lost),
    its presence in Redis."""
    recheck_interval_ms: int = 5_000
    """``wait_for`` re-reads the record after this long without an event, and each process
    re-reads the unsettled tasks it enqueued this often (events can be lost); a producer also
    reclaims lapsed leases this often (workers do at every sweep)."""
    control_timeout_ms: int = 5_000
    """How long a resume sent to another process waits for its answer."""
    connect_timeout_ms: int = 5_000
    """How long ``start`` waits for Redis before going on without it (and logging so)."""


class DistributedTaskManager(BackgroundTaskManager):
    """A manager that shares ``storage`` and the Redis at ``redis_url`` with the managers of
    other processes using the same ``channel_prefix``.

    ``worker=False`` (or the config's ``mode="producer"``) makes a producer: it never runs a tool, and its backpressure is always
    ``queue`` (a worker may have a slot when it has none). Every process that may run a task
    (recovered, claimed from the queue, resumed) must ``register_tool`` its tools.
    """

    def __init__(
        self,
        storage: Storage,
        config: BackgroundTaskConfig | None = None,
        *,
        redis_url: str,
        worker: bool | None = None,
        channel_prefix: str = "runstream",
        scale_out: ScaleOutConfig | None = None,
        on_task_complete: TaskHook | None = None,
        on_task_failed: TaskHook | None = None,
    ) -> None:
        bus = RedisEventBus(
            redis_url,
            channel_prefix=channel_prefix,
            before_delivery=self._on_remote_event,
            on_reconnect=self._recheck_soon,
        )
        super().__init__(
            storage, config, bus=bus, on_task_complete=on_task_complete, on_task_failed=on_task_failed
        )
        if worker is None:  # from Mastra's mode: "producer" runs nothing, "full"/"worker" run tasks
            worker = self.config.mode != "producer"
        elif worker and self.config.mode == "producer":
            raise ValueError('worker=True contradicts the config\'s mode "producer"')
        self.worker = worker
        self.worker_id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.scale_out = scale_out or ScaleOutConfig()
        self._redis_bus = bus
        self._control = RedisChannel(bus.client, f"{channel_prefix}:control", self._on_control)
        self._workers_key = f"{channel_prefix}:workers"
        self._leases: dict[_Execution, datetime] = {}
        self._delivered: dict[str, tuple[str, str]] = {}
        """The last settled state delivered here of each task with a request here."""
        self._finished: OrderedDict[str, None] = OrderedDict()
        """The latest tasks whose request here ended: a late duplicate of their end is dropped."""
        self._replies: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._handlers: set[asyncio.Task[None]] = set()
        self._loops: list[asyncio.Task[None]] = []
        self._wake = asyncio.Event()
        self._recheck = asyncio.Event()
        self._shutting_down = False

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        if self._started:
            return
        timeout_s = self.scale_out.connect_timeout_ms / 1000
        connected = await asyncio.gather(
            self._redis_bus.connect(timeout_s), self._control.wait_subscribed(timeout_s)
        )
        if not all(connected):
            logger.warning("Redis not reachable yet: events and control messages wait for it")
        if not self._loops:
            self._loops.append(asyncio.create_task(self._recheck_loop()))
            if self.worker:
                await self._heartbeat()
                self._loops.append(asyncio.create_task(self._poll_loop()))
        await super().start()

    async def shutdown(self) -> None:
        """As the base manager, then release the leases of the tasks left ``running`` here, so
        another worker reclaims them at its next sweep rather than when the lease runs out."""
        if self._shutting_down:
            return
        self._shutting_down = True
        for task in (*self._loops, *self._handlers):
            task.cancel()
        await asyncio.gather(*self._loops, *self._handlers, return_exceptions=True)
        if self.worker:
            try:
                await self._redis_bus.client.zrem(self._workers_key, self.worker_id)
            except (RedisError, OSError):
                logger.warning("could not remove worker %s from the live set", self.worker_id)
        await self._control.close()
        leased = [ex.record for ex in self._executions.values()]
        await super().shutdown()  # closes the bus and with it the Redis client
        for record in leased:
            try:
                await self.storage.update_task(
                    record.id,
                    expected_status="running",
                    expected_metadata=self._lease_guard(record),
                    metadata={**record.metadata, "lease_until": iso_datetime(utc_now())},
                )
            except Exception:  # the lease then lapses in its own time
                logger.exception("task %s: could not release its lease", record.id)

    # -- dispatch: workers claim from the shared queue, producers hand over -----------------

    async def _dispatch_pending(self) -> None:
        if not self.worker:
            queued = [task_id for task_id, r in self._active.items() if r.status == "pending"]
            for task_id in queued:
                del self._active[task_id]
            if queued:
                self._send_control({"op": "dispatch"})
            return
        added = [] if self._closing else await self._claimable()
        for record in added:
            self._active[record.id] = record
        await super()._dispatch_pending()
        for record in added:  # not claimed here: still in the shared queue
            left = self._active.get(record.id)
            if left is not None and left.status == "pending":
                del self._active[record.id]

    async def _claimable(self) -> list[TaskRecord]:
        """The oldest pending tasks of the shared queue that this worker can run, at most
        ``global_concurrency`` (no pass can claim more); paged, so that a run of tasks for tools
        registered only elsewhere does not hide the rest."""
        wanted = max(self.config.global_concurrency, 1)
        found: list[TaskRecord] = []
        page = 0
        while len(found) < wanted:
            batch = await self.storage.list_tasks(TaskFilter(status="pending", page=page, per_page=wanted))
            found += [
                r for r in batch.items if r.id not in self._active and self._resolve_tool(r) is not None
            ]
            if not batch.has_more:
                return found
            page += 1
        return found[:wanted]

    async def _recover(self) -> None:
        """Reclaim only running tasks whose lease lapsed: other workers may be alive. (A
        producer reclaims too, in its re-read loop: a task without retries left then fails
        even when no worker is left to notice.)"""
        if self.worker:
            await self._reclaim_lapsed()

    async def _reclaim_lapsed(self) -> None:
        for record in (await self.storage.list_tasks(TaskFilter(status="running"))).items:
            if record.id not in self._executions and self._lapsed(record):
                await self._reclaim(record)

    async def _reclaim(self, record: TaskRecord) -> bool:
        """Re-queue a task whose lease lapsed (the lost attempt counts as a retry), or fail it
        without retries left; only if its lease is still the lapsed one that was read. Whether
        this call did it."""
        lapsed = {key: _text(record.metadata.get(key)) for key in ("lease", "lease_until")}
        released = {k: v for k, v in record.metadata.items() if k not in LEASE_KEYS}
        if record.retry_count < record.max_retries:
            requeued = await self.storage.update_task(
                record.id, expected_status="running", expected_metadata=lapsed, status="pending",
                started_at=None, retry_count=record.retry_count + 1, metadata=released,
            )  # fmt: skip
            if requeued is not None:
                logger.info("task %s: lease of %s lapsed, re-queued", record.id, record.metadata.get("owner"))
                self._wake.set()
                self._send_control({"op": "dispatch"})
            return requeued is not None
        failed = await self.storage.update_task(
            record.id, expected_status="running", expected_metadata=lapsed, status="failed",
            error={"message": STALE_TASK_MESSAGE}, completed_at=utc_now(), metadata=released,
        )  # fmt: skip
        if failed is not None:
            await self._announce(failed)
        return failed is not None

    def _lapsed(self, record: TaskRecord) -> bool:
        """Past ``lease_until``; a record without one (claimed by a plain manager) is protected
        for ``lease_ms`` from ``started_at``."""
        lease_until = record.metadata.get("lease_until")
        if isinstance(lease_until, str):
            return utc_now() > datetime.fromisoformat(lease_until)
        if record.started_at is None:
            return True
        return utc_now() > record.started_at + timedelta(milliseconds=self.scale_out.lease_ms)

    async def _poll_loop(self) -> None:
        interval_s = self.scale_out.poll_interval_ms / 1000
        next_sweep = 0.0
        while True:
            try:
                async with asyncio.timeout(interval_s):
                    await self._wake.wait()
            except TimeoutError:
                pass
            self._wake.clear()
            try:
                if time.monotonic() >= next_sweep:
                    next_sweep = time.monotonic() + interval_s
                    await self._heartbeat()
                    if self.config.recover_stale_tasks_on_start:
                        await self._reclaim_lapsed()
                await self._drain()
            except Exception:
                logger.exception("scale-out sweep failed")

    async def _heartbeat(self) -> None:
        """Keep this worker in the live set (a sorted set scored by expiry) for resume routing."""
        now_ms = time.time() * 1000
        try:
            await self._redis_bus.client.zadd(
                self._workers_key, {self.worker_id: now_ms + self.scale_out.lease_ms}
            )
            await self._redis_bus.client.zremrangebyscore(self._workers_key, "-inf", now_ms)
        except (RedisError, OSError) as exc:
            logger.warning("worker heartbeat failed: %s", exc)

    # -- leases ----------------------------------------------------------------------------

    def _claim_metadata(self, record: TaskRecord) -> dict[str, Any]:
        """A new lease, written by the same compare-and-set that claims (or resumes) the task."""
        until = utc_now() + timedelta(milliseconds=self.scale_out.lease_ms)
        lease = {"owner": self.worker_id, "lease": uuid.uuid4().hex, "lease_until": iso_datetime(until)}
        return {**record.metadata, **lease}

    def _lease_guard(self, record: TaskRecord) -> dict[str, str | None]:
        return {"lease": _text(record.metadata.get("lease"))}

    async def _run(self, ex: _Execution, announce: bool) -> None:
        """Run the task while renewing the lease its claim took."""
        lease_until = ex.record.metadata.get("lease_until")
        self._leases[ex] = datetime.fromisoformat(lease_until) if isinstance(lease_until, str) else utc_now()
        keeper = asyncio.create_task(self._keep_lease(ex))
        try:
            await super()._run(ex, announce)
        finally:
            keeper.cancel()
            del self._leases[ex]

    async def _keep_lease(self, ex: _Execution) -> None:
        """Renew until the runner ends; once the lease is lost, stop the tool (if it still runs:
        a runner that is storing its outcome is left to its own compare-and-set)."""
        while True:
            await asyncio.sleep(self.scale_out.renew_interval_ms / 1000)
            if ex.stopping:
                return
            try:
                held = await self._renew(ex)
            except Exception:
                logger.exception("task %s: lease renewal failed", ex.record.id)
                held = utc_now() < self._leases[ex]
            if not held and (ex.attempt is None or not ex.attempt.done()):
                logger.warning("task %s: lease lost, stopping the tool here", ex.record.id)
                self._spawn(self._stop(ex, "Task lease lost"))
                return

    async def _renew(self, ex: _Execution) -> bool:
        """Extend the lease; ``False`` if it is lost (lapsed here, or the task is no longer
        running under this lease: cancelled, reclaimed)."""
        if utc_now() >= self._leases[ex]:
            return False
        until = utc_now() + timedelta(milliseconds=self.scale_out.lease_ms)
        renewed = await self.storage.update_task(
            ex.record.id,
            expected_status="running",
            expected_metadata=self._lease_guard(ex.record),
            metadata={**ex.record.metadata, "lease_until": iso_datetime(until)},
        )
        if renewed is None:
            return False
        self._leases[ex] = until
        return True

    async def _conclude(self, record: TaskRecord, outcome: _Outcome) -> None:
        ex = self._executions.get(record.id)
        deadline = None if ex is None else self._leases.get(ex)
        if deadline is not None and utc_now() > deadline:
            logger.warning("task %s: lease lapsed before the outcome, not storing it", record.id)
            return
        await super()._conclude(record, outcome)

    # -- control ---------------------------------------------------------------------------

    async def cancel(self, task_id: str) -> None:
        """Cancel in storage (and here), then tell the process running the task to abort it."""
        await super().cancel(task_id)
        self._send_control({"op": "cancel", "task_id": task_id})

    async def resume(self, task_id: str, data: Any = None) -> TaskRecord:
        """Resume where the task's tool (and its enqueuing request) lives: the owner if alive,
        else here if this worker can run it, else another live worker."""
        self._check_open()
        await self.start()
        record = await self._get_existing(task_id)
        if record.status != "suspended":
            raise TaskStateError(f"Cannot resume task in status '{record.status}' (expected 'suspended')")
        target = await self._resume_target(record)
        if target is None:
            return await super().resume(task_id, data)
        return await self._remote_resume(target, task_id, data)

    async def _resume_target(self, record: TaskRecord) -> str | None:
        owner = record.metadata.get("owner")
        if self.worker and owner == self.worker_id:
            return None
        try:
            live = await self._redis_bus.client.zrangebyscore(self._workers_key, time.time() * 1000, "+inf")
        except (RedisError, OSError) as exc:
            raise BackgroundTaskError(f"Cannot reach Redis to route the resume: {exc}") from exc
        if owner in live:
            return str(owner)
        if self.worker and self._resolve_tool(record) is not None:
            return None
        others = [w for w in live if w != self.worker_id]
        if not others:
            raise BackgroundTaskError(f"No live worker can resume task {record.id}")
        return str(random.choice(others))

    async def _remote_resume(self, target: str, task_id: str, data: Any) -> TaskRecord:
        request_id = uuid.uuid4().hex
        answer: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._replies[request_id] = answer
        self._send_control(
            {"op": "resume", "target": target, "task_id": task_id, "data": data, "request_id": request_id}
        )
        try:
            async with asyncio.timeout(self.scale_out.control_timeout_ms / 1000):
                reply = await answer
        except TimeoutError:
            raise BackgroundTaskError(
                f"Worker {target} did not answer the resume of task {task_id}"
            ) from None
        finally:
            self._replies.pop(request_id, None)
        if reply.get("error"):
            error = reply["error"]
            raise _REMOTE_ERRORS.get(error["type"], BackgroundTaskError)(error["message"])
        return record_from_wire(reply["record"])

    def _send_control(self, message: dict[str, Any]) -> None:
        self._control.send(dumps({**message, "origin": self.worker_id}))

    async def _on_control(self, data: str) -> None:
        message = json.loads(data)
        if message.get("origin") == self.worker_id or message.get("target", self.worker_id) != self.worker_id:
            return
        op = message.get("op")
        if op == "reply":
            answer = self._replies.pop(message["request_id"], None)
            if answer is not None and not answer.done():
                answer.set_result(message)
        elif op == "dispatch" and self.worker:
            self._wake.set()
        elif op == "cancel":
            execution = self._executions.get(message["task_id"])
            if execution is not None:
                self._spawn(self._stop_cancelled(execution))
        elif op == "resume":
            self._spawn(self._serve_resume(message))

    async def _stop_cancelled(self, ex: _Execution) -> None:
        current = await self.storage.get_task(ex.record.id)
        if current is None or current.status == "cancelled":
            await self._stop(ex, "Task cancelled")

    async def _stop(self, ex: _Execution, reason: str) -> None:
        await ex.stop(reason)
        await self._drain()

    async def _serve_resume(self, message: dict[str, Any]) -> None:
        reply: dict[str, Any] = {
            "op": "reply",
            "target": message["origin"],
            "request_id": message["request_id"],
        }
        try:
            record = await self.storage.get_task(message["task_id"])
            if record is not None and self._resolve_tool(record) is None:
                raise BackgroundTaskError(
                    f'No executor registered for tool "{record.tool_name}" in worker {self.worker_id}'
                )
            reply["record"] = (await super().resume(message["task_id"], message.get("data"))).to_wire()
        except BackgroundTaskError as exc:
            reply["error"] = {"type": type(exc).__name__, "message": str(exc)}
        self._send_control(reply)

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coroutine)
        self._handlers.add(task)
        task.add_done_callback(self._handlers.discard)

    # -- reading ---------------------------------------------------------------------------

    async def wait_for(self, task_id: str, timeout_ms: float | None = None) -> TaskRecord:
        """As the base manager, but also re-reads the record after ``recheck_interval_ms``
        without an event: Redis pub/sub may have lost the one that settled the task."""
        subscription = self.bus.subscribe(TaskEventFilter(task_ids=frozenset({task_id})))
        try:
            async with asyncio.timeout(None if timeout_ms is None else timeout_ms / 1000):
                record = await self._get_existing(task_id)
                while record.status not in SETTLED_STATUSES:
                    try:
                        event = await asyncio.wait_for(
                            anext(subscription), self.scale_out.recheck_interval_ms / 1000
                        )
                    except TimeoutError:
                        record = await self._get_existing(task_id)
                    except StopAsyncIteration:
                        raise BackgroundTaskError(
                            "Background task manager shut down during wait_for"
                        ) from None
                    else:
                        record = event.record
                return record
        finally:
            await subscription.close()

    async def _get_existing(self, task_id: str) -> TaskRecord:
        record = await self.storage.get_task(task_id)
        if record is None:
            raise TaskNotFoundError(f"Task not found: {task_id}")
        return record

    # -- the tasks enqueued here run elsewhere --------------------------------------------

    def is_active(self, task_id: str) -> bool:
        """Pending or running here, or enqueued here and, as far as this process has heard,
        pending or running in another process (what this process's runs wait for)."""
        return task_id in self._active or self._active_elsewhere(task_id)

    def running_task_ids(
        self,
        *,
        agent_id: str | None = None,
        run_id: str | None = None,
        thread_id: str | None = None,
        resource_id: str | None = None,
    ) -> list[str]:
        """As the base manager, plus the matching tasks enqueued here that are active in
        another process (so a newer until-idle stream takes them over too)."""
        here = super().running_task_ids(
            agent_id=agent_id, run_id=run_id, thread_id=thread_id, resource_id=resource_id
        )
        wanted = {"agent_id": agent_id, "run_id": run_id, "thread_id": thread_id, "resource_id": resource_id}
        elsewhere = [
            task_id
            for task_id, request in self._requests.items()
            if self._active_elsewhere(task_id)
            and all(value is None or getattr(request, key) == value for key, value in wanted.items())
        ]
        return here + elsewhere

    def _active_elsewhere(self, task_id: str) -> bool:
        return (
            task_id not in self._active
            and task_id in self._requests
            and self._delivered.get(task_id, ("",))[0] != "suspended"
        )

    # -- results into memory before their event, in every process -------------------------

    async def _announce(self, record: TaskRecord) -> None:
        """As the base manager; without the enqueuing request here, write the settled state
        into memory (as the agent's hook would) before the event is published."""
        request = self._requests.get(record.id)
        if request is not None:
            self._delivered[record.id] = _settled_key(record)
        else:
            await self._write_outcome(record)
        await super()._announce(record)
        if record.id not in self._requests:
            self._delivered.pop(record.id, None)

    async def _write_outcome(self, record: TaskRecord) -> None:
        """The result over its placeholder, or the suspension in the message's metadata."""
        memory = Memory(storage=self.storage)
        try:
            resume_schema = (
                resume_schema_of(self._resolve_tool(record)) if record.status == "suspended" else None
            )
            await memory.apply_task_outcome(record, resume_schema)
        except Exception:
            logger.exception("task %s: could not write its %s state into memory", record.id, record.status)

    async def _on_remote_event(self, event: TaskEvent) -> bool:
        """Before another process's event is delivered here: if it settles a task enqueued
        here, its request's hook runs first; a state already delivered (found by a re-read) is
        dropped."""
        record = event.record
        if record.status not in SETTLED_STATUSES:
            if record.status == "running":  # resumed elsewhere: no longer suspended
                self._delivered.pop(record.id, None)
            return True
        if record.id in self._requests:
            return await self._settled_elsewhere(record)
        return not (record.status in TERMINAL_STATUSES and record.id in self._finished)

    async def _settled_elsewhere(self, record: TaskRecord) -> bool:
        """Run the request's hook for a settled state another process stored; whether that
        state is new here (``False`` once delivered, or without a request here)."""
        request = self._requests.get(record.id)
        key = _settled_key(record)
        if request is None or self._delivered.get(record.id) == key:
            return False
        self._delivered[record.id] = key
        if record.status in TERMINAL_STATUSES:
            del self._requests[record.id]
            del self._delivered[record.id]
            self._finished[record.id] = None
            if len(self._finished) > FINISHED_REMEMBERED:
                self._finished.popitem(last=False)
        if request.on_terminal is not None:
            try:
                await request.on_terminal(record)
            except Exception:
                logger.exception("background task %s: on_terminal hook failed", record.id)
        return True

    def _recheck_soon(self) -> None:
        self._recheck.set()

    async def _recheck_loop(self) -> None:
        interval_s = self.scale_out.recheck_interval_ms / 1000
        while True:
            try:
                async with asyncio.timeout(interval_s):
                    await self._recheck.wait()
            except TimeoutError:
                pass
            self._recheck.clear()
            try:
                if not self.worker and self.config.recover_stale_tasks_on_start:
                    await self._reclaim_lapsed()  # even with every worker dead, a lost task ends
                await self._recheck_requests()
            except Exception:
                logger.exception("re-reading the tasks enqueued here failed")

    async def _recheck_requests(self) -> None:
        """Deliver the settled states of tasks enqueued here whose events never arrived."""
        for task_id in list(self._requests):
            if task_id in self._active:  # queued or running here: announced here
                continue
            record = await self.storage.get_task(task_id)
            if record is None:  # deleted: nothing will settle it
                self._requests.pop(task_id, None)
            elif record.status in SETTLED_STATUSES and await self._settled_elsewhere(record):
                logger.info("task %s: %s found in storage, its event was lost", task_id, record.status)
                self._redis_bus.deliver_locally(TaskEvent(_lifecycle_chunk(record), record))


def _settled_key(record: TaskRecord) -> tuple[str, str]:
    moment = record.suspended_at if record.status == "suspended" else record.completed_at
    return (record.status, iso_datetime(moment) if moment else "")


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None
