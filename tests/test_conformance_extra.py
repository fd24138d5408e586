"""Scenarios we recorded ourselves from the real Mastra 1.71 (its Node runner in
``../shared/conformance/mastra-runner``) to pin behaviours the public traces do not show:
invalid tool arguments, and a structured-output stream that opens with a bare ``{``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import compare  # type: ignore[import-not-found]
import pytest

EXTRA = Path(__file__).parent / "conformance_extra"
SCENARIOS = sorted(p.stem for p in (EXTRA / "scenarios").glob("*.json"))


@pytest.mark.parametrize("name", SCENARIOS)
def test_matches_mastra_at_level_3(name: str, tmp_path: Path) -> None:
    out = tmp_path / f"{name}.jsonl"
    with out.open("w") as fh:
        subprocess.run(
            [sys.executable, "-m", "runstream.conformance", str(EXTRA / "scenarios" / f"{name}.json")],
            stdout=fh,
            check=True,
            timeout=60,
        )
    result = compare.compare(str(EXTRA / "golden" / f"{name}.jsonl"), str(out), level=3)
    assert result["passed"], compare.format_divergence(result["divergence"])
