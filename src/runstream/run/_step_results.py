"""The payloads of ``step-finish`` and ``finish``: step records, usage, messages, the UI message.

Mastra's finish payloads carry a lot besides the key fields (every step's content and response
messages, the conversation, the response as an AI SDK UI message); building them lives here so
the loop reads as the loop.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from operator import itemgetter
from typing import TYPE_CHECKING, Any, Literal, NotRequired, TypedDict

from runstream._clock import iso_now, now_utc
from runstream._ids import new_id
from runstream._json import JsonObject, JsonValue
from runstream._messages import (
    StoredPart,
    UIPart,
    merge_metadata,
    parts_to_steps,
    parts_to_ui,
    responses_to_parts,
)
from runstream.chunks import FinishChunk, StepFinishChunk
from runstream.models.base import LanguageModel, ModelCallError, PromptMessage
from runstream.models.parts import ProviderMetadata
from runstream.models.prompt import AssistantPart, ReasoningPart, TextPart, ToolCallPart, ToolResultPart

if TYPE_CHECKING:
    from runstream.run._run_state import (
        CutStep,
        LoopConfig,
        PublicStep,
        RunState,
        StepRecord,
        StepResultFields,
        StepToolCall,
    )

_USAGE_KEYS = ("inputTokens", "outputTokens", "totalTokens")
_PER_STEP = frozenset({"cacheCreationInputTokens5m", "cacheCreationInputTokens1h"})
"""Usage keys a step reports that Mastra's run total (the finish chunk) leaves out."""
_NUMBERS = (int, float)
_ROLE = itemgetter("role")


class StepResultPayload(TypedDict):
    """A ``step-finish`` / ``finish`` payload's ``stepResult``."""

    reason: str
    isContinued: bool
    rawReason: NotRequired[JsonValue]
    warnings: NotRequired[list[JsonValue]]
    retryReason: NotRequired[str]
    retryMetadata: NotRequired[object]
    retryProcessorId: NotRequired[str | None]
    messageId: NotRequired[str]


class StepMessages(TypedDict):
    """A payload's ``messages``: the conversation, the run's new user input, its response."""

    all: list[PromptMessage]
    user: list[PromptMessage]
    nonUser: list[PromptMessage]


class StepOutput(TypedDict):
    """A payload's ``output``: the step's text and calls, usage, every step so far."""

    text: str
    toolCalls: list[StepToolCall]
    usage: JsonObject
    steps: list[PublicStep]
    object: NotRequired[object]
    """The structured output's object, once there is one."""


class UIMessage(TypedDict):
    """The run's response as an AI SDK UI message (``finish``'s ``response.uiMessages``)."""

    id: str
    role: Literal["assistant"]
    metadata: Mapping[str, object]
    parts: list[UIPart]


def normalize_usage(usage: object, provider_metadata: object = None) -> JsonObject:
    """A step's usage as Mastra reports it: AI SDK v2 usage as is; v3's nested usage flattened
    (a count the provider did not report stays out); Anthropic's cache-write split by lifetime
    taken from the finish part's provider metadata."""
    cache_creation = _cache_creation_usage(provider_metadata)
    if not isinstance(usage, dict):
        return cache_creation
    inp, out = usage.get("inputTokens"), usage.get("outputTokens")
    if isinstance(inp, dict) or isinstance(out, dict):
        inp = _innermost(inp or {})
        out = _innermost(out or {})
        total_in, total_out = inp.get("total"), out.get("total")
        normalized: JsonObject = {
            "inputTokens": total_in,
            "outputTokens": total_out,
            "totalTokens": (total_in or 0) + (total_out or 0),
            "reasoningTokens": out.get("reasoning"),
            "cachedInputTokens": inp.get("cacheRead"),
            "cacheCreationInputTokens": inp.get("cacheWrite"),
            **cache_creation,
            "raw": usage,
        }
        return {key: value for key, value in normalized.items() if value is not None}
    normalized = {**usage, **cache_creation, "raw": dict(usage)}
    if usage.get("totalTokens") is None:  # Mastra sums what it has (a missing count is 0)
        normalized["totalTokens"] = (inp or 0) + (out or 0)
    return normalized


