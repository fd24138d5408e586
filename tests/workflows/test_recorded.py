"""Workflow streams against real Mastra: the public ``w0*`` scenarios and the scenarios in
``data/`` (recorded with ``@mastra/core`` 1.71.0 by the shared ``mastra-runner``: suspend /
resume in every construct, cancel, validation failures, mapping errors, retries …).

Each runs in-process through :func:`run_workflow_scenario` and must match at level 3, except
where the agent loop's own chunks differ in details (level 2).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import compare  # type: ignore[import-not-found]
import pytest

from runstream.conformance.behavior import ToolExecutionLog
from runstream.conformance.runner import StreamWriter
from runstream.conformance.workflow_runner import run_workflow_scenario
from tests.conftest import CONFORMANCE

DATA = Path(__file__).parent / "data"
DEVIATIONS = compare.load_deviations(str(CONFORMANCE / "deviations.json"))
CASES = [(CONFORMANCE, p.stem) for p in sorted((CONFORMANCE / "scenarios").glob("w*.json"))] + [
    (DATA, p.stem) for p in sorted((DATA / "scenarios").glob("*.json"))
]
AGENT_DETAILS = {
    "p20-agent-step-error": "the agent's step-finish metadata after a failed model call",
    "r05-agent-step-retry": "the agent's step-finish metadata after a failed model call",
    "s02-foreach-nested-and-agent": "the agent's response id when the model sends no response-metadata",
}


@pytest.mark.parametrize(("folder", "name"), CASES, ids=[name for _, name in CASES])
async def test_stream_matches_mastra(folder: Path, name: str, tmp_path: Path) -> None:
    scenario = json.loads((folder / "scenarios" / f"{name}.json").read_text())
    out = tmp_path / f"{name}.jsonl"
    with out.open("w") as fh:
        await asyncio.wait_for(run_workflow_scenario(scenario, StreamWriter(fh), ToolExecutionLog()), 30)
    level = 2 if name in AGENT_DETAILS else 3
    result = compare.compare(
        str(folder / "golden" / f"{name}.jsonl"), str(out), level=level, devs=DEVIATIONS, scenario=name
    )
    assert result["passed"], compare.format_divergence(result["divergence"])
