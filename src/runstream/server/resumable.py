"""Resumable streams: a run's chunks go to a replay log that readers follow, not to a socket.

A detached run is pumped into its log by a server-owned task, so a dropped connection never
stops it (nor its background tasks). Each chunk gets a sequence number (1, 2, ...); its SSE id is
``<runId>:<seq>``. A client that reconnects with ``Last-Event-ID`` (or asks an observe route for
the run) gets the chunks after that id, then the live ones, each exactly once.

:class:`ReplayLog` is the storage interface; :class:`InMemoryReplayLog` keeps logs in this
process, bounded in events per run and in runs, and forgets a log ``ttl_s`` after its run ends.
A Redis log would map ``append`` to ``XADD``, ``read`` to ``XRANGE`` + ``XREAD BLOCK``, and the
TTL to ``EXPIRE`` once the run ends.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections import Counter, OrderedDict, deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from runstream.errors import ConfigurationError, NotFoundError, RunstreamError, StateConflictError

logger = logging.getLogger("runstream.server")


class ReplayGapError(NotFoundError):
    """The events a reader asked for are no longer kept (the log was trimmed)."""


class RunAlreadyStreamingError(StateConflictError):
    """A run with this id is streaming into the replay log already (a 409)."""


@dataclass(frozen=True, slots=True)
class RunInfo:
    """Who started a run: its agent and the resource that owns it (``None``: unconfined)."""

    run_id: str
    agent_id: str
    resource_id: str | None


class ReplayLog(Protocol):
    async def create(self, info: RunInfo) -> None:
        """Open an empty log for a new run (replacing an ended one with the same id)."""
        ...

    async def append(self, run_id: str, data: str) -> int:
        """Add one event (wire JSON); returns its sequence number."""
        ...

    async def end(self, run_id: str) -> None:
        """Mark the run finished: readers stop after the last event; the TTL starts."""
        ...

    async def info(self, run_id: str) -> RunInfo | None:
        """The run's owner, or ``None`` if the log is unknown or expired."""
        ...

    def read(self, run_id: str, after: int) -> AsyncIterator[tuple[int, str]]:
        """``(seq, data)`` for every event after ``after``, then live ones until the run ends.

        Raises :class:`ReplayGapError` if events after ``after`` were trimmed, ``KeyError`` if
        the log is unknown.
        """
        ...


LARGE_STRING = 16 * 1024
"""A JSON string at least this long (characters) in an event is kept once per run, however many
events hold it: ``step-finish`` and ``finish`` each carry the whole conversation."""
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
Event = str | tuple[str, ...]
"""An event as kept: its text, or its pieces (odd ones are large strings shared with other events)."""


def text_size(text: str) -> int:
    """The UTF-8 size of ``text`` (its length when ASCII, without encoding it)."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def split_large(data: str) -> list[str]:
    """``data`` cut around its JSON strings of at least :data:`LARGE_STRING` characters: the
    odd pieces are those strings (quotes included), and the pieces join back into ``data``."""
    pieces: list[str] = []
    start = 0
    if len(data) >= LARGE_STRING:
        for match in _STRING.finditer(data):
            if match.end() - match.start() >= LARGE_STRING:
                pieces += (data[start : match.start()], match.group())
                start = match.end()
    pieces.append(data[start:])
    return pieces


@dataclass(eq=False)
class _Log:
    info: RunInfo
    events: deque[Event] = field(default_factory=deque)
    first_seq: int = 1
    ended_at: float | None = None
    waiters: list[asyncio.Future[None]] = field(default_factory=list)
    shared: dict[str, list[Any]] = field(default_factory=dict)
    """A large string -> ``[the one copy kept, how many kept events hold it]``."""
    size: int = 0
    """Bytes kept: each event's own text, and each shared string once."""

    @property
    def last_seq(self) -> int:
        return self.first_seq + len(self.events) - 1

    def wake(self) -> None:
        waiters, self.waiters = self.waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def add(self, data: str) -> int:
        """Keep one more event; returns the bytes that took."""
        if len(data) < LARGE_STRING:
            self.events.append(data)
            added = text_size(data)
        else:
            pieces, added = self._pieces(data)
            self.events.append(pieces)
        self.size += added
        return added

    def _pieces(self, data: str) -> tuple[Event, int]:
        pieces = split_large(data)
        added = sum(text_size(piece) for piece in pieces[::2])
        for index in range(1, len(pieces), 2):
            entry = self.shared.get(pieces[index])
            if entry is None:
                entry = self.shared[pieces[index]] = [pieces[index], 0]
                added += text_size(pieces[index])
            entry[1] += 1
            pieces[index] = entry[0]  # the one copy
        return (tuple(pieces) if len(pieces) > 1 else data), added

    def drop_oldest(self) -> int:
        """Forget the oldest kept event; returns the bytes freed."""
        event = self.events.popleft()
        self.first_seq += 1
        if isinstance(event, str):
            freed = text_size(event)
        else:
            freed = sum(text_size(piece) for piece in event[::2])
            for literal in event[1::2]:
                entry = self.shared[literal]
                entry[1] -= 1
                if entry[1] == 0:
                    del self.shared[literal]
                    freed += text_size(literal)
        self.size -= freed
        return freed

    def event(self, seq: int) -> str:
        kept = self.events[seq - self.first_seq]
        return kept if isinstance(kept, str) else "".join(kept)


