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
from typing import Any, Literal, NotRequired, TypeAlias, TypedDict, TypeVar, cast

from typing_extensions import TypeIs

from runstream._clock import iso_datetime
from runstream._json import JsonObject
from runstream.models.base import PromptMessage, tool_result_output
from runstream.models.prompt import (
    AssistantPart,
    FilePart,
    PromptPart,
    ProviderOptions,
    ReasoningPart,
    TextPart,
    ToolApprovalResponsePart,
    ToolCallPart,
    ToolResultOutput,
    ToolResultPart,
)
from runstream.storage import StoredMessage, TaskRecord
from runstream.tools import public_task_error

BACKGROUND_FAILED_PREFIX = "Background task failed: "


# -- Mastra's stored format 2: the parts of a stored message ------------------------------------


class StepStartPart(TypedDict):
    """Opens a step after the first (``createdAt`` and ``model`` where runstream knows the model)."""

    type: Literal["step-start"]
    createdAt: NotRequired[int]
    model: NotRequired[str]


class StoredTextPart(TypedDict):
    type: Literal["text"]
    text: str
    providerMetadata: NotRequired[ProviderOptions]


class ReasoningDetail(TypedDict):
    """A reasoning block's text, or ``redacted`` (Anthropic's redacted thinking: no text)."""

    type: Literal["text", "redacted"]
    text: NotRequired[str]
    data: NotRequired[str]


class StoredReasoningPart(TypedDict):
    type: Literal["reasoning"]
    reasoning: str
    details: list[ReasoningDetail]
    providerMetadata: NotRequired[ProviderOptions]


class ToolInvocation(TypedDict):
    """A tool call and, once settled, its result or error (``args`` and ``result`` are the tool's
    own values)."""

    state: Literal["call", "partial-call", "result", "output-error"]
    toolCallId: str
    toolName: str
    args: Any
    result: NotRequired[Any]
    errorText: NotRequired[Any]


class ToolInvocationPart(TypedDict):
    type: Literal["tool-invocation"]
    toolInvocation: ToolInvocation
    providerMetadata: NotRequired[ProviderOptions]
    """The call's provider metadata; ``mastra.backgroundTask`` links a background task."""
    providerExecuted: NotRequired[bool]


StoredPart: TypeAlias = StepStartPart | StoredTextPart | StoredReasoningPart | ToolInvocationPart | FilePart
"""One part of a stored message (a user's file part is stored as its prompt part)."""

InputPart: TypeAlias = PromptPart | ToolApprovalResponsePart
"""A new input message's part as stored: its prompt part as given."""


class SuspensionRecord(TypedDict):
    """What a stored message keeps about a suspended call (``metadata.suspendedTools[id]``)."""

    toolCallId: str | None
    toolName: str
    args: Any
    type: Literal["suspension"]
    runId: str | None
    suspendPayload: Any
    resumeSchema: NotRequired[str]


# -- AI SDK v5 UI message parts (what a ``useChat`` client holds) --------------------------------


class UITextPart(TypedDict):
    type: Literal["text"]
    text: str
    providerMetadata: NotRequired[ProviderOptions]


class UIReasoningPart(TypedDict):
    type: Literal["reasoning"]
    text: str
    state: Literal["done"]
    providerMetadata: NotRequired[ProviderOptions]


class UIToolPart(TypedDict):
    """``type`` is ``tool-<name>``."""

    type: str
    toolCallId: str
    input: Any
    state: NotRequired[Literal["input-available", "output-available", "output-error"]]
    output: NotRequired[Any]
    errorText: NotRequired[Any]
    callProviderMetadata: NotRequired[ProviderOptions]
    providerExecuted: NotRequired[bool]


class UIFilePart(TypedDict):
    type: Literal["file"]
    mediaType: str | None
    url: str | bytes | None


class UISuspendedPart(TypedDict):
    type: Literal["data-tool-call-suspended"]
    data: Any


UIPart: TypeAlias = UITextPart | UIReasoningPart | UIToolPart | UIFilePart | UISuspendedPart | StepStartPart
"""One part of a UI message (a stored ``step-start`` is one as it is)."""


