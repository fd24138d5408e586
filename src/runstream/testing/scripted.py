"""``ScriptedModel``: a deterministic language model that plays scripted stream parts.

To script a conversation in a few lines, use ``ScriptedModel.turns(...)`` and the items of
:mod:`runstream.testing.turns` (text, tool calls, reasoning, errors, delays) instead of raw parts.

Each model call plays the next entry of ``calls`` (the last one repeats when the model is called
more often). A call is a list of provider stream parts, or a dict in the conformance scenario
format (``parts``, ``delayMs``, ``throwOnCall``, ``streamError``). Parts are handed over
literally: nothing is added (no implicit ``stream-start`` or ``finish``). ``tool-call`` inputs
are JSON text, as vendors send them. ``delayMs`` on a part, a call or the model waits before a
part; the wait stops early when the request's abort signal fires, after which the part stream
raises the abort reason.
"""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from runstream.abort import AbortError, AbortSignal, sleep
from runstream.models.base import ModelRequest, ModelStream, StreamPart

if TYPE_CHECKING:
    from runstream.testing.turns import Turn


class ScriptedError(Exception):
    """An error built from a scenario ``ErrorSpec`` (message, name and extra properties)."""

    def __init__(self, message: str, name: str = "Error", **props: Any) -> None:
        super().__init__(message)
        self.name = name
        for key, value in props.items():
            setattr(self, key, value)

    @classmethod
    def from_spec(cls, spec: str | Mapping[str, Any]) -> ScriptedError:
        if isinstance(spec, str):
            return cls(spec)
        props = {k: v for k, v in spec.items() if k not in ("message", "name")}
        return cls(str(spec.get("message", "")), str(spec.get("name", "Error")), **props)


@dataclass(slots=True)
class RecordedCall:
    """What the model was asked, for assertions in tests."""

    index: int
    prompt: list[dict[str, Any]]
    tools: list[str]
    tool_choice: dict[str, Any] | None
    response_format: dict[str, Any] | None
    include_raw_chunks: bool


@dataclass(slots=True)
class _Call:
    parts: list[StreamPart]
    delay_ms: float | None = None
    throw_on_call: ScriptedError | None = None
    stream_error_after: int | None = None
    stream_error_delay_ms: float = 0
    stream_error: ScriptedError | None = None


def prepare_call(call: Sequence[StreamPart] | Mapping[str, Any]) -> _Call:
    """A scripted call (a list of parts, or the scenario dict format) ready to play."""
    if isinstance(call, Mapping):
        stream_error = call.get("streamError")
        return _Call(
            parts=[dict(p) for p in call.get("parts", [])],
            delay_ms=call.get("delayMs"),
            throw_on_call=ScriptedError.from_spec(call["throwOnCall"]) if call.get("throwOnCall") else None,
            stream_error_after=stream_error["afterParts"] if stream_error else None,
            stream_error_delay_ms=stream_error.get("delayMs", 0) if stream_error else 0,
            stream_error=ScriptedError.from_spec(stream_error["error"]) if stream_error else None,
        )
    return _Call(parts=[dict(p) for p in call])


def prepare_part(part: StreamPart) -> StreamPart:
    """Convert scenario JSON into the Python values a real provider yields."""
    out = dict(part)
    out.pop("delayMs", None)
    kind = out.get("type")
    if kind == "response-metadata" and isinstance(out.get("timestamp"), str):
        out["timestamp"] = datetime.fromisoformat(out["timestamp"].replace("Z", "+00:00"))
    elif kind == "error" and isinstance(out.get("error"), str | dict):
        out["error"] = ScriptedError.from_spec(out["error"])
    return out


@dataclass
class ScriptedModel:
    """A :class:`~runstream.models.LanguageModel` that plays ``calls`` in order."""

    calls: list[Any]
    model_id: str = "scripted-model"
    provider: str = "scripted"
    specification_version: str = "v2"
    delay_ms: float = 0
    recorded: list[RecordedCall] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.calls:
            raise ValueError("ScriptedModel needs at least one call")
        self._calls = [prepare_call(c) for c in self.calls]

    @classmethod
    def from_script(cls, script: Mapping[str, Any]) -> ScriptedModel:
        """Build from a conformance ``ModelScript`` object."""
        return cls(
            calls=list(script["calls"]),
            model_id=script.get("modelId", "scripted-model"),
            provider=script.get("provider", "scripted"),
            specification_version=script.get("specificationVersion", "v2"),
            delay_ms=script.get("delayMs", 0),
        )

    @classmethod
    def text(cls, *replies: str, chunk_size: int = 0) -> ScriptedModel:
        """A model whose n-th call answers with ``replies[n]`` (word by word if ``chunk_size``)."""
        from runstream.testing.turns import Text

        return cls.turns(*(Text(reply, words=bool(chunk_size)) for reply in replies))

    @classmethod
    def turns(cls, *turns: Turn) -> ScriptedModel:
        """A model whose n-th call plays ``turns[n]`` (see :mod:`runstream.testing.turns`)::

        ScriptedModel.turns(ToolCall("get_weather", {"city": "Paris"}), Text("It is 21C."))
        """
        from runstream.testing.turns import compile_turns

        return cls(calls=compile_turns(turns))

    @property
    def call_count(self) -> int:
        return len(self.recorded)

    async def stream(self, request: ModelRequest) -> ModelStream:
        index = record(self.recorded, request)
        call = self._calls[min(index, len(self._calls) - 1)]
        if call.throw_on_call is not None:
            raise call.throw_on_call
        return ModelStream(
            parts=play_call(call, self.delay_ms, request.abort_signal),
            request={"body": json.dumps({"scripted": index}, separators=(",", ":"))},
            response={"headers": {}},
        )


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
    for n, raw_part in enumerate(call.parts):
        if call.stream_error is not None and n == call.stream_error_after:
            await _sleep(call.stream_error_delay_ms, signal)
            raise call.stream_error
        await _sleep(raw_part.get("delayMs", default_delay), signal)
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
