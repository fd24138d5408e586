"""OpenAI providers on the official ``openai`` SDK: the Responses API and Chat Completions.

:class:`OpenAIChatModel` also speaks to any OpenAI-compatible server (Ollama, vLLM, llama.cpp,
LM Studio, OpenRouter) by ``base_url``. The event mapping follows the AI SDK's ``@ai-sdk/openai``
and ``@ai-sdk/openai-compatible`` providers; a refusal is streamed as text and finishes with
``content-filter``. The SDK is imported when a model is built, so it stays an optional extra.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from runstream.errors import InvalidInputError
from runstream.models._common import (
    DEFAULT_MAX_RETRIES,
    DEFAULT_RETRY_POLICY,
    AbortScope,
    RetryPolicy,
    call_error,
    connection_error,
    data_url,
    file_data,
    merge_options,
    open_stream,
    retries_for,
    stream_parts,
    tool_output_text,
    unsupported,
    vendor_message,
)
from runstream.models._openai_responses import ResponsesMapper, check_start, responses_input
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
    from openai import AsyncOpenAI
    from openai.types.chat import ChatCompletionChunk

_RESPONSES_UNSUPPORTED = ("top_k", "seed", "presence_penalty", "frequency_penalty", "stop_sequences")


class _OpenAIModel:
    """Client handling shared by both APIs."""

    specification_version = "v2"

    def __init__(
        self,
        model_id: str,
        *,
        provider: str = "openai",
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float | None = None,
        max_retries: int = DEFAULT_MAX_RETRIES,
        headers: Mapping[str, str] | None = None,
        client: AsyncOpenAI | None = None,
        retry: RetryPolicy = DEFAULT_RETRY_POLICY,
    ) -> None:
        self.model_id = model_id
        self.provider = provider
        self.max_retries = max_retries
        """Retries of a call whose settings name none (runstream retries; the SDK's are off)."""
        self.retry = retry
        if client is None:
            from openai import AsyncOpenAI

            extra: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
            client = AsyncOpenAI(
                api_key=api_key, base_url=base_url, max_retries=0, default_headers=headers, **extra
            )
        elif client.max_retries:
            client = client.with_options(max_retries=0)
        self.client = client

    def _reasoning_model(self) -> bool:
        """OpenAI's reasoning models take ``developer`` messages and no sampling settings."""
        model = self.model_id
        return (
            self.provider == "openai"
            and model.startswith(("o1", "o3", "o4", "gpt-5"))
            and not model.startswith("gpt-5-chat")
        )

    def _sampling(self, request: ModelRequest, body: dict[str, Any]) -> list[str]:
        """Put temperature/top_p unless the model rejects them; returns the settings left out."""
        if self._reasoning_model():
            return ["temperature", "top_p"]
        _put(body, temperature=request.settings.temperature, top_p=request.settings.top_p)
        return []

    async def _open(self, request: ModelRequest, scope: AbortScope, call: Any) -> Any:
        """The vendor request, with runstream's retries (see ``_common``)."""
        return await open_stream(
            scope,
            call,
            translate_error,
            max_retries=retries_for(request, self.max_retries),
            policy=self.retry,
            what=f"{self.provider}/{self.model_id}",
        )


def translate_error(exc: Exception) -> ModelCallError:
    """An ``openai`` SDK exception (or a malformed stream) as a :class:`ModelCallError`."""
    import openai

    if isinstance(exc, ModelCallError):  # already one (an error event before any output)
        return exc
    if isinstance(exc, openai.APIStatusError):
        message = vendor_message(exc.body, exc.message)
        headers = exc.response.headers
        return call_error(message, status_code=exc.status_code, body=exc.body, headers=headers)
    if isinstance(exc, openai.APIConnectionError):
        return connection_error(exc)
    if isinstance(exc, openai.APIError):  # an error object inside a Chat Completions stream
        return call_error(vendor_message(exc.body, exc.message), body=exc.body)
    return call_error(f"Malformed OpenAI stream: {exc!r}")


def _put(body: dict[str, Any], **values: Any) -> None:
    body.update((key, value) for key, value in values.items() if value is not None)


def _timestamp(seconds: float | None) -> datetime | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, UTC)


def _metadata(id_: object, model_id: object, created: float | None) -> StreamPart:
    return {"type": "response-metadata", "id": id_, "modelId": model_id, "timestamp": _timestamp(created)}


# --------------------------------------------------------------------------- Responses API


