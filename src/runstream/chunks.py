"""Every chunk a run can stream, and the one place that knows Mastra's wire JSON.

A chunk is ``{"type", "runId", "from", "payload"}`` on the wire (camelCase payload keys, dates as
ISO strings, errors as ``{"message", "name"}``, bytes as base64). In Python each chunk type is a
small slotted class whose ``payload`` is a plain dict already in wire shape (a ``TypedDict`` per
type documents and type-checks its fields). Internally produced chunks are built without
validation (the hot path); :func:`chunk_from_wire` validates at the boundary and keeps chunk
types it does not know as :class:`UnknownChunk` instead of dropping them.

Exceptions to the envelope, as in Mastra: ``object`` / ``object-result`` carry ``object`` at the
top level, and ``data-*`` chunks carry ``data`` (plus optional ``id`` and ``transient``).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping
from datetime import datetime
from functools import cache
from typing import Any, ClassVar, Generic, Literal, TypeVar, cast

import orjson
from pydantic import TypeAdapter, ValidationError

from runstream._clock import iso_datetime
from runstream._json import JsonObject
from runstream._payloads import (
    CustomPayload as CustomPayload,
)
from runstream._payloads import (
    ErrorPayload as ErrorPayload,
)
from runstream._payloads import (
    FilePayload as FilePayload,
)
from runstream._payloads import (
    FinishPayload as FinishPayload,
)
from runstream._payloads import (
    GoalPayload as GoalPayload,
)
from runstream._payloads import (
    IsTaskCompletePayload as IsTaskCompletePayload,
)
from runstream._payloads import (
    OpenPayload as OpenPayload,
)
from runstream._payloads import (
    ReasoningPayload as ReasoningPayload,
)
from runstream._payloads import (
    ReasoningSignaturePayload as ReasoningSignaturePayload,
)
from runstream._payloads import (
    RedactedReasoningPayload as RedactedReasoningPayload,
)
from runstream._payloads import (
    ResponseMetadataPayload as ResponseMetadataPayload,
)
from runstream._payloads import (
    ScorerResult as ScorerResult,
)
from runstream._payloads import (
    SourcePayload as SourcePayload,
)
from runstream._payloads import (
    StartPayload as StartPayload,
)
from runstream._payloads import (
    StepFinishPayload as StepFinishPayload,
)
from runstream._payloads import (
    StepOutputPayload as StepOutputPayload,
)
from runstream._payloads import (
    StepResult as StepResult,
)
from runstream._payloads import (
    StepStartPayload as StepStartPayload,
)
from runstream._payloads import (
    TaskCancelledPayload as TaskCancelledPayload,
)
from runstream._payloads import (
    TaskCompletedPayload as TaskCompletedPayload,
)
from runstream._payloads import (
    TaskEventPayload as TaskEventPayload,
)
from runstream._payloads import (
    TaskFailedPayload as TaskFailedPayload,
)
from runstream._payloads import (
    TaskOutputPayload as TaskOutputPayload,
)
from runstream._payloads import (
    TaskProgressPayload as TaskProgressPayload,
)
from runstream._payloads import (
    TaskResumedPayload as TaskResumedPayload,
)
from runstream._payloads import (
    TaskRunningPayload as TaskRunningPayload,
)
from runstream._payloads import (
    TaskStartedPayload as TaskStartedPayload,
)
from runstream._payloads import (
    TaskSuspendedPayload as TaskSuspendedPayload,
)
from runstream._payloads import (
    TextDeltaPayload as TextDeltaPayload,
)
from runstream._payloads import (
    TextPayload as TextPayload,
)
from runstream._payloads import (
    ToolCallApprovalPayload as ToolCallApprovalPayload,
)
from runstream._payloads import (
    ToolCallDeltaPayload as ToolCallDeltaPayload,
)
from runstream._payloads import (
    ToolCallPayload as ToolCallPayload,
)
from runstream._payloads import (
    ToolCallSuspendedPayload as ToolCallSuspendedPayload,
)
from runstream._payloads import (
    ToolErrorPayload as ToolErrorPayload,
)
from runstream._payloads import (
    ToolInputEndPayload as ToolInputEndPayload,
)
from runstream._payloads import (
    ToolInputStartPayload as ToolInputStartPayload,
)
from runstream._payloads import (
    ToolOutputDeniedPayload as ToolOutputDeniedPayload,
)
from runstream._payloads import (
    ToolOutputPayload as ToolOutputPayload,
)
from runstream._payloads import (
    ToolResultPayload as ToolResultPayload,
)
from runstream._payloads import (
    TripwirePayload as TripwirePayload,
)
from runstream._payloads import (
    Usage as Usage,
)
from runstream._payloads import (
    WatchPayload as WatchPayload,
)
from runstream._payloads import WireChunk as WireChunk
from runstream._payloads import WireError
from runstream.errors import InvalidInputError, RunstreamError

ChunkFrom = Literal["AGENT", "USER", "SYSTEM", "WORKFLOW", "NETWORK"]

# ---------------------------------------------------------------------------------------------
# Chunk classes
# ---------------------------------------------------------------------------------------------

P = TypeVar("P")


class Chunk(Generic[P]):
    """One chunk of a run's stream. ``payload`` is already in wire shape."""

    __slots__ = ("from_", "payload", "run_id", "type")
    __match_args__ = ("payload",)
    TYPE: ClassVar[str] = ""
    PAYLOAD: ClassVar[Any] = OpenPayload

    type: str
    run_id: str
    from_: ChunkFrom
    payload: P

    def __init__(self, run_id: str, payload: P, from_: ChunkFrom = "AGENT") -> None:
        self.type = self.TYPE
        self.run_id = run_id
        self.from_ = from_
        self.payload = payload

    def to_wire(self) -> WireChunk:
        """The chunk in wire shape. One read from the wire without ``runId`` (Mastra omits it on
        some types) is written back without the envelope; every chunk runstream makes has one."""
        if not self.run_id:
            return {"type": self.type, "payload": self.payload}
        return {"type": self.type, "runId": self.run_id, "from": self.from_, "payload": self.payload}

    def to_json(self) -> str:
        return dumps(self.to_wire())

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.to_wire()!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Chunk) and self.to_wire() == other.to_wire()

    __hash__ = None  # type: ignore[assignment]


