"""Background tasks over several processes: one shared storage, Redis for events and control.

:class:`DistributedTaskManager` is a :class:`BackgroundTaskManager` whose

* lifecycle events travel on a :class:`RedisEventBus`, so every process's subscribers (and
  ``wait_for``) see every task;
* ``cancel`` and ``resume`` reach the process that runs (or ran) the task over the control
  channel ``<prefix>:control``: a cancel aborts the tool where it runs; a resume is carried out
  by the task's owner if it is alive, else here if this process can run the tool, else by
  another live worker;
* running tasks hold a lease (``metadata.owner``, ``metadata.lease_until``) that the owner
  renews every ``renew_interval_ms``. Workers reclaim a ``running`` task only once its lease
  has lapsed, so live workers never take each other's tasks; an owner that could not renew in
  time stops the tool and does not store its outcome;
* workers (``worker=True``) take pending tasks from the shared storage, whoever enqueued them:
  the storage's compare-and-set on ``pending`` makes every claim exclusive, so each task runs
  once. A producer (``worker=False``) enqueues, reads, cancels and resumes, and runs nothing.

Limits, all because ``Storage.update_task`` compares the status only: a reclaim re-reads the
record just before its compare-and-set, but a claim landing in between (a millisecond window)
could still be re-queued; leases compare wall clocks of different hosts (keep them synchronised,
with leases far longer than the skew); concurrency limits count ``running`` rows, so they hold
for the whole cluster but two workers dispatching at the same instant may overshoot by one.

A request's ``on_terminal`` hook stays in the process that enqueued it. When another process
settles the task, the hook runs here on the settled event, hence after that event was published
(and not at all if Redis lost it).
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
from collections.abc import Coroutine
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from redis.exceptions import RedisError

from runstream.chunks import dumps
from runstream.storage import Storage, TaskFilter, TaskRecord
from runstream.storage.records import js_iso, utc_now
from runstream.tasks.bus import BusSubscription, TaskEventFilter
from runstream.tasks.config import (
    BackgroundTaskConfig,
    BackgroundTaskError,
    ConcurrencyLimitError,
    TaskNotFoundError,
    TaskStateError,
)
from runstream.tasks.manager import (
    SETTLED_STATUSES,
    TERMINAL_STATUSES,
    BackgroundTaskManager,
    TaskHook,
    _Execution,
    _Outcome,
)
from runstream.tasks.redis_bus import RedisChannel, RedisEventBus, record_from_wire

logger = logging.getLogger(__name__)

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
    """``wait_for`` re-reads the record after this long without an event (events can be lost)."""
    control_timeout_ms: int = 5_000
    """How long a resume sent to another process waits for its answer."""
    connect_timeout_ms: int = 5_000
    """How long ``start`` waits for Redis before going on without it (and logging so)."""


class DistributedTaskManager(BackgroundTaskManager):
    """A manager that shares ``storage`` and the Redis at ``redis_url`` with the managers of
    other processes using the same ``channel_prefix``.

    ``worker=False`` makes a producer: it never runs a tool, and its backpressure is always
    ``queue`` (a worker may have a slot when it has none). Every process that may run a task
    (recovered, claimed from the queue, resumed) must ``register_tool`` its tools.
    """

    def __init__(
        self,
        storage: Storage,
        config: BackgroundTaskConfig | None = None,
        *,
        redis_url: str,
        worker: bool = True,
        channel_prefix: str = "runstream",
        scale_out: ScaleOutConfig | None = None,
        on_task_complete: TaskHook | None = None,
        on_task_failed: TaskHook | None = None,
    ) -> None:
        bus = RedisEventBus(redis_url, channel_prefix=channel_prefix)
        super().__init__(
            storage, config, bus=bus, on_task_complete=on_task_complete, on_task_failed=on_task_failed
        )
        self.worker = worker
        self.worker_id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.scale_out = scale_out or ScaleOutConfig()
        self._redis_bus = bus
        self._control = RedisChannel(bus.client, f"{channel_prefix}:control", self._on_control)
        self._workers_key = f"{channel_prefix}:workers"
        self._leases: dict[_Execution, datetime] = {}
        self._announced: dict[str, set[tuple[str, str]]] = {}
        self._replies: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._handlers: set[asyncio.Task[None]] = set()
        self._loops: list[asyncio.Task[None]] = []
        self._wake = asyncio.Event()
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
            self._loops.append(asyncio.create_task(self._watch(self.bus.subscribe(TaskEventFilter()))))
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
        leased = list(self._executions)
        await super().shutdown()  # closes the bus and with it the Redis client
        for task_id in leased:
            current = await self.storage.get_task(task_id)
            if current is not None and current.status == "running" and self._owns(current):
                await self.storage.update_task(
                    task_id,
                    expected_status="running",
                    metadata={**current.metadata, "lease_until": js_iso(utc_now())},
                )

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
        """Reclaim only running tasks whose lease lapsed: other workers may be alive."""
        if self.worker:
            await self._reclaim_lapsed()

    async def _reclaim_lapsed(self) -> None:
        for record in (await self.storage.list_tasks(TaskFilter(status="running"))).items:
            if record.id in self._executions or not self._lapsed(record):
                continue
            current = await self.storage.get_task(record.id)  # narrow the window before the CAS
            if current is None or current.status != "running" or not self._lapsed(current):
                continue
            logger.info("task %s: lease of %s lapsed, reclaiming", current.id, current.metadata.get("owner"))
            if current.retry_count < current.max_retries:
                await self.storage.update_task(
                    current.id, expected_status="running", status="pending", started_at=None,
                    retry_count=current.retry_count + 1,
                )  # fmt: skip
            else:
                await self._settle_stale(current.id)

    def _lapsed(self, record: TaskRecord) -> bool:
        """The lease counts once written for this run (``lease_run`` is its ``started_at``);
        before that, a fresh claim is protected for ``lease_ms`` from ``started_at``."""
        if record.started_at is None:
            return True
        until = record.started_at + timedelta(milliseconds=self.scale_out.lease_ms)
        lease_until = record.metadata.get("lease_until")
        if isinstance(lease_until, str) and record.metadata.get("lease_run") == js_iso(record.started_at):
            until = datetime.fromisoformat(lease_until)
        return utc_now() > until

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

    async def _run(self, ex: _Execution, announce: bool) -> None:
        """Take the lease (so the record names its owner) before the tool starts; renew it."""
        task_id = ex.record.id
        self._leases[ex] = (ex.record.started_at or utc_now()) + timedelta(
            milliseconds=self.scale_out.lease_ms
        )
        acquired = False
        try:
            until = await self._renew(ex, check_owner=False)
        except Exception:
            logger.exception("task %s: could not take the lease yet", task_id)
        else:
            if until is None:  # no longer running: cancelled since the claim
                del self._leases[ex]
                if self._executions.get(task_id) is ex:
                    del self._executions[task_id]
                    self._active.pop(task_id, None)
                return
            self._leases[ex], acquired = until, True
        keeper = asyncio.create_task(self._keep_lease(ex, acquired))
        try:
            await super()._run(ex, announce)
        finally:
            keeper.cancel()
            del self._leases[ex]

    async def _keep_lease(self, ex: _Execution, acquired: bool) -> None:
        """Renew until the runner ends; once the lease is lost, stop the tool (if it still runs:
        a runner that is storing its outcome is left to its own compare-and-set)."""
        while True:
            await asyncio.sleep(self.scale_out.renew_interval_ms / 1000)
            if ex.stopping:
                return
            try:
                until = await self._renew(ex, check_owner=acquired)
            except Exception:
                logger.exception("task %s: lease renewal failed", ex.record.id)
                until = self._leases[ex] if utc_now() < self._leases[ex] else None
            if until is not None:
                self._leases[ex], acquired = until, True
            elif ex.attempt is None or not ex.attempt.done():
                logger.warning("task %s: lease lost, stopping the tool here", ex.record.id)
                self._spawn(self._stop(ex, "Task lease lost"))
                return

    async def _renew(self, ex: _Execution, *, check_owner: bool) -> datetime | None:
        """The new lease end, or ``None`` if the lease is lost (lapsed, or the task is no
        longer running here). The first write after a claim takes over a stale owner field."""
        if utc_now() >= self._leases[ex]:
            return None
        current = await self.storage.get_task(ex.record.id)
        if current is None or current.status != "running" or (check_owner and not self._owns(current)):
            return None
        until = utc_now() + timedelta(milliseconds=self.scale_out.lease_ms)
        metadata = {
            **current.metadata,
            "owner": self.worker_id,
            "lease_until": js_iso(until),
            "lease_run": js_iso(current.started_at) if current.started_at else None,
        }
        stored = await self.storage.update_task(ex.record.id, expected_status="running", metadata=metadata)
        return None if stored is None else until

    def _owns(self, record: TaskRecord) -> bool:
        return record.metadata.get("owner") == self.worker_id

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

    def _on_control(self, data: str) -> None:
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

    # -- hooks of requests settled elsewhere -----------------------------------------------

    async def _announce(self, record: TaskRecord) -> None:
        self._announced.setdefault(record.id, set()).add(_settled_key(record))
        await super()._announce(record)

    async def _watch(self, events: BusSubscription) -> None:
        """Run a request's ``on_terminal`` hook here when another process settled its task."""
        async for event in events:
            record = event.record
            if record.status not in SETTLED_STATUSES:
                continue
            announced = self._announced.get(record.id, set())
            terminal = record.status in TERMINAL_STATUSES
            request = self._requests.pop(record.id, None) if terminal else self._requests.get(record.id)
            if terminal:
                self._announced.pop(record.id, None)
            if _settled_key(record) in announced or request is None or request.on_terminal is None:
                continue
            try:
                await request.on_terminal(record)
            except Exception:
                logger.exception("background task %s: on_terminal hook failed", record.id)


def _settled_key(record: TaskRecord) -> tuple[str, str]:
    moment = record.suspended_at if record.status == "suspended" else record.completed_at
    return (record.status, js_iso(moment) if moment else "")
