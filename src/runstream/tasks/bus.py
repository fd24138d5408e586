"""How background-task lifecycle events travel from the manager to whoever listens.

:class:`EventBus` is the interface; :class:`InProcessEventBus` delivers within one process. A
bus for several processes (Redis pub/sub, say) is a sibling implementation: it would send
``event.chunk.to_wire()`` plus ``event.record.to_wire()`` and rebuild both on the other side.

Delivery contract, which every implementation keeps: a subscriber sees the matching events in
publish order, none lost, however slowly it reads (buffers are unbounded). ``publish`` never
blocks, so a tool's writer (a plain callback) can publish, and events published one after
another cannot overtake each other. A subscriber sees each settled state of a task (terminal or
suspended, with its moment) once, even when it is delivered twice (live and found in storage
after a gap: :meth:`InProcessEventBus.reconcile`).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import Protocol

from runstream._clock import iso_datetime
from runstream.storage import TaskRecord
from runstream.storage.records import utc_now
from runstream.tasks.lifecycle import TaskChunk
from runstream.tasks.settling import MemoryWrite


@dataclass(frozen=True, slots=True)
class TaskEvent:
    """One lifecycle event: the chunk consumers see and the task record as of that moment."""

    chunk: TaskChunk
    record: TaskRecord


@dataclass(frozen=True, slots=True)
class TaskSettled(TaskEvent):
    """A task reached a settled state (completed, failed, timed out, cancelled or suspended),
    published only once its outcome is written where the conversation holds the call: the
    result or error (``record``), the thread and resource (``record.thread_id``/``resource_id``)
    and what came of the write (``written``) travel together, so a reader woken by this event
    needs no other read to know the outcome is in memory."""

    written: MemoryWrite = "memory"


@dataclass(frozen=True, slots=True)
class TaskEventFilter:
    """Which events a subscriber wants; ``None`` fields do not filter."""

    agent_id: str | None = None
    run_id: str | None = None
    thread_id: str | None = None
    resource_id: str | None = None
    task_ids: frozenset[str] | None = None

    def matches(self, record: TaskRecord) -> bool:
        return (
            (self.agent_id is None or record.agent_id == self.agent_id)
            and (self.run_id is None or record.run_id == self.run_id)
            and (self.thread_id is None or record.thread_id == self.thread_id)
            and (self.resource_id is None or record.resource_id == self.resource_id)
            and (self.task_ids is None or record.id in self.task_ids)
        )


class BusSubscription(Protocol):
    """The events matching one filter, as an async iterator that ends when closed."""

    def __aiter__(self) -> BusSubscription: ...

    async def __anext__(self) -> TaskEvent: ...

    async def close(self) -> None:
        """Stop at once (buffered events are dropped). Idempotent."""
        ...


class EventBus(Protocol):
    def publish(self, event: TaskEvent) -> None:
        """Hand the event to every matching subscriber; never blocks."""
        ...

    def subscribe(self, event_filter: TaskEventFilter) -> BusSubscription:
        """Start receiving now: every event published after this call is delivered."""
        ...

    async def close(self) -> None:
        """End every subscription once it has delivered what was already published."""
        ...


_END = None

SETTLED_REMEMBERED = 10_000
"""How many settled states a subscription remembers having delivered (to drop a repeat)."""

MissedEvents = Callable[[TaskEventFilter, datetime], Awaitable[tuple[list[TaskEvent], bool]]]
"""The settled events matching a filter since a moment, as storage holds them, and whether some
settled state there is not announced yet (to read again shortly)."""


class _InProcessSubscription:
    def __init__(self, bus: InProcessEventBus, event_filter: TaskEventFilter) -> None:
        self._bus = bus
        self.filter = event_filter
        self.opened_at = utc_now()
        self._queue: asyncio.Queue[TaskEvent | None] = asyncio.Queue()
        self._closed = False
        self._settled: OrderedDict[tuple[str, str, str], None] = OrderedDict()

    def deliver(self, event: TaskEvent | None) -> None:
        if event is not None and (key := settled_key(event.record)) is not None:
            if key in self._settled:
                return
            self._settled[key] = None
            if len(self._settled) > SETTLED_REMEMBERED:
                self._settled.popitem(last=False)
        self._queue.put_nowait(event)

    def __aiter__(self) -> _InProcessSubscription:
        return self

    async def __anext__(self) -> TaskEvent:
        if self._closed:
            raise StopAsyncIteration
        event = await self._queue.get()
        if event is _END or self._closed:
            self._closed = True
            self._bus.discard(self)
            raise StopAsyncIteration
        return event

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._bus.discard(self)
            self._queue.put_nowait(_END)  # wake a reader blocked in __anext__


class InProcessEventBus:
    """Fan-out to subscribers of this process through one unbounded queue each."""

    def __init__(self) -> None:
        self._subscribers: list[_InProcessSubscription] = []
        self._closed = False

    def publish(self, event: TaskEvent) -> None:
        for subscriber in list(self._subscribers):
            if subscriber.filter.matches(event.record):
                subscriber.deliver(event)

    def subscribe(self, event_filter: TaskEventFilter) -> BusSubscription:
        subscriber = _InProcessSubscription(self, event_filter)
        if self._closed:
            subscriber.deliver(_END)
        else:
            self._subscribers.append(subscriber)
        return subscriber

    async def reconcile(self, missed: MissedEvents, since: datetime) -> bool:
        """Hand each subscriber the settled states since ``since`` (or since it subscribed,
        if later) that ``missed`` finds, the ones it already has dropped; whether some were not
        announced yet (a later pass should look again)."""
        waiting = False
        for subscriber in list(self._subscribers):
            events, unannounced = await missed(subscriber.filter, max(since, subscriber.opened_at))
            waiting = waiting or unannounced
            for event in events:
                subscriber.deliver(event)
        return waiting

    def discard(self, subscriber: _InProcessSubscription) -> None:
        if subscriber in self._subscribers:
            self._subscribers.remove(subscriber)

    async def close(self) -> None:
        self._closed = True
        subscribers, self._subscribers = self._subscribers, []
        for subscriber in subscribers:
            subscriber.deliver(_END)


def settled_key(record: TaskRecord) -> tuple[str, str, str] | None:
    """A settled state of a task (terminal or suspended) by its moment; ``None`` for the others."""
    if record.status in ("pending", "running"):
        return None
    moment = record.suspended_at if record.status == "suspended" else record.completed_at
    return None if moment is None else (record.id, record.status, iso_datetime(moment))


Snapshot = Callable[[], Awaitable[list[TaskEvent]]]


class TaskSubscription:
    """The lifecycle chunks of the tasks matching a filter (``BackgroundTaskManager.subscribe``).

    With a ``snapshot`` (``include_existing``), its chunks come first. The bus subscription is
    opened before the snapshot is read, so nothing falls between the two; a ``running`` event
    that repeats a snapshot entry (same task, same start time) is skipped.
    """

    def __init__(self, source: BusSubscription, snapshot: Snapshot | None = None) -> None:
        self._source = source
        self._snapshot = snapshot
        self._prelude: deque[TaskEvent] = deque()
        self._seen_running: set[tuple[str, datetime | None]] = set()

    def __aiter__(self) -> TaskSubscription:
        return self

    async def __anext__(self) -> TaskChunk:
        return (await self.next_event()).chunk

    async def next_event(self) -> TaskEvent:
        """The next event whole: its chunk and record (a :class:`TaskSettled` for a settled
        state, with what came of its memory write)."""
        if self._snapshot is not None:
            snapshot, self._snapshot = self._snapshot, None
            self._prelude.extend(await snapshot())
            self._seen_running = {_running_key(event.record) for event in self._prelude}
        if self._prelude:
            return self._prelude.popleft()
        while True:
            event = await anext(self._source)
            if (
                event.chunk.type != "background-task-running"
                or _running_key(event.record) not in self._seen_running
            ):
                return event

    async def close(self) -> None:
        self._prelude.clear()
        await self._source.close()

    async def __aenter__(self) -> TaskSubscription:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()


def _running_key(record: TaskRecord) -> tuple[str, datetime | None]:
    """A task's run by its start (a running chunk's ``taskId`` and ``startedAt``)."""
    return (record.id, record.started_at)