def _innermost(tokens: Mapping[str, Any]) -> Mapping[str, Any]:
    """The counts of a v3 usage entry (the vendor's numbers, read as such as Mastra does)."""
    while isinstance(tokens.get("total"), dict):
        tokens = tokens["total"]
    return tokens


def _cache_creation_usage(provider_metadata: object) -> JsonObject:
    """``cacheCreationInputTokens5m`` / ``1h`` from Anthropic's ``cacheCreation`` metadata."""
    anthropic = provider_metadata.get("anthropic") if isinstance(provider_metadata, dict) else None
    details = anthropic.get("cacheCreation") if isinstance(anthropic, dict) else None
    if not isinstance(details, dict):
        return {}
    found: JsonObject = {}
    for key, snake, camel in (
        ("cacheCreationInputTokens5m", "ephemeral_5m_input_tokens", "ephemeral5mInputTokens"),
        ("cacheCreationInputTokens1h", "ephemeral_1h_input_tokens", "ephemeral1hInputTokens"),
    ):
        value = details.get(snake, details.get(camel))
        if isinstance(value, int | float):
            found[key] = value
    return found


def content_blocks(
    starts: list[tuple[str, int]],
    text: list[str],
    reasoning: list[str],
    meta: dict[int, ProviderMetadata] | None,
) -> list[TextPart | ReasoningPart | None]:
    """The step's text and reasoning as Mastra keeps them: one part per block (``*-start`` ...
    ``*-end``), in the order the blocks began, each with its provider metadata; an empty text
    block is ``None`` (dropped), an empty reasoning block is kept (OpenAI's encrypted reasoning
    often has no summary). Deltas that came without a start make one block (reasoning first)
    after the started ones."""
    blocks = {
        "text": _split(text, [i for k, i in starts if k == "text"]),
        "reasoning": _split(reasoning, [i for k, i in starts if k == "reasoning"]),
    }
    order = [kind for kind, _ in starts]
    for kind in ("reasoning", "text"):
        order.extend([kind] * (len(blocks[kind]) - order.count(kind)))
    taken = {"text": iter(blocks["text"]), "reasoning": iter(blocks["reasoning"])}
    parts: list[TextPart | ReasoningPart | None] = []
    for position, kind in enumerate(order):
        value = next(taken[kind])
        if kind == "text" and not value:
            parts.append(None)
            continue
        part: TextPart | ReasoningPart = (
            {"type": "text", "text": value} if kind == "text" else {"type": "reasoning", "text": value}
        )
        pm = meta.get(position) if meta else None
        if pm:
            part["providerOptions"] = pm
        parts.append(part)
    return parts


def _split(deltas: list[str], starts: list[int]) -> list[str]:
    """``deltas`` joined per block, each block starting at one of ``starts``."""
    if not deltas:
        return [""] * len(starts)
    bounds = [0, *starts[1:]] if starts else [0]
    ends = [*bounds[1:], len(deltas)]
    return ["".join(deltas[start:end]) for start, end in zip(bounds, ends, strict=True)]


def add_usage(total: JsonObject, step: JsonObject) -> None:
    """Add a step's counts to the run's (the last step's ``raw`` usage is the run's)."""
    for key, value in step.items():
        if key == "raw":
            total["raw"] = value
        elif key in _PER_STEP:
            continue
        elif isinstance(value, _NUMBERS):
            before = total.get(key, 0)
            total[key] = (before if isinstance(before, _NUMBERS) else 0) + value
    for key in _USAGE_KEYS:
        total.setdefault(key, 0)


def step_record(
    state: RunState,
    text: str,
    content: list[AssistantPart],
    usage: JsonObject,
    reason: str,
    request: JsonObject,
    response_meta: dict[str, object],
    warnings: list[Any],
    *,
    rejected: bool = False,
    provider_metadata: ProviderMetadata | None = None,
) -> StepRecord:
    """Record a finished step; a ``rejected`` step's message (a processor asked for a retry) is
    not in the conversation, but its record shows it among the response messages, as Mastra's."""
    record: StepRecord = {
        "text": text,
        "content": [_step_content_part(part, content) for part in content],
        "usage": usage,
        "finishReason": reason,
        "warnings": warnings,
        "request": request,
        "response": response_meta,
        "toolCalls": [_tool_call_view(c) for c in content if c["type"] == "tool-call"],
        "responseMessages": [],
    }
    if provider_metadata:
        record["providerMetadata"] = provider_metadata
    # The response messages as of this step (a tool step's results are not in yet).
    messages = response_view(state)
    if rejected and content:
        messages.append({"role": "assistant", "content": [*content]})
    if record["toolCalls"]:
        messages.append({"role": "tool", "content": []})
    record["responseMessages"] = messages
    if state.continued is not None:
        # Mastra takes a step's content from the response message by step position; continuing a
        # stored message, that is the stored message's step of the same number.
        record["content"] = _nth_step_content(_merged_parts(state), len(state.steps) + 1)
    state.steps.append(record)
    add_usage(state.usage, usage)
    return record


