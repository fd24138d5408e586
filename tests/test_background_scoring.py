"""The runtime's background scoring runner: bounded concurrency and queue (a batch beyond it is
refused whole), jobs held until they end, and a close that cancels them and waits, letting a
score write under way finish so nothing is half-written; a runtime closed with scoring in flight
ends cleanly with nothing stored."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from runstream import Runstream
from runstream.background_scoring import Job, ScoringQueueFullError, ScoringRunner, uninterrupted
from runstream.errors import ConfigurationError
from runstream.observability import SpanStore
from runstream.scoring import ScoreInput, Scorer
from runstream.server.trace_scoring import scoring_job
from tests.otel_testkit import spans

__all__ = ["spans"]


async def test_the_runner_bounds_its_jobs_and_refuses_a_batch_whole() -> None:
    runner = ScoringRunner(concurrency=1, max_pending=3)
    release = asyncio.Event()
    ran: list[int] = []

    def job(n: int) -> Job:
        async def run() -> None:
            ran.append(n)
            await release.wait()

        return run

    tasks = runner.submit([job(1), job(2)])
    await asyncio.sleep(0)  # (one turn of the loop: the first job takes the only slot)
    assert ran == [1] and runner.pending == 2
    with pytest.raises(ScoringQueueFullError, match=r"Scoring queue is full \(2 of 3"):
        runner.submit([job(3), job(4)])
    assert runner.pending == 2  # neither of the refused batch was started
    release.set()
    await runner.join()
    assert ran == [1, 2] and runner.pending == 0 and all(t.done() and not t.cancelled() for t in tasks)
    with pytest.raises(ConfigurationError):
        ScoringRunner(concurrency=2, max_pending=1)


async def test_close_cancels_jobs_but_lets_a_write_finish() -> None:
    runner = ScoringRunner(concurrency=1, max_pending=4)
    writing, release = threading.Event(), threading.Event()
    written: list[str] = []
    waiting = asyncio.Event()

    def write() -> None:
        writing.set()
        release.wait(10)
        written.append("score")

    async def writer() -> None:
        await uninterrupted(write)
        written.append("after")  # never reached: the job was cancelled during its write

    async def queued() -> None:
        waiting.set()

    first, second = runner.submit([writer, queued])
    await asyncio.to_thread(writing.wait, 10)
    closing = asyncio.create_task(runner.close())
    await asyncio.sleep(0)
    assert not closing.done()  # waits for the write under way
    release.set()
    await closing
    assert written == ["score"] and first.cancelled() and second.cancelled() and not waiting.is_set()
    assert runner.pending == 0


async def test_a_runtime_closed_with_scoring_in_flight_ends_cleanly(
    tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    store = SpanStore(str(tmp_path / "spans.db"))
    runtime = Runstream(observability=store, scoring=ScoringRunner(concurrency=1, max_pending=2))
    await runtime.start()
    started, never = asyncio.Event(), asyncio.Event()

    async def stuck(data: ScoreInput) -> tuple[float, str]:
        started.set()
        await never.wait()
        return 1.0, "unreachable"

    scorer = Scorer(id="stuck", score=stuck)
    target = {"traceId": "t1", "spanId": "s1", "spanType": "agent_run", "entityId": "a"}
    data = ScoreInput(text="hi", messages=[], iteration=1)
    (task,) = runtime.scoring.submit([scoring_job(scorer, data, target, store, "user-a")])
    await started.wait()
    await runtime.close()
    assert task.cancelled() and runtime.scoring.pending == 0
    reopened = SpanStore(str(tmp_path / "spans.db"))
    assert reopened.list_signals("score", filters={}, page=0, per_page=10) == ([], 0)
    reopened.close()
