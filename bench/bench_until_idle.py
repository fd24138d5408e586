"""1,000 until-idle streams, each waiting on one background task, in one process.

``python -m bench.bench_until_idle [--streams N]`` measures, for runstream and for a bare asyncio
baseline in the same run (each in a fresh interpreter for the memory figure):

* peak RSS growth per waiting stream (all streams open, every task running), and
* the time from a task's completion (the tool returning) to the first chunk of the stream's
  continuation turn, median and p99 over all streams: the tasks are released one after another
  while all the other streams stay open and waiting (latency under load, not burst throughput).

The bare baseline does the minimum the same job needs: per stream a task that awaits its
"tool", a waiter that wakes on completion, and an async generator that yields the continuation's
first chunk (a small dict).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

from bench.rss import _reset_peak, _status_kb
from runstream import Agent, ToolContext, tool
from runstream.memory import Memory
from runstream.models.base import ModelRequest, ModelStream
from runstream.runtime import Runstream
from runstream.storage import InMemoryStorage

USAGE = {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2}


class _BenchModel:
    """Calls the research tool for a new user message (its text is the topic), else answers."""

    provider = "bench"
    model_id = "bench-model"
    specification_version = "v2"

    async def stream(self, request: ModelRequest) -> ModelStream:
        last = request.prompt[-1]
        if last["role"] == "user":
            topic = last["content"][0]["text"]
            parts: list[dict[str, Any]] = [
                {
                    "type": "tool-call",
                    "toolCallId": "c1",
                    "toolName": "research",
                    "input": json.dumps({"topic": topic}),
                },
                {"type": "finish", "finishReason": "tool-calls", "usage": USAGE},
            ]
        else:
            parts = [
                {"type": "text-start", "id": "a"},
                {"type": "text-delta", "id": "a", "delta": "ok"},
                {"type": "text-end", "id": "a"},
                {"type": "finish", "finishReason": "stop", "usage": USAGE},
            ]
        return ModelStream(parts=_play(parts))


async def _play(parts: list[dict[str, Any]]) -> AsyncIterator[dict[str, Any]]:
    for part in parts:
        await asyncio.sleep(0)
        yield part


async def _runstream(streams: int) -> tuple[float, list[float]]:
    releases = [asyncio.Event() for _ in range(streams)]
    continued = [asyncio.Event() for _ in range(streams)]
    arrived = 0
    all_running = asyncio.Event()
    completed_at: dict[str, float] = {}

    @tool(background=True)
    async def research(topic: str, ctx: ToolContext) -> str:
        """Research (waits for the benchmark to release it)."""
        nonlocal arrived
        arrived += 1
        if arrived == streams:
            all_running.set()
        await releases[int(topic)].wait()
        completed_at[topic] = time.perf_counter()
        return "done"

    agent = Agent("researcher", model=_BenchModel(), tools=[research], memory=Memory())
    runtime = Runstream(
        agents=[agent],
        storage=InMemoryStorage(),
        background_tasks={"enabled": True, "globalConcurrency": streams, "perAgentConcurrency": streams},
    )
    latencies: list[float] = []
    await runtime.start()
    gc.collect()
    base = _status_kb("VmRSS")
    _reset_peak()

    async def one(i: int) -> None:
        out = await agent.stream(str(i), memory={"thread": f"t{i}", "resource": "u"}, until_idle=True)
        starts = 0
        async for chunk in out.full_stream:
            if chunk.type == "start":
                starts += 1
                if starts == 2:
                    latencies.append(time.perf_counter() - completed_at[str(i)])
                    continued[i].set()

    tasks = [asyncio.ensure_future(one(i)) for i in range(streams)]
    await all_running.wait()
    await asyncio.sleep(0.05)  # let every first turn finish and its stream start waiting
    peak = max(_status_kb("VmHWM"), _status_kb("VmRSS"))
    for release, done in zip(releases, continued, strict=True):
        release.set()
        await done.wait()
    await asyncio.gather(*tasks)
    await runtime.close()
    return (peak - base) / streams, latencies


async def _bare(streams: int) -> tuple[float, list[float]]:
    releases = [asyncio.Event() for _ in range(streams)]
    continued = [asyncio.Event() for _ in range(streams)]
    latencies: list[float] = []
    gc.collect()
    base = _status_kb("VmRSS")
    _reset_peak()

    async def continuation() -> Any:
        yield {"type": "start"}

    async def one(i: int) -> None:
        done = asyncio.get_running_loop().create_future()

        async def tool() -> None:
            await releases[i].wait()
            done.set_result(time.perf_counter())

        worker = asyncio.ensure_future(tool())
        finished = await done
        async for _ in continuation():
            latencies.append(time.perf_counter() - finished)
            continued[i].set()
        await worker

    tasks = [asyncio.ensure_future(one(i)) for i in range(streams)]
    await asyncio.sleep(0.05)
    peak = max(_status_kb("VmHWM"), _status_kb("VmRSS"))
    for release, done in zip(releases, continued, strict=True):
        release.set()
        await done.wait()
    await asyncio.gather(*tasks)
    return (peak - base) / streams, latencies


def _measure(impl: str, streams: int) -> dict[str, float]:
    """One measurement in a fresh interpreter (so earlier allocations hide no growth)."""
    code = (
        "import asyncio, json, sys; from bench.bench_until_idle import _run_impl; "
        f"print(json.dumps(asyncio.run(_run_impl({impl!r}, {streams}))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


async def _run_impl(impl: str, streams: int) -> dict[str, float]:
    kb, latencies = await (_runstream(streams) if impl == "runstream" else _bare(streams))
    if len(latencies) != streams:
        raise RuntimeError(f"{impl}: {len(latencies)} of {streams} streams reached their continuation")
    latencies.sort()
    return {
        "kb_per_stream": kb,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99) - 1] * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_until_idle", description=__doc__)
    parser.add_argument("--streams", type=int, default=1000)
    args = parser.parse_args()
    ours = _measure("runstream", args.streams)
    bare = _measure("bare", args.streams)
    print(f"{args.streams} until-idle streams, each waiting on one background task")
    for key, label in (
        ("kb_per_stream", "peak RSS per stream (KB)"),
        ("p50_ms", "completion -> continuation p50 (ms)"),
        ("p99_ms", "completion -> continuation p99 (ms)"),
    ):
        ratio = ours[key] / bare[key] if bare[key] else float("inf")
        print(f"{label:40s} runstream {ours[key]:9.2f}   bare {bare[key]:9.2f}   ratio {ratio:6.1f}x")


if __name__ == "__main__":
    main()
