"""Scale-out: one producer process and 1 or 2 worker processes on a shared storage and Redis.

``python -m bench.bench_scaleout [--tasks N] [--work-ms MS] [--redis URL] [--postgres URL]``
enqueues N tasks from this process (a ``worker=False`` :class:`DistributedTaskManager`) and
measures, with one worker process and then with two:

* throughput: tasks per second from the first enqueue to the last completion event here;
* completion-event latency: from a task's ``completedAt`` (stored by the worker) to its
  ``background-task-completed`` event reaching this process, median and p99.

Each task's tool keeps its process's CPU busy for ``--work-ms`` milliseconds, so two workers on
two cores can show what a second process brings. The storage is a SQLite file, or with
``--postgres`` a fresh schema (dropped afterwards) in that PostgreSQL database. Run as
``... worker PREFIX REDIS_URL DB [SCHEMA]`` it is one worker (used by the benchmark itself).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg

from runstream.storage import PostgresStorage, SqliteStorage, Storage
from runstream.storage._postgres_schema import quote_ident
from runstream.tasks.config import BackgroundTaskConfig, TaskRequest
from runstream.tasks.distributed import DistributedTaskManager, ScaleOutConfig
from runstream.tools import Tool, ToolContext

AGENT = "bench-agent"
CONFIG = BackgroundTaskConfig(global_concurrency=8, per_agent_concurrency=8)
SCALE_OUT = ScaleOutConfig(poll_interval_ms=200)


async def busy(args: dict[str, Any], ctx: ToolContext) -> Any:
    deadline = time.perf_counter() + args["ms"] / 1000
    while time.perf_counter() < deadline:
        pass
    return args["n"]


def open_storage(db: str, schema: str | None) -> Storage:
    """A SQLite file, or with a schema the PostgreSQL database at ``db``."""
    return SqliteStorage(db) if schema is None else PostgresStorage(db, schema=schema)


async def serve(prefix: str, url: str, db: str, schema: str | None) -> None:
    manager = DistributedTaskManager(
        open_storage(db, schema), CONFIG, redis_url=url, channel_prefix=prefix, scale_out=SCALE_OUT
    )
    manager.register_tool(AGENT, Tool("busy", busy, input_schema={"type": "object"}))
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await manager.start()
    print("ready", flush=True)
    await stop.wait()
    await manager.shutdown()
    await manager.storage.close()


async def measure(workers: int, tasks: int, work_ms: int, url: str, postgres: str | None) -> dict[str, float]:
    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    if postgres is None:
        db, schema = str(Path(tempfile.mkdtemp(prefix="bench-scaleout-")) / "tasks.db"), None
    else:
        db, schema = postgres, f"bench_scaleout_{uuid.uuid4().hex[:8]}"
    storage = open_storage(db, schema)
    await storage.init()
    processes = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bench.bench_scaleout",
            "worker",
            prefix,
            url,
            db,
            *([schema] if schema else []),
            stdout=asyncio.subprocess.PIPE,
        )
        for _ in range(workers)
    ]
    producer = DistributedTaskManager(
        storage, CONFIG, redis_url=url, worker=False, channel_prefix=prefix, scale_out=SCALE_OUT
    )
    try:
        for process in processes:
            assert process.stdout is not None
            assert await asyncio.wait_for(process.stdout.readline(), 30) == b"ready\n"
        await producer.start()
        events = producer.subscribe(agent_id=AGENT)
        latencies: list[float] = []

        async def collect() -> None:
            while len(latencies) < tasks:
                chunk = await anext(events)
                if chunk.type == "background-task-completed":
                    completed: datetime = chunk.payload["completedAt"]
                    latencies.append((datetime.now(UTC) - completed).total_seconds() * 1000)

        collector = asyncio.ensure_future(collect())
        tool = Tool("busy", busy, input_schema={"type": "object"})
        started = time.perf_counter()
        for n in range(tasks):
            await producer.enqueue(TaskRequest(tool, f"call-{n}", {"n": n, "ms": work_ms}, AGENT, "run-1"))
        await asyncio.wait_for(collector, 60 + tasks * work_ms / 1000)
        elapsed = time.perf_counter() - started
        await events.close()
    finally:
        await producer.shutdown()
        await storage.close()
        for process in processes:
            process.terminate()
            await process.wait()
        if schema is not None:
            await drop_schema(db, schema)
        else:
            shutil.rmtree(Path(db).parent, ignore_errors=True)
    latencies.sort()
    return {
        "tasks_per_s": tasks / elapsed,
        "latency_p50_ms": statistics.median(latencies),
        "latency_p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
    }


async def drop_schema(db: str, schema: str) -> None:
    conn = await asyncpg.connect(db)
    try:
        await conn.execute(f"DROP SCHEMA IF EXISTS {quote_ident(schema)} CASCADE")
    finally:
        await conn.close()


async def run(tasks: int, work_ms: int, url: str, postgres: str | None) -> None:
    storage = "PostgreSQL" if postgres else "SQLite"
    print(f"{tasks} tasks of {work_ms} ms CPU each, {os.cpu_count()} cores, {storage}")
    print(f"{'workers':>7}  {'tasks/s':>8}  {'p50 ms':>7}  {'p99 ms':>7}")
    for workers in (1, 2):
        result = await measure(workers, tasks, work_ms, url, postgres)
        print(
            f"{workers:>7}  {result['tasks_per_s']:>8.1f}  "
            f"{result['latency_p50_ms']:>7.1f}  {result['latency_p99_ms']:>7.1f}"
        )


def main() -> None:
    if sys.argv[1:2] == ["worker"]:
        prefix, url, db = sys.argv[2:5]
        asyncio.run(serve(prefix, url, db, sys.argv[5] if len(sys.argv) > 5 else None))
        return
    parser = argparse.ArgumentParser(prog="python -m bench.bench_scaleout", description=__doc__)
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--work-ms", type=int, default=20)
    parser.add_argument(
        "--redis", default=os.environ.get("RUNSTREAM_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
    )
    parser.add_argument("--postgres", metavar="URL", help="use this PostgreSQL database, not SQLite")
    args = parser.parse_args()
    asyncio.run(run(args.tasks, args.work_ms, args.redis, args.postgres))


if __name__ == "__main__":
    main()
