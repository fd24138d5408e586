"""The OpenAI Responses API on the wire: prompt -> ``input`` items, stream events -> parts.

Both follow ``@ai-sdk/openai`` 3.0.88 (what Mastra 1.71 runs), proven against recordings of real
Mastra in ``tests/vendor_kit``. Two deliberate differences, both where the AI SDK breaks: parts are
keyed by ``output_index`` (a gateway may rotate item ids between the events of one item; the AI SDK
then throws), and a part keeps the id its item was opened with.

``store`` is the request's ``store`` option (``None`` when not given): it decides whether
assistant items go back as ``item_reference`` (stored, the API's default) or in full, and, as in
the AI SDK, a reasoning summary part is closed at its ``summary_part.done`` only when ``store`` is
explicitly true; otherwise when the next part starts or its item ends.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from runstream._json import JsonObject, JsonValue
from runstream.errors import InvalidInputError
from runstream.models._common import call_error, data_url, file_data, part_metadata
from runstream.models.base import FinishReason, ModelCallError, PromptMessage, StreamPart
from runstream.models.parts import InputTokensV3, ProviderMetadata, ToolCallPart, ToolInputStartPart, UsageV3
from runstream.models.parts import ToolResultPart as ToolResultStreamPart
from runstream.models.prompt import AssistantPart, ReasoningPart, ToolResultPart, UserPart


def _json(value: object) -> str:
    """``JSON.stringify``: compact, non-ASCII kept."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


# --------------------------------------------------------------------------- prompt -> input


def responses_input(
    prompt: list[PromptMessage], system_role: str, *, store: bool = True, vendor: str = "openai"
) -> list[JsonValue]:
    """An AI SDK prompt as Responses ``input`` items (``convertToOpenAIResponsesInput``).

    With ``store`` (the API's default) assistant text, reasoning and provider-executed tool
    results that carry their item id go back as ``item_reference``; without it reasoning goes back
    in full with its ``encrypted_content`` and provider-executed results are left out.
    """
    items: list[JsonValue] = []
    for message in prompt:
        if message["role"] == "system":
            items.append({"role": system_role, "content": message["content"]})
        elif message["role"] == "user":
            content = message["content"]
            items.append(
                {"role": "user", "content": [_user_part(part, i, vendor) for i, part in enumerate(content)]}
            )
        elif message["role"] == "assistant":
            _assistant_items(message["content"], items, store, vendor)
        elif message["role"] == "tool":
            items.extend(
                {"type": "function_call_output", "call_id": part["toolCallId"], "output": _output_text(part)}
                for part in message["content"]
                if part["type"] == "tool-result"
            )
    return items


def _assistant_items(content: list[AssistantPart], items: list[JsonValue], store: bool, vendor: str) -> None:
    reasoning: dict[str, JsonObject] = {}
    for part in content:
        meta = part_metadata(part, vendor)
        item_id = meta.get("itemId")
        if part["type"] == "text":
            if store and item_id is not None:
                items.append({"type": "item_reference", "id": item_id})
                continue
            item: JsonObject = {
                "role": "assistant",
                "content": [{"type": "output_text", "text": part["text"]}],
            }
            if item_id is not None:
                item["id"] = item_id
            if meta.get("phase") is not None:
                item["phase"] = meta["phase"]
            items.append(item)
        elif part["type"] == "tool-call":
            if part.get("providerExecuted"):
                if store and item_id is not None:
                    items.append({"type": "item_reference", "id": item_id})
                continue
            args = part["input"]
            items.append(
                {
                    "type": "function_call",
                    "call_id": part["toolCallId"],
                    "name": part["toolName"],
                    "arguments": _json({} if args is None else args),
                }
            )
        elif part["type"] == "tool-result":  # a provider-executed tool's result
            output = part.get("output")
            if (output is not None and output.get("type") == "execution-denied") or not store:
                continue
            items.append({"type": "item_reference", "id": item_id or part["toolCallId"]})
        elif part["type"] == "reasoning":
            _reasoning_item(part, meta, reasoning, items, store)


