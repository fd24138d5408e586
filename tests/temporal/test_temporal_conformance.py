"""The background-task conformance scenarios (public and recorded) with the Temporal task
manager: each task a workflow on the session's dev server, run by a worker in the replaying
process, events over Redis. The chunks must match Mastra's golden traces at level 2, as they do
with the in-process manager (``test_conformance.py``, ``test_conformance_extra.py``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import compare  # type: ignore[import-not-found]
import pytest

from runstream.conformance.temporal import REDIS_ENV, TEMPORAL_ENV
from runstream.tasks.temporal.devserver import TemporalDevServer
from tests.conformance_replay import replay
from tests.conftest import CONFORMANCE, REDIS_URL

EXTRA = CONFORMANCE.parent / "conformance_extra"
DEVIATIONS = compare.load_deviations(str(CONFORMANCE / "deviations.json"))


def background_scenarios() -> list[Path]:
    """Every scenario whose Mastra container enables background tasks."""
    paths = sorted((CONFORMANCE / "scenarios").glob("*.json")) + sorted((EXTRA / "scenarios").glob("*.json"))
    return [p for p in paths if json.loads(p.read_text()).get("mastra", {}).get("backgroundTasks")]


SCENARIOS = {p.stem: p for p in background_scenarios()}

# The module's fixture replays every scenario (~50 processes forked as conformance_replay.py
# does); the first test waits for all of them, so it gets more than the default 300 s.
pytestmark = pytest.mark.timeout(1200)


@pytest.fixture(scope="module")
def candidate(temporal_server: TemporalDevServer, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out_dir = tmp_path_factory.mktemp("temporal-conformance")
    env = {TEMPORAL_ENV: temporal_server.address, REDIS_ENV: REDIS_URL}

    def run(name: str) -> tuple[str, int, str]:
        """One scenario; a runner that outlasts its timeout fails that scenario's test only."""
        code, stderr = replay(SCENARIOS[name], out_dir / f"{name}.jsonl", 120, env)
        return name, code, stderr

    with ThreadPoolExecutor(max_workers=2) as pool:
        runs = {name: (code, err) for name, code, err in pool.map(run, SCENARIOS)}
    results: dict[str, Any] = {}
    for name, path in SCENARIOS.items():
        golden = path.parent.parent / "golden" / f"{name}.jsonl"
        results[name] = compare.compare(
            str(golden), str(out_dir / f"{name}.jsonl"), level=2, devs=DEVIATIONS, scenario=name
        )
        results[name]["exit"] = runs[name]
    return results


def test_every_background_scenario_is_covered() -> None:
    assert len(SCENARIOS) >= 40, sorted(SCENARIOS)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_scenario_matches_mastra_at_level_2_on_temporal(name: str, candidate: dict[str, Any]) -> None:
    code, stderr = candidate[name]["exit"]
    assert code == 0, f"runner exited {code}: {stderr[-2000:]}"
    assert candidate[name]["passed"], compare.format_divergence(candidate[name]["divergence"])


def test_the_command_replays_a_scenario_on_temporal(
    temporal_server: TemporalDevServer, tmp_path: Path
) -> None:
    """``python -m runstream.conformance`` itself with a Temporal server (it ends by
    ``exit_process``: the SDK's native threads can crash interpreter finalization)."""
    name = "x-d02-durable-fast-task"
    out = tmp_path / f"{name}.jsonl"
    env = {**os.environ, TEMPORAL_ENV: temporal_server.address, REDIS_ENV: REDIS_URL}
    with out.open("w") as fh:
        proc = subprocess.run(
            [sys.executable, "-m", "runstream.conformance", str(SCENARIOS[name])],
            stdout=fh, stderr=subprocess.PIPE, text=True, timeout=120, check=False, env=env,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    golden = str(SCENARIOS[name].parent.parent / "golden" / f"{name}.jsonl")
    result = compare.compare(golden, str(out), level=2, devs=DEVIATIONS, scenario=name)
    assert result["passed"], compare.format_divergence(result["divergence"])
