"""Scorer runs off the caller's path: a bounded runner owned by the runtime.

Trace scoring (``POST /api/observability/traces/score``) answers once its targets are checked,
and an agent's ``scorers`` score each run after it ends; both hand their scorer runs to the
runtime's :class:`ScoringRunner`. It runs at most ``concurrency`` jobs at once and holds at most
``max_pending`` jobs (running or waiting): a batch beyond that is refused whole
(:class:`ScoringQueueFullError`), never queued without bound. Every job is a task the runner holds
until it ends (none is garbage-collected mid-run), and :meth:`ScoringRunner.close` cancels the
waiting and running ones and awaits them, so nothing outlives the runtime.

A job's score write is one store call that a cancellation does not interrupt: a job cancelled
while writing finishes the write first, so a score is stored whole or not at all.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar

from runstream._payloads import ScorerResult
from runstream._uninterrupted import run_to_end
from runstream.errors import ConfigurationError, RunstreamError
from runstream.scoring import ScoreInput, Scorer

logger = logging.getLogger("runstream.scoring")
T = TypeVar("T")

DEFAULT_CONCURRENCY = 4
DEFAULT_MAX_PENDING = 256
MAX_REASON = 10_000
"""A scorer's reason is kept up to this many characters."""


class ScoringQueueFullError(RunstreamError):
    """The runner holds as many scorer runs as it may; the batch was not started."""


Job = Callable[[], Awaitable[None]]


class ScoringRunner:
    """Runs scorer jobs in the background, ``concurrency`` at a time, at most ``max_pending`` held.

    ``sample`` draws the number (from 0 to 1) that decides whether a sampled scorer scores a run
    (it does when the number is below its rate); give a seeded one for reproducible sampling."""

    def __init__(
        self,
        *,
        concurrency: int = DEFAULT_CONCURRENCY,
        max_pending: int = DEFAULT_MAX_PENDING,
        sample: Callable[[], float] = random.random,
    ) -> None:
        if concurrency < 1 or max_pending < concurrency:
            raise ConfigurationError("concurrency must be at least 1 and max_pending at least concurrency")
        self.concurrency = concurrency
        self.max_pending = max_pending
        self.sample = sample
        self._slots: asyncio.Semaphore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False

    @property
    def pending(self) -> int:
        """Jobs running or waiting for a slot."""
        return len(self._tasks)

    def submit(self, jobs: Iterable[Job]) -> list[asyncio.Task[None]]:
        """Start every job of the batch, or none when they would exceed ``max_pending``
        (:class:`ScoringQueueFullError`). Call from the event loop; returns the jobs' tasks."""
        batch = list(jobs)
        if self._closed:
            raise ScoringQueueFullError("Scoring is shut down: the runtime is closing")
        if len(self._tasks) + len(batch) > self.max_pending:
            raise ScoringQueueFullError(
                f"Scoring queue is full ({len(self._tasks)} of {self.max_pending} scorer runs pending, "
                f"{len(batch)} more asked); try again later"
            )
        loop = asyncio.get_running_loop()
        if self._slots is None or self._loop is not loop:  # (after close, or a new event loop)
            self._slots, self._loop = asyncio.Semaphore(self.concurrency), loop
        tasks = [loop.create_task(self._run(job, self._slots)) for job in batch]
        for task in tasks:
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return tasks

    @staticmethod
    async def _run(job: Job, slots: asyncio.Semaphore) -> None:
        async with slots:
            try:
                await job()
            except asyncio.CancelledError:
                raise
            except Exception:  # a job logs its own failures; this is a bug in one, kept from the loop
                logger.exception("A background scoring job failed")

    async def join(self) -> None:
        """Wait until every job held now (and any they lead to) has ended."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def close(self) -> None:
        """Cancel the held jobs and wait until they end (a write under way completes first)."""
        self._closed = True
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._closed = False  # a runtime may start again
        self._slots = self._loop = None


async def uninterrupted(write: Callable[[], T]) -> T:
    """``write()`` in a thread; a cancellation waits for it to finish, then propagates."""
    future = asyncio.ensure_future(asyncio.to_thread(write))
    if await run_to_end(future):
        raise asyncio.CancelledError
    return future.result()


async def score_once(scorer: Scorer, data: ScoreInput, **about: str | None) -> ScorerResult | None:
    """``scorer`` over ``data``; ``None`` when it raises or its score is not a finite number,
    logged on ``runstream.scoring`` with the scorer and ``about`` (``traceId``, ``resourceId``,
    ``runId``: the log store files the record under them)."""
    where = ", ".join(f"{key} {value}" for key, value in about.items() if value is not None)
    extra = {**about, "scorerId": scorer.id}
    try:
        result = await scorer.run(data)
    except Exception as exc:  # the app's scorer: logged, never raised into the caller
        logger.error(
            "Scorer '%s' failed (%s): %s: %s", scorer.id, where, type(exc).__name__, exc, extra=extra
        )
        return None
    score = result["score"]
    if isinstance(score, bool) or not isinstance(score, int | float) or not math.isfinite(score):
        logger.error(
            "Scorer '%s' returned a score that is not a finite number (%s): %r",
            scorer.id,
            where,
            score,
            extra=extra,
        )
        return None
    return result
