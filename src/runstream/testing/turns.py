"""Script a model conversation turn by turn, for unit tests of your own agents.

Each model call answers with one *turn*: a single item or a list of items, played in order.

* :class:`Text` — an answer (``words=True`` streams it word by word),
* :class:`Reasoning` — a reasoning block,
* :class:`ToolCall` — a call of one of the agent's tools with arguments (the loop really runs it),
* :class:`Delay` — wait before the next item (abortable, as a slow vendor would be),
* :class:`StreamError` — the vendor stream fails at this point (an ``error`` chunk),
* :class:`CallError` — the model request itself fails (nothing is streamed),
* :class:`Finish` — the finish reason and usage, when the defaults do not fit (``tool-calls``
  when the turn calls a tool, ``stop`` otherwise).

``ScriptedModel.turns(...)`` plays a fixed script; :class:`FunctionModel` asks a function for
each turn, so the answer can depend on what the model was sent (tool results, the user's words)::

    model = ScriptedModel.turns(
        ToolCall("get_weather", {"city": "Paris"}),   # call 1: the model calls the tool
        Text("It is 21C in Paris."),                  # call 2: it answers with the result
    )

Both record what each call was sent (``model.recorded``) for assertions.
"""

from __future__ import annotations

import copy
import inspect
import json
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeAlias

from runstream._json import JsonObject
from runstream.errors import InvalidTypeError
from runstream.models.base import ModelRequest, ModelStream, PromptMessage, StreamPart, Usage
from runstream.models.prompt import ToolResultPart
from runstream.testing._playback import RecordedCall, ScriptedCall, play_call, prepare_call, record


@dataclass(frozen=True, slots=True)
class Text:
    """A text answer; ``words=True`` streams one ``text-delta`` per word."""

    text: str
    words: bool = False


@dataclass(frozen=True, slots=True)
class Reasoning:
    """A reasoning block (``reasoning-start`` / ``-delta`` / ``-end``)."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call: its input is streamed as vendors do, then the ``tool-call`` part arrives.

    ``args`` may be a mapping (sent as JSON) or a string sent as is (to test malformed input).
    """

    tool_name: str
    args: Mapping[str, object] | str = field(default_factory=dict)
    id: str | None = None


@dataclass(frozen=True, slots=True)
class Delay:
    """Wait ``ms`` milliseconds before the next item (the wait ends early on abort)."""

    ms: float


@dataclass(frozen=True, slots=True)
class StreamError:
    """The stream fails here with an ``error`` part (the run shows an ``error`` chunk)."""

    message: str
    name: str = "AI_APICallError"


@dataclass(frozen=True, slots=True)
class CallError:
    """The model request fails before anything streams (e.g. a 429 with no retries left)."""

    message: str
    name: str = "AI_APICallError"
    status_code: int | None = None


@dataclass(frozen=True, slots=True)
class Finish:
    """Override the turn's finish reason and usage."""

    reason: str | None = None
    usage: Usage | None = None


TurnItem: TypeAlias = Text | Reasoning | ToolCall | Delay | StreamError | CallError | Finish
Turn: TypeAlias = TurnItem | str | Sequence[TurnItem | str]
"""One model call's answer: an item, a string (short for ``Text``), or a list of them."""


def compile_turn(turn: Turn, index: int) -> ScriptedCall:
    """A turn as a scripted call (``{"parts": [...], "throwOnCall"?: ...}``)."""
    items: list[TurnItem] = [
        Text(item) if isinstance(item, str) else item
        for item in ([turn] if isinstance(turn, str | TurnItem) else list(turn))
    ]
    for item in items:
        if not isinstance(item, TurnItem):
            raise InvalidTypeError(
                f"a turn holds Text, Reasoning, ToolCall, Delay, errors or Finish, not {item!r}"
            )
    failure = next((item for item in items if isinstance(item, CallError)), None)
    if failure is not None:
        spec: JsonObject = {"message": failure.message, "name": failure.name}
        if failure.status_code is not None:
            spec["statusCode"] = failure.status_code
        return {"parts": [], "throwOnCall": spec}
    parts: list[dict[str, object]] = [{"type": "stream-start", "warnings": []}]
    delay = 0.0
    calls = output_tokens = 0
    finish = Finish()
    for n, item in enumerate(items):
        if isinstance(item, Delay):
            delay += item.ms
            continue
        if isinstance(item, Finish):
            finish = item
            continue
        new: list[dict[str, object]] = [dict(part) for part in _parts(item, f"{index}-{n}")]
        if delay and new:
            new[0]["delayMs"] = delay
            delay = 0
        parts.extend(new)
        calls += isinstance(item, ToolCall)
        output_tokens += sum(1 for p in new if p["type"] in ("text-delta", "reasoning-delta", "tool-call"))
        if isinstance(item, StreamError):
            return {"parts": parts}
    reason = finish.reason or ("tool-calls" if calls else "stop")
    usage = finish.usage or {
        "inputTokens": 10,
        "outputTokens": output_tokens,
        "totalTokens": 10 + output_tokens,
    }
    end: dict[str, object] = {"type": "finish", "finishReason": reason, "usage": dict(usage)}
    if delay:
        end["delayMs"] = delay
    parts.append(end)
    return {"parts": parts}