def _tool_call_view(part: ToolCallPart) -> StepToolCall:
    """A tool-call part as a step's ``toolCalls`` lists it."""
    call: StepToolCall = {
        "toolCallId": part["toolCallId"],
        "toolName": part["toolName"],
        "args": part["input"],
    }
    if part.get("providerExecuted"):
        call["providerExecuted"] = True
    if part.get("providerOptions"):
        call["providerMetadata"] = part["providerOptions"]
    return call


def _durable_step_finish(
    record: StepRecord, result: StepResultPayload, tool_results: Sequence[ToolResultPart]
) -> dict[str, object]:
    """A durable run's step-finish, as Mastra's durable loop sends it: the step's usage and its
    content (with the step's tool results) in AI SDK v4 terms; no conversation."""
    content = [*record["content"], *tool_results]
    return {
        "stepResult": result,
        "output": {"usage": record["usage"]},
        "metadata": {},
        "messages": {"all": [], "user": [], "nonUser": []},
        "type": "finish",
        "_durableStepContent": [_durable_part(part) for part in content],
    }


def _durable_part(part: Mapping[str, Any]) -> Mapping[str, object]:
    kind = part.get("type")
    if kind == "tool-call":
        return {
            "type": kind,
            "toolCallId": part["toolCallId"],
            "toolName": part["toolName"],
            "args": part["input"],
        }
    if kind == "tool-result":
        value = (part.get("output") or {}).get("value")
        return {"type": kind, "toolCallId": part["toolCallId"], "toolName": part["toolName"], "result": value}
    return dict(part)


def _durable_finish(
    state: RunState, record: Mapping[str, Any], reason: str, usage: JsonObject
) -> dict[str, object]:
    """A durable run's finish: its steps in AI SDK v4 terms, the last step's usage as the
    step result's total (as Mastra's durable loop reports it)."""
    steps = []
    for step in state.steps:
        calls = [{**call, "activeTools": None} for call in step["toolCalls"]]
        results = [
            {**_v4_call(part), "activeTools": None, "result": (part.get("output") or {}).get("value")}
            for part in step["content"]
            if part.get("type") == "tool-result"
        ]
        steps.append(
            {
                "text": step["text"],
                "toolCalls": calls,
                "toolResults": results,
                "usage": step["usage"],
                "finishReason": step["finishReason"],
            }
        )
    return {
        "output": {"text": record["text"], "usage": usage, "steps": steps},
        "stepResult": {
            "reason": reason,
            "warnings": [],
            "isContinued": False,
            "totalUsage": record.get("usage") or {},
            "headers": {},
        },
    }


def _v4_call(part: Mapping[str, Any]) -> dict[str, object]:
    return {"toolCallId": part["toolCallId"], "toolName": part["toolName"], "args": part["input"]}


def add_tool_results(state: RunState, record: StepRecord, results: list[ToolResultPart]) -> None:
    """A tool step's content gains its results once its step-finish is out (as in Mastra); a
    step read from a continued message keeps what that message said at its step-finish."""
    if state.continued is None:
        record["content"].extend(results)
        _content_grew(state, record)


def add_feedback(state: RunState, record: StepRecord, feedback: list[PromptMessage]) -> None:
    """A completion check's assistant feedback joins the checked step's content once its
    step-finish is out (as in Mastra: it is a response message of that step)."""
    for message in feedback:
        if message["role"] == "assistant":
            record["content"].extend(dict(part) for part in message["content"])
    _content_grew(state, record)