C = TypeVar("C", bound="type[Chunk[Any]]")


def _chunk(type_: str, payload: Any) -> Callable[[C], C]:
    """Class decorator setting a chunk class's wire type and payload type (typed to return the
    class itself, so that type checkers see each chunk class as it is declared)."""

    def register(cls: C) -> C:
        cls.TYPE = type_
        cls.PAYLOAD = payload
        CHUNK_CLASSES[type_] = cls
        return cls

    return register


CHUNK_CLASSES: dict[str, type[Chunk[Any]]] = {}


@_chunk("start", StartPayload)
class StartChunk(Chunk[StartPayload]):
    __slots__ = ()
    type: Literal["start"]


@_chunk("step-start", StepStartPayload)
class StepStartChunk(Chunk[StepStartPayload]):
    __slots__ = ()
    type: Literal["step-start"]


@_chunk("response-metadata", ResponseMetadataPayload)
class ResponseMetadataChunk(Chunk[ResponseMetadataPayload]):
    __slots__ = ()
    type: Literal["response-metadata"]


@_chunk("text-start", TextPayload)
class TextStartChunk(Chunk[TextPayload]):
    __slots__ = ()
    type: Literal["text-start"]


@_chunk("text-delta", TextDeltaPayload)
class TextDeltaChunk(Chunk[TextDeltaPayload]):
    __slots__ = ()
    type: Literal["text-delta"]


@_chunk("text-end", TextPayload)
class TextEndChunk(Chunk[TextPayload]):
    __slots__ = ()
    type: Literal["text-end"]


@_chunk("reasoning-start", ReasoningPayload)
class ReasoningStartChunk(Chunk[ReasoningPayload]):
    __slots__ = ()
    type: Literal["reasoning-start"]


@_chunk("reasoning-delta", TextDeltaPayload)
class ReasoningDeltaChunk(Chunk[TextDeltaPayload]):
    __slots__ = ()
    type: Literal["reasoning-delta"]


@_chunk("reasoning-end", ReasoningPayload)
class ReasoningEndChunk(Chunk[ReasoningPayload]):
    __slots__ = ()
    type: Literal["reasoning-end"]


@_chunk("reasoning-signature", ReasoningSignaturePayload)
class ReasoningSignatureChunk(Chunk[ReasoningSignaturePayload]):
    __slots__ = ()
    type: Literal["reasoning-signature"]