def _reasoning_item(
    part: ReasoningPart,
    meta: Mapping[str, Any],
    seen: dict[str, JsonObject],
    items: list[JsonValue],
    store: bool,
) -> None:
    """Parts of one reasoning item (same ``itemId``) become one item: a reference when stored,
    else the item with its summary parts and ``encrypted_content``."""
    item_id = meta.get("itemId")
    encrypted = meta.get("reasoningEncryptedContent")
    text = part.get("text") or ""
    summary: list[JsonValue] = [{"type": "summary_text", "text": text}] if text else []
    if item_id is None:
        if encrypted is not None:  # reasoning without an id (not stored): sent by its content
            items.append({"type": "reasoning", "encrypted_content": encrypted, "summary": summary})
        return  # another vendor's reasoning is not sent to OpenAI
    known = seen.get(item_id)
    if store:
        if known is None:
            items.append({"type": "item_reference", "id": item_id})
            seen[item_id] = {}
        return
    if known is None:
        item: JsonObject = {
            "type": "reasoning",
            "id": item_id,
            "encrypted_content": encrypted,
            "summary": summary,
        }
        if encrypted is None:
            del item["encrypted_content"]
        seen[item_id] = item
        items.append(item)
        return
    known_summary = known["summary"]
    if isinstance(known_summary, list):  # always (set above): narrows the JSON value for mypy
        known_summary.extend(summary)
    if encrypted is not None:
        known["encrypted_content"] = encrypted


def _output_text(part: ToolResultPart) -> str:
    output: Mapping[str, Any] = part["output"]
    kind, value = output.get("type"), output.get("value")
    if kind in ("text", "error-text"):
        return str(value)
    if kind == "execution-denied":
        return str(output.get("reason") or "Tool call execution denied.")
    if kind in ("json", "error-json"):
        return _json(value)
    return _json(value)


def _user_part(part: UserPart, index: int, vendor: str) -> JsonObject:
    if part["type"] == "text":
        return {"type": "input_text", "text": part["text"]}
    media_type = str(part["mediaType"])
    if media_type == "image/*":
        media_type = "image/jpeg"
        part = {**part, "mediaType": media_type}
    if media_type.startswith("image/"):
        image: JsonObject = {"type": "input_image", "image_url": data_url(part)}
        detail = part_metadata(part, vendor).get("imageDetail")
        if detail is not None:
            image["detail"] = detail
        return image
    kind, value = file_data(part)
    if kind == "url":
        return {"type": "input_file", "file_url": value}
    if media_type == "application/pdf":
        return {
            "type": "input_file",
            "filename": part.get("filename") or f"part-{index}.pdf",
            "file_data": data_url(part),
        }
    raise InvalidInputError(f"OpenAI Responses does not take {media_type} file parts")


# --------------------------------------------------------------------------- events -> parts


def _web_search_result(action: Any) -> JsonObject:
    """``mapWebSearchOutput``: the result part of a ``web_search_call``."""
    if action is None:
        return {}
    data = action if isinstance(action, Mapping) else action.to_dict()
    kind = data.get("type")
    if kind == "search":
        search: JsonObject = {"type": "search"}
        result: JsonObject = {"action": search}
        if data.get("query") is not None:
            search["query"] = data["query"]
        if data.get("queries") is not None:
            search["queries"] = data["queries"]
        if data.get("sources") is not None:
            result["sources"] = data["sources"]
        return result
    if kind == "open_page":
        return {"action": {"type": "openPage", "url": data.get("url")}}
    if kind == "find_in_page":
        return {"action": {"type": "findInPage", "url": data.get("url"), "pattern": data.get("pattern")}}
    return {}


def _escape(delta: str) -> str:
    """A string's JSON text without its quotes (code streamed inside a JSON input)."""
    return _json(delta)[1:-1]


def _field(value: Any, name: str) -> Any:
    return value.get(name) if isinstance(value, Mapping) else getattr(value, name, None)


def _dump(value: Any) -> Any:
    return value.to_dict() if hasattr(value, "to_dict") else value


_Handler = Callable[["ResponsesMapper", Any], list[StreamPart]]


