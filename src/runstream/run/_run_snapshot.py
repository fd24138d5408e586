"""A saved run's JSON: its shape (``TypedDict``s that pydantic checks) and one migration per
older version.

:meth:`RunState.to_json <runstream.run._run_state.RunState.to_json>` writes a :class:`SavedRunState`
(mypy makes it name every key); :func:`read_snapshot` brings a saved state of any version up to
:data:`STATE_VERSION` one migration at a time, then checks it against :class:`SavedRunState`, in
which every key is required: a field the writer leaves out fails on load (and in the tests),
instead of loading as a silent default. Conversation content (messages, steps, chunks, tool
arguments) is the caller's JSON: its shape is typed for mypy and passed through unchecked
(``SkipValidation``), so a key runstream does not know is never dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, Literal

from pydantic import SkipValidation, TypeAdapter, ValidationError
from typing_extensions import TypedDict  # (pydantic reads only these on Python 3.11)

from runstream._json import JsonObject, JsonValue
from runstream.chunks import TripwirePayload
from runstream.errors import RunstreamError
from runstream.models.base import PromptMessage
from runstream.models.parts import ProviderMetadata
from runstream.models.prompt import ToolResultOutput

STATE_VERSION: Final = 3
"""The version :meth:`RunState.to_json` writes. 1: no ``stateVersion``; the tool step's control
keys (``approved``, ``resume_data``) in its step record and no ``stepIndex``. 2: keys added over
its life may be missing (they load as their defaults). 3: every key present."""

Json = SkipValidation[Any]
"""A value of the caller's JSON, passed through as it was saved."""

if TYPE_CHECKING:  # typed for mypy; at run time passed through as saved, like Json
    Messages = list[PromptMessage]
    Tripwire = TripwirePayload | None
    Metadata = ProviderMetadata | None
    ModelOutput = ToolResultOutput | None
else:
    Messages = Tripwire = Metadata = ModelOutput = Json


class UnsupportedRunStateError(RunstreamError, ValueError):
    """A saved run state of a version this code cannot read (or not a run state at all)."""


class SavedToolCall(TypedDict):
    toolCallId: str
    toolName: str
    args: Json
    argsError: str | None
    argsUnreadable: bool
    providerMetadata: Metadata
    modelInput: Json


class SavedOutcome(TypedDict):
    kind: Literal["result", "error", "suspended", "denied"]
    value: Json
    providerMetadata: Metadata
    modelOutput: ModelOutput
    resumeSchema: Json


class SavedPendingStep(TypedDict):
    calls: list[SavedToolCall]
    awaitingApproval: list[str]
    suspended: Json
    done: dict[str, SavedOutcome]
    approved: list[str]
    resumeData: Json
    suspendedRunIds: dict[str, str]
    stepRecord: Json
    stepIndex: int | None
    """Where the record is in the run's ``steps`` (saved once: the pending step shares it)."""


class SavedContinuedMessage(TypedDict):
    id: str
    parts: Json
    metadata: Json
    promptCount: int


class SavedRunState(TypedDict):
    stateVersion: Literal[3]
    runId: str
    messageId: str
    messages: Messages
    inputCount: int
    historyCount: int
    steps: Json
    usage: Json
    finishReason: str | None
    status: Literal["running", "success", "failed", "suspended", "aborted", "tripwire"]
    tripwire: Tripwire
    object: Json
    stepNumber: int
    processorRetryCount: int
    backgroundTaskIds: list[str]
    waitedTaskIds: list[str]
    endsAfterStep: str | None
    reasoning: list[str]
    toolCalls: Json
    toolResults: Json
    sources: Json
    files: Json
    suspendPayload: Json
    checkCounts: dict[str, int]
    messageSegments: list[tuple[str, int]]
    hiddenToolErrors: dict[str, str]
    continued: SavedContinuedMessage | None
    pending: SavedPendingStep | None


_ADAPTER: list[TypeAdapter[SavedRunState]] = []
"""The snapshot's validator, built on the first load (not when runstream is imported)."""

Migration = Callable[[JsonObject], JsonObject]


