"""Anthropic Messages on the official ``anthropic`` SDK (``stream=True``, raw events).

The mapping follows the AI SDK's ``@ai-sdk/anthropic``: part ids are content block indexes,
thinking signatures arrive as an empty ``reasoning-delta`` carrying
``providerMetadata.anthropic.signature`` and redacted thinking as a ``reasoning-start`` carrying
``redactedData``. The SDK is imported when a model is built, so it stays an optional extra.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from runstream.errors import InvalidInputError
from runstream.models._common import (
    DEFAULT_MAX_RETRIES,
    AbortScope,
    call_error,
    connection_error,
    file_data,
    merge_options,
    open_stream,
    part_metadata,
    stream_parts,
    tool_output_text,
    unsupported,
    vendor_message,
)
from runstream.models.base import (
    FinishReason,
    ModelCallError,
    ModelRequest,
    ModelStream,
    PromptMessage,
    StreamPart,
    Usage,
)

if TYPE_CHECKING:
    from anthropic import AsyncAnthropic
    from anthropic.types import RawMessageStreamEvent

DEFAULT_MAX_TOKENS = 4096

_STOP_REASONS: dict[str, FinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "tool_use": "tool-calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "content-filter",
}

# HTTP statuses of Anthropic's documented error types, for errors that arrive inside a stream.
_ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}


class AnthropicModel:
    """``POST /v1/messages`` with ``stream=True`` (what ``anthropic/<model>`` resolves to)."""

    specification_version = "v2"

    def __init__(
        self,
        model_id: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float | None = None,
        max_retries: int = DEFAULT_MAX_RETRIES,
        headers: Mapping[str, str] | None = None,
        client: AsyncAnthropic | None = None,
    ) -> None:
        self.model_id = model_id
        self.provider = "anthropic"
        if client is None:
            from anthropic import AsyncAnthropic

            extra: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
            client = AsyncAnthropic(
                api_key=api_key, base_url=base_url, max_retries=max_retries, default_headers=headers, **extra
            )
        self.client = client

    async def stream(self, request: ModelRequest) -> ModelStream:
        body, warnings = self._body(request)
        client = self.client
        retries = request.settings.max_retries
        if retries is not None and retries != client.max_retries:
            client = client.with_options(max_retries=retries)
        headers = request.settings.headers
        rest = {key: value for key, value in body.items() if key not in ("max_tokens", "messages")}
        scope = AbortScope(request.abort_signal)
        source = await open_stream(
            scope,
            lambda: client.messages.create(
                model=self.model_id,
                max_tokens=body["max_tokens"],
                messages=body["messages"],
                stream=True,
                extra_body=rest,
                extra_headers=headers,
            ),
            translate_error,
        )
        parts = stream_parts(
            source,
            _AnthropicMapper(),
            scope,
            warnings=warnings,
            raw=_raw if request.include_raw_chunks else None,
            translate=translate_error,
            vendor="Anthropic",
        )
        sent = {"model": self.model_id, "stream": True, **body}
        return ModelStream(parts, request={"body": sent}, response={"headers": dict(source.response.headers)})

    def _body(self, request: ModelRequest) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        settings = request.settings
        system, messages = anthropic_messages(request.prompt)
        body: dict[str, Any] = {
            "max_tokens": settings.max_output_tokens or DEFAULT_MAX_TOKENS,
            "messages": messages,
        }
        if system:
            body["system"] = system
        for key, value in (
            ("temperature", settings.temperature),
            ("top_p", settings.top_p),
            ("top_k", settings.top_k),
            ("stop_sequences", settings.stop_sequences),
        ):
            if value is not None:
                body[key] = value
        choice = request.tool_choice
        if request.tools and (choice is None or choice["type"] != "none"):
            body["tools"] = [
                {
                    "name": tool["name"],
                    "description": tool["description"],
                    "input_schema": tool["inputSchema"],
                }
                for tool in request.tools
            ]
            if choice is not None:
                kind = choice["type"]
                body["tool_choice"] = (
                    {"type": "tool", "name": choice["toolName"]}
                    if kind == "tool"
                    else {"type": "any" if kind == "required" else "auto"}
                )
        warnings = unsupported(request, "seed", "presence_penalty", "frequency_penalty")
        fmt = request.response_format
        if fmt is not None and fmt.get("type") == "json":
            if fmt.get("schema") is None:
                warnings.append({"type": "unsupported-setting", "setting": "responseFormat"})
            else:
                body["output_config"] = {"format": {"type": "json_schema", "schema": fmt["schema"]}}
        merge_options(body, settings.provider_options.get("anthropic"))
        return body, warnings


def translate_error(exc: Exception) -> ModelCallError:
    """An ``anthropic`` SDK exception (or a malformed stream) as a :class:`ModelCallError`.

    A stream ``error`` event surfaces as a status error with the stream's HTTP status (200), so
    the status is taken from the error type instead.
    """
    import anthropic
    import httpx2

    if isinstance(exc, anthropic.APIStatusError):
        body = exc.body
        error = body.get("error") if isinstance(body, Mapping) else None
        status = exc.status_code
        if status < 400 and isinstance(error, Mapping):
            status = _ERROR_STATUS.get(str(error.get("type")), status)
        return call_error(vendor_message(body, exc.message), status_code=status, body=body)
    if isinstance(exc, anthropic.APIConnectionError):
        return connection_error(exc)
    if isinstance(exc, httpx2.TransportError):  # the SDK does not wrap errors while streaming
        return connection_error(exc)
    if isinstance(exc, anthropic.APIError):
        return call_error(vendor_message(exc.body, exc.message), body=exc.body)
    return call_error(f"Malformed Anthropic stream: {exc!r}")


def anthropic_messages(prompt: list[PromptMessage]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """An AI SDK prompt as Anthropic ``system`` blocks and ``messages``.

    Tool results travel in user messages; consecutive messages of one Anthropic role are merged,
    since the API wants the roles to alternate.
    """
    system: list[dict[str, Any]] = []
    messages: list[dict[str, Any]] = []
    for message in prompt:
        role, content = message["role"], message["content"]
        if role == "system":
            system.append({"type": "text", "text": content})
            continue
        if role == "assistant":
            target, blocks = "assistant", [b for part in content if (b := _assistant_block(part)) is not None]
        elif role == "tool":
            target, blocks = "user", [_tool_result(part) for part in content]
        else:
            target, blocks = "user", [_user_block(part) for part in content]
        if messages and messages[-1]["role"] == target:
            messages[-1]["content"].extend(blocks)
        else:
            messages.append({"role": target, "content": blocks})
    return system, messages


def _user_block(part: dict[str, Any]) -> dict[str, Any]:
    if part["type"] == "text":
        return {"type": "text", "text": part["text"]}
    media_type = str(part["mediaType"])
    kind, value = file_data(part)
    if kind == "url":
        source: dict[str, Any] = {"type": "url", "url": value}
    else:
        source = {"type": "base64", "media_type": media_type, "data": value}
    if media_type.startswith("image/"):
        return {"type": "image", "source": source}
    if media_type == "application/pdf":
        return {"type": "document", "source": source}
    if media_type == "text/plain" and kind == "base64":
        text = base64.b64decode(value).decode("utf-8")
        return {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": text}}
    raise InvalidInputError(f"Anthropic does not take {media_type} file parts")


def _tool_result(part: dict[str, Any]) -> dict[str, Any]:
    output = part["output"]
    return {
        "type": "tool_result",
        "tool_use_id": part["toolCallId"],
        "content": tool_output_text(output),
        "is_error": output.get("type") in ("error-text", "error-json"),
    }


def _assistant_block(part: dict[str, Any]) -> dict[str, Any] | None:
    kind = part["type"]
    if kind == "text":
        return {"type": "text", "text": part["text"]}
    if kind == "tool-call":
        return {
            "type": "tool_use",
            "id": part["toolCallId"],
            "name": part["toolName"],
            "input": part["input"],
        }
    if kind == "reasoning":  # Anthropic takes thinking back only with its signature
        meta = part_metadata(part, "anthropic")
        if meta.get("signature"):
            return {"type": "thinking", "thinking": part["text"], "signature": meta["signature"]}
        if meta.get("redactedData"):
            return {"type": "redacted_thinking", "data": meta["redactedData"]}
    return None


def _raw(event: Any) -> object:
    return event.to_dict()


class _AnthropicMapper:
    """Raw Messages events to parts."""

    __slots__ = (
        "_blocks",
        "_cache_write",
        "_finish",
        "_message_id",
        "_sources",
        "_stop_sequence",
        "_usage",
        "done",
    )

    def __init__(self) -> None:
        self.done = False
        self._blocks: dict[int, list[str]] = {}  # index -> [kind, part id, tool name, input json]
        self._usage: Usage = {}
        self._cache_write: int | None = None
        self._finish: FinishReason = "unknown"
        self._stop_sequence: str | None = None
        self._message_id = ""
        self._sources = 0

    def map(self, event: RawMessageStreamEvent) -> list[StreamPart]:
        if event.type == "content_block_delta":
            delta = event.delta
            index = str(event.index)
            if delta.type == "text_delta":
                return [{"type": "text-delta", "id": index, "delta": delta.text}]
            if delta.type == "thinking_delta":
                return [{"type": "reasoning-delta", "id": index, "delta": delta.thinking}]
            if delta.type == "input_json_delta":
                block = self._blocks.get(event.index)
                if block is None or not delta.partial_json:
                    return []
                block[3] += delta.partial_json
                return [{"type": "tool-input-delta", "id": block[1], "delta": delta.partial_json}]
            if delta.type == "signature_delta":
                meta = {"anthropic": {"signature": delta.signature}}
                return [{"type": "reasoning-delta", "id": index, "delta": "", "providerMetadata": meta}]
            if delta.type == "citations_delta":
                return self._citation(delta.citation)
            return []
        if event.type == "content_block_start":
            return self._block_start(event.index, event.content_block)
        if event.type == "content_block_stop":
            return self._block_stop(event.index)
        if event.type == "message_start":
            message = event.message
            self._message_id = message.id
            self._update_usage(message.usage)
            return [{"type": "response-metadata", "id": message.id, "modelId": message.model}]
        if event.type == "message_delta":
            self._update_usage(event.usage)
            reason = event.delta.stop_reason
            self._finish = _STOP_REASONS.get(reason, "unknown") if reason is not None else "unknown"
            self._stop_sequence = event.delta.stop_sequence
            return []
        if event.type == "message_stop":
            self.done = True
        return []

    def end(self) -> StreamPart | None:
        if not self.done:
            return None
        usage = self._usage
        usage["totalTokens"] = usage.get("inputTokens", 0) + usage.get("outputTokens", 0)
        meta = {"cacheCreationInputTokens": self._cache_write, "stopSequence": self._stop_sequence}
        return {
            "type": "finish",
            "finishReason": self._finish,
            "usage": usage,
            "providerMetadata": {"anthropic": meta},
        }

    def _update_usage(self, raw: Any) -> None:
        """``message_start`` carries the input counts, ``message_delta`` the cumulative output."""
        usage = self._usage
        if raw.input_tokens is not None:
            usage["inputTokens"] = raw.input_tokens
        if raw.output_tokens is not None:
            usage["outputTokens"] = raw.output_tokens
        if raw.cache_read_input_tokens is not None:
            usage["cachedInputTokens"] = raw.cache_read_input_tokens
        if raw.cache_creation_input_tokens is not None:
            usage["cacheCreationInputTokens"] = self._cache_write = raw.cache_creation_input_tokens
        details = raw.output_tokens_details
        if details is not None:
            usage["reasoningTokens"] = details.thinking_tokens

    def _block_start(self, index: int, block: Any) -> list[StreamPart]:
        kind, part_id = block.type, str(index)
        if kind == "text":
            self._blocks[index] = ["text", part_id, "", ""]
            return [{"type": "text-start", "id": part_id}]
        if kind == "thinking":
            self._blocks[index] = ["reasoning", part_id, "", ""]
            return [{"type": "reasoning-start", "id": part_id}]
        if kind == "redacted_thinking":
            self._blocks[index] = ["reasoning", part_id, "", ""]
            meta = {"anthropic": {"redactedData": block.data}}
            return [{"type": "reasoning-start", "id": part_id, "providerMetadata": meta}]
        if kind == "tool_use":
            self._blocks[index] = ["tool", block.id, block.name, ""]
            return [{"type": "tool-input-start", "id": block.id, "toolName": block.name}]
        if kind == "web_search_tool_result" and isinstance(block.content, list):
            return [self._source(result.url, result.title) for result in block.content]
        return []

    def _block_stop(self, index: int) -> list[StreamPart]:
        block = self._blocks.pop(index, None)
        if block is None:
            return []
        kind, part_id, name, args = block
        if kind == "text":
            return [{"type": "text-end", "id": part_id}]
        if kind == "reasoning":
            return [{"type": "reasoning-end", "id": part_id}]
        return [
            {"type": "tool-input-end", "id": part_id},
            {"type": "tool-call", "toolCallId": part_id, "toolName": name, "input": args or "{}"},
        ]

    def _citation(self, citation: Any) -> list[StreamPart]:
        if citation.type == "web_search_result_location":
            return [self._source(citation.url, citation.title)]
        if citation.type in ("char_location", "page_location"):
            self._sources += 1
            media_type = "text/plain" if citation.type == "char_location" else "application/pdf"
            return [
                {
                    "type": "source",
                    "sourceType": "document",
                    "id": f"{self._message_id}-src-{self._sources}",
                    "mediaType": media_type,
                    "title": citation.document_title or "Document",
                    "providerMetadata": {"anthropic": {"citedText": citation.cited_text}},
                }
            ]
        return []

    def _source(self, url: str, title: str | None) -> StreamPart:
        self._sources += 1
        return {
            "type": "source",
            "sourceType": "url",
            "id": f"{self._message_id}-src-{self._sources}",
            "url": url,
            "title": title,
        }