class ResponsesMapper:
    """Responses events to parts. Reasoning part ids are ``<item id>:<summary index>``."""

    __slots__ = (
        "_annotations",
        "_by_item",
        "_finish",
        "_function_call",
        "_ids",
        "_phase",
        "_reasoning",
        "_response_id",
        "_service_tier",
        "_sources",
        "_store",
        "_tools",
        "_vendor",
        "done",
    )

    def __init__(self, *, store: bool | None = None, vendor: str = "openai") -> None:
        self.done = False
        self._store = store is True
        self._vendor = vendor
        self._finish: StreamPart | None = None
        self._ids: dict[int, str] = {}  # output_index -> the id its message/reasoning item opened with
        self._by_item: dict[str, str] = {}  # item id seen in an event -> that part id (one lookup per delta)
        self._tools: dict[int, list[Any]] = {}  # output_index -> [call id, tool name, container id]
        self._reasoning: dict[int, list[Any]] = {}  # output_index -> [encrypted content, {index: state}]
        self._annotations: list[JsonValue] = []
        self._phase: str | None = None
        self._function_call = False
        self._response_id: str | None = None
        self._service_tier: str | None = None
        self._sources = 0

    def map(self, event: Any) -> list[StreamPart]:
        kind = event.type
        if kind == "response.output_text.delta":
            item_id = event.item_id
            part_id = self._by_item.get(item_id) or self._part_id(event.output_index, item_id)
            return [{"type": "text-delta", "id": part_id, "delta": event.delta}]
        handler = _HANDLERS.get(kind)
        return [] if handler is None else handler(self, event)

    def end(self) -> StreamPart | None:
        if self._finish is None:  # the stream stopped before its terminal event
            return self._finish_part(None, "other", None)
        return self._finish

    def _part_id(self, index: int, item_id: str) -> str:
        """The part id of an event's item: the id its output item opened with, whatever id a
        gateway gives the item in later events."""
        part_id = self._by_item[item_id] = self._ids.get(index, item_id)
        return part_id

    def _meta(self, **values: Any) -> ProviderMetadata:
        return {self._vendor: values}

    # ----------------------------------------------------------------- text and reasoning

    def _summary_delta(self, event: Any) -> list[StreamPart]:
        base = self._by_item.get(event.item_id) or self._part_id(event.output_index, event.item_id)
        return [
            {
                "type": "reasoning-delta",
                "id": f"{base}:{event.summary_index}",
                "delta": event.delta,
                "providerMetadata": self._meta(itemId=event.item_id),
            }
        ]

    def _summary_added(self, event: Any) -> list[StreamPart]:
        index = event.summary_index
        state = self._reasoning.get(event.output_index)
        if index == 0 or state is None:
            return []  # the first part opened with its item
        base = self._by_item.get(event.item_id) or self._part_id(event.output_index, event.item_id)
        parts: list[StreamPart] = []
        status: dict[int, str] = state[1]
        for open_index, value in status.items():
            if value == "can-conclude":
                status[open_index] = "concluded"
                parts.append(
                    {
                        "type": "reasoning-end",
                        "id": f"{base}:{open_index}",
                        "providerMetadata": self._meta(itemId=event.item_id),
                    }
                )
        status[index] = "active"
        meta = self._meta(itemId=event.item_id, reasoningEncryptedContent=state[0])
        parts.append({"type": "reasoning-start", "id": f"{base}:{index}", "providerMetadata": meta})
        return parts

    def _summary_done(self, event: Any) -> list[StreamPart]:
        state = self._reasoning.get(event.output_index)
        if state is None:
            return []
        if not self._store:
            state[1][event.summary_index] = "can-conclude"
            return []
        state[1][event.summary_index] = "concluded"
        base = self._by_item.get(event.item_id) or self._part_id(event.output_index, event.item_id)
        meta = self._meta(itemId=event.item_id)
        return [{"type": "reasoning-end", "id": f"{base}:{event.summary_index}", "providerMetadata": meta}]

    def _annotation(self, event: Any) -> list[StreamPart]:
        data = _dump(event.annotation)
        self._annotations.append(data)
        kind = data.get("type")
        if kind == "url_citation":
            return [
                {
                    "type": "source",
                    "sourceType": "url",
                    "id": self._source_id(),
                    "url": data.get("url"),
                    "title": data.get("title"),
                }
            ]
        if kind == "file_citation":
            name, meta = (
                data.get("filename"),
                self._meta(type=kind, fileId=data.get("file_id"), index=data.get("index")),
            )
        elif kind == "container_file_citation":
            name = data.get("filename")
            meta = self._meta(type=kind, fileId=data.get("file_id"), containerId=data.get("container_id"))
        elif kind == "file_path":
            name, meta = (
                data.get("file_id"),
                self._meta(type=kind, fileId=data.get("file_id"), index=data.get("index")),
            )
        else:
            return []
        media_type = "application/octet-stream" if kind == "file_path" else "text/plain"
        return [
            {
                "type": "source",
                "sourceType": "document",
                "id": self._source_id(),
                "mediaType": media_type,
                "title": name,
                "filename": name,
                "providerMetadata": meta,
            }
        ]

    def _source_id(self) -> str:
        self._sources += 1
        return f"{self._response_id}-src-{self._sources}"

    # ----------------------------------------------------------------- items

    def _item_added(self, event: Any) -> list[StreamPart]:
        item, index = event.item, event.output_index
        kind = item.type
        if kind == "message":
            self._ids[index] = item.id
            self._annotations = []
            self._phase = _field(item, "phase")
            meta = (
                self._meta(itemId=item.id)
                if self._phase is None
                else self._meta(itemId=item.id, phase=self._phase)
            )
            return [{"type": "text-start", "id": item.id, "providerMetadata": meta}]
        if kind == "reasoning":
            self._ids[index] = item.id
            encrypted = _field(item, "encrypted_content")
            self._reasoning[index] = [encrypted, {0: "active"}]
            meta = self._meta(itemId=item.id, reasoningEncryptedContent=encrypted)
            return [{"type": "reasoning-start", "id": f"{item.id}:0", "providerMetadata": meta}]
        if kind == "function_call":
            self._tools[index] = [item.call_id, item.name, None]
            return [{"type": "tool-input-start", "id": item.call_id, "toolName": item.name}]
        return self._hosted_added(item, index)

    def _hosted_added(self, item: Any, index: int) -> list[StreamPart]:
        """A provider-executed tool starts (what the AI SDK streams for each)."""
        kind, call_id = item.type, item.id
        if kind == "web_search_call":
            self._tools[index] = [call_id, "web_search", None]
            return [
                _hosted_start(call_id, "web_search"),
                {"type": "tool-input-end", "id": call_id},
                _hosted_call(call_id, "web_search", "{}"),
            ]
        if kind == "code_interpreter_call":
            container = _field(item, "container_id")
            self._tools[index] = [call_id, "code_interpreter", container]
            return [
                _hosted_start(call_id, "code_interpreter"),
                {
                    "type": "tool-input-delta",
                    "id": call_id,
                    "delta": f'{{"containerId":"{container}","code":"',
                },
            ]
        if kind == "computer_call":
            self._tools[index] = [call_id, "computer_use", None]
            return [_hosted_start(call_id, "computer_use")]
        if kind == "file_search_call":
            return [_hosted_call(call_id, "file_search", "{}")]
        if kind == "image_generation_call":
            return [_hosted_call(call_id, "image_generation", "{}")]
        return []

    def _item_done(self, event: Any) -> list[StreamPart]:
        item, index = event.item, event.output_index
        kind = item.type
        if kind == "message":
            meta: JsonObject = {"itemId": item.id}
            phase = _field(item, "phase") or self._phase
            self._phase = None
            if phase is not None:
                meta["phase"] = phase
            if self._annotations:
                meta["annotations"] = self._annotations
            return [
                {
                    "type": "text-end",
                    "id": self._ids.pop(index, item.id),
                    "providerMetadata": {self._vendor: meta},
                }
            ]
        if kind == "function_call":
            self._tools.pop(index, None)
            self._function_call = True
            return [
                {"type": "tool-input-end", "id": item.call_id},
                {
                    "type": "tool-call",
                    "toolCallId": item.call_id,
                    "toolName": item.name,
                    "input": item.arguments,
                    "providerMetadata": self._meta(itemId=item.id),
                },
            ]
        if kind == "reasoning":
            base = self._ids.pop(index, item.id)
            state = self._reasoning.pop(index, None)
            status: dict[int, str] = state[1] if state is not None else {0: "active"}
            reasoning_meta = self._meta(
                itemId=item.id, reasoningEncryptedContent=_field(item, "encrypted_content")
            )
            return [
                {"type": "reasoning-end", "id": f"{base}:{i}", "providerMetadata": reasoning_meta}
                for i, value in status.items()
                if value in ("active", "can-conclude")
            ]
        self._tools.pop(index, None)
        return self._hosted_done(item)

    def _hosted_done(self, item: Any) -> list[StreamPart]:
        """A provider-executed tool's result."""
        kind, call_id = item.type, item.id
        if kind == "web_search_call":
            return [_hosted_result(call_id, "web_search", _web_search_result(_field(item, "action")))]
        if kind == "file_search_call":
            results = _field(item, "results")
            return [
                _hosted_result(
                    call_id,
                    "file_search",
                    {
                        "queries": _field(item, "queries"),
                        "results": None
                        if results is None
                        else [
                            {
                                "attributes": _field(r, "attributes"),
                                "fileId": _field(r, "file_id"),
                                "filename": _field(r, "filename"),
                                "score": _field(r, "score"),
                                "text": _field(r, "text"),
                            }
                            for r in results
                        ],
                    },
                )
            ]
        if kind == "code_interpreter_call":
            outputs = _field(item, "outputs")
            dumped = None if outputs is None else [_dump(o) for o in outputs]
            return [_hosted_result(call_id, "code_interpreter", {"outputs": dumped})]
        if kind == "image_generation_call":
            return [_hosted_result(call_id, "image_generation", {"result": _field(item, "result")})]
        if kind == "computer_call":
            return [
                {"type": "tool-input-end", "id": call_id},
                _hosted_call(call_id, "computer_use", ""),
                _hosted_result(
                    call_id,
                    "computer_use",
                    {"type": "computer_use_tool_result", "status": _field(item, "status") or "completed"},
                ),
            ]
        return []

    def _arguments_delta(self, event: Any) -> list[StreamPart]:
        tool = self._tools.get(event.output_index)
        return [] if tool is None else [{"type": "tool-input-delta", "id": tool[0], "delta": event.delta}]

    def _code_delta(self, event: Any) -> list[StreamPart]:
        tool = self._tools.get(event.output_index)
        return (
            []
            if tool is None
            else [{"type": "tool-input-delta", "id": tool[0], "delta": _escape(event.delta)}]
        )

    def _code_done(self, event: Any) -> list[StreamPart]:
        tool = self._tools.get(event.output_index)
        if tool is None:
            return []
        call_id = tool[0]
        return [
            {"type": "tool-input-delta", "id": call_id, "delta": '"}'},
            {"type": "tool-input-end", "id": call_id},
            _hosted_call(call_id, "code_interpreter", _json({"code": event.code, "containerId": tool[2]})),
        ]

    def _partial_image(self, event: Any) -> list[StreamPart]:
        result = _hosted_result(event.item_id, "image_generation", {"result": event.partial_image_b64})
        result["preliminary"] = True
        return [result]

    # ----------------------------------------------------------------- response lifecycle

    def _created(self, event: Any) -> list[StreamPart]:
        response = event.response
        self._response_id = response.id
        created = datetime.fromtimestamp(response.created_at, UTC)
        return [
            {"type": "response-metadata", "id": response.id, "modelId": response.model, "timestamp": created}
        ]

    def _finished(self, event: Any) -> list[StreamPart]:
        response = event.response
        details = response.incomplete_details
        raw = details.reason if details is not None else None
        tier = _field(response, "service_tier")
        if isinstance(tier, str):
            self._service_tier = tier
        self._finish = self._finish_part(response.usage, _finish_reason(raw, self._function_call), raw)
        self.done = True
        return []

    def _failed(self, event: Any) -> list[StreamPart]:
        response = event.response
        error = response.error
        self.done = True
        details = response.incomplete_details
        if error is None:
            raw = details.reason if details is not None else None
            reason = _finish_reason(raw, self._function_call) if raw else "error"
            self._finish = self._finish_part(response.usage, reason, raw or "error")
            return []
        # The AI SDK streams this event's fields as the error value, which Mastra reports as its JSON.
        summary: JsonObject = {
            "error": {"code": error.code, "message": error.message},
            "incomplete_details": None if details is None else _dump(details),
        }
        tier = _field(response, "service_tier")
        if tier is not None:
            summary["service_tier"] = tier
        frame = {"type": "response.failed", "sequence_number": event.sequence_number, "response": summary}
        return [{"type": "error", "error": _stream_error(_json(frame), frame, error.code)}]

    def _error(self, event: Any) -> list[StreamPart]:
        self.done = True
        code = _field(event, "code")
        body = _dump(event)
        return [{"type": "error", "error": _stream_error(event.message, body, code)}]

    def _finish_part(self, usage: Any, reason: FinishReason, raw: str | None) -> StreamPart:
        meta: JsonObject = {"responseId": self._response_id}
        if self._service_tier is not None:
            meta["serviceTier"] = self._service_tier
        return {
            "type": "finish",
            "finishReason": reason if raw is None else {"unified": reason, "raw": raw},
            "usage": _usage(usage),
            "providerMetadata": {self._vendor: meta},
        }


