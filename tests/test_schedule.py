"""The long files that ``make test`` starts first (tests/conftest.py) are files of the suite."""

from __future__ import annotations

from tests.conftest import HERE, LONGEST_FIRST


def test_every_file_named_longest_first_exists() -> None:
    missing = [path for path in LONGEST_FIRST if not (HERE.parent / path).is_file()]
    assert missing == []
    assert len(set(LONGEST_FIRST)) == len(LONGEST_FIRST)
