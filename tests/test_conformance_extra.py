"""Scenarios we recorded ourselves from the real Mastra 1.71 (its Node runner in
``../shared/conformance/mastra-runner``) to pin behaviours the public traces do not show:
invalid tool arguments, a structured-output stream that opens with a bare ``{``, declining an
approval, processors that drop and rewrite, ``tool_choice: required``, the step limit, a background
task timing out, a watched task-manager stream, invalid structured output, and more background
cases (a concurrency limit of one, retries exhausted, aborting an until-idle stream, a later run
seeing a finished result, a sub-agent opted in by its bare name, a failing awaited task, custom
data from a task, suspended tasks resumed after the stream closed, cancelled while suspended,
suspended while another task runs, and suspended under a plain stream, a continuation that starts
another task, backpressure reject, a task after a foreground step, an awaited task under until-idle,
a timeout with retries left), parallel tool calls (completion order, errors before results), tools
that start while the model still streams, goals (budget spent, a judge answering prose, waiting)
and completion checks (never passing, strategy any), a model stream failing right after (or some
time after) its first parts, an abort right after start, a failing sub-agent, approvals of a background
tool and with memory, tool output checked against its output schema, workflows as tools (plain, suspended and resumed),
durable agents (a failing task, a task done before the first wait, no tools), finish reasons
(content-filter, other and unknown going on, error without an error part, usage details), until-idle
without a task, with tasks from two steps and twice on one thread, aborts while a tool runs and
between steps, and loop edge cases (one step only, a forced tool, a failing second model call,
an error part after a tool call, two text blocks, a reasoning signature, a string tool result). All must match at
level 2; those listed in ``LEVEL_3`` at level 3 too."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import compare  # type: ignore[import-not-found]
import pytest

EXTRA = Path(__file__).parent / "conformance_extra"
SCENARIOS = sorted(p.stem for p in (EXTRA / "scenarios").glob("*.json"))
LEVEL_3 = {
    "x24-invalid-tool-args",
    "x25-structured-brace",
    "x-p03-tool-choice-required",
    "x-p09-structured-invalid",
    "x-s05-bg-suspend-plain-stream",
    "x-t01-parallel-completion-order",
    "x-t02-parallel-error-first",
    "x-t03-parallel-late-error",
    "x-u03-tool-call-before-slow-finish",
    "x-v04-itc-two-scorers-any",
    "x-wt02-workflow-tool-plain",
    "x-f01-content-filter",
    "x-f02-usage-details",
    "x-f05-finish-error-reason",
    "x-s12-until-idle-no-task",
    "x-s13-bg-two-steps",
    "x-s14-until-idle-two-runs",
    "x-z01-tool-output-schema-mismatch",
    "x-z03-tool-output-schema-ok",
}


@pytest.mark.parametrize("name", SCENARIOS)
def test_matches_mastra(name: str, tmp_path: Path) -> None:
    out = tmp_path / f"{name}.jsonl"
    with out.open("w") as fh:
        subprocess.run(
            [sys.executable, "-m", "runstream.conformance", str(EXTRA / "scenarios" / f"{name}.json")],
            stdout=fh,
            check=True,
            timeout=60,
        )
    level = 3 if name in LEVEL_3 else 2
    deviations = compare.load_deviations(str(EXTRA.parent / "conformance_data" / "deviations.json"))
    result = compare.compare(
        str(EXTRA / "golden" / f"{name}.jsonl"), str(out), level=level, devs=deviations, scenario=name
    )
    assert result["passed"], compare.format_divergence(result["divergence"])
