"""The benchmark's workloads run end to end with tiny sizes (no timing assertions)."""

from __future__ import annotations

import math

from bench.suite import Plan, run_suite

TINY = Plan(w1_tokens=20, w2_tokens=5, w3_steps=2, w3_tokens=3, w4_runs=3, w4_tokens=4, reps=1, rss_reps=1)


def test_every_workload_runs_for_both_pipelines() -> None:
    rows = run_suite(TINY)
    assert len({r.label for r in rows}) == len(rows) == 11
    for r in rows:
        assert math.isfinite(r.runstream) and math.isfinite(r.bare), r
        if r.unit != "KB":  # RSS growth of three tiny runs can round to zero or below
            assert r.runstream > 0 and r.bare > 0, r
        assert r.verdict in ("PASS", "FAIL", "")
