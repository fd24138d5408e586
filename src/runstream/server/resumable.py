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
import time
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Protocol

from runstream.errors import NotFoundError, RunstreamError, StateConflictError

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


@dataclass(eq=False)
class _Log:
    info: RunInfo
    events: deque[str] = field(default_factory=deque)
    first_seq: int = 1
    ended_at: float | None = None
    waiters: list[asyncio.Future[None]] = field(default_factory=list)

    @property
    def last_seq(self) -> int:
        return self.first_seq + len(self.events) - 1

    def wake(self) -> None:
        waiters, self.waiters = self.waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)


class InMemoryReplayLog:
    """Replay logs in this process's memory."""

    def __init__(
        self,
        *,
        max_events: int = 10_000,
        max_runs: int = 1_000,
        ttl_s: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_events = max_events
        self.max_runs = max_runs
        self.ttl_s = ttl_s
        self._clock = clock
        self._logs: OrderedDict[str, _Log] = OrderedDict()

    def _purge(self) -> None:
        now = self._clock()
        for run_id, log in list(self._logs.items()):
            if log.ended_at is not None and now - log.ended_at >= self.ttl_s:
                del self._logs[run_id]
        ended = [run_id for run_id, log in self._logs.items() if log.ended_at is not None]
        while len(self._logs) > self.max_runs and ended:  # oldest ended runs go first
            del self._logs[ended.pop(0)]

    def _get(self, run_id: str) -> _Log | None:
        log = self._logs.get(run_id)
        if log is not None and log.ended_at is not None and self._clock() - log.ended_at >= self.ttl_s:
            del self._logs[run_id]
            return None
        return log

    async def create(self, info: RunInfo) -> None:
        current = self._get(info.run_id)
        if current is not None and current.ended_at is None:
            raise RunAlreadyStreamingError(f"run {info.run_id!r} is already streaming")
        self._logs[info.run_id] = _Log(info)
        self._logs.move_to_end(info.run_id)
        self._purge()

    async def append(self, run_id: str, data: str) -> int:
        log = self._logs[run_id]
        log.events.append(data)
        if len(log.events) > self.max_events:
            log.events.popleft()
            log.first_seq += 1
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
                yield seq, log.events[seq - log.first_seq]
                continue
            if log.ended_at is not None:
                return
            waiter = asyncio.get_running_loop().create_future()
            log.waiters.append(waiter)
            await waiter


class TooManyRunsError(RunstreamError, RuntimeError):
    """This process already pumps as many detached runs as it may (overall or for one resource)."""


class RunRegistry:
    """Pumps detached runs into the replay log and keeps what is needed to abort them.

    Live detached runs are bounded like ended logs are: at most ``max_live_runs`` in this
    process and ``max_live_runs_per_resource`` per owning resource, so no caller can pile up
    runs that outlive their clients.
    """

    def __init__(
        self, log: ReplayLog, *, max_live_runs: int = 1_000, max_live_runs_per_resource: int = 50
    ) -> None:
        self.log = log
        self.max_live_runs = max_live_runs
        self.max_live_runs_per_resource = max_live_runs_per_resource
        self._pumps: dict[str, asyncio.Task[None]] = {}
        self._aborts: dict[str, Callable[[], None]] = {}
        self._owners: dict[str, str | None] = {}

    def ensure_capacity(self, resource_id: str | None) -> None:
        """Raise :class:`TooManyRunsError` if one more detached run for ``resource_id`` would
        exceed a bound (checked before a run starts, so a refused one has no side effects)."""
        if len(self._pumps) >= self.max_live_runs:
            raise TooManyRunsError(f"this server already streams {len(self._pumps)} detached runs")
        mine = sum(1 for owner in self._owners.values() if owner == resource_id)
        if mine >= self.max_live_runs_per_resource:
            raise TooManyRunsError(
                f"{mine} detached runs of this resource are still streaming "
                f"(at most {self.max_live_runs_per_resource}); abort one or wait for it to end"
            )

    async def start(self, info: RunInfo, events: AsyncIterator[str], abort: Callable[[], None]) -> None:
        """Open the run's log and start copying ``events`` into it (independent of any reader)."""
        await self.log.create(info)
        self._owners[info.run_id] = info.resource_id
        self._aborts[info.run_id] = abort
        self._pumps[info.run_id] = asyncio.create_task(
            self._pump(info.run_id, events), name=f"run {info.run_id}"
        )

    async def _pump(self, run_id: str, events: AsyncIterator[str]) -> None:
        try:
            async for data in events:
                await self.log.append(run_id, data)
        except Exception:
            logger.exception("run %s: pumping into the replay log failed", run_id)
        finally:
            await self.log.end(run_id)
            self._pumps.pop(run_id, None)
            self._aborts.pop(run_id, None)
            self._owners.pop(run_id, None)

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