@_chunk("redacted-reasoning", RedactedReasoningPayload)
class RedactedReasoningChunk(Chunk[RedactedReasoningPayload]):
    __slots__ = ()
    type: Literal["redacted-reasoning"]


@_chunk("source", SourcePayload)
class SourceChunk(Chunk[SourcePayload]):
    __slots__ = ()
    type: Literal["source"]


@_chunk("file", FilePayload)
class FileChunk(Chunk[FilePayload]):
    __slots__ = ()
    type: Literal["file"]


@_chunk("reasoning-file", FilePayload)
class ReasoningFileChunk(Chunk[FilePayload]):
    __slots__ = ()
    type: Literal["reasoning-file"]


@_chunk("custom", CustomPayload)
class CustomChunk(Chunk[CustomPayload]):
    __slots__ = ()
    type: Literal["custom"]


@_chunk("tool-call-input-streaming-start", ToolInputStartPayload)
class ToolCallInputStreamingStartChunk(Chunk[ToolInputStartPayload]):
    __slots__ = ()
    type: Literal["tool-call-input-streaming-start"]


@_chunk("tool-call-delta", ToolCallDeltaPayload)
class ToolCallDeltaChunk(Chunk[ToolCallDeltaPayload]):
    __slots__ = ()
    type: Literal["tool-call-delta"]


@_chunk("tool-call-input-streaming-end", ToolInputEndPayload)
class ToolCallInputStreamingEndChunk(Chunk[ToolInputEndPayload]):
    __slots__ = ()
    type: Literal["tool-call-input-streaming-end"]


@_chunk("tool-call", ToolCallPayload)
class ToolCallChunk(Chunk[ToolCallPayload]):
    __slots__ = ()
    type: Literal["tool-call"]


@_chunk("tool-result", ToolResultPayload)
class ToolResultChunk(Chunk[ToolResultPayload]):
    __slots__ = ()
    type: Literal["tool-result"]


@_chunk("tool-error", ToolErrorPayload)
class ToolErrorChunk(Chunk[ToolErrorPayload]):
    __slots__ = ()
    type: Literal["tool-error"]


@_chunk("tool-output", ToolOutputPayload)
class ToolOutputChunk(Chunk[ToolOutputPayload]):
    __slots__ = ()
    type: Literal["tool-output"]


@_chunk("tool-call-approval", ToolCallApprovalPayload)
class ToolCallApprovalChunk(Chunk[ToolCallApprovalPayload]):
    __slots__ = ()
    type: Literal["tool-call-approval"]


@_chunk("tool-call-suspended", ToolCallSuspendedPayload)
class ToolCallSuspendedChunk(Chunk[ToolCallSuspendedPayload]):
    __slots__ = ()
    type: Literal["tool-call-suspended"]


@_chunk("tool-output-denied", ToolOutputDeniedPayload)
class ToolOutputDeniedChunk(Chunk[ToolOutputDeniedPayload]):
    __slots__ = ()
    type: Literal["tool-output-denied"]


@_chunk("step-finish", StepFinishPayload)
class StepFinishChunk(Chunk[StepFinishPayload]):
    __slots__ = ()
    type: Literal["step-finish"]


@_chunk("finish", StepFinishPayload)
class FinishChunk(Chunk[StepFinishPayload]):
    __slots__ = ()
    type: Literal["finish"]


@_chunk("error", ErrorPayload)
class ErrorChunk(Chunk[ErrorPayload]):
    __slots__ = ()
    type: Literal["error"]


@_chunk("abort", OpenPayload)
class AbortChunk(Chunk[OpenPayload]):
    __slots__ = ()
    type: Literal["abort"]


@_chunk("raw", Any)
class RawChunk(Chunk[Any]):
    __slots__ = ()
    type: Literal["raw"]


@_chunk("step-output", StepOutputPayload)
class StepOutputChunk(Chunk[StepOutputPayload]):
    __slots__ = ()
    type: Literal["step-output"]


@_chunk("watch", WatchPayload)
class WatchChunk(Chunk[WatchPayload]):
    __slots__ = ()
    type: Literal["watch"]


@_chunk("tripwire", TripwirePayload)
class TripwireChunk(Chunk[TripwirePayload]):
    __slots__ = ()
    type: Literal["tripwire"]


@_chunk("is-task-complete", IsTaskCompletePayload)
class IsTaskCompleteChunk(Chunk[IsTaskCompletePayload]):
    __slots__ = ()
    type: Literal["is-task-complete"]


