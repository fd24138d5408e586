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

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NotRequired, TypedDict

from runstream.errors import ConfigurationError
from runstream.models.base import ModelRequest, ModelStream
from runstream.testing._playback import (
    RecordedCall,
    ScriptedCall,
    ScriptedError,
    ScriptPart,
    play_call,
    prepare_call,
    prepare_part,
    record,
)
from runstream.testing.turns import Text, Turn, compile_turns

__all__ = ["RecordedCall", "ScriptedError", "ScriptedModel", "prepare_part"]


class ModelScript(TypedDict):
    """A conformance ``ModelScript``: the calls to play, and how the model names itself."""

    calls: Sequence[Sequence[ScriptPart] | ScriptedCall]
    modelId: NotRequired[str]
    provider: NotRequired[str]
    specificationVersion: NotRequired[str]
    delayMs: NotRequired[float]


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
            raise ConfigurationError("ScriptedModel needs at least one call")
        self._calls = [prepare_call(c) for c in self.calls]

    @classmethod
    def from_script(cls, script: ModelScript) -> ScriptedModel:
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
        return cls.turns(*(Text(reply, words=bool(chunk_size)) for reply in replies))

    @classmethod
    def turns(cls, *turns: Turn) -> ScriptedModel:
        """A model whose n-th call plays ``turns[n]`` (see :mod:`runstream.testing.turns`)::

        ScriptedModel.turns(ToolCall("get_weather", {"city": "Paris"}), Text("It is 21C."))
        """
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
