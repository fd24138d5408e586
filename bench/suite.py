"""Repetitions, medians and targets: every workload for both pipelines in one run."""

from __future__ import annotations

import asyncio
import math
import statistics
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from bench import bench_span_store as span_store
from bench import bench_thread_length as thread_length
from bench.rss import kb_per_run
from bench.source import Runner
from bench.workloads import RUNNERS, Figures, w1, w2, w3, w4

Workload = Callable[[Runner], Awaitable[Figures]]


@dataclass(frozen=True, slots=True)
class Plan:
    w1_tokens: int = 10_000
    w2_tokens: int = 100
    w3_steps: int = 10
    w3_tokens: int = 20
    w4_runs: int = 200
    w4_tokens: int = 200
    reps: int = 11
    """Repetitions of W1, W3 and W4 (W2 runs ``reps * 10`` times); one warm-up each first."""
    rss_reps: int = 3
    thread_lengths: tuple[int, ...] = (20, 5_000, 20_000)
    thread_turns: int = 15
    """W5: until-idle turns timed per thread length, the lengths taking turns (the first length
    is the reference). Each is a few ms of SQLite work: 7 turns, one length after the other,
    gave 0.98x-1.74x for 20,000 messages in four runs of the suite."""


QUICK = Plan(reps=2, rss_reps=1, thread_turns=2)


@dataclass(frozen=True, slots=True)
class Row:
    label: str
    unit: str
    runstream: float
    bare: float
    max_ratio: float | None = None
    max_value: float | None = None

    @property
    def ratio(self) -> float:
        return self.runstream / self.bare if self.bare > 0 else math.inf

    @property
    def target(self) -> str:
        if self.max_ratio is not None:
            return f"≤ {self.max_ratio:g}x bare"
        return f"≤ {self.max_value:g} {self.unit}" if self.max_value is not None else ""

    @property
    def verdict(self) -> str:
        if self.max_ratio is not None:
            return "PASS" if self.ratio <= self.max_ratio else "FAIL"
        if self.max_value is not None:
            return "PASS" if self.runstream <= self.max_value else "FAIL"
        return ""


async def _medians(workload: Workload, reps: int) -> dict[str, Figures]:
    """Median figures per pipeline; the pipelines alternate within each repetition."""
    samples: dict[str, list[Figures]] = {name: [] for name in RUNNERS}
    for rep in range(reps + 1):
        for name, run in RUNNERS.items():
            figures = await workload(run)
            if rep:  # repetition 0 is the warm-up
                samples[name].append(figures)
    return {
        name: {key: statistics.median(f[key] for f in runs) for key in runs[0]}
        for name, runs in samples.items()
    }


async def _timed(plan: Plan) -> dict[str, dict[str, Figures]]:
    return {
        "W1": await _medians(lambda run: w1(run, plan.w1_tokens), plan.reps),
        "W1-nosuspend": await _medians(lambda run: w1(run, plan.w1_tokens, suspend=False), plan.reps),
        "W2": await _medians(lambda run: w2(run, plan.w2_tokens), plan.reps * 10),
        "W3": await _medians(lambda run: w3(run, plan.w3_steps, plan.w3_tokens), plan.reps),
        "W4": await _medians(lambda run: w4(run, plan.w4_runs, plan.w4_tokens), plan.reps),
    }


def run_suite(plan: Plan) -> list[Row]:
    """Measure everything; one row per figure, with its target if it has one."""
    f = asyncio.run(_timed(plan))
    kb = {
        name: statistics.median(kb_per_run(name, plan.w4_runs, plan.w4_tokens) for _ in range(plan.rss_reps))
        for name in RUNNERS
    }

    # W5: cost against thread length; its "bare" figure is the same turn on the shortest thread.
    turns = asyncio.run(thread_length.measure(list(plan.thread_lengths), plan.thread_turns))
    shortest = plan.thread_lengths[0]
    # The span store: its "bare" figure is the same workload traced by the SDK without the store.
    # Four times the repetitions: W3's figure is within a point or two of its target, and 11
    # paired blocks flipped the row's verdict in one run of four (1.03x-1.06x).
    kept = asyncio.run(span_store.measure(plan.reps * 4))

    def row(workload: str, key: str, label: str, unit: str, **target: float) -> Row:
        return Row(label, unit, f[workload]["runstream"][key], f[workload]["bare"][key], **target)

    return [
        row("W1", "us_per_token", "W1 per token", "µs", max_ratio=1.3),
        row("W1-nosuspend", "us_per_token", "W1-nosuspend per token", "µs", max_ratio=2),
        row("W1-nosuspend", "first_delta_us", "W1-nosuspend first text-delta", "µs", max_value=100),
        row("W2", "first_chunk_us", "W2 first chunk", "µs", max_value=15),
        row("W2", "first_delta_us", "W2 first text-delta", "µs", max_value=30),
        row("W2", "total_ms", "W2 total", "ms"),
        row("W3", "us_per_step", "W3 per tool step", "µs", max_ratio=2),
        row("W4", "us_per_token", "W4 wall per token", "µs", max_ratio=2),
        row("W4", "first_delta_p50_ms", "W4 first text-delta, median run", "ms"),
        row("W4", "first_delta_max_ms", "W4 first text-delta, last run", "ms", max_ratio=10),
        Row("W4 peak RSS growth per run", "KB", kb["runstream"], kb["bare"], max_value=30),
        Row(
            "W1 CPU per token, span store on (bare: off)",
            "µs",
            kept["W1"]["on"],
            kept["W1"]["off"],
            max_ratio=1.05,
        ),
        Row(
            "W3 CPU per tool step, span store on (bare: off)",
            "µs",
            kept["W3"]["on"],
            kept["W3"]["off"],
            max_ratio=1.05,
        ),
        *(
            Row(
                f"W5 until-idle turn CPU, {length:,} msgs (bare: {shortest:,})",
                "ms",
                turns[length][1],
                turns[shortest][1],
                max_ratio=1.5,
            )
            for length in plan.thread_lengths[1:]
        ),
    ]
