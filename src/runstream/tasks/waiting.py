"""Waiting for the first of several background tasks (Mastra's ``manager.waitForNextTask``).

``await manager.wait_for_next_task([a, b], timeout_ms=..., on_progress=..., progress_interval_ms=...)``
returns the record of whichever task reaches a terminal status first (completed, failed,
cancelled, timed_out: a suspended task is still waited for, as in Mastra). ``on_progress``
(sync or async) gets the elapsed milliseconds every ``progress_interval_ms`` (default 3000, as
Mastra) while none has ended; ``abort_signal`` ends the wait with its reason.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol, TypedDict

from runstream.abort import AbortSignal
from runstream.errors import InvalidInputError
from runstream.storage import Storage, TaskRecord
from runstream.tasks.bus import EventBus, TaskEvent, TaskEventFilter
from runstream.tasks.config import BackgroundTaskError, TaskNotFoundError


class _Manager(Protocol):
    """What waiting needs of a task manager (its storage and event bus)."""

    @property
    def storage(self) -> Storage: ...
    @property
    def bus(self) -> EventBus: ...


class WaitOptions(TypedDict, total=False):
    """The options of :func:`wait_for_next_task` (and the managers' ``wait_for_next_task``)."""

    timeout_ms: float | None
    on_progress: Callable[[int], object] | None
    progress_interval_ms: float
    abort_signal: AbortSignal | None


TERMINAL = frozenset({"completed", "failed", "cancelled", "timed_out"})
DEFAULT_PROGRESS_INTERVAL_MS = 3000
MAX_WAIT_MS = 24 * 3600 * 1000


async def wait_for_next_task(
    manager: _Manager,
    task_ids: Iterable[str],
    *,
    timeout_ms: float | None = None,
    on_progress: Callable[[int], object] | None = None,
    progress_interval_ms: float = DEFAULT_PROGRESS_INTERVAL_MS,
    abort_signal: AbortSignal | None = None,
) -> TaskRecord:
    """The first of ``task_ids`` to end. Raises ``TimeoutError`` after ``timeout_ms``, the
    signal's :class:`~runstream.abort.AbortError` on abort,
    :class:`~runstream.errors.InvalidInputError` (a ``ValueError``) for no ids or a bad interval,
    and :class:`~runstream.tasks.config.TaskNotFoundError` for an id no task has."""
    ids = list(dict.fromkeys(task_ids))
    if not ids:
        raise InvalidInputError("wait_for_next_task needs at least one task id")
    if not 0 < progress_interval_ms <= MAX_WAIT_MS:
        raise InvalidInputError(
            f"progress_interval_ms must be in (0, {MAX_WAIT_MS}], got {progress_interval_ms!r}"
        )
    if timeout_ms is not None and not 0 <= timeout_ms <= MAX_WAIT_MS:
        raise InvalidInputError(f"timeout_ms must be in [0, {MAX_WAIT_MS}], got {timeout_ms!r}")
    subscription = manager.bus.subscribe(TaskEventFilter(task_ids=frozenset(ids)))  # before reading
    started = time.monotonic()
    deadline = None if timeout_ms is None else started + timeout_ms / 1000
    interval = progress_interval_ms / 1000
    next_progress = started + interval
    aborted = asyncio.ensure_future(abort_signal.wait()) if abort_signal is not None else None
    event: asyncio.Future[TaskEvent] | None = None  # the next bus event, kept across progress ticks
    try:
        ended = await _first_ended(manager, ids, check=True)
        if ended is not None:
            return ended
        while True:
            if abort_signal is not None:
                abort_signal.raise_if_aborted()
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                raise TimeoutError("Timed out waiting for background task")
            if now >= next_progress:
                next_progress += interval
                ended = await _first_ended(manager, ids)  # an event may be lost (another process)
                if ended is not None:
                    return ended
                if on_progress is not None:
                    reported = on_progress(round((now - started) * 1000))
                    if inspect.isawaitable(reported):
                        await reported
                continue
            until = min(next_progress, deadline) if deadline is not None else next_progress
            if event is None:
                event = asyncio.ensure_future(anext(subscription))
            waited: list[asyncio.Future[Any]] = [event, aborted] if aborted is not None else [event]
            await asyncio.wait(waited, timeout=until - now, return_when=asyncio.FIRST_COMPLETED)
            if not event.done():
                continue
            done, event = event, None
            try:
                record = done.result().record
            except StopAsyncIteration:
                raise BackgroundTaskError(
                    "Background task manager shut down during wait_for_next_task"
                ) from None
            if record.status in TERMINAL:
                return record
    finally:
        for future in (aborted, event):
            if future is not None:
                future.cancel()
        await subscription.close()


async def _first_ended(manager: _Manager, ids: list[str], *, check: bool = False) -> TaskRecord | None:
    """The first of the tasks found ended in storage (``check``: a missing one is an error)."""
    for task_id in ids:
        stored = await manager.storage.get_task(task_id)
        if stored is None and check:
            raise TaskNotFoundError(f"Task not found: {task_id}")
        if stored is not None and stored.status in TERMINAL:
            return stored
    return None