MIB = 1024 * 1024


class InMemoryReplayLog:
    """Replay logs in this process's memory, bounded in bytes per run (``max_run_bytes``: the
    oldest events go first) and in all (``max_total_bytes``: the oldest ended runs' logs go
    first, then the oldest events of the largest live ones), in events per run and in runs."""

    def __init__(
        self,
        *,
        max_events: int = 10_000,
        max_runs: int = 1_000,
        ttl_s: float = 300.0,
        max_run_bytes: int = 16 * MIB,
        max_total_bytes: int = 256 * MIB,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if min(max_events, max_runs, max_run_bytes, max_total_bytes) < 1:
            raise ConfigurationError("a replay log's bounds must be at least 1")
        self.max_events = max_events
        self.max_runs = max_runs
        self.ttl_s = ttl_s
        self.max_run_bytes = max_run_bytes
        self.max_total_bytes = max_total_bytes
        self._clock = clock
        self._logs: OrderedDict[str, _Log] = OrderedDict()
        self.size = 0
        """Bytes kept by every log."""

    def _forget(self, run_id: str) -> None:
        self.size -= self._logs.pop(run_id).size

    def _purge(self) -> None:
        now = self._clock()
        for run_id, log in list(self._logs.items()):
            if log.ended_at is not None and now - log.ended_at >= self.ttl_s:
                self._forget(run_id)
        ended = [run_id for run_id, log in self._logs.items() if log.ended_at is not None]
        while (len(self._logs) > self.max_runs or self.size > self.max_total_bytes) and ended:
            self._forget(ended.pop(0))  # oldest ended runs go first
        while self.size > self.max_total_bytes:  # then the oldest events of the largest live logs
            largest = max(self._logs.values(), key=lambda log: log.size)
            if len(largest.events) <= 1:
                break
            self.size -= largest.drop_oldest()

    def _get(self, run_id: str) -> _Log | None:
        log = self._logs.get(run_id)
        if log is not None and log.ended_at is not None and self._clock() - log.ended_at >= self.ttl_s:
            self._forget(run_id)
            return None
        return log

    async def create(self, info: RunInfo) -> None:
        current = self._get(info.run_id)
        if current is not None and current.ended_at is None:
            raise RunAlreadyStreamingError(f"run {info.run_id!r} is already streaming")
        if current is not None:
            self._forget(info.run_id)
        self._logs[info.run_id] = _Log(info)
        self._logs.move_to_end(info.run_id)
        self._purge()

    async def append(self, run_id: str, data: str) -> int:
        log = self._logs[run_id]
        self.size += log.add(data)
        while len(log.events) > 1 and (len(log.events) > self.max_events or log.size > self.max_run_bytes):
            self.size -= log.drop_oldest()
        if self.size > self.max_total_bytes:
            self._purge()
        log.wake()
        return log.last_seq

    async def end(self, run_id: str) -> None:
        log = self._logs.get(run_id)
        if log is not None and log.ended_at is None:
            log.ended_at = self._clock()
            log.wake()

    async def info(self, run_id: str) -> RunInfo | None:
        log = self._get(run_id)
        return log.info if log is not None else None

    async def read(self, run_id: str, after: int) -> AsyncIterator[tuple[int, str]]:
        log = self._get(run_id)
        if log is None:
            raise KeyError(run_id)
        seq = max(after, 0)
        while True:
            if seq < log.first_seq - 1:
                raise ReplayGapError(
                    f"events {seq + 1}..{log.first_seq - 1} of run {run_id!r} are no longer kept"
                )
            if seq < log.last_seq:
                seq += 1
                yield seq, log.event(seq)
                continue
            if log.ended_at is not None:
                return
            waiter = asyncio.get_running_loop().create_future()
            log.waiters.append(waiter)
            await waiter


class TooManyRunsError(RunstreamError, RuntimeError):
    """This process already runs as many runs as it may (overall or for one resource)."""


@dataclass(eq=False)
class LiveSlot:
    """One live run's place under the caps, held from before it starts until it ends (released
    once, however many of its ends report it: the stream's end, its pump's, a disconnect's)."""

    registry: RunRegistry
    resource_id: str | None
    released: bool = False

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.registry._free(self)


class RunRegistry:
    """Counts the live runs of the process and pumps detached ones into the replay log.

    Every run the server starts holds a :class:`LiveSlot` while it runs, whatever its kind:
    agent streams and generates (direct or detached: until-idle, ``?resumable=true``, thread
    messages), continuations and workflow runs. At most ``max_live_runs`` in this process and
    ``max_live_runs_per_resource`` per owning resource, so no caller can pile up runs, nor
    starve the other resources.
    """

    def __init__(
        self, log: ReplayLog, *, max_live_runs: int = 1_000, max_live_runs_per_resource: int = 50
    ) -> None:
        self.log = log
        self.max_live_runs = max_live_runs
        self.max_live_runs_per_resource = max_live_runs_per_resource
        self._pumps: dict[str, asyncio.Task[None]] = {}
        self._aborts: dict[str, Callable[[], None]] = {}
        self._live: Counter[str | None] = Counter()

    def live_runs(self) -> int:
        """Live runs in this process."""
        return self._live.total()

    def live_runs_of(self, resource_id: str | None) -> int:
        """Live runs of one resource (``None``: unconfined callers')."""
        return self._live[resource_id]

    def reserve(self, resource_id: str | None) -> LiveSlot:
        """A slot for one more run of ``resource_id``, or :class:`TooManyRunsError` if that would
        exceed a cap (taken before the run starts, so a refused one has no side effects)."""
        total = self._live.total()
        if total >= self.max_live_runs:
            raise TooManyRunsError(f"this server already runs {total} runs")
        mine = self._live[resource_id]
        if mine >= self.max_live_runs_per_resource:
            raise TooManyRunsError(
                f"{mine} runs of this resource are still running "
                f"(at most {self.max_live_runs_per_resource}); abort one or wait for it to end"
            )
        self._live[resource_id] += 1
        return LiveSlot(self, resource_id)

    def _free(self, slot: LiveSlot) -> None:
        self._live[slot.resource_id] -= 1
        if self._live[slot.resource_id] <= 0:
            del self._live[slot.resource_id]

    async def start(
        self, info: RunInfo, events: AsyncIterator[str], abort: Callable[[], None], slot: LiveSlot
    ) -> None:
        """Open the run's log and start copying ``events`` into it (independent of any reader);
        ``slot`` is released when the run's last event is in the log."""
        await self.log.create(info)
        self._aborts[info.run_id] = abort
        self._pumps[info.run_id] = asyncio.create_task(
            self._pump(info.run_id, events, slot), name=f"run {info.run_id}"
        )

    async def _pump(self, run_id: str, events: AsyncIterator[str], slot: LiveSlot) -> None:
        try:
            async for data in events:
                await self.log.append(run_id, data)
        except Exception:
            logger.exception("run %s: pumping into the replay log failed", run_id)
        finally:
            slot.release()
            await self.log.end(run_id)
            self._pumps.pop(run_id, None)
            self._aborts.pop(run_id, None)

    def is_live(self, run_id: str) -> bool:
        """Whether this process is still pumping the run into its log."""
        return run_id in self._pumps

    async def wait(self, run_id: str) -> None:
        """Wait until every event of the run is in its log (at once if it is not being pumped)."""
        pump = self._pumps.get(run_id)
        if pump is not None:
            await asyncio.shield(pump)

    def abort(self, run_id: str) -> bool:
        """Abort a live detached run; False if it is not live here."""
        abort = self._aborts.get(run_id)
        if abort is None:
            return False
        abort()
        return True

    async def close(self) -> None:
        """Abort every live run and wait for its log to end (server shutdown)."""
        for abort in list(self._aborts.values()):
            abort()
        pumps = list(self._pumps.values())
        if pumps:
            await asyncio.wait(pumps, timeout=5)
