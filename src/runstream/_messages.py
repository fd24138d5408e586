"""Message formats, as pure functions: model-prompt messages, Mastra's stored format 2, AI SDK
UI messages, and a background task's outcome written into them.

Nothing here touches storage: :mod:`runstream.memory` loads and saves with these, the loop and
``step_results`` build payloads with them, and the server lists messages with them.

Stored assistant messages hold one run each; their parts are the run's steps (``step-start``,
``text``, ``reasoning``, ``tool-invocation`` with its result, ``file``, ``source``). A run without
new input that continues the thread's last (assistant) message appends to it
(:class:`ContinuedMessage`, :func:`merge_parts`).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypedDict, TypeVar, cast

from runstream._clock import iso_datetime
from runstream.models.base import PromptMessage, tool_result_output
from runstream.models.prompt import (
    AssistantPart,
    FilePart,
    ProviderOptions,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)
from runstream.storage import StoredMessage, TaskRecord
from runstream.tools import public_task_error

BACKGROUND_FAILED_PREFIX = "Background task failed: "


@dataclass(slots=True)
class ContinuedMessage:
    """The thread's last stored message, an assistant one, that a run without new input continues."""

    id: str
    parts: list[dict[str, Any]]
    metadata: dict[str, Any]
    prompt_count: int
    """How many of the run's history prompt messages this message makes up (the last ones)."""

    def merged_parts(
        self, responses: Sequence[PromptMessage], model: str | None = None
    ) -> list[dict[str, Any]]:
        """This message's parts with the run's responses appended (see :func:`merge_parts`)."""
        return merge_parts(copy_json(self.parts), responses_to_parts(responses, model))


_SCALARS = frozenset({str, int, float, bool, type(None)})


def copy_json(value: Any) -> Any:
    """``copy.deepcopy`` for the JSON-shaped values messages hold (dicts, lists, scalars), without
    its memo bookkeeping: several times faster on a finish payload's many small parts. Any other
    value still goes through ``copy.deepcopy``. (Scalars inside a container are taken as they
    are, without a call each.)"""
    kind = type(value)
    if kind is dict:
        return {key: item if type(item) in _SCALARS else copy_json(item) for key, item in value.items()}
    if kind is list:
        return [item if type(item) in _SCALARS else copy_json(item) for item in value]
    if kind in _SCALARS:
        return value
    return copy.deepcopy(value)


def input_parts(message: PromptMessage) -> list[dict[str, Any]]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [copy_json(p) for p in content or []]


def plain_text(message: PromptMessage) -> str:
    return "".join(p.get("text", "") for p in input_parts(message) if p.get("type") == "text")


def responses_to_parts(responses: Sequence[PromptMessage], model: str | None = None) -> list[dict[str, Any]]:
    """A run's assistant/tool prompt messages as the parts of one stored assistant message.

    Steps after the first open with a ``step-start`` part (labelled with ``model``, as Mastra
    stores them); the first step has none.
    """
    parts: list[dict[str, Any]] = []
    invocations: dict[str, dict[str, Any]] = {}
    steps = 0
    for message in responses:
        if message["role"] == "assistant":
            if steps:
                parts.append(_step_start(model))
            steps += 1
            for part in message["content"]:
                if part["type"] == "text":
                    parts.append(_with_metadata({"type": "text", "text": part["text"]}, part))
                elif part["type"] == "reasoning":
                    parts.append(_stored_reasoning(part))
                elif part["type"] == "tool-call":
                    invocation: dict[str, Any] = {
                        "type": "tool-invocation",
                        "toolInvocation": {
                            "state": "call",
                            "toolCallId": part["toolCallId"],
                            "toolName": part["toolName"],
                            "args": part.get("input", {}),
                        },
                    }
                    _with_metadata(invocation, part)
                    if part.get("providerExecuted"):
                        invocation["providerExecuted"] = True
                    invocations[part["toolCallId"]] = invocation
                    parts.append(invocation)
                elif part["type"] == "tool-result":  # a tool the provider executed: its call is here too
                    found = invocations.get(part.get("toolCallId", ""))
                    if found is not None:
                        _settle(found, part.get("output") or {})
                else:
                    parts.append(copy_json(part))
        elif message["role"] == "tool":
            for result in message["content"]:
                if result["type"] != "tool-result":
                    continue
                found = invocations.get(result.get("toolCallId", ""))
                if found is None:
                    continue
                invocation = found
                _settle(invocation, result.get("output") or {})
                # Mastra stamps a result's time here unless it carries other metadata (the
                # call's provider metadata, a task link).
                invocation["providerMetadata"] = (
                    copy_json(result.get("providerOptions"))
                    or invocation.get("providerMetadata")
                    or {"mastra": {"createdAt": int(time.time() * 1000)}}
                )
    return parts