class OpenAIResponsesModel(_OpenAIModel):
    """``POST /responses`` with ``stream=True`` (what ``openai/<model>`` resolves to).

    The input items and the parts follow ``@ai-sdk/openai`` (see :mod:`._openai_responses`); the
    ``store`` provider option (default: stored) decides whether earlier items go back by reference.
    """

    async def stream(self, request: ModelRequest) -> ModelStream:
        body, warnings = self._body(request)
        client = self.client
        headers = request.settings.headers
        scope = AbortScope(request.abort_signal)
        source = await self._open(
            request,
            scope,
            lambda: check_start_of(
                client.responses.create(
                    model=self.model_id, stream=True, extra_body=body, extra_headers=headers
                )
            ),
        )
        parts = stream_parts(
            source,
            ResponsesMapper(store=body.get("store"), vendor=self._vendor()),
            scope,
            warnings=warnings,
            raw=_raw if request.include_raw_chunks else None,
            translate=translate_error,
            vendor="OpenAI",
        )
        sent = {"model": self.model_id, "stream": True, **body}
        return ModelStream(parts, request={"body": sent}, response={"headers": dict(source.response.headers)})

    def _vendor(self) -> str:
        """The provider-metadata key: ``azure`` for Azure OpenAI, as the AI SDK names it."""
        return "azure" if "azure" in self.provider else "openai"

    def _body(self, request: ModelRequest) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        system_role = "developer" if self._reasoning_model() else "system"
        options = request.settings.provider_options.get(self.provider) or {}
        store = options.get("store")
        vendor = self._vendor()
        body: dict[str, Any] = {
            "input": responses_input(request.prompt, system_role, store=store is not False, vendor=vendor)
        }
        ignored = [*_RESPONSES_UNSUPPORTED, *self._sampling(request, body)]
        _put(body, max_output_tokens=request.settings.max_output_tokens)
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "name": tool["name"],
                    "description": tool["description"],
                    "parameters": tool["inputSchema"],
                }
                for tool in request.tools
            ]
        if request.tool_choice is not None:
            choice = request.tool_choice
            body["tool_choice"] = (
                {"type": "function", "name": choice["toolName"]}
                if choice["type"] == "tool"
                else choice["type"]
            )
        fmt = request.response_format
        if fmt is not None and fmt.get("type") == "json":
            schema = fmt.get("schema")
            name = fmt.get("name") or "response"
            body["text"] = {
                "format": {"type": "json_schema", "strict": True, "name": name, "schema": schema}
                if schema is not None
                else {"type": "json_object"}
            }
        merge_options(body, options)
        if store is False and self._reasoning_model():
            include = body.setdefault("include", [])
            if "reasoning.encrypted_content" not in include:
                include.append("reasoning.encrypted_content")
        return body, unsupported(request, *ignored)


async def check_start_of(opening: Awaitable[Any]) -> Any:
    """The opened stream, read up to its first output (see :func:`check_start`)."""
    return await check_start(await opening)


def _raw(event: Any) -> object:
    return event.to_dict()


# --------------------------------------------------------------------------- Chat Completions


class OpenAIChatModel(_OpenAIModel):
    """``POST /chat/completions`` with ``stream=True``: OpenAI, or an OpenAI-compatible server.

    For a server other than OpenAI (``provider`` not ``"openai"``) the request uses ``max_tokens``
    and the reasoning a server streams as ``reasoning_content`` (vLLM, DeepSeek) or
    ``reasoning`` (Ollama, OpenRouter) becomes reasoning parts.
    """

    async def stream(self, request: ModelRequest) -> ModelStream:
        body, warnings = self._body(request)
        client = self.client
        headers = request.settings.headers
        rest = {key: value for key, value in body.items() if key != "messages"}
        scope = AbortScope(request.abort_signal)
        source = await self._open(
            request,
            scope,
            lambda: client.chat.completions.create(
                model=self.model_id,
                messages=body["messages"],
                stream=True,
                extra_body=rest,
                extra_headers=headers,
            ),
        )
        parts = stream_parts(
            source,
            _ChatMapper(),
            scope,
            warnings=warnings,
            raw=_raw if request.include_raw_chunks else None,
            translate=translate_error,
            vendor="OpenAI" if self.provider == "openai" else f"OpenAI-compatible ({self.provider})",
        )
        sent = {"model": self.model_id, "stream": True, **body}
        return ModelStream(parts, request={"body": sent}, response={"headers": dict(source.response.headers)})

    def _body(self, request: ModelRequest) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        settings = request.settings
        system_role = "developer" if self._reasoning_model() else "system"
        body: dict[str, Any] = {"messages": chat_messages(request.prompt, system_role)}
        ignored = ["top_k", *self._sampling(request, body)]
        max_key = "max_completion_tokens" if self.provider == "openai" else "max_tokens"
        _put(
            body,
            **{max_key: settings.max_output_tokens},
            stop=settings.stop_sequences,
            seed=settings.seed,
            presence_penalty=settings.presence_penalty,
            frequency_penalty=settings.frequency_penalty,
        )
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": tool["name"],
                        "description": tool["description"],
                        "parameters": tool["inputSchema"],
                    },
                }
                for tool in request.tools
            ]
        if request.tool_choice is not None:
            choice = request.tool_choice
            body["tool_choice"] = (
                {"type": "function", "function": {"name": choice["toolName"]}}
                if choice["type"] == "tool"
                else choice["type"]
            )
        fmt = request.response_format
        if fmt is not None and fmt.get("type") == "json":
            schema = fmt.get("schema")
            body["response_format"] = (
                {
                    "type": "json_schema",
                    "json_schema": {"name": fmt.get("name") or "response", "schema": schema},
                }
                if schema is not None
                else {"type": "json_object"}
            )
        body["stream_options"] = {"include_usage": True}
        merge_options(body, settings.provider_options.get(self.provider))
        return body, unsupported(request, *ignored)


