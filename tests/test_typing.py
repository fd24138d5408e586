"""The public types narrow (issue 26): tests/typing/consumer.py passes mypy --strict and pyright
(its ``assert_type`` lines pin the inferred types), and tests/typing/payload_typo.py, which reads
a misspelled payload key after ``chunk.type == "text-delta"`` and a payload key of a chunk nothing
narrowed, fails both. Each checker runs once over both files (a run analyses all of runstream)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent / "typing"
BIN = Path(sys.executable).parent
CHECKERS = {
    "mypy": [str(BIN / "mypy"), "--strict", "--no-incremental", "--cache-dir=/dev/null"],
    "pyright": [str(BIN / "pyright")],
}


@pytest.mark.parametrize("checker", sorted(CHECKERS))
def test_a_typed_consumer_passes_and_payload_mistakes_fail(checker: str) -> None:
    result = subprocess.run(
        [*CHECKERS[checker], str(HERE / "consumer.py"), str(HERE / "payload_typo.py")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=HERE.parent.parent,
    )
    out = result.stdout + result.stderr
    errors = [line for line in out.splitlines() if "error:" in line]
    assert result.returncode != 0 and errors, out
    assert not [e for e in errors if "consumer.py" in e], out
    assert all("payload_typo.py:13" in e or "payload_typo.py:17" in e for e in errors), out
    assert '"txt"' in out and any("payload_typo.py:17" in e for e in errors), out
