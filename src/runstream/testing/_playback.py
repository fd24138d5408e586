"""Playing a scripted model call: the call's parts (scenario JSON made into what a provider
yields), its delays, its errors, and the record of what the model was asked. Shared by
:class:`~runstream.testing.scripted.ScriptedModel` and the turn-based models of
:mod:`runstream.testing.turns`."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import NotRequired, TypeAlias, TypedDict, cast

from runstream.abort import AbortError, AbortSignal, sleep
from runstream.models.base import ModelRequest, PromptMessage, StreamPart, ToolChoice

ScriptPart: TypeAlias = Mapping[str, object]
"""A provider part as a script writes it (JSON), with an optional ``delayMs`` before it."""


class StreamErrorSpec(TypedDict):
    """The stream fails after ``afterParts`` parts (``delayMs`` later) with ``error``."""

    afterParts: int
    error: str | Mapping[str, object]
    delayMs: NotRequired[float]


class ScriptedCall(TypedDict, total=False):
    """A scripted call in the scenario format (a bare list of parts is one too)."""

    parts: Sequence[ScriptPart]
    delayMs: float
    throwOnCall: str | Mapping[str, object]
    streamError: StreamErrorSpec


class ScriptedError(Exception):
    """An error built from a scenario ``ErrorSpec`` (message, name and extra properties)."""

    def __init__(self, message: str, name: str = "Error", **props: object) -> None:
        super().__init__(message)
        self.name = name
        for key, value in props.items():
            setattr(self, key, value)

    @classmethod
    def from_spec(cls, spec: str | Mapping[str, object]) -> ScriptedError:
        if isinstance(spec, str):
            return cls(spec)
        props = {k: v for k, v in spec.items() if k not in ("message", "name")}
        return cls(str(spec.get("message", "")), str(spec.get("name", "Error")), **props)


@dataclass(slots=True)
class RecordedCall:
    """What the model was asked, for assertions in tests."""

    index: int
    prompt: list[PromptMessage]
    tools: list[str]
    tool_choice: ToolChoice | None
    response_format: Mapping[str, object] | None
    include_raw_chunks: bool


@dataclass(slots=True)
class _Call:
    parts: list[ScriptPart]
    """The scenario's parts as written (JSON, with their ``delayMs``)."""
    delays: list[float | None]
    """Each part's ``delayMs`` (``None``: the call's default)."""
    delay_ms: float | None = None
    throw_on_call: ScriptedError | None = None
    stream_error_after: int | None = None
    stream_error_delay_ms: float = 0
    stream_error: ScriptedError | None = None


def prepare_call(call: Sequence[ScriptPart] | ScriptedCall) -> _Call:
    """A scripted call (a list of parts, or the scenario dict format) ready to play."""
    if isinstance(call, Mapping):
        stream_error = call.get("streamError")
        parts: list[ScriptPart] = [dict(p) for p in call.get("parts", [])]
        return _Call(
            parts=parts,
            delays=_delays(parts),
            delay_ms=call.get("delayMs"),
            throw_on_call=ScriptedError.from_spec(call["throwOnCall"]) if call.get("throwOnCall") else None,
            stream_error_after=stream_error["afterParts"] if stream_error else None,
            stream_error_delay_ms=stream_error.get("delayMs", 0) if stream_error else 0,
            stream_error=ScriptedError.from_spec(stream_error["error"]) if stream_error else None,
        )
    plain: list[ScriptPart] = [dict(p) for p in call]
    return _Call(parts=plain, delays=_delays(plain))


def _delays(parts: Sequence[ScriptPart]) -> list[float | None]:
    return [delay if isinstance(delay := part.get("delayMs"), int | float) else None for part in parts]


def prepare_part(part: ScriptPart) -> StreamPart:
    """Convert scenario JSON into the Python values a real provider yields (taken as the part it
    says it is: a script is trusted, as a provider is)."""
    out = dict(part)
    out.pop("delayMs", None)
    kind = out.get("type")
    if kind == "response-metadata" and isinstance(stamp := out.get("timestamp"), str):
        out["timestamp"] = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    elif kind == "error" and isinstance(error := out.get("error"), str | dict):
        out["error"] = ScriptedError.from_spec(error)
    return cast(StreamPart, out)


def record(recorded: list[RecordedCall], request: ModelRequest) -> int:
    """Append what the model was asked to ``recorded``; returns the call's index."""
    index = len(recorded)
    recorded.append(
        RecordedCall(
            index=index,
            prompt=copy.deepcopy(request.prompt),
            tools=[t["name"] for t in request.tools],
            tool_choice=request.tool_choice,
            response_format=request.response_format,
            include_raw_chunks=request.include_raw_chunks,
        )
    )
    return index


async def play_call(call: _Call, delay_ms: float, signal: AbortSignal | None) -> AsyncIterator[StreamPart]:
    """Yield the call's parts, waiting ``delayMs`` (the part's, the call's, or ``delay_ms``) first."""
    default_delay = call.delay_ms if call.delay_ms is not None else delay_ms
    for n, (raw_part, delay) in enumerate(zip(call.parts, call.delays, strict=True)):
        if call.stream_error is not None and n == call.stream_error_after:
            await _sleep(call.stream_error_delay_ms, signal)
            raise call.stream_error
        await _sleep(delay if delay is not None else default_delay, signal)
        if signal is not None and signal.aborted:
            raise AbortError(signal.reason)
        yield prepare_part(raw_part)
    if call.stream_error is not None and call.stream_error_after == len(call.parts):
        await _sleep(call.stream_error_delay_ms, signal)
        raise call.stream_error


async def _sleep(ms: float, signal: AbortSignal | None) -> None:
    """Sleep ``ms`` milliseconds, returning early if ``signal`` fires."""
    if ms:
        await sleep(ms / 1000, signal)