@dataclass(slots=True)
class ContinuedMessage:
    """The thread's last stored message, an assistant one, that a run without new input continues."""

    id: str
    parts: list[StoredPart]
    metadata: JsonObject
    prompt_count: int
    """How many of the run's history prompt messages this message makes up (the last ones)."""

    def merged_parts(self, responses: Sequence[PromptMessage], model: str | None = None) -> list[StoredPart]:
        """This message's parts with the run's responses appended (see :func:`merge_parts`)."""
        return merge_parts(copy_json(self.parts), responses_to_parts(responses, model))


_SCALARS = frozenset({str, int, float, bool, type(None)})
_T = TypeVar("_T")


def copy_json(value: _T) -> _T:
    """``copy.deepcopy`` for the JSON-shaped values messages hold (dicts, lists, scalars), without
    its memo bookkeeping: several times faster on a finish payload's many small parts. Any other
    value still goes through ``copy.deepcopy``. (Scalars inside a container are taken as they
    are, without a call each.)"""
    kind = type(value)
    copied: object
    if kind is dict:
        items = cast(dict[str, object], value).items()
        copied = {key: item if type(item) in _SCALARS else copy_json(item) for key, item in items}
    elif kind is list:
        copied = [item if type(item) in _SCALARS else copy_json(item) for item in cast(list[object], value)]
    elif kind in _SCALARS:
        return value
    else:
        return copy.deepcopy(value)
    return cast(_T, copied)  # a copy of the same shape


def input_parts(message: PromptMessage) -> list[InputPart]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [copy_json(p) for p in content or []]


def plain_text(message: PromptMessage) -> str:
    texts = (p.get("text") for p in input_parts(message) if p.get("type") == "text")
    return "".join(text for text in texts if isinstance(text, str))


