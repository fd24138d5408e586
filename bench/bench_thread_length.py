"""Cost against thread length: an until-idle turn with one background task, on SQLite.

``python -m bench.bench_thread_length [--lengths 20,5000,20000] [--turns 7]`` fills a thread with
that many stored messages, then times until-idle turns (a user message, the model calls a
background tool, the task finishes, its result is written into the stored message, the
continuation turn answers): median wall ms per turn for each length, and each length's ratio to
the shortest. Writing a task's result finds its message through the storage's tool-call index,
so the turn should not grow with the thread (target: within 1.5x of each other).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from runstream import Agent, tool
from runstream.memory import Memory
from runstream.models.base import ModelRequest, ModelStream
from runstream.runtime import Runstream
from runstream.storage import SqliteStorage, StoredMessage, Thread

USAGE = {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2}
THREAD, RESOURCE = "long-thread", "bench-user"


class _BenchModel:
    """Calls the background tool for a new user message, answers otherwise."""

    provider = "bench"
    model_id = "bench-model"
    specification_version = "v2"

    async def stream(self, request: ModelRequest) -> ModelStream:
        if request.prompt[-1]["role"] == "user":
            call = {"type": "tool-call", "toolCallId": str(uuid.uuid4()), "toolName": "lookup", "input": "{}"}
            parts: list[dict[str, Any]] = [
                call,
                {"type": "finish", "finishReason": "tool-calls", "usage": USAGE},
            ]
        else:
            parts = [
                {"type": "text-start", "id": "a"},
                {"type": "text-delta", "id": "a", "delta": "done"},
                {"type": "text-end", "id": "a"},
                {"type": "finish", "finishReason": "stop", "usage": USAGE},
            ]
        return ModelStream(parts=_play(parts))


async def _play(parts: list[dict[str, Any]]) -> AsyncIterator[dict[str, Any]]:
    for part in parts:
        yield part


@tool(background=True)
async def lookup() -> str:
    """Look something up (at once)."""
    return "found"


async def _fill(storage: SqliteStorage, length: int) -> None:
    await storage.save_thread(Thread(id=THREAD, resource_id=RESOURCE))
    start = datetime.now(UTC) - timedelta(days=1)
    for first in range(0, length, 1000):
        batch = [
            StoredMessage(
                id=f"old-{i}",
                thread_id=THREAD,
                resource_id=RESOURCE,
                role="user" if i % 2 == 0 else "assistant",
                content={"format": 2, "parts": [{"type": "text", "text": f"message {i} " * 20}]},
                created_at=start + timedelta(milliseconds=i),
            )
            for i in range(first, min(first + 1000, length))
        ]
        await storage.save_messages(batch)


async def _thread_of(path: Path, length: int, stack: AsyncExitStack) -> Agent:
    """An agent whose memory's thread holds ``length`` messages (in its own SQLite file)."""
    filling = SqliteStorage(path)
    await _fill(filling, length)
    await filling.close()  # checkpoints the write-ahead log: the turns do not pay for the fill
    agent = Agent("bench", model=_BenchModel(), tools=[lookup], memory=Memory())
    runtime = Runstream(agents=[agent], storage=SqliteStorage(path), background_tasks={"enabled": True})
    await stack.enter_async_context(runtime)
    return agent


async def _turn(agent: Agent) -> tuple[float, float]:
    """Wall ms and CPU ms (the process's, SQLite's thread included: steadier on a busy machine)
    of one until-idle turn."""
    start, start_cpu = time.perf_counter(), time.process_time()
    out = await agent.stream("look it up", memory={"thread": THREAD, "resource": RESOURCE}, until_idle=True)
    async for _ in out.full_stream:
        pass
    return (time.perf_counter() - start) * 1000, (time.process_time() - start_cpu) * 1000


async def measure(lengths: list[int], turns: int) -> dict[int, tuple[float, float]]:
    """Median wall ms and CPU ms of an until-idle turn per thread length. The lengths take
    turns (one turn each, round after round), so what else the machine does at any moment
    weighs on every length alike."""
    with tempfile.TemporaryDirectory() as folder:
        async with AsyncExitStack() as stack:
            agents = {n: await _thread_of(Path(folder) / f"{n}.db", n, stack) for n in lengths}
            times: dict[int, list[tuple[float, float]]] = {n: [] for n in lengths}
            for turn in range(turns + 1):
                for length, agent in agents.items():
                    timed = await _turn(agent)
                    if turn:  # the first round warms up
                        times[length].append(timed)
    return {
        n: (statistics.median(t[0] for t in timed), statistics.median(t[1] for t in timed))
        for n, timed in times.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_thread_length", description=__doc__)
    parser.add_argument("--lengths", default="20,5000,20000")
    parser.add_argument("--turns", type=int, default=7)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    figures = asyncio.run(measure([int(n) for n in args.lengths.split(",")], args.turns))
    if args.json:
        print(json.dumps(figures))
        return
    wall0, cpu0 = figures[min(figures)]
    print("until-idle turn with one background task, SQLite (median per turn)")
    for length, (wall, cpu) in figures.items():
        print(
            f"{length:>7} messages: wall {wall:8.2f} ms ({wall / wall0:.2f}x the shortest)"
            f"   cpu {cpu:8.2f} ms ({cpu / cpu0:.2f}x)"
        )


if __name__ == "__main__":
    main()