def _settle(invocation: dict[str, Any], output: Mapping[str, Any]) -> None:
    """A stored tool invocation gets its result (or error)."""
    inv = invocation["toolInvocation"]
    if output.get("type") in ("error-text", "error-json"):
        inv["state"] = "output-error"
        inv["errorText"] = output.get("value")
    else:
        inv["state"] = "result"
        inv["result"] = output.get("value")


def _with_metadata(stored: dict[str, Any], part: Mapping[str, Any]) -> dict[str, Any]:
    """A stored part keeps the prompt part's ``providerOptions`` as ``providerMetadata``."""
    options = part.get("providerOptions")
    if options:
        stored["providerMetadata"] = copy_json(options)
    return stored


def _stored_reasoning(part: Mapping[str, Any]) -> dict[str, Any]:
    """A reasoning block in Mastra's format 2: its text, its details (redacted thinking as a
    ``redacted`` detail) and its provider metadata (signatures, encrypted content, item ids)."""
    text = part.get("text", "")
    options = part.get("providerOptions") or {}
    redacted = any(isinstance(v, Mapping) and v.get("redactedData") for v in options.values())
    detail = {"type": "redacted", "data": ""} if redacted else {"type": "text", "text": text}
    return _with_metadata({"type": "reasoning", "reasoning": text, "details": [detail]}, part)


def _step_start(model: str | None) -> dict[str, Any]:
    if model is None:
        return {"type": "step-start"}
    return {"type": "step-start", "createdAt": int(time.time() * 1000), "model": model}