@_chunk("goal", GoalPayload)
class GoalChunk(Chunk[GoalPayload]):
    __slots__ = ()
    type: Literal["goal"]


@_chunk("background-task-started", TaskStartedPayload)
class BackgroundTaskStartedChunk(Chunk[TaskStartedPayload]):
    __slots__ = ()
    type: Literal["background-task-started"]


@_chunk("background-task-running", TaskRunningPayload)
class BackgroundTaskRunningChunk(Chunk[TaskRunningPayload]):
    __slots__ = ()
    type: Literal["background-task-running"]


@_chunk("background-task-progress", TaskProgressPayload)
class BackgroundTaskProgressChunk(Chunk[TaskProgressPayload]):
    __slots__ = ()
    type: Literal["background-task-progress"]


@_chunk("background-task-output", TaskOutputPayload)
class BackgroundTaskOutputChunk(Chunk[TaskOutputPayload]):
    __slots__ = ()
    type: Literal["background-task-output"]


@_chunk("background-task-completed", TaskCompletedPayload)
class BackgroundTaskCompletedChunk(Chunk[TaskCompletedPayload]):
    __slots__ = ()
    type: Literal["background-task-completed"]


@_chunk("background-task-failed", TaskFailedPayload)
class BackgroundTaskFailedChunk(Chunk[TaskFailedPayload]):
    __slots__ = ()
    type: Literal["background-task-failed"]


@_chunk("background-task-cancelled", TaskCancelledPayload)
class BackgroundTaskCancelledChunk(Chunk[TaskCancelledPayload]):
    __slots__ = ()
    type: Literal["background-task-cancelled"]


@_chunk("background-task-suspended", TaskSuspendedPayload)
class BackgroundTaskSuspendedChunk(Chunk[TaskSuspendedPayload]):
    __slots__ = ()
    type: Literal["background-task-suspended"]


@_chunk("background-task-resumed", TaskResumedPayload)
class BackgroundTaskResumedChunk(Chunk[TaskResumedPayload]):
    __slots__ = ()
    type: Literal["background-task-resumed"]


WORKFLOW_CHUNK_TYPES = (
    "workflow-start",
    "workflow-finish",
    "workflow-canceled",
    "workflow-paused",
    "workflow-step-start",
    "workflow-step-finish",
    "workflow-step-suspended",
    "workflow-step-waiting",
    "workflow-step-output",
    "workflow-step-progress",
    "workflow-step-result",
)


class WorkflowChunk(Chunk[OpenPayload]):
    """A workflow stream event (``workflow-*``); the payload is an open record."""

    __slots__ = ()

    def __init__(self, type_: str, run_id: str, payload: OpenPayload, from_: ChunkFrom = "WORKFLOW") -> None:
        super().__init__(run_id, payload, from_)
        self.type = type_


class _ObjectChunkBase(Chunk[None]):
    """``object`` / ``object-result``: the (partial) object sits at the top level."""

    __slots__ = ("metadata", "object")
    __match_args__ = ("object",)

    def __init__(
        self, run_id: str, obj: Any, from_: ChunkFrom = "AGENT", metadata: JsonObject | None = None
    ) -> None:
        super().__init__(run_id, None, from_)
        self.object = obj
        self.metadata = metadata
        """Mastra's ``{"from": "structured-output"}`` (a separate structuring model's object) and
        ``{"fallback": true}`` (an ``errorStrategy: "fallback"`` value); ``None`` otherwise."""

    def to_wire(self) -> WireChunk:
        wire: WireChunk = (
            {"type": self.type, "object": self.object}
            if not self.run_id
            else {"type": self.type, "runId": self.run_id, "from": self.from_, "object": self.object}
        )
        if self.metadata is not None:
            wire["metadata"] = self.metadata
        return wire


@_chunk("object", None)
class ObjectChunk(_ObjectChunkBase):
    __slots__ = ()
    type: Literal["object"]


@_chunk("object-result", None)
class ObjectResultChunk(_ObjectChunkBase):
    __slots__ = ()
    type: Literal["object-result"]


DataChunkType = Literal["data-*"]
"""A :class:`DataChunk`'s ``type`` for checkers: a stand-in for its ``data-<name>`` (no pattern
literals in Python). A literal keeps :data:`AgentChunk` a tagged union (mypy narrows
``chunk.type == "text-delta"`` only if every member's ``type`` is one); pick data chunks out with
``isinstance`` or ``case DataChunk(data)``."""