def _content_grew(state: RunState, record: StepRecord) -> None:
    """A step's content changed: its public form (and those after it) is built again when next
    listed. Steps only change here, and it is one of the last ones, so it is looked for from the
    end (its public forms sent before stay as they were)."""
    built = state.public_steps
    for index in range(min(len(built), len(state.steps)) - 1, -1, -1):
        if state.steps[index] is record:
            del built[index:]
            return


def _step_content_part(part: AssistantPart, content: list[AssistantPart]) -> Mapping[str, Any]:
    """A message part as a step's content reports it: a file as the AI SDK's generated file, a
    provider-executed tool's result with its call's input (and without provider options)."""
    if part["type"] == "tool-result":
        call_id = part["toolCallId"]
        call = next((c for c in content if c["type"] == "tool-call" and c["toolCallId"] == call_id), None)
        return {
            "type": "tool-result",
            "input": call["input"] if call is not None else {},
            "output": part["output"],
            "toolCallId": call_id,
            "toolName": part["toolName"],
        }
    if part["type"] != "file":
        return part
    media_type = part["mediaType"]
    base64_data = str(part["data"]).removeprefix(f"data:{media_type};base64,")
    return {"type": "file", "file": {"base64Data": base64_data, "mediaType": media_type, "type": "file"}}


def default_response_metadata(model: LanguageModel) -> dict[str, object]:
    """A step's response metadata when the model sent none (or its call failed), as Mastra
    fills it in: a generated id, the time, and the model."""
    return {
        "id": new_id(),
        "timestamp": iso_now(),
        "modelId": model.model_id,
        "modelVersion": model.specification_version,
        "modelProvider": model.provider,
    }


def _model_metadata(cfg: LoopConfig, record: Mapping[str, Any]) -> dict[str, object]:
    response = record.get("response") or {}
    meta: dict[str, object] = dict(response)
    meta["modelId"] = response.get("modelId", cfg.model.model_id)
    meta["headers"] = {}
    meta["modelMetadata"] = {
        "modelId": cfg.model.model_id,
        "modelVersion": cfg.model.specification_version,
        "modelProvider": cfg.model.provider,
    }
    meta["request"] = record.get("request") or {}
    if record.get("providerMetadata"):
        meta["providerMetadata"] = record["providerMetadata"]
    return meta


def _merged_parts(state: RunState, model: str | None = None) -> list[StoredPart]:
    assert state.continued is not None
    return state.continued.merged_parts(state.response_messages, model)


def response_view(state: RunState) -> list[PromptMessage]:
    """The run's response messages as Mastra reports them: a run that continues a stored
    assistant message reports that whole message (with its own response appended)."""
    if state.continued is not None:
        return [m for step in parts_to_steps(_merged_parts(state)) for m in step]
    return _own_messages(state.response_messages)


def _own_messages(messages: list[PromptMessage]) -> list[PromptMessage]:
    """The model's own messages among a run's responses: user-role ones there are signals
    the run added (a goal judge's reminder), which Mastra keeps out of the response.

    The messages themselves are shared, not copied: once in the conversation a message (its
    dict and its content list) does not change, later steps append new ones, so every record
    and payload that lists it may hold the same object (copies made each step cost as much as
    the whole conversation, in time and in memory the run's chunks keep)."""
    if "user" not in map(_ROLE, messages):  # the usual case, checked without a Python loop
        return list(messages)
    return [m for m in messages if m["role"] != "user"]


def _nth_step_content(parts: list[StoredPart], number: int) -> list[Mapping[str, Any]]:
    steps = parts_to_steps(parts)
    if number > len(steps):
        return []
    content: list[Mapping[str, Any]] = []
    for message in steps[number - 1]:
        if message["role"] == "system":
            continue
        for part in message["content"]:
            if part["type"] == "tool-result":
                content.append({k: v for k, v in part.items() if k != "providerOptions"})
            else:
                content.append(part)
    return content