def _stream_error(message: str, body: object, code: object) -> ModelCallError:
    """An error event after output: the AI SDK streams the event itself (a plain object, named
    ``Error`` on the wire), not an ``APICallError``."""
    return ModelCallError(message, name="Error", body=body, retryable=code == "server_error")


def _finish_reason(raw: str | None, function_call: bool) -> FinishReason:
    """``mapOpenAIResponseFinishReason``."""
    if raw is None:
        return "tool-calls" if function_call else "stop"
    if raw == "max_output_tokens":
        return "length"
    if raw == "content_filter":
        return "content-filter"
    return "tool-calls" if function_call else "other"


def _usage(usage: Any) -> UsageV3:
    """``convertOpenAIResponsesUsage``: AI SDK v3 usage (cache reads and reasoning 0 when the vendor
    leaves them out; no usage at all gives empty totals), ``raw`` the vendor's usage."""
    if usage is None:
        return {"inputTokens": {}, "outputTokens": {}}
    inputs, outputs = usage.input_tokens, usage.output_tokens
    input_details, output_details = usage.input_tokens_details, usage.output_tokens_details
    cached = (_field(input_details, "cached_tokens") if input_details is not None else None) or 0
    cache_write = _field(input_details, "cache_write_tokens") if input_details is not None else None
    reasoning = (_field(output_details, "reasoning_tokens") if output_details is not None else None) or 0
    input_tokens: InputTokensV3 = {
        "total": inputs,
        "noCache": inputs - cached - (cache_write or 0),
        "cacheRead": cached,
    }
    if cache_write is not None:
        input_tokens["cacheWrite"] = cache_write
    raw = _dump(usage)
    if isinstance(raw, dict):
        raw.pop("total_tokens", None)  # not in the AI SDK's usage schema, so not in its raw usage
    return {
        "inputTokens": input_tokens,
        "outputTokens": {"total": outputs, "text": outputs - reasoning, "reasoning": reasoning},
        "raw": raw,
    }


