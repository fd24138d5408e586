"""Message shapes that arrive over HTTP, as model-prompt messages; stored messages as UI messages.

Accepted input, as clients really send it: a bare string; AI SDK model messages
(``{role, content: string | parts}``); AI SDK v5 ``UIMessage`` s (``{id, role, parts}``); and the
AI SDK v4-style messages client-js sends when it continues after client-side tools
(``toolInvocations`` / ``tool-invocation`` parts, and ``tool-result`` parts carrying ``result``).
An assistant UI message becomes one assistant (and tool) message per step.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypedDict, cast

from runstream._json import JsonObject, JsonValue
from runstream.models.base import PromptMessage
from runstream.server.errors import ApiError


class _Draft(TypedDict):
    """A prompt message being read from a request body: its parts unchecked until
    ``_check_prompt`` (text content only for a system message)."""

    role: str
    content: str | list[JsonObject]


ROLES = ("user", "assistant", "system", "tool")


def to_prompt(messages: JsonValue, field: str = "messages") -> list[PromptMessage]:
    """Any accepted ``messages`` value as prompt messages (400 on a malformed one)."""
    if isinstance(messages, str):
        messages = [messages]
    if not isinstance(messages, list):
        raise ApiError(400, f"Invalid request body: '{field}' must be a string or an array of messages")
    out: list[_Draft] = []
    for index, message in enumerate(messages):
        if isinstance(message, str):
            out.append(_user_text(message))
            continue
        role = message.get("role") if isinstance(message, dict) else None
        if not isinstance(message, dict) or not isinstance(role, str) or role not in ROLES:
            raise ApiError(
                400,
                f"Invalid request body: {field}[{index}] must be a string or a message with a role "
                f"({', '.join(ROLES)})",
            )
        parts = message.get("parts")
        if isinstance(parts, list):
            out.extend(_from_ui(message, role, parts))
        else:
            out.extend(_from_model(message, role))
    for index, prompt in enumerate(out):
        _check_prompt(prompt, f"{field}[{index}]")
    return cast(list[PromptMessage], _dedupe_results(out))  # checked: the shapes the run can use


_STRING_FIELDS = {
    "text": ("text",),
    "reasoning": ("text",),
    "tool-call": ("toolCallId", "toolName"),
    "tool-result": ("toolCallId", "toolName"),
    "file": ("mediaType",),
    "image": (),
}


def _check_prompt(prompt: _Draft, where: str) -> None:
    """Refuse content the run could not use, before the run starts (a malformed part used to
    fail in the memory save after the run had happened, so the turn was lost)."""
    content = prompt["content"]
    if isinstance(content, str):  # a system message's (its text is all it holds)
        return
    for part in content:
        kind = part.get("type")
        required = _STRING_FIELDS.get(kind) if isinstance(kind, str) else None
        if required is None:
            raise ApiError(
                400,
                f"Invalid request body: {where}: unsupported content part type {kind!r} "
                f"(expected one of {', '.join(_STRING_FIELDS)})",
            )
        for name in required:
            if not isinstance(part.get(name), str):
                raise ApiError(400, f"Invalid request body: {where}: a {kind} part needs a string '{name}'")


def _dedupe_results(messages: list[_Draft]) -> list[_Draft]:
    """Keep the first result per tool call (v4 history repeats results in a tool message)."""
    seen: set[str] = set()
    out: list[_Draft] = []
    for message in messages:
        if message["role"] == "tool" and not isinstance(message["content"], str):
            content = [p for p in message["content"] if p.get("toolCallId") not in seen]
            seen.update(str(p.get("toolCallId")) for p in content)
            if not content:
                continue
            message = {**message, "content": content}
        out.append(message)
    return out


def _user_text(text: str) -> _Draft:
    return {"role": "user", "content": [{"type": "text", "text": text}]}


def _text_of(content: JsonValue | Sequence[JsonValue]) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        return "".join(
            text
            for p in content
            if isinstance(p, dict) and p.get("type") == "text" and isinstance(text := p.get("text", ""), str)
        )
    return ""


def _tool_result(
    call_id: str, tool_name: str, *, value: JsonValue, error: bool, args: JsonValue = None
) -> JsonObject:
    part: JsonObject = {
        "type": "tool-result",
        "toolCallId": call_id,
        "toolName": tool_name,
        "output": {"type": "error-text" if error else "json", "value": value},
    }
    if args is not None:
        part["input"] = args
    return part


def _model_part(part: JsonValue) -> JsonObject | None:
    if not isinstance(part, dict):
        return None
    kind = part.get("type")
    if kind == "tool-call":
        return {
            "type": "tool-call",
            "toolCallId": str(part.get("toolCallId", "")),
            "toolName": str(part.get("toolName", "")),
            "input": part.get("input", part.get("args", {})),
        }
    if kind == "tool-result":
        output = part.get("output")
        if isinstance(output, dict) and "type" in output:
            return {**part, "output": dict(output)}
        return _tool_result(
            str(part.get("toolCallId", "")),
            str(part.get("toolName", "")),
            value=part.get("result", output),
            error=bool(part.get("isError")),
            args=part.get("input", part.get("args")),
        )
    return dict(part)


def _from_model(message: JsonObject, role: str) -> list[_Draft]:
    content = message.get("content", "")
    if role == "system":
        return [{"role": "system", "content": _text_of(content)}]
    parts: JsonValue = [{"type": "text", "text": content}] if isinstance(content, str) else content
    if not isinstance(parts, list) or not all(isinstance(p, dict) for p in parts):
        raise ApiError(
            400, "Invalid request body: message content must be a string or an array of part objects"
        )
    converted = [p for p in (_model_part(p) for p in parts) if p is not None]
    invocations = message.get("toolInvocations")
    if role == "assistant" and isinstance(invocations, list):
        step = _Step()
        step.content.extend(p for p in converted if not (p.get("type") == "text" and not p.get("text")))
        for invocation in invocations:
            step.invocation(invocation)
        return step.messages()
    return [{"role": role, "content": converted}]


class _Step:
    """The assistant content and tool results of one step of an assistant UI message."""

    def __init__(self) -> None:
        self.content: list[JsonObject] = []
        self.results: list[JsonObject] = []

    def invocation(self, inv: JsonValue) -> None:
        """An AI SDK v4 ``toolInvocation``."""
        if not isinstance(inv, dict):
            return
        call_id, name, args = (
            str(inv.get("toolCallId", "")),
            str(inv.get("toolName", "")),
            inv.get("args", {}),
        )
        self.content.append({"type": "tool-call", "toolCallId": call_id, "toolName": name, "input": args})
        if inv.get("state") == "result":
            self.results.append(_tool_result(call_id, name, value=inv.get("result"), error=False, args=args))

    def tool_part(self, part: JsonObject, name: str) -> None:
        """An AI SDK v5 ``tool-<name>`` / ``dynamic-tool`` part."""
        call_id, args = str(part.get("toolCallId", "")), part.get("input", {})
        self.content.append({"type": "tool-call", "toolCallId": call_id, "toolName": name, "input": args})
        state = part.get("state")
        if state == "output-available":
            self.results.append(_tool_result(call_id, name, value=part.get("output"), error=False, args=args))
        elif state in ("output-error", "output-denied"):
            text = part.get("errorText") or "Tool call was not approved by the user"
            self.results.append(_tool_result(call_id, name, value=text, error=True, args=args))

    def messages(self) -> list[_Draft]:
        out: list[_Draft] = []
        if self.content:
            out.append({"role": "assistant", "content": self.content})
        if self.results:
            out.append({"role": "tool", "content": self.results})
        return out


def _from_ui(message: JsonObject, role: str, ui_parts: list[JsonValue]) -> list[_Draft]:
    parts = [p for p in ui_parts if isinstance(p, dict)]
    if role == "system":
        return [{"role": "system", "content": _text_of(parts)}]
    if role != "assistant":
        content: list[JsonObject] = []
        for part in parts:
            if part.get("type") == "text":
                content.append({"type": "text", "text": str(part.get("text", ""))})
            elif part.get("type") == "file":
                content.append({"type": "file", "data": part.get("url"), "mediaType": part.get("mediaType")})
            elif part.get("type") in ("tool-result", "tool-call"):
                converted = _model_part(part)
                if converted is not None:
                    content.append(converted)
        return [{"role": role, "content": content}]
    out: list[_Draft] = []
    step = _Step()
    for part in parts:
        kind = str(part.get("type", ""))
        if kind == "step-start":
            out.extend(step.messages())
            step = _Step()
        elif kind == "text" and part.get("text"):
            step.content.append({"type": "text", "text": str(part["text"])})
        elif kind == "reasoning" and part.get("text"):
            step.content.append({"type": "reasoning", "text": str(part["text"])})
        elif kind == "tool-invocation":
            step.invocation(part.get("toolInvocation"))
        elif kind == "dynamic-tool":
            step.tool_part(part, str(part.get("toolName", "")))
        elif kind.startswith("tool-"):
            step.tool_part(part, kind[len("tool-") :])
    if not ui_parts and isinstance(text := message.get("content"), str):
        step.content.append({"type": "text", "text": text})
    out.extend(step.messages())
    return out
