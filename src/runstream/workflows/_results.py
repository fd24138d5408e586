"""Helpers for step result records (shared by the engine and the control-flow handlers)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

UNDEFINED: Any = object()
"""A step output that is JavaScript ``undefined``: the ``output`` key is left out."""

_COMPLETION_FIELDS = frozenset(
    ("output", "error", "endedAt", "suspendedAt", "suspendPayload", "suspendOutput", "tripwire")
)


def now_ms() -> int:
    return int(time.time() * 1000)


def omit_completion(result: Mapping[str, Any] | None) -> dict[str, Any]:
    """A previous step result without the fields of how it ended (Mastra's
    ``omitPriorCompletionFields``): what a re-run of the step starts from."""
    return {k: v for k, v in (result or {}).items() if k not in _COMPLETION_FIELDS}