def _hosted_start(call_id: str, name: str) -> ToolInputStartPart:
    return {"type": "tool-input-start", "id": call_id, "toolName": name, "providerExecuted": True}


def _hosted_call(call_id: str, name: str, input_text: str) -> ToolCallPart:
    return {
        "type": "tool-call",
        "toolCallId": call_id,
        "toolName": name,
        "input": input_text,
        "providerExecuted": True,
    }


def _hosted_result(call_id: str, name: str, result: object) -> ToolResultStreamPart:
    """A provider-executed tool's result: as the AI SDK emits it, without ``providerExecuted`` (the
    call carries it; Mastra's tool-result chunk has none)."""
    return {"type": "tool-result", "toolCallId": call_id, "toolName": name, "result": result}


_HANDLERS: dict[str, _Handler] = {
    "response.reasoning_summary_text.delta": ResponsesMapper._summary_delta,
    "response.function_call_arguments.delta": ResponsesMapper._arguments_delta,
    "response.code_interpreter_call_code.delta": ResponsesMapper._code_delta,
    "response.code_interpreter_call_code.done": ResponsesMapper._code_done,
    "response.image_generation_call.partial_image": ResponsesMapper._partial_image,
    "response.output_item.added": ResponsesMapper._item_added,
    "response.output_item.done": ResponsesMapper._item_done,
    "response.reasoning_summary_part.added": ResponsesMapper._summary_added,
    "response.reasoning_summary_part.done": ResponsesMapper._summary_done,
    "response.output_text.annotation.added": ResponsesMapper._annotation,
    "response.created": ResponsesMapper._created,
    "response.completed": ResponsesMapper._finished,
    "response.incomplete": ResponsesMapper._finished,
    "response.failed": ResponsesMapper._failed,
    "error": ResponsesMapper._error,
}

