"""Helpers for step result records (shared by the engine and the control-flow handlers)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, TypedDict, cast

from runstream._json import JsonObject

UNDEFINED: Any = object()
"""A step output that is JavaScript ``undefined``: the ``output`` key is left out."""

_COMPLETION_FIELDS = frozenset(
    ("output", "error", "endedAt", "suspendedAt", "suspendPayload", "suspendOutput", "tripwire")
)


class TripwireRecord(TypedDict):
    """A processor's tripwire that failed a step (an agent step's)."""

    reason: str
    retry: bool
    metadata: object
    processorId: str | None


class StepResult(TypedDict, total=False):
    """One step's record in a run's ``results`` (Mastra's ``StepResult``), also what the engine's
    parts return for an entry: how it started (``payload``, ``startedAt``, or ``resumePayload``,
    ``resumedAt``), its ``status`` and how it ended. Inputs, outputs and payloads are the steps'
    own values; ``error`` is the exception (or, read back from a snapshot, its JSON)."""

    status: str
    payload: Any
    startedAt: int
    resumePayload: Any
    resumedAt: int
    output: Any
    error: Any
    endedAt: int
    suspendPayload: Any
    suspendedAt: int | None
    suspendOutput: Any
    tripwire: TripwireRecord | None
    metadata: JsonObject


def now_ms() -> int:
    return int(time.time() * 1000)


def omit_completion(result: Mapping[str, Any] | None) -> StepResult:
    """A previous step result without the fields of how it ended (Mastra's
    ``omitPriorCompletionFields``): what a re-run of the step starts from."""
    # A record of this run's (or read back from its snapshot): a StepResult, in its own key order.
    return cast(StepResult, {k: v for k, v in (result or {}).items() if k not in _COMPLETION_FIELDS})
