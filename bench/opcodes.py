"""``python -m bench.opcodes``: bytecode instructions per token, per tool step and to the first
chunk, for runstream and the bare pipeline.

Counted, not timed: the interpreter reports every instruction it executes to a trace function
(``f_trace_opcodes``), so the figures do not depend on what else the machine runs (they vary
by a fraction of a percent between runs: the event loop's bookkeeping) and
show a hot-path change that timings on a shared machine would lose in their noise. Each figure is
the difference of two runs of different lengths (one warm-up first), so a run's fixed cost
drops out of the per-token and per-step figures. An instruction is not a unit of time (a call
costs more than a load): read these next to ``python -m bench``, not instead of it.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
from collections.abc import Awaitable, Callable
from types import FrameType
from typing import Any

from bench.source import Runner, Script, reply, tool_steps
from bench.workloads import RUNNERS


class _Counter:
    """Counts the bytecode instructions executed while it is on."""

    def __init__(self) -> None:
        self.count = 0

    def _trace(self, frame: FrameType, event: str, arg: Any) -> Callable[..., Any]:
        frame.f_trace_opcodes = True
        if event == "opcode":
            self.count += 1
        return self._trace

    async def counted(self, work: Awaitable[Any]) -> int:
        self.count = 0
        gc.collect()
        gc.disable()  # a collection's finalizers would run (and count) wherever it struck
        sys.settrace(self._trace)
        try:
            await work
        finally:
            sys.settrace(None)
            gc.enable()
        return self.count


async def _per_unit(
    run: Runner, script: Callable[[int], Script], small: int, large: int, suspend: bool
) -> float:
    """Instructions per token (or step) between runs of ``small`` and ``large`` of them."""
    counter = _Counter()
    for size in (small, large):  # warm-up: first-call paths and caches (an agent per script)
        await run(script(size), suspend)
    few = await counter.counted(run(script(small), suspend))
    many = await counter.counted(run(script(large), suspend))
    return (many - few) / (large - small)


async def _to_first_chunk(name: str) -> int:
    """Instructions from the call to the first chunk of a short reply (the fewest of three runs)."""
    counter = _Counter()
    if name == "bare":
        from bench.bare import _loop

        async def first() -> None:
            await anext(_loop(reply(5), True, "run"))
    else:
        from bench.subject import _agent

        agent = _agent(reply(5), True)

        async def first() -> None:
            out = await agent.stream("hi")
            await anext(out.full_stream)

    await first()
    # The least of three: the event loop's bookkeeping varies a little from run to run.
    return min([await counter.counted(first()) for _ in range(3)])


async def _wrapped_per_token(**options: Any) -> float:
    """Instructions per token (no suspension) of a runstream run with ``options`` (memory,
    callbacks: the bare pipeline has neither)."""
    from bench.subject import BenchModel
    from runstream import Agent
    from runstream.memory import Memory
    from runstream.storage import InMemoryStorage

    counter = _Counter()
    agent = Agent("wrapped", model=BenchModel(reply(1), False), memory=Memory(storage=InMemoryStorage()))

    async def run(tokens: int) -> None:
        agent.model = BenchModel(reply(tokens), False)
        out = await agent.stream("hi", **options)
        async for _ in out.full_stream:
            pass

    await run(10)
    return (await counter.counted(run(3_000)) - await counter.counted(run(1_000))) / 2_000


async def measure_wrapped() -> dict[str, float]:
    """runstream alone: per token with memory, and with an ``on_chunk`` callback."""
    return {
        "per token with memory": await _wrapped_per_token(memory={"thread": "t", "resource": "r"}),
        "per token with an on_chunk callback": await _wrapped_per_token(on_chunk=lambda _: None),
    }


async def measure() -> dict[str, dict[str, float]]:
    figures: dict[str, dict[str, float]] = {}
    for name, run in RUNNERS.items():
        figures[name] = {
            "per token (W1-nosuspend)": await _per_unit(run, reply, 1_000, 3_000, False),
            "per token (W1)": await _per_unit(run, reply, 1_000, 3_000, True),
            "per tool step (W3)": await _per_unit(run, lambda n: tool_steps(n, 20), 5, 15, True),
            "to the first chunk (W2)": await _to_first_chunk(name),
        }
    return figures


def main() -> None:
    argparse.ArgumentParser(prog="python -m bench.opcodes", description=__doc__).parse_args()
    figures = asyncio.run(measure())
    for label in figures["runstream"]:
        ours, bare = figures["runstream"][label], figures["bare"][label]
        print(f"{label}: runstream {ours:,.0f}, bare {bare:,.0f} instructions, ratio {ours / bare:.2f}x")
    for label, ours in asyncio.run(measure_wrapped()).items():
        print(f"{label} (no suspension): runstream {ours:,.0f} instructions")


if __name__ == "__main__":
    main()