_OUTPUT_EVENTS = frozenset(_HANDLERS).union(
    ("response.output_text.delta", "response.custom_tool_call_input.delta")
) - {"response.created", "response.failed", "error"}
"""The events that count as output (the AI SDK's ``isResponseOutputChunk`` over the events it parses)."""


async def check_start(stream: Any) -> Replay:
    """Read ``stream`` up to its first output event; an ``error`` or failed response before it is
    raised as the request's error (the AI SDK's ``throwIfOpenAIStreamErrorBeforeOutput``), so it
    fails the call, with the status its code implies, rather than the stream."""
    ahead: deque[Any] = deque()
    try:
        while True:
            try:
                event = await stream.__anext__()
            except StopAsyncIteration:
                break
            ahead.append(event)
            kind = event.type
            if kind == "error" or (kind == "response.failed" and event.response.error is not None):
                raise _early_error(event)
            if kind in _OUTPUT_EVENTS:
                break
    except BaseException:
        await stream.close()
        raise
    return Replay(stream, ahead)


def _early_error(event: Any) -> ModelCallError:
    if event.type == "error":
        message, code, kind = event.message, _field(event, "code"), "error"
    else:
        error = event.response.error
        message, code, kind = error.message, error.code, "response.failed"
    body = _dump(event)
    return call_error(message, status_code=_status_code(code, kind), body=body)


