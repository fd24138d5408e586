"""W1-W4 for one pipeline; each returns its figures (µs or ms, named by key)."""

from __future__ import annotations

import asyncio
import statistics

from bench.bare import run_bare
from bench.source import Runner, clock, reply, tool_steps
from bench.subject import run_runstream

RUNNERS: dict[str, Runner] = {"bare": run_bare, "runstream": run_runstream}

Figures = dict[str, float]


async def w1(run: Runner, tokens: int, suspend: bool = True) -> Figures:
    """One reply of ``tokens`` text tokens: µs per token (and µs to the first text-delta)."""
    t = await run(reply(tokens), suspend)
    return {"us_per_token": (t.end - t.call) / tokens * 1e6, "first_delta_us": (t.first_delta - t.call) * 1e6}


async def w2(run: Runner, tokens: int) -> Figures:
    """A short reply: µs to the first chunk and first text-delta, ms in total."""
    t = await run(reply(tokens), True)
    return {
        "first_chunk_us": (t.first_chunk - t.call) * 1e6,
        "first_delta_us": (t.first_delta - t.call) * 1e6,
        "total_ms": (t.end - t.call) * 1e3,
    }


async def w3(run: Runner, steps: int, tokens: int) -> Figures:
    """``steps`` tool steps and a final text step: µs per step."""
    t = await run(tool_steps(steps, tokens), True)
    return {"us_per_step": (t.end - t.call) / (steps + 1) * 1e6}


async def w4(run: Runner, runs: int, tokens: int) -> Figures:
    """``runs`` concurrent replies: wall µs per token, ms from the start to each first text-delta."""
    script = reply(tokens)
    start = clock()()
    times = await asyncio.gather(*(run(script, True) for _ in range(runs)))
    wall = clock()() - start
    firsts = [(t.first_delta - start) * 1e3 for t in times]
    return {
        "us_per_token": wall / (runs * tokens) * 1e6,
        "first_delta_p50_ms": statistics.median(firsts),
        "first_delta_max_ms": max(firsts),
    }