class DataChunk(Chunk[None]):
    """A custom ``data-<name>`` chunk written by a tool or step (``writer.custom``): ``data``,
    optional ``id`` and ``transient`` on the wire, no ``payload``. ``type`` is the whole
    ``data-<name>`` (checkers see :data:`DataChunkType`)."""

    __slots__ = ("data", "id", "transient")
    __match_args__ = ("data",)
    type: DataChunkType

    def __init__(
        self,
        type_: str,
        data: Any,
        *,
        run_id: str = "",
        from_: ChunkFrom = "USER",
        id: str | None = None,
        transient: bool | None = None,
    ) -> None:
        if not type_.startswith("data-"):
            raise InvalidInputError(f"custom chunk type must start with 'data-', got {type_!r}")
        super().__init__(run_id, None, from_)
        self.type = type_  # type: ignore[assignment]  # any data-<name>: see DataChunkType
        self.data = data
        self.id = id
        self.transient = transient

    @property
    def name(self) -> str:
        return self.type.removeprefix("data-")

    def to_wire(self) -> WireChunk:
        wire: WireChunk = {"type": self.type, "data": self.data}
        if self.id is not None:
            wire["id"] = self.id
        if self.transient is not None:
            wire["transient"] = self.transient
        if self.run_id:
            wire["runId"] = self.run_id
            wire["from"] = self.from_
        return wire


class UnknownChunk(Chunk[Any]):
    """A chunk read from the wire whose type this version does not know: kept verbatim."""

    __slots__ = ("raw",)

    def __init__(self, raw: WireChunk) -> None:
        from_ = cast(ChunkFrom, raw.get("from", "AGENT"))  # (kept as it came, like the rest)
        super().__init__(str(raw.get("runId", "")), raw.get("payload"), from_)
        self.type = str(raw.get("type"))
        self.raw = raw

    def to_wire(self) -> WireChunk:
        return self.raw


AnyChunk = Chunk[Any]
"""Any chunk, without narrowing: what internal code passes around."""

AgentChunk = (
    StartChunk
    | StepStartChunk
    | ResponseMetadataChunk
    | TextStartChunk
    | TextDeltaChunk
    | TextEndChunk
    | ReasoningStartChunk
    | ReasoningDeltaChunk
    | ReasoningEndChunk
    | ReasoningSignatureChunk
    | RedactedReasoningChunk
    | SourceChunk
    | FileChunk
    | ReasoningFileChunk
    | CustomChunk
    | ToolCallInputStreamingStartChunk
    | ToolCallDeltaChunk
    | ToolCallInputStreamingEndChunk
    | ToolCallChunk
    | ToolResultChunk
    | ToolErrorChunk
    | ToolOutputChunk
    | ToolCallApprovalChunk
    | ToolCallSuspendedChunk
    | ToolOutputDeniedChunk
    | StepFinishChunk
    | FinishChunk
    | ErrorChunk
    | AbortChunk
    | RawChunk
    | StepOutputChunk
    | WatchChunk
    | TripwireChunk
    | IsTaskCompleteChunk
    | GoalChunk
    | BackgroundTaskStartedChunk
    | BackgroundTaskRunningChunk
    | BackgroundTaskProgressChunk
    | BackgroundTaskOutputChunk
    | BackgroundTaskCompletedChunk
    | BackgroundTaskFailedChunk
    | BackgroundTaskCancelledChunk
    | BackgroundTaskSuspendedChunk
    | BackgroundTaskResumedChunk
    | ObjectChunk
    | ObjectResultChunk
    | DataChunk
)
"""Every chunk an agent's run streams (runstream's own and tools' ``data-*`` ones), each tagged by
a ``Literal`` ``type``: a closed union that narrows with ``match chunk: case TextDeltaChunk(payload):``,
with ``isinstance``, and with ``if chunk.type == "text-delta":`` (then a ``TextDeltaPayload``)."""

StreamChunk = AgentChunk | WorkflowChunk | UnknownChunk
"""What a stream can hold: an agent's chunks, a nested workflow's events, and chunks read from
the wire whose type this version does not know."""

# ---------------------------------------------------------------------------------------------
# Wire encoding
# ---------------------------------------------------------------------------------------------


