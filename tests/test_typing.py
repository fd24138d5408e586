"""The public types narrow (issue 26): tests/typing/consumer.py passes mypy --strict and pyright
(its ``assert_type`` lines pin the inferred types), and tests/typing/payload_typo.py, which reads
a misspelled payload key after ``chunk.type == "text-delta"``, fails both."""

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


def check(checker: str, name: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CHECKERS[checker], str(HERE / name)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=HERE.parent.parent,
    )


@pytest.mark.parametrize("checker", sorted(CHECKERS))
def test_a_typed_consumer_passes(checker: str) -> None:
    result = check(checker, "consumer.py")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("checker", sorted(CHECKERS))
def test_a_payload_typo_fails(checker: str) -> None:
    result = check(checker, "payload_typo.py")
    assert result.returncode != 0
    assert '"txt"' in result.stdout and "payload_typo.py:12" in result.stdout, result.stdout