def responses_to_parts(responses: Sequence[PromptMessage], model: str | None = None) -> list[StoredPart]:
    """A run's assistant/tool prompt messages as the parts of one stored assistant message.

    Steps after the first open with a ``step-start`` part (labelled with ``model``, as Mastra
    stores them); the first step has none.
    """
    parts: list[StoredPart] = []
    invocations: dict[str, ToolInvocationPart] = {}
    steps = 0
    for message in responses:
        if message["role"] == "assistant":
            if steps:
                parts.append(_step_start(model))
            steps += 1
            for part in message["content"]:
                if part["type"] == "text":
                    parts.append(_with_metadata(StoredTextPart(type="text", text=part["text"]), part))
                elif part["type"] == "reasoning":
                    parts.append(_stored_reasoning(part))
                elif part["type"] == "tool-call":
                    invocation: ToolInvocationPart = {
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
                options = result.get("providerOptions")
                invocation["providerMetadata"] = (
                    (copy_json(options) if options is not None else None)
                    or invocation.get("providerMetadata")
                    or {"mastra": {"createdAt": int(time.time() * 1000)}}
                )
    return parts


def _settle(invocation: ToolInvocationPart, output: ToolResultOutput | _NoOutput) -> None:
    """A stored tool invocation gets its result (or error)."""
    inv = invocation["toolInvocation"]
    if output.get("type") in ("error-text", "error-json"):
        inv["state"] = "output-error"
        inv["errorText"] = output.get("value")
    else:
        inv["state"] = "result"
        inv["result"] = output.get("value")


class _NoOutput(TypedDict):
    """A tool result without an ``output`` (settled as a ``None`` result)."""


class _WithProviderOptions(TypedDict):
    providerOptions: NotRequired[ProviderOptions]


class _WithProviderMetadata(TypedDict):
    providerMetadata: NotRequired[ProviderOptions]


_Stored = TypeVar("_Stored", bound=_WithProviderMetadata)


def _with_metadata(stored: _Stored, part: _WithProviderOptions) -> _Stored:
    """A stored part keeps the prompt part's ``providerOptions`` as ``providerMetadata``."""
    options = part.get("providerOptions")
    if options:
        stored["providerMetadata"] = copy_json(options)
    return stored


def _stored_reasoning(part: ReasoningPart) -> StoredReasoningPart:
    """A reasoning block in Mastra's format 2: its text, its details (redacted thinking as a
    ``redacted`` detail) and its provider metadata (signatures, encrypted content, item ids)."""
    text = part.get("text", "")
    options = part.get("providerOptions") or {}
    redacted = any(isinstance(v, Mapping) and v.get("redactedData") for v in options.values())
    detail: ReasoningDetail = {"type": "redacted", "data": ""} if redacted else {"type": "text", "text": text}
    stored: StoredReasoningPart = {"type": "reasoning", "reasoning": text, "details": [detail]}
    return _with_metadata(stored, part)


def _step_start(model: str | None) -> StepStartPart:
    if model is None:
        return {"type": "step-start"}
    return {"type": "step-start", "createdAt": int(time.time() * 1000), "model": model}


def merge_parts(parts: list[StoredPart], new_parts: Sequence[StoredPart]) -> list[StoredPart]:
    """Append a response's parts to a stored assistant message's parts (in place), as Mastra's
    message merger: a result for a call already there updates that call; text right after a
    tool invocation opens a new step."""
    calls = {p["toolInvocation"]["toolCallId"]: p for p in parts if p["type"] == "tool-invocation"}
    for part in new_parts:
        if part["type"] == "tool-invocation":
            known = calls.get(part["toolInvocation"]["toolCallId"])
            if known is not None:
                known.update(copy_json(part))
                continue
        elif part["type"] == "text" and parts and parts[-1]["type"] == "tool-invocation":
            parts.append({"type": "step-start"})
        parts.append(copy_json(part))
    return parts


def merge_metadata(stored: JsonObject, new: JsonObject) -> JsonObject:
    """The stored message's metadata with a later run's added (background tasks of both)."""
    merged = {**copy_json(new), **copy_json(stored)}
    new_tasks, stored_tasks = new.get("backgroundTasks"), merged.get("backgroundTasks")
    tasks = {
        **(copy_json(new_tasks) if isinstance(new_tasks, dict) else {}),
        **(stored_tasks if isinstance(stored_tasks, dict) else {}),
    }
    if tasks:
        merged["backgroundTasks"] = tasks
    return merged


def db_to_prompt(message: StoredMessage) -> list[PromptMessage]:
    """A stored message as prompt messages (an assistant message becomes one pair per step)."""
    parts: list[StoredPart] = message.content.get("parts", [])
    if message.role != "assistant":  # stored JSON, taken as the message its role says it is
        return [cast(PromptMessage, {"role": message.role, "content": copy_json(parts)})]
    return [prompt for step in parts_to_steps(parts) for prompt in step]


def parts_to_steps(parts: Sequence[StoredPart]) -> list[list[PromptMessage]]:
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
        if part["type"] == "step-start":
            flush()
        elif part["type"] == "text":
            text: TextPart = {"type": "text", "text": part["text"]}
            content.append(_with_options(text, part))
        elif part["type"] == "reasoning":
            reasoning: ReasoningPart = {"type": "reasoning", "text": reasoning_text(part)}
            content.append(_with_options(reasoning, part))
        elif part["type"] == "file":  # as stored
            file = {"type": "file", "data": part.get("data"), "mediaType": part.get("mediaType")}
            content.append(cast(FilePart, file))
        elif part["type"] == "tool-invocation":
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


def reasoning_text(part: StoredReasoningPart) -> str:
    """A stored reasoning part's text."""
    return "".join(d.get("text", "") for d in part.get("details", [])) or part.get("reasoning", "")


class _WithOptions(TypedDict, total=False):
    providerOptions: ProviderOptions


_Part = TypeVar("_Part", bound=_WithOptions)


def _with_options(prompt_part: _Part, stored: _WithProviderMetadata) -> _Part:
    """A prompt part gets the stored part's ``providerMetadata`` as ``providerOptions``."""
    metadata = stored.get("providerMetadata")
    if metadata:
        prompt_part["providerOptions"] = copy_json(metadata)
    return prompt_part


def parts_to_ui(parts: Sequence[StoredPart], metadata: JsonObject | None = None) -> list[UIPart]:
    """Stored parts as AI SDK UI message parts (what a ``useChat`` client holds); a call the
    metadata lists as suspended is followed by a ``data-tool-call-suspended`` part. The parts
    are the caller's own, made for this message (:func:`responses_to_parts`, a copy of a stored
    message's): a tool part takes its call's metadata as it is, and a part of another kind (a
    step start, a source, data) goes in itself, without copies."""
    suspended = (metadata or {}).get("suspendedTools")
    ui: list[UIPart] = []
    for part in parts:
        if part["type"] == "tool-invocation":
            ui.append(ui_tool_part(part))
            record = (
                suspended.get(part["toolInvocation"]["toolCallId"]) if isinstance(suspended, dict) else None
            )
            if record is not None:
                ui.append({"type": "data-tool-call-suspended", "data": copy_json(record)})
        elif part["type"] == "reasoning":
            reasoning: UIReasoningPart = {"type": "reasoning", "text": reasoning_text(part), "state": "done"}
            ui.append(_with_metadata(reasoning, _stored_options(part)))
        elif part["type"] == "text":
            ui.append(_with_metadata(UITextPart(type="text", text=part["text"]), _stored_options(part)))
        elif part["type"] == "file":
            ui.append({"type": "file", "mediaType": part.get("mediaType"), "url": part.get("data")})
        else:
            ui.append(part)
    return ui


def _stored_options(stored: _WithProviderMetadata) -> _WithProviderOptions:
    """A stored part's ``providerMetadata`` as ``_with_metadata`` reads a prompt part's."""
    metadata = stored.get("providerMetadata")
    return {"providerOptions": metadata} if metadata else {}


def ui_tool_part(part: ToolInvocationPart) -> UIToolPart:
    """A stored tool invocation as an AI SDK v5 UI tool part (holding its call's metadata, not
    a copy: see :func:`parts_to_ui`)."""
    inv = part["toolInvocation"]
    tool: UIToolPart = {
        "type": f"tool-{inv['toolName']}",
        "toolCallId": inv["toolCallId"],
        "input": inv.get("args", {}),
    }
    if inv["state"] == "result":
        tool["state"], tool["output"] = "output-available", inv.get("result")
    elif inv["state"] == "output-error":
        tool["state"], tool["errorText"] = "output-error", inv.get("errorText")
    else:
        tool["state"] = "input-available"
    if part.get("providerExecuted"):  # (Mastra's UI part keeps the call's creation stamp)
        metadata = copy_json(part.get("providerMetadata") or {})
        metadata.setdefault("mastra", {}).setdefault("createdAt", int(time.time() * 1000))
        tool["callProviderMetadata"], tool["providerExecuted"] = metadata, True
    elif part.get("providerMetadata"):
        tool["callProviderMetadata"] = part["providerMetadata"]
    return tool


def _task_link(metadata: ProviderOptions | None) -> Mapping[str, object] | None:
    if not isinstance(metadata, Mapping):
        return None
    mastra = metadata.get("mastra")
    link = mastra.get("backgroundTask") if isinstance(mastra, Mapping) else None
    return link if isinstance(link, Mapping) else None


def is_task_part(part: StoredPart, task: TaskRecord) -> TypeIs[ToolInvocationPart]:
    if part["type"] != "tool-invocation":
        return False
    link = _task_link(part.get("providerMetadata"))
    return (
        part["toolInvocation"].get("toolCallId") == task.tool_call_id
        and link is not None
        and link.get("taskId") == task.id
    )


def task_outcome(task: TaskRecord) -> tuple[Literal["result", "output-error"], Any]:
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


def suspension_record(task: TaskRecord, resume_schema: str | None) -> SuspensionRecord:
    """What a stored message keeps about a suspended call (``metadata.suspendedTools``)."""
    record: SuspensionRecord = {
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


def record_suspension(message: StoredMessage, task: TaskRecord, record: SuspensionRecord) -> StoredMessage:
    for part in message.content.get("parts", []):
        if is_task_part(part, task):
            part["providerMetadata"]["mastra"].setdefault("createdAt", int(time.time() * 1000))
    metadata = message.content.setdefault("metadata", {})
    metadata.setdefault("suspendedTools", {})[task.tool_call_id] = copy_json(record)
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
