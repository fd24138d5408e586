"""The benchmark's workloads run end to end with tiny sizes (no timing assertions)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

from bench.suite import Plan, run_suite

TINY = Plan(
    w1_tokens=20,
    w2_tokens=5,
    w3_steps=2,
    w3_tokens=3,
    w4_runs=3,
    w4_tokens=4,
    reps=1,
    rss_reps=1,
    thread_lengths=(2, 30),
    thread_turns=1,
)


def test_every_workload_runs_for_both_pipelines() -> None:
    rows = run_suite(TINY)
    assert len({r.label for r in rows}) == len(rows) == 14
    for r in rows:
        assert math.isfinite(r.runstream) and math.isfinite(r.bare), r
        if r.unit != "KB":  # RSS growth of three tiny runs can round to zero or below
            assert r.runstream > 0 and r.bare > 0, r
        assert r.verdict in ("PASS", "FAIL", "")


def test_the_server_bench_runs_both_endpoints_without_errors() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "bench.bench_server", "--streams", "5", "--rounds", "1", "--deltas", "5"],
        cwd=Path(__file__).parent.parent,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout.splitlines()
    rows = [json.loads(line) for line in out[1:3]]
    assert [row["endpoint"] for row in rows] == ["starlette baseline", "runstream"]
    assert all(row["errors"] == 0 and row["streams"] == 5 for row in rows)
    assert json.loads(out[3])["median_of_rounds"] == 1


async def test_the_bench_model_plays_each_step_of_its_script_once() -> None:
    from bench.source import tool_steps
    from bench.subject import _agent

    out = await _agent(tool_steps(3, 2), False).stream("hi")
    types = [chunk.type async for chunk in out.full_stream]
    assert types.count("tool-result") == 3
    assert types.count("text-delta") == 4 * 2
    assert types.count("step-finish") == 4


async def test_the_instruction_counts_are_per_unit_and_steady() -> None:
    from bench.opcodes import measure

    first, second = await measure(), await measure()
    for name, figures in first.items():
        for label, value in figures.items():
            assert value > 0
            assert abs(second[name][label] - value) <= 0.02 * value, (name, label)  # counted, not timed
    assert first["runstream"]["per token (W1-nosuspend)"] > first["bare"]["per token (W1-nosuspend)"]


def test_the_vector_bench_runs() -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.bench_vectors",
            "--sizes",
            "300",
            "--queries",
            "3",
            "--thread",
            "60",
            "--turns",
            "1",
            "--no-pg",
        ],
        cwd=Path(__file__).parent.parent,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    rows = [json.loads(line) for line in out.splitlines()]
    assert rows[0]["backend"] == "sqlite-vec (exact scan)" and rows[0]["unfiltered"]["p50_ms"] > 0
    assert rows[1]["backend"] == "sqlite-vec (filter key tag: vec0)" and rows[1]["filtered"]["p50_ms"] > 0
    assert rows[-1]["thread_messages"] == 60 and rows[-1]["turn_ms_with_recall"] > 0
    assert "added_cpu_ms" in rows[-1]


def test_the_metrics_bench_runs() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "bench.bench_metrics", "--spans", "300", "--rounds", "1", "--no-pg"],
        cwd=Path(__file__).parent.parent,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    (row,) = [json.loads(line) for line in out.splitlines()]
    assert row["backend"] == "sqlite" and row["spans"] >= 300
    assert len(row["median_ms"]) == 12 and all(ms > 0 for ms in row["median_ms"].values())