def read_snapshot(data: Mapping[str, Any]) -> SavedRunState:
    """A saved state (any version up to :data:`STATE_VERSION`) in the current shape, checked."""
    version = data.get("stateVersion", 1)
    if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= STATE_VERSION:
        raise UnsupportedRunStateError(
            f"saved run {data.get('runId')!r} has state version {version!r}; this runstream "
            f"reads versions 1 to {STATE_VERSION} (a newer runstream wrote it?)"
        )
    current: JsonObject = dict(data)
    for older in range(version, STATE_VERSION):
        current = _MIGRATIONS[older](current)
    try:
        if not _ADAPTER:
            _ADAPTER.append(TypeAdapter(SavedRunState))
        return _ADAPTER[0].validate_python({**current, "stateVersion": STATE_VERSION})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(map(str, first["loc"]))
        raise UnsupportedRunStateError(
            f"saved run {data.get('runId')!r} (state version {version}) is not a run state: "
            f"{where}: {first['msg']}"
        ) from None


def _from_version_1(data: JsonObject) -> JsonObject:
    """Version 1 kept the tool step's control keys in its step record, and the record was the
    run's last step (saved twice, no ``stepIndex``). A snapshot of another shape is left as it
    is, for the check after the migrations to name what is wrong."""
    pending, saved_steps = data.get("pending"), data.get("steps", [])
    if not isinstance(pending, dict) or not isinstance(saved_steps, list):
        return data
    saved_record = pending.get("stepRecord")
    if not isinstance(saved_record, dict):
        return data
    record = dict(saved_record)
    control: JsonObject = {
        "approved": record.pop("approved", []),
        "resumeData": record.pop("resume_data", {}),
    }
    steps, index = list(saved_steps), None
    if steps and isinstance(steps[-1], dict) and _without_control_keys(steps[-1]) == record:
        steps[-1], index = record, len(steps) - 1
    return {
        **data,
        "steps": steps,
        "pending": {**control, **pending, "stepRecord": record, "stepIndex": index},
    }


def _without_control_keys(record: Mapping[str, object]) -> dict[str, object]:
    return {k: v for k, v in record.items() if k not in ("approved", "resume_data", "pendingResults")}


_VERSION_2_DEFAULTS: JsonObject = {
    "finishReason": None,
    "status": "suspended",
    "tripwire": None,
    "object": None,
    "waitedTaskIds": [],
    "endsAfterStep": None,
    "sources": [],
    "files": [],
    "checkCounts": {},
    "messageSegments": [],
    "hiddenToolErrors": {},
    "continued": None,
    "pending": None,
}
_PENDING_DEFAULTS: JsonObject = {
    "approved": [],
    "resumeData": {},
    "suspendedRunIds": {},
    "stepIndex": None,
}
_CALL_DEFAULTS: JsonObject = {
    "argsError": None,
    "argsUnreadable": False,
    "providerMetadata": None,
    "modelInput": None,
}
_OUTCOME_DEFAULTS: JsonObject = {"providerMetadata": None, "modelOutput": None, "resumeSchema": None}


def _from_version_2(data: JsonObject) -> JsonObject:
    """Version 2 gained keys over its life: a snapshot may lack the later ones (their defaults)."""
    migrated = {**_VERSION_2_DEFAULTS, **data}
    pending = migrated["pending"]
    if isinstance(pending, dict):
        calls, done = pending.get("calls", []), pending.get("done", {})
        migrated["pending"] = {
            **_PENDING_DEFAULTS,
            **pending,
            "calls": [_with_defaults(_CALL_DEFAULTS, call) for call in calls]
            if isinstance(calls, list)
            else calls,
            "done": {key: _with_defaults(_OUTCOME_DEFAULTS, value) for key, value in done.items()}
            if isinstance(done, dict)
            else done,
        }
    return migrated


def _with_defaults(defaults: JsonObject, value: JsonValue) -> JsonValue:
    """``value`` with the keys it lacks from ``defaults`` (a value that is no object as it is)."""
    return {**defaults, **value} if isinstance(value, dict) else value


_MIGRATIONS: dict[int, Migration] = {1: _from_version_1, 2: _from_version_2}
"""Version n's snapshot -> version n + 1's."""