_STATUS_TERMS = (
    (("insufficient_quota", "rate_limit"), 429),
    (("authentication",), 401),
    (("permission",), 403),
    (("not_found",), 404),
    (("invalid", "bad_request", "context_length"), 400),
    (("overload",), 503),
    (("timeout",), 504),
)


def _status_code(code: object, kind: str) -> int:
    """The HTTP status an error code stands for (``getStatusCode`` of ``@ai-sdk/openai``)."""
    if isinstance(code, int) and 400 <= code <= 599:
        return code
    if isinstance(code, str) and len(code) == 3 and code.isdigit() and 400 <= int(code) <= 599:
        return int(code)
    words = " ".join(str(v) for v in (code, kind) if isinstance(v, str | int)).lower()
    for terms, status in _STATUS_TERMS:
        if any(term in words for term in terms):
            return status
    return 500


class Replay:
    """The SDK stream with the events :func:`check_start` read put back in front of it."""

    __slots__ = ("_ahead", "_next", "_stream", "response")

    def __init__(self, stream: Any, ahead: deque[Any]) -> None:
        self._stream = stream
        self._ahead = ahead
        self._next: Callable[[], Awaitable[Any]] = stream.__anext__
        self.response = stream.response

    def __anext__(self) -> Awaitable[Any]:
        if self._ahead:
            done = asyncio.get_running_loop().create_future()
            done.set_result(self._ahead.popleft())
            return done
        return self._next()

    async def close(self) -> None:
        await self._stream.close()
