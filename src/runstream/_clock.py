"""Times as Mastra writes them: JavaScript's ``Date.toISOString()`` form (UTC, milliseconds,
``Z``)."""

from __future__ import annotations

import time
from datetime import UTC, datetime


def now_utc() -> datetime:
    return datetime.now(UTC)


def iso_datetime(value: datetime) -> str:
    """JavaScript's ``Date.toISOString()`` form: UTC, milliseconds, ``Z``."""
    if value.tzinfo is not None:
        value = value.astimezone(UTC)
    return value.isoformat(timespec="milliseconds")[:23] + "Z"  # (without an offset, if any)


_current_second: tuple[int, str] = (0, "")
"""The last second :func:`iso_now` wrote, and its text up to the seconds."""


def iso_now() -> str:
    """``iso_datetime(now_utc())``, a few times cheaper: every model step's response metadata
    carries the time, and the text of the current second is kept (only the milliseconds
    change within it)."""
    global _current_second
    now = time.time()
    second = int(now)
    if second != _current_second[0]:
        _current_second = (second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)))
    return f"{_current_second[1]}.{int((now - second) * 1000):03d}Z"