def chat_messages(prompt: list[PromptMessage], system_role: str) -> list[dict[str, Any]]:
    """An AI SDK prompt as Chat Completions ``messages`` (reasoning parts are not sent back)."""
    messages: list[dict[str, Any]] = []
    for message in prompt:
        role, content = message["role"], message["content"]
        if role == "system":
            messages.append({"role": system_role, "content": content})
        elif role == "user":
            if len(content) == 1 and content[0]["type"] == "text":
                messages.append({"role": "user", "content": content[0]["text"]})
            else:
                messages.append({"role": "user", "content": [_chat_user_part(part) for part in content]})
        elif role == "assistant":
            text = "".join(part["text"] for part in content if part["type"] == "text")
            calls = [
                {
                    "id": part["toolCallId"],
                    "type": "function",
                    "function": {"name": part["toolName"], "arguments": json.dumps(part["input"])},
                }
                for part in content
                if part["type"] == "tool-call"
            ]
            messages.append({"role": "assistant", "content": text} | ({"tool_calls": calls} if calls else {}))
        elif role == "tool":
            messages.extend(
                {
                    "role": "tool",
                    "tool_call_id": part["toolCallId"],
                    "content": tool_output_text(part["output"]),
                }
                for part in content
            )
    return messages


_AUDIO_FORMATS = {"audio/wav": "wav", "audio/mpeg": "mp3", "audio/mp3": "mp3"}


def _chat_user_part(part: dict[str, Any]) -> dict[str, Any]:
    if part["type"] == "text":
        return {"type": "text", "text": part["text"]}
    media_type = str(part["mediaType"])
    if media_type.startswith("image/"):
        return {"type": "image_url", "image_url": {"url": data_url(part)}}
    if media_type == "application/pdf":
        filename = part.get("filename") or "file.pdf"
        return {"type": "file", "file": {"filename": filename, "file_data": data_url(part)}}
    if media_type in _AUDIO_FORMATS:
        return {
            "type": "input_audio",
            "input_audio": {"data": file_data(part)[1], "format": _AUDIO_FORMATS[media_type]},
        }
    raise InvalidInputError(f"Chat Completions does not take {media_type} file parts")


_CHAT_FINISH: dict[str, FinishReason] = {
    "stop": "stop",
    "length": "length",
    "content_filter": "content-filter",
    "tool_calls": "tool-calls",
    "function_call": "tool-calls",
    "error": "error",
}