def error_to_wire(error: BaseException) -> WireError:
    """An exception as Mastra serialises it: ``{"message", "name"}``."""
    name = getattr(error, "name", None)
    return {"message": str(error), "name": name if isinstance(name, str) else type(error).__name__}


def _default(value: object) -> object:
    if isinstance(value, datetime):
        return iso_datetime(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, BaseException):
        return error_to_wire(value)
    if isinstance(value, Chunk):
        return value.to_wire()
    to_wire = getattr(value, "to_wire", None)
    if callable(to_wire):
        return to_wire()
    model_dump = getattr(value, "model_dump", None)
    if callable(model_dump):
        return model_dump(mode="json", by_alias=True)
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


_ORJSON_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS
"""Dates and dataclasses (chunks among them) go through :func:`_default`, as with the json module."""


def dumps(value: object) -> str:
    """Serialise to compact one-line JSON the way a Mastra wire carries it (NaN becomes null).

    orjson does it several times faster than the json module, and every SSE frame and bus message
    passes here; the json module takes what orjson refuses (integers beyond 64 bits) or says why
    a value has no JSON form (``TypeError`` / ``ValueError``).
    """
    try:
        return orjson.dumps(value, default=_default, option=_ORJSON_OPTIONS).decode()
    except orjson.JSONEncodeError:
        return json.dumps(value, default=_default, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def dumps_bytes(value: object) -> bytes:
    """:func:`dumps` as UTF-8 bytes, straight from orjson (no decode and re-encode). A lone
    surrogate, which UTF-8 cannot hold, becomes ``?``."""
    try:
        return orjson.dumps(value, default=_default, option=_ORJSON_OPTIONS)
    except orjson.JSONEncodeError:
        return dumps(value).encode("utf-8", "replace")


def to_jsonable(value: Any) -> Any:
    """A deep copy of ``value`` with only JSON types (dates, errors, bytes converted)."""
    return json.loads(dumps(value))


# ---------------------------------------------------------------------------------------------
# Wire decoding (the validation boundary)
# ---------------------------------------------------------------------------------------------


class ChunkDecodeError(RunstreamError, ValueError):
    """A wire chunk is malformed (not an object, no type, or a payload of the wrong shape)."""


@cache
def _payload_adapter(payload_type: Any) -> TypeAdapter[Any]:
    return TypeAdapter(payload_type)


def chunk_from_wire(raw: Mapping[str, object] | str) -> StreamChunk:
    """Build a chunk from its wire JSON (a dict or a JSON string), validating the payload.

    Unknown types become :class:`UnknownChunk` (kept, not dropped).
    """
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError as exc:
            raise ChunkDecodeError(f"chunk is not valid JSON: {exc}") from exc
    type_ = raw.get("type") if isinstance(raw, dict) else None
    if not isinstance(raw, dict) or not isinstance(type_, str):
        raise ChunkDecodeError("a chunk must be a JSON object with a string 'type'")
    wire: WireChunk = raw
    run_id = str(wire.get("runId", ""))
    from_ = cast(ChunkFrom, wire.get("from", "AGENT"))
    if type_.startswith("data-"):
        id_, transient = wire.get("id"), wire.get("transient")
        return DataChunk(
            type_,
            wire.get("data"),
            run_id=run_id,
            from_=from_,
            id=id_ if isinstance(id_, str) else None,
            transient=transient if isinstance(transient, bool) else None,
        )
    if type_ in ("object", "object-result"):
        cls = ObjectChunk if type_ == "object" else ObjectResultChunk
        metadata = wire.get("metadata")
        return cls(run_id, wire.get("object"), from_, metadata if isinstance(metadata, dict) else None)
    if type_ in WORKFLOW_CHUNK_TYPES:
        workflow_payload = wire.get("payload", {})
        if not isinstance(workflow_payload, dict):
            raise ChunkDecodeError(f"the payload of a {type_!r} chunk must be an object")
        return WorkflowChunk(type_, run_id, dict(workflow_payload), from_)
    chunk_cls = CHUNK_CLASSES.get(type_)
    if chunk_cls is None:
        return UnknownChunk(wire)
    payload = wire.get("payload", {})
    try:
        payload = _payload_adapter(chunk_cls.PAYLOAD).validate_python(payload)
    except ValidationError as exc:
        raise ChunkDecodeError(f"invalid payload for chunk type {type_!r}: {exc}") from exc
    return cast(AgentChunk, chunk_cls(run_id, payload, from_))  # (every registered class is one)
