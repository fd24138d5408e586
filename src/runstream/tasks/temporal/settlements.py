"""What the process that enqueued a task hears of it when another process settles it.

A worker settles a task (stores it, writes it into memory, publishes the event); the process
that enqueued it holds its request, whose target (the run, still streaming there, or its thread's
memory) must get the outcome before that process's subscribers see the event. Events come over
Redis pub/sub, which can lose some, so the enqueuer also re-reads its unsettled tasks after a
reconnect and every ``recheck_interval_ms``, and delivers a settled state it missed; each state
is delivered once.

Every other subscriber in the process (one following a thread or a task it did not enqueue) is
reconciled after a gap in the subscription by :meth:`Settlements.missed`: the settled states
stored since the gap began, once announced (their outcome in memory), as the events that were
lost.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import replace
from datetime import datetime

from runstream._clock import iso_datetime
from runstream.storage import TaskFilter, TaskRecord
from runstream.storage.records import utc_now
from runstream.tasks.bus import TaskEvent, TaskEventFilter, TaskSettled
from runstream.tasks.coordination import SETTLED_STATUSES, TERMINAL_STATUSES, TaskCoordinator
from runstream.tasks.lifecycle import lifecycle_chunk
from runstream.tasks.settling import MemoryWrite

logger = logging.getLogger(__name__)

FINISHED_REMEMBERED = 10_000

ANNOUNCED_KEY = "announced"
"""The metadata key of a settled record that its announcement is over (its outcome is in
memory): the record's :func:`announced_mark`, written by the process that announced it."""
ANNOUNCE_GRACE_S = 30.0
"""How long after a state settled a waiter still waits for its announcement (then the process
that stored it died before announcing, or the record predates the mark)."""


class Settlements:
    """The enqueuer's view of its tasks settled elsewhere (see the module's docstring)."""

    def __init__(self, tasks: TaskCoordinator) -> None:
        self.tasks = tasks
        self._delivered: dict[str, tuple[str, str]] = {}
        """The last settled state delivered here of each task with a request here."""
        self._finished: OrderedDict[str, None] = OrderedDict()
        """The latest tasks whose request here ended: a late duplicate of their end is dropped."""
        self._suspended: set[str] = set()
        """Tasks enqueued here whose last state heard here is ``suspended``."""

    def is_active(self, task_id: str) -> bool:
        """Enqueued here and, as far as this process has heard, pending or running somewhere."""
        return task_id in self.tasks.requests and task_id not in self._suspended

    def resumed(self, task_id: str) -> None:
        self._suspended.discard(task_id)

    def announced_here(self, record: TaskRecord) -> None:
        """This process is announcing a settled state of a task (before the announcement)."""
        if record.id in self.tasks.requests:
            self._delivered[record.id] = settled_key(record)
            if record.status == "suspended":
                self._suspended.add(record.id)

    async def before_delivery(self, event: TaskEvent) -> bool:
        """Before another process's event is delivered here: a settled state of a task enqueued
        here runs its request's hook first (once); whether to deliver the event."""
        record = event.record
        if record.status not in SETTLED_STATUSES:
            if record.status == "running":
                self._suspended.discard(record.id)
            return True
        if record.id in self.tasks.requests:
            return await self.settled_elsewhere(record) is not None
        return not (record.status in TERMINAL_STATUSES and record.id in self._finished)

    async def settled_elsewhere(self, record: TaskRecord) -> MemoryWrite | None:
        """Write a settled state stored by another process where the request here says (its
        run, else its thread's memory); what came of it, or ``None`` if that state is not new here."""
        request = self.tasks.requests.get(record.id)
        key = settled_key(record)
        if request is None or self._delivered.get(record.id) == key:
            return None
        self._delivered[record.id] = key
        if record.status in TERMINAL_STATUSES:
            del self.tasks.requests[record.id]
            self._delivered.pop(record.id, None)
            self._suspended.discard(record.id)
            self._finished[record.id] = None
            if len(self._finished) > FINISHED_REMEMBERED:
                self._finished.popitem(last=False)
        else:
            self._suspended.add(record.id)
        return await self.tasks.write_outcome(record, request)

    async def recheck(self) -> list[TaskEvent]:
        """Re-read the tasks enqueued here; the events of settled states never delivered here
        (their outcomes written where their requests say), for this process's subscribers."""
        missed: list[TaskEvent] = []
        for task_id in list(self.tasks.requests):
            try:
                record = await self.tasks.storage.get_task(task_id)
            except Exception:
                logger.exception("re-reading task %s failed", task_id)
                continue
            if record is None:
                self.tasks.requests.pop(task_id, None)
            elif record.status in SETTLED_STATUSES:
                written = await self.settled_elsewhere(record)
                if written is not None:
                    logger.info("task %s: %s found in storage, its event was lost", task_id, record.status)
                    missed.append(TaskSettled(lifecycle_chunk(record), record, written))
        return missed

    async def missed(self, wanted: TaskEventFilter, since: datetime) -> tuple[list[TaskEvent], bool]:
        """The events of the settled states of tasks matching ``wanted`` stored since ``since``
        and announced, oldest first, but for tasks enqueued here (:meth:`recheck` delivers
        those, after writing them); whether some such state is not announced yet."""
        storage = self.tasks.storage
        if wanted.task_ids is not None:
            found = [await storage.get_task(task_id) for task_id in sorted(wanted.task_ids)]
            records = [record for record in found if record is not None]
        else:
            scope = TaskFilter(
                agent_id=wanted.agent_id,
                run_id=wanted.run_id,
                thread_id=wanted.thread_id,
                resource_id=wanted.resource_id,
            )
            ended = replace(scope, status=TERMINAL_STATUSES, date_field="completed_at", from_date=since)
            records = (await storage.list_tasks(ended)).items
            records += (await storage.list_tasks(replace(scope, status="suspended"))).items
        events: list[TaskEvent] = []
        waiting = False
        settled = [
            (moment, r) for r in records if (moment := settled_moment(r)) is not None and moment >= since
        ]
        for _, record in sorted(settled, key=lambda pair: pair[0]):
            if record.id in self.tasks.requests or not wanted.matches(record):
                continue
            if is_announced(record):  # (its outcome is in memory)
                events.append(TaskSettled(lifecycle_chunk(record), record, "memory"))
            else:
                waiting = True
        return events, waiting


def settled_moment(record: TaskRecord) -> datetime | None:
    """When a settled record settled (``None`` for a task still pending or running)."""
    if record.status not in SETTLED_STATUSES:
        return None
    return record.suspended_at if record.status == "suspended" else record.completed_at


def settled_key(record: TaskRecord) -> tuple[str, str]:
    moment = settled_moment(record)
    return (record.status, iso_datetime(moment) if moment else "")


def announced_mark(record: TaskRecord) -> str:
    """The :data:`ANNOUNCED_KEY` value of a record's settled state (a later state has another)."""
    return " ".join(settled_key(record))


def is_announced(record: TaskRecord) -> bool:
    """Whether a settled record read from storage has been announced: marked so, or settled
    more than :data:`ANNOUNCE_GRACE_S` ago."""
    if record.metadata.get(ANNOUNCED_KEY) == announced_mark(record):
        return True
    moment = settled_moment(record)
    return moment is None or (utc_now() - moment).total_seconds() >= ANNOUNCE_GRACE_S