def merge_parts(parts: list[dict[str, Any]], new_parts: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Append a response's parts to a stored assistant message's parts (in place), as Mastra's
    message merger: a result for a call already there updates that call; text right after a
    tool invocation opens a new step."""
    calls = {p["toolInvocation"]["toolCallId"]: p for p in parts if p.get("type") == "tool-invocation"}
    for part in new_parts:
        if part.get("type") == "tool-invocation":
            known = calls.get(part["toolInvocation"]["toolCallId"])
            if known is not None:
                known.update(copy_json(part))
                continue
        elif part.get("type") == "text" and parts and parts[-1].get("type") == "tool-invocation":
            parts.append({"type": "step-start"})
        parts.append(copy_json(part))
    return parts


def merge_metadata(stored: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The stored message's metadata with a later run's added (background tasks of both)."""
    merged = {**copy_json(dict(new)), **copy_json(dict(stored))}
    tasks = {**copy_json(new.get("backgroundTasks") or {}), **(merged.get("backgroundTasks") or {})}
    if tasks:
        merged["backgroundTasks"] = tasks
    return merged


def db_to_prompt(message: StoredMessage) -> list[PromptMessage]:
    """A stored message as prompt messages (an assistant message becomes one pair per step)."""
    parts = message.content.get("parts", [])
    if message.role != "assistant":  # stored JSON, taken as the message its role says it is
        return [cast(PromptMessage, {"role": message.role, "content": copy_json(parts)})]
    return [prompt for step in parts_to_steps(parts) for prompt in step]


def parts_to_steps(parts: Sequence[Mapping[str, Any]]) -> list[list[PromptMessage]]:
    """An assistant message's parts as prompt messages, grouped by step (split at ``step-start``).

    A tool invocation becomes a ``tool-call`` and, once it has one, a ``tool-result`` in the
    step's tool message; both carry the invocation's provider metadata (the task link).
    """
    steps: list[list[PromptMessage]] = []
    content: list[AssistantPart] = []
    results: list[ToolResultPart] = []

    def flush() -> None:
        step: list[PromptMessage] = []
        if content:
            step.append({"role": "assistant", "content": list(content)})
        if results:
            step.append({"role": "tool", "content": [*results]})
        steps.append(step)
        content.clear()
        results.clear()

    for part in parts:
        kind = part.get("type")
        if kind == "step-start":
            flush()
        elif kind == "text":
            text: TextPart = {"type": "text", "text": part["text"]}
            content.append(_with_options(text, part))
        elif kind == "reasoning":
            reasoning: ReasoningPart = {"type": "reasoning", "text": reasoning_text(part)}
            content.append(_with_options(reasoning, part))
        elif kind == "file":
            file = {"type": "file", "data": part.get("data"), "mediaType": part.get("mediaType")}
            content.append(cast(FilePart, file))  # as stored
        elif kind == "tool-invocation":
            inv = part["toolInvocation"]
            call: ToolCallPart = {
                "type": "tool-call",
                "toolCallId": inv["toolCallId"],
                "toolName": inv["toolName"],
                "input": inv["args"],
            }
            provider_executed = bool(part.get("providerExecuted"))
            if provider_executed:
                call["providerExecuted"] = True
            _with_options(call, part)
            content.append(call)
            if inv["state"] in ("result", "output-error"):
                output = (
                    tool_result_output(inv.get("errorText"), is_error=True)
                    if inv["state"] == "output-error"
                    else tool_result_output(inv.get("result"))
                )
                result: ToolResultPart = {
                    "type": "tool-result",
                    "toolCallId": inv["toolCallId"],
                    "toolName": inv["toolName"],
                    "output": output,
                }
                if provider_executed:  # the provider's result is part of the assistant's message
                    content.append(_with_options(result, part))
                    continue
                result["input"] = inv["args"]
                results.append(_with_options(result, part))
    flush()
    return [step for step in steps if step]


def reasoning_text(part: Mapping[str, Any]) -> str:
    """A stored reasoning part's text."""
    return "".join(d.get("text", "") for d in part.get("details", [])) or part.get("reasoning", "")


class _WithOptions(TypedDict, total=False):
    providerOptions: ProviderOptions


_Part = TypeVar("_Part", bound=_WithOptions)


def _with_options(prompt_part: _Part, stored: Mapping[str, Any]) -> _Part:
    """A prompt part gets the stored part's ``providerMetadata`` as ``providerOptions``."""
    metadata = stored.get("providerMetadata")
    if metadata:
        prompt_part["providerOptions"] = copy_json(metadata)
    return prompt_part


def parts_to_ui(
    parts: Sequence[Mapping[str, Any]], metadata: Mapping[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Stored parts as AI SDK UI message parts (what a ``useChat`` client holds); a call the
    metadata lists as suspended is followed by a ``data-tool-call-suspended`` part."""
    suspended = (metadata or {}).get("suspendedTools") or {}
    ui: list[dict[str, Any]] = []
    for part in parts:
        kind = part.get("type")
        if kind == "tool-invocation":
            ui.append(ui_tool_part(part))
            record = suspended.get(part["toolInvocation"]["toolCallId"])
            if record is not None:
                ui.append({"type": "data-tool-call-suspended", "data": copy_json(record)})
        elif kind == "reasoning":
            reasoning = {"type": "reasoning", "text": reasoning_text(part), "state": "done"}
            ui.append(_with_ui_metadata(reasoning, part))
        elif kind == "text":
            ui.append(_with_ui_metadata({"type": "text", "text": part["text"]}, part))
        elif kind == "file":
            ui.append({"type": "file", "mediaType": part.get("mediaType"), "url": part.get("data")})
        else:
            ui.append(copy_json(part if type(part) is dict else dict(part)))
    return ui


def _with_ui_metadata(ui_part: dict[str, Any], stored: Mapping[str, Any]) -> dict[str, Any]:
    if stored.get("providerMetadata"):
        ui_part["providerMetadata"] = copy_json(stored["providerMetadata"])
    return ui_part


def ui_tool_part(part: Mapping[str, Any]) -> dict[str, Any]:
    """A stored tool invocation as an AI SDK v5 UI tool part."""
    inv = part["toolInvocation"]
    tool: dict[str, Any] = {
        "type": f"tool-{inv['toolName']}",
        "toolCallId": inv["toolCallId"],
        "input": inv.get("args", {}),
    }
    if inv["state"] == "result":
        tool.update(state="output-available", output=inv.get("result"))
    elif inv["state"] == "output-error":
        tool.update(state="output-error", errorText=inv.get("errorText"))
    else:
        tool["state"] = "input-available"
    if part.get("providerExecuted"):  # (Mastra's UI part keeps the call's creation stamp)
        metadata = copy_json(part.get("providerMetadata") or {})
        metadata.setdefault("mastra", {}).setdefault("createdAt", int(time.time() * 1000))
        tool.update(callProviderMetadata=metadata, providerExecuted=True)
    elif part.get("providerMetadata"):
        tool["callProviderMetadata"] = copy_json(part["providerMetadata"])
    return tool


def _task_link(metadata: Any) -> Mapping[str, Any] | None:
    if not isinstance(metadata, Mapping):
        return None
    mastra = metadata.get("mastra")
    link = mastra.get("backgroundTask") if isinstance(mastra, Mapping) else None
    return link if isinstance(link, Mapping) else None


def is_task_part(part: Mapping[str, Any], task: TaskRecord) -> bool:
    if part.get("type") != "tool-invocation":
        return False
    link = _task_link(part.get("providerMetadata"))
    return (
        part["toolInvocation"].get("toolCallId") == task.tool_call_id
        and link is not None
        and link.get("taskId") == task.id
    )


def task_outcome(task: TaskRecord) -> tuple[str, Any]:
    """``("result", value)`` or ``("output-error", text)`` for a finished task."""
    if task.status == "completed":
        return "result", task.result
    if task.status == "cancelled":
        return "output-error", "Background task cancelled by the user: no result."
    message = public_task_error(task.error, task.tool_name).get("message") or "Unknown error"
    return "output-error", f"{BACKGROUND_FAILED_PREFIX}{message}"


def link_status(task: TaskRecord) -> str:
    """The status a task link records: a timeout is a failure (as the task's lifecycle event)."""
    return "failed" if task.status == "timed_out" else task.status


def suspension_record(task: TaskRecord, resume_schema: str | None) -> dict[str, Any]:
    """What a stored message keeps about a suspended call (``metadata.suspendedTools``)."""
    record = {
        "toolCallId": task.tool_call_id,
        "toolName": task.tool_name,
        "args": copy_json(task.args),
        "type": "suspension",
        "runId": task.run_id,
        "suspendPayload": copy_json(task.suspend_payload),
    }
    if resume_schema is not None:
        record["resumeSchema"] = resume_schema
    return record


def record_suspension(message: StoredMessage, task: TaskRecord, record: Mapping[str, Any]) -> StoredMessage:
    for part in message.content.get("parts", []):
        if is_task_part(part, task):
            part["providerMetadata"]["mastra"].setdefault("createdAt", int(time.time() * 1000))
    metadata = message.content.setdefault("metadata", {})
    metadata.setdefault("suspendedTools", {})[task.tool_call_id] = copy_json(dict(record))
    timing = metadata.get("backgroundTasks", {}).get(task.tool_call_id)
    if timing is not None:
        timing["suspendedAt"] = iso_datetime(task.suspended_at or datetime.now(UTC))
    return message


def rewrite_task_result(message: StoredMessage, task: TaskRecord) -> StoredMessage:
    state, value = task_outcome(task)
    for part in message.content.get("parts", []):
        if not is_task_part(part, task):
            continue
        inv = part["toolInvocation"]
        inv["state"] = state
        inv.pop("result", None)
        inv.pop("errorText", None)
        inv["result" if state == "result" else "errorText"] = value
        mastra = part["providerMetadata"]["mastra"]
        mastra["backgroundTask"]["status"] = link_status(task)
        mastra["modelOutput"] = None  # as Mastra's rewrite: no model-output override for the result
        tasks = message.content.get("metadata", {}).get("backgroundTasks", {})
        if task.tool_call_id in tasks:
            tasks[task.tool_call_id]["completedAt"] = iso_datetime(task.completed_at or datetime.now(UTC))
    return message


def rewrite_prompt_result(messages: list[PromptMessage], task: TaskRecord) -> bool:
    """The same rewrite on a live run's prompt messages (before they are saved). Copy on write:
    the message is replaced in the list by a new one, since payloads already streamed share the
    conversation's messages and parts and must keep what they said."""
    state, value = task_outcome(task)
    for index, message in enumerate(messages):
        if message["role"] != "tool":
            continue
        for position, part in enumerate(message["content"]):
            if part["type"] != "tool-result":
                continue
            link = _task_link(part.get("providerOptions"))
            if (
                part.get("toolCallId") == task.tool_call_id
                and link is not None
                and link.get("taskId") == task.id
            ):
                options = part["providerOptions"]
                mastra = {
                    **options["mastra"],
                    "backgroundTask": {**link, "status": link_status(task)},
                    "modelOutput": None,
                }
                content = list(message["content"])
                content[position] = {
                    **part,
                    "output": tool_result_output(value, is_error=state != "result"),
                    "providerOptions": {**options, "mastra": mastra},
                }
                messages[index] = {**message, "content": content}
                return True
    return False