def _parts(item: TurnItem, block: str) -> list[StreamPart]:
    if isinstance(item, Text):
        pieces = item.text.split(" ") if item.words else [item.text]
        deltas = [p + (" " if i < len(pieces) - 1 else "") for i, p in enumerate(pieces)]
        text: list[StreamPart] = [{"type": "text-delta", "id": f"txt-{block}", "delta": d} for d in deltas]
        return [
            {"type": "text-start", "id": f"txt-{block}"},
            *text,
            {"type": "text-end", "id": f"txt-{block}"},
        ]
    if isinstance(item, Reasoning):
        return [
            {"type": "reasoning-start", "id": f"rsn-{block}"},
            {"type": "reasoning-delta", "id": f"rsn-{block}", "delta": item.text},
            {"type": "reasoning-end", "id": f"rsn-{block}"},
        ]
    if isinstance(item, ToolCall):
        call_id = item.id or f"call-{block}"
        args = item.args if isinstance(item.args, str) else json.dumps(item.args, separators=(",", ":"))
        return [
            {"type": "tool-input-start", "id": call_id, "toolName": item.tool_name},
            {"type": "tool-input-delta", "id": call_id, "delta": args},
            {"type": "tool-input-end", "id": call_id},
            {"type": "tool-call", "toolCallId": call_id, "toolName": item.tool_name, "input": args},
        ]
    if isinstance(item, StreamError):
        return [{"type": "error", "error": {"message": item.message, "name": item.name}}]
    return []


def compile_turns(turns: Iterable[Turn]) -> list[ScriptedCall]:
    return [compile_turn(turn, i) for i, turn in enumerate(turns)]


@dataclass(slots=True)
class ModelCall:
    """What the model was sent in one call, as :class:`FunctionModel` hands it to the function."""

    index: int
    prompt: list[PromptMessage]
    tools: list[str]

    @property
    def tool_results(self) -> list[ToolResultPart]:
        """Every ``tool-result`` part of the prompt, oldest first (``toolName``, ``output`` …)."""
        return [
            part
            for message in self.prompt
            if message["role"] == "tool"
            for part in message["content"]
            if part["type"] == "tool-result"
        ]

    @property
    def last_user_text(self) -> str:
        """The text of the last user message ("" when there is none)."""
        for message in reversed(self.prompt):
            if message["role"] == "user":
                return "".join(p.get("text", "") for p in message["content"] if p.get("type") == "text")
        return ""


Responder = Callable[[ModelCall], Turn | Awaitable[Turn]]


@dataclass
class FunctionModel:
    """A model whose every turn comes from ``respond(call)`` (sync or async).

    Like pydantic-ai's ``FunctionModel``: the answer can depend on the prompt, e.g. call a tool
    on the first call and quote its result on the next::

        def respond(call: ModelCall) -> Turn:
            if not call.tool_results:
                return ToolCall("get_weather", {"city": "Paris"})
            return Text(f"The tool said {call.tool_results[-1]['output']['value']}")
    """

    respond: Responder
    model_id: str = "function-model"
    provider: str = "scripted"
    specification_version: str = "v2"
    recorded: list[RecordedCall] = field(default_factory=list)

    @property
    def call_count(self) -> int:
        return len(self.recorded)

    async def stream(self, request: ModelRequest) -> ModelStream:
        index = record(self.recorded, request)
        turn = self.respond(
            ModelCall(index, copy.deepcopy(request.prompt), [t["name"] for t in request.tools])
        )
        if inspect.isawaitable(turn):
            turn = await turn
        call = prepare_call(compile_turn(turn, index))
        if call.throw_on_call is not None:
            raise call.throw_on_call
        return ModelStream(
            parts=play_call(call, 0, request.abort_signal),
            request={"body": json.dumps({"function": index}, separators=(",", ":"))},
            response={"headers": {}},
        )