def _messages_payload(cfg: LoopConfig, state: RunState) -> StepMessages:
    """The conversation (``all``: context messages other than system ones, history, input and
    response), the run's new user input and its response (``nonUser``)."""
    history = state.messages[: state.history_count]
    if state.continued is not None:
        history = history[: len(history) - state.continued.prompt_count]
        conversation = responses = response_view(state)
    else:  # the run's own order: its responses with the signals among them (shared, see above)
        conversation = state.response_messages
        responses = _own_messages(conversation)
    inputs = state.new_input_messages
    context = [m for m in cfg.context if m["role"] != "system"]
    return {
        "all": [*context, *history, *inputs, *cfg.after_input, *conversation],
        "user": [m for m in inputs if m["role"] == "user"],
        "nonUser": responses,
    }


def _output_payload(state: RunState, record: Mapping[str, Any], usage: JsonObject) -> StepOutput:
    output: StepOutput = {
        "text": record["text"],
        "toolCalls": record["toolCalls"],
        "usage": usage,
        "steps": _public_steps(state),
    }
    if state.object is not None:
        output["object"] = state.object
    return output


def _public_steps(state: RunState) -> list[PublicStep]:
    """The steps as payloads list them: each step's public form is built once and shared by
    every later payload (built again only when its content grows: :func:`_content_grew`)."""
    built = state.public_steps
    for record in state.steps[len(built) :]:
        built.append(_public_step(record))
    return list(built)


def _public_step(record: StepRecord) -> PublicStep:
    """A step as payloads list it."""
    step: PublicStep = {
        "content": list(record["content"]),
        "usage": record["usage"],
        "warnings": record["warnings"],
        "request": record["request"],
        "response": {**record["response"], "headers": {}, "messages": record["responseMessages"]},
    }
    if "providerMetadata" in record:
        step["providerMetadata"] = record["providerMetadata"]
    if record["finishReason"] == "error":  # Mastra names the reason only on failed steps
        step["finishReason"] = "error"
    if "tripwire" in record:
        step["tripwire"] = record["tripwire"]
    return step


def step_finish_chunk(
    cfg: LoopConfig,
    state: RunState,
    record: StepRecord,
    reason: str,
    *,
    continued: bool,
    step_result: StepResultFields | None = None,
    tool_results: Sequence[ToolResultPart] = (),
) -> StepFinishChunk:
    """``tool_results``: a tool step's result parts (not in its record's content yet)."""
    result: StepResultPayload = {"reason": reason, **(step_result or {}), "isContinued": continued}
    if cfg.durable:
        durable = _durable_step_finish(record, result, tool_results)
        return StepFinishChunk(state.run_id, durable)  # type: ignore[arg-type]
    payload: dict[str, object] = {
        "messageId": state.message_id,
        "stepResult": result,
        "metadata": _model_metadata(cfg, record),
        "output": _output_payload(state, record, record["usage"]),
        "messages": _messages_payload(cfg, state),
        "processorRetryCount": state.processor_retry_count,
    }
    if _background_task_pending(cfg, state):
        payload["backgroundTaskPending"] = True
    return StepFinishChunk(state.run_id, payload)  # type: ignore[arg-type]


def finish_chunk(
    cfg: LoopConfig,
    state: RunState,
    reason: str,
    *,
    step_result: StepResultFields | None = None,
    current: CutStep | None = None,
) -> FinishChunk:
    """The run's ``finish``; its metadata and text are the last finished step's, or those of
    the ``current`` step (``text``, ``request``, ``response``) when that one was cut short."""
    state.finish_reason = reason
    if state.status == "running":
        state.status = "success"
    record: Mapping[str, Any] = {"text": "", "toolCalls": [], "usage": {}, "request": {}, "response": {}}
    if current is not None:
        record = {**record, **current}
    elif state.steps:
        record = state.steps[-1]
    usage = dict(state.usage) or {"inputTokens": 0, "outputTokens": 0, "totalTokens": 0}
    for key in _USAGE_KEYS:
        usage.setdefault(key, 0)
    if cfg.durable:
        return FinishChunk(state.run_id, _durable_finish(state, record, reason, usage))  # type: ignore[arg-type]
    result: StepResultPayload = {**(step_result or {}), "reason": reason, "isContinued": False}
    metadata = _model_metadata(cfg, record)
    payload: dict[str, object] = {
        "messageId": state.message_id,
        "stepResult": result,
        "metadata": metadata,
        "output": _output_payload(state, record, usage),
        "messages": _messages_payload(cfg, state),
        "processorRetryCount": state.processor_retry_count,
    }
    if _background_task_pending(cfg, state):
        payload["backgroundTaskPending"] = True
    response = {
        **metadata,
        "messages": response_view(state),
        "uiMessages": _ui_messages(cfg, state),
    }
    response.pop("request", None)
    response.pop("providerMetadata", None)  # (Mastra's response has none)
    payload["response"] = response
    return FinishChunk(state.run_id, payload)  # type: ignore[arg-type]