class _ChatMapper:
    """Chat chunks to parts; tool calls are complete (``tool-call``) when ``finish_reason`` comes."""

    __slots__ = (
        "_finish",
        "_id",
        "_reasoning",
        "_refused",
        "_sources",
        "_text",
        "_tools",
        "_usage",
        "done",
    )

    def __init__(self) -> None:
        self.done = False
        self._id: str | None = None  # set by the first chunk
        self._text = False
        self._reasoning = False
        self._refused = False
        self._tools: dict[int, list[str]] = {}  # index -> [id, name, arguments]
        self._finish: FinishReason | None = None
        self._usage: Usage = {}
        self._sources = 0

    def map(self, chunk: ChatCompletionChunk) -> list[StreamPart]:
        parts: list[StreamPart] = []
        if self._id is None:
            self._id = getattr(chunk, "id", None) or "chatcmpl"  # compatible servers may leave fields out
            model, created = getattr(chunk, "model", None), getattr(chunk, "created", None)
            parts.append(_metadata(self._id, model, created))
        if chunk.usage is not None:
            self._usage = _chat_usage(chunk.usage)
        if not chunk.choices:
            return parts
        choice = chunk.choices[0]
        delta = choice.delta
        extra = delta.model_extra
        if extra:
            reasoning = extra.get("reasoning_content") or extra.get("reasoning")
            if isinstance(reasoning, str) and reasoning:
                if not self._reasoning:
                    self._reasoning = True
                    parts.append({"type": "reasoning-start", "id": "reasoning-0"})
                parts.append({"type": "reasoning-delta", "id": "reasoning-0", "delta": reasoning})
        text = delta.content
        if delta.refusal:
            self._refused = True
            text = (text or "") + delta.refusal
        if text:
            if not self._text:
                self._close_reasoning(parts)
                self._text = True
                parts.append({"type": "text-start", "id": "txt-0"})
            parts.append({"type": "text-delta", "id": "txt-0", "delta": text})
        if delta.tool_calls:
            self._close_reasoning(parts)
            for call in delta.tool_calls:
                self._tool_delta(call, parts)
        if extra:
            self._extras(extra, parts)
        if choice.finish_reason is not None:
            self._finish = _CHAT_FINISH.get(choice.finish_reason, "unknown")
            self._close(parts)
        return parts

    def end(self) -> StreamPart | None:
        if self._finish is None:
            return None
        finish = "content-filter" if self._refused and self._finish == "stop" else self._finish
        return {"type": "finish", "finishReason": finish, "usage": self._usage}

    def _tool_delta(self, call: Any, parts: list[StreamPart]) -> None:
        index = getattr(call, "index", None)  # some compatible servers send no index
        if index is None:
            index = len(self._tools)
        function = call.function
        args = function.arguments if function is not None else None
        entry = self._tools.get(index)
        if entry is None:
            if not call.id or function is None or not function.name:
                raise ValueError(f"tool call delta {index} starts without an id and function name")
            entry = self._tools[index] = [call.id, function.name, ""]
            parts.append({"type": "tool-input-start", "id": call.id, "toolName": function.name})
        if args:
            entry[2] += args
            parts.append({"type": "tool-input-delta", "id": entry[0], "delta": args})

    def _extras(self, extra: dict[str, Any], parts: list[StreamPart]) -> None:
        """What OpenAI (annotations) and OpenRouter (images) add to a delta beyond the SDK types."""
        for annotation in extra.get("annotations") or ():
            citation = annotation.get("url_citation") if isinstance(annotation, dict) else None
            if isinstance(citation, dict):
                self._sources += 1
                source_id = f"{self._id}-src-{self._sources}"
                url, title = citation.get("url"), citation.get("title")
                parts.append(
                    {"type": "source", "sourceType": "url", "id": source_id, "url": url, "title": title}
                )
        for image in extra.get("images") or ():
            url = (image.get("image_url") or {}).get("url", "") if isinstance(image, dict) else ""
            if url.startswith("data:") and ";base64," in url:
                media_type, data = url[5:].split(";base64,", 1)
                parts.append({"type": "file", "mediaType": media_type, "data": data})

    def _close_reasoning(self, parts: list[StreamPart]) -> None:
        if self._reasoning:
            self._reasoning = False
            parts.append({"type": "reasoning-end", "id": "reasoning-0"})

    def _close(self, parts: list[StreamPart]) -> None:
        self._close_reasoning(parts)
        if self._text:
            self._text = False
            parts.append({"type": "text-end", "id": "txt-0"})
        for call_id, name, args in self._tools.values():
            parts.append({"type": "tool-input-end", "id": call_id})
            parts.append(
                {"type": "tool-call", "toolCallId": call_id, "toolName": name, "input": args or "{}"}
            )
        self._tools.clear()


def _chat_usage(usage: Any) -> Usage:
    result: Usage = {
        "inputTokens": usage.prompt_tokens,
        "outputTokens": usage.completion_tokens,
        "totalTokens": usage.total_tokens,
    }
    details = usage.completion_tokens_details
    if details is not None and details.reasoning_tokens is not None:
        result["reasoningTokens"] = details.reasoning_tokens
    prompt_details = usage.prompt_tokens_details
    if prompt_details is not None and prompt_details.cached_tokens is not None:
        result["cachedInputTokens"] = prompt_details.cached_tokens
    return result