def _background_task_pending(cfg: LoopConfig, state: RunState) -> bool:
    ids = state.background_task_ids
    return bool(ids) and cfg.tasks_pending is not None and cfg.tasks_pending(ids)


def model_label(cfg: LoopConfig) -> str:
    """``provider/model-id``, as Mastra labels a message's step boundaries."""
    return f"{cfg.model.provider}/{cfg.model.model_id}"


def run_metadata(cfg: LoopConfig, state: RunState) -> JsonObject:
    """The response message's metadata: the model, and the background tasks its calls started."""
    metadata: JsonObject = {"modelId": cfg.model.model_id, "provider": cfg.model.provider}
    if state.object is not None:
        metadata["structuredOutput"] = state.object
    background: JsonObject = {}
    for message in state.response_messages:
        if message["role"] != "assistant":
            continue
        for part in message["content"]:
            options = part.get("providerOptions")
            link = options.get("mastra", {}).get("backgroundTask") if options else None
            if part["type"] == "tool-call" and link:
                timing = {"startedAt": iso_now(), "taskId": link["taskId"]}
                if link.get("status") in ("completed", "failed"):  # it settled while the run was live
                    timing["completedAt"] = iso_now()
                background[part["toolCallId"]] = timing
    if background:
        metadata.update(mode="stream", backgroundTasks=background)
    return metadata


def _ui_messages(cfg: LoopConfig, state: RunState) -> list[UIMessage]:
    """The run's response as AI SDK UI messages (what a ``useChat`` client would hold): one,
    or one per response message when signals split the response (each marked as bounded)."""
    if state.continued is not None:
        metadata = merge_metadata(state.continued.metadata, run_metadata(cfg, state))
        return [_ui_message(cfg, state.continued.id, _merged_parts(state, model_label(cfg)), metadata)]
    if not state.message_segments:
        parts = responses_to_parts(state.response_messages, model_label(cfg))
        return [_ui_message(cfg, state.message_id, parts, run_metadata(cfg, state))]
    # Tool results join the message that holds their calls (Mastra merges them there).
    starts = [_after_tool_results(state.messages, start) for _, start in state.message_segments]
    ends = [*starts[1:], len(state.messages)]
    messages = []
    for index, ((message_id, _), start, end) in enumerate(
        zip(state.message_segments, starts, ends, strict=True)
    ):
        responses = _own_messages(state.messages[start:end])
        if responses:
            metadata = run_metadata(cfg, state)
            if index < len(starts) - 1:  # a boundary (a signal, a pause) closed this message
                metadata["mastra"] = {"responseBoundary": True}
            parts = responses_to_parts(responses, model_label(cfg))
            messages.append(_ui_message(cfg, message_id, parts, metadata))
    return messages


def _after_tool_results(messages: list[PromptMessage], start: int) -> int:
    while start < len(messages) and messages[start]["role"] == "tool":
        start += 1
    return start


def _ui_message(cfg: LoopConfig, message_id: str, parts: list[StoredPart], metadata: JsonObject) -> UIMessage:
    shown: dict[str, object] = {**metadata, "createdAt": now_utc()}
    if cfg.thread_id is not None:
        shown.update(threadId=cfg.thread_id, resourceId=cfg.resource_id)
    return {
        "id": message_id,
        "role": "assistant",
        "metadata": shown,
        "parts": parts_to_ui(parts, metadata),
    }


def empty_end(reason: str, outcome: str, step_result: Mapping[str, Any]) -> ModelCallError:
    """Mastra's error for a step that ended ``reason`` with nothing to show for it."""
    raw = step_result.get("rawReason")
    said = f' (provider reported "{raw}")' if raw else ""
    return ModelCallError(f'Agent stream finished with finishReason "{reason}"{said} {outcome}', name="Error")
