"""OpenAI providers on the official ``openai`` SDK: the Responses API and Chat Completions.

:class:`OpenAIChatModel` also speaks to any OpenAI-compatible server (Ollama, vLLM, llama.cpp,
LM Studio, OpenRouter) by ``base_url``. The event mapping follows the AI SDK's ``@ai-sdk/openai``
and ``@ai-sdk/openai-compatible`` providers (Chat Completions: the latter's, as Mastra's ``{id, url}``
models stream it; OpenAI's refusal is streamed as text and finishes with ``content-filter``, a
compatible server's is dropped). The SDK is imported when a model is built, so it stays an optional extra.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from typing_extensions import Unpack

from runstream._json import JsonObject, JsonValue
from runstream.errors import InvalidInputError
from runstream.models._common import (
    AbortScope,
    ClientOptions,
    ProviderModel,
    call_error,
    connection_error,
    data_url,
    file_data,
    merge_options,
    open_stream,
    retries_for,
    sdk_client_arguments,
    stream_parts,
    unsupported,
    vendor_message,
    without_sdk_retries,
)
from runstream.models._openai_responses import ResponsesMapper, check_start, responses_input
from runstream.models.base import ModelCallError, ModelRequest, ModelStream, PromptMessage, StreamPart
from runstream.models.parts import (
    CallWarning,
    FinishPart,
    FinishReason,
    FinishReasonV3,
    InputTokensV3,
    ResponseMetadataPart,
    UsageV3,
)
from runstream.models.prompt import AssistantPart, ToolResultOutput, UserPart

if TYPE_CHECKING:
    from openai import AsyncOpenAI
    from openai.types.chat import ChatCompletionChunk

_RESPONSES_UNSUPPORTED = ("top_k", "seed", "presence_penalty", "frequency_penalty", "stop_sequences")


class _OpenAIModel(ProviderModel["AsyncOpenAI"]):
    """Client handling shared by both APIs."""

    def __init__(
        self,
        model_id: str,
        *,
        provider: str = "openai",
        client: AsyncOpenAI | None = None,
        **options: Unpack[ClientOptions],
    ) -> None:
        super().__init__(model_id, provider, client, options)

    def _new_client(self, options: ClientOptions) -> AsyncOpenAI:
        from openai import AsyncOpenAI

        return AsyncOpenAI(**sdk_client_arguments(options))

    def _without_sdk_retries(self, client: AsyncOpenAI) -> AsyncOpenAI:
        return without_sdk_retries(client)

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
    if isinstance(exc, openai.APIError):  # an error object inside a Chat Completions stream: Mastra
        message = vendor_message(exc.body, exc.message)  # streams it as it came, a plain Error
        return ModelCallError(message, name="Error", body=exc.body)
    return _malformed(repr(exc))


def _malformed(detail: str) -> ModelCallError:
    """A stream that breaks the Chat Completions protocol: a vendor fault like any other."""
    return call_error(f"Malformed OpenAI stream: {detail}")


def _put(body: dict[str, Any], **values: Any) -> None:
    body.update((key, value) for key, value in values.items() if value is not None)


def _timestamp(seconds: float | None) -> datetime | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, UTC)


def _metadata(id_: str | None, model_id: str | None, created: float | None) -> ResponseMetadataPart:
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

    def _body(self, request: ModelRequest) -> tuple[dict[str, Any], list[CallWarning]]:
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
            _ChatMapper(self.provider, refusal_as_text=self.provider == "openai"),
            scope,
            warnings=warnings,
            raw=_raw if request.include_raw_chunks else None,
            translate=translate_error,
            vendor="OpenAI" if self.provider == "openai" else f"OpenAI-compatible ({self.provider})",
        )
        sent = {"model": self.model_id, "stream": True, **body}
        return ModelStream(parts, request={"body": sent}, response={"headers": dict(source.response.headers)})

    def _body(self, request: ModelRequest) -> tuple[dict[str, Any], list[CallWarning]]:
        settings = request.settings
        system_role = "developer" if self._reasoning_model() else "system"
        compatible = self.provider != "openai"
        body: dict[str, Any] = {"messages": chat_messages(request.prompt, system_role, reasoning=compatible)}
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
        if (
            not compatible
        ):  # @ai-sdk/openai asks for usage; @ai-sdk/openai-compatible (Mastra's {id, url}) does not
            body["stream_options"] = {"include_usage": True}
        merge_options(body, settings.provider_options.get(self.provider))
        return body, unsupported(request, *ignored)


def chat_messages(
    prompt: list[PromptMessage], system_role: str, *, reasoning: bool = False
) -> list[JsonValue]:
    """An AI SDK prompt as Chat Completions ``messages``, serialised as the AI SDK does
    (``JSON.stringify``'s compact JSON). With ``reasoning`` (OpenAI-compatible servers, as
    ``@ai-sdk/openai-compatible``) an assistant turn's reasoning goes back as ``reasoning_content``;
    OpenAI itself takes none."""
    messages: list[JsonValue] = []
    for message in prompt:
        if message["role"] == "system":
            messages.append({"role": system_role, "content": message["content"]})
        elif message["role"] == "user":
            content = message["content"]
            first = content[0] if len(content) == 1 else None
            if first is not None and first["type"] == "text":
                messages.append({"role": "user", "content": first["text"]})
            else:
                messages.append({"role": "user", "content": [_chat_user_part(part) for part in content]})
        elif message["role"] == "assistant":
            messages.append(_chat_assistant(message["content"], reasoning))
        elif message["role"] == "tool":
            messages.extend(
                {
                    "role": "tool",
                    "tool_call_id": part["toolCallId"],
                    "content": _chat_tool_output(part["output"]),
                }
                for part in message["content"]
                if part["type"] == "tool-result"
            )
    return messages


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _chat_assistant(content: list[AssistantPart], reasoning: bool) -> JsonObject:
    text = "".join(part["text"] for part in content if part["type"] == "text")
    thought = "".join(part.get("text") or "" for part in content if part["type"] == "reasoning")
    calls: list[JsonValue] = [
        {
            "id": part["toolCallId"],
            "type": "function",
            "function": {"name": part["toolName"], "arguments": _compact(part["input"])},
        }
        for part in content
        if part["type"] == "tool-call" and not part.get("providerExecuted")
    ]
    message: JsonObject = {"role": "assistant", "content": (text or None) if calls else text}
    if reasoning and thought:
        message["reasoning_content"] = thought
    if calls:
        message["tool_calls"] = calls
    return message


def _chat_tool_output(output: ToolResultOutput) -> str:
    """A tool result as the AI SDK sends it: text as is, anything else as compact JSON."""
    if output["type"] == "execution-denied":
        return str(output.get("reason") or "Tool call execution denied.")
    value = output.get("value")
    if output["type"] in ("text", "error-text") and isinstance(value, str):
        return value
    return _compact(value)


_AUDIO_FORMATS = {"audio/wav": "wav", "audio/mpeg": "mp3", "audio/mp3": "mp3"}


def _chat_user_part(part: UserPart) -> JsonObject:
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
}


class _ChatMapper:
    """Chat chunks to parts, as ``@ai-sdk/openai-compatible`` 2.x (v3 parts) maps them.

    Reasoning (``reasoning_content`` or ``reasoning``) is ``reasoning-0`` and text ``txt-0``; a
    tool call opens when its delta names the function (arguments before that are buffered) and is
    complete (``tool-call``) when the stream ends. The end of the stream closes what is open and
    finishes, ``finish_reason`` or not (without one the reason is ``other``, as the AI SDK's, and
    Mastra's loop asks again). ``finish`` carries a v3 reason ``{unified, raw}``, v3 usage and the
    prediction token counts under the provider's name.
    """

    __slots__ = (
        "_finish",
        "_first",
        "_id",
        "_key",
        "_pending",
        "_reasoning",
        "_refusal_as_text",
        "_refused",
        "_sources",
        "_text",
        "_tools",
        "_usage",
        "done",
    )

    def __init__(self, metadata_key: str = "openai", *, refusal_as_text: bool = True) -> None:
        self.done = False
        self._key = metadata_key
        self._refusal_as_text = refusal_as_text
        self._first = True
        self._id: str | None = None
        self._text = False
        self._reasoning = False
        self._refused = False
        self._tools: dict[int, list[str]] = {}  # index -> [id, name, arguments]
        self._pending: dict[int, list[str | None]] = {}  # index -> [id, arguments] until the name comes
        self._finish: FinishReasonV3 = {"unified": "other", "raw": None}
        self._usage: Any = None
        self._sources = 0

    def map(self, chunk: ChatCompletionChunk) -> list[StreamPart]:
        parts: list[StreamPart] = []
        if self._first:
            self._first = False
            self._id = getattr(chunk, "id", None)  # compatible servers may leave fields out
            model, created = getattr(chunk, "model", None), getattr(chunk, "created", None)
            parts.append(_metadata(self._id, model, created))
        if chunk.usage is not None:
            self._usage = chunk.usage
        choice = chunk.choices[0] if chunk.choices else None
        if choice is None:
            return parts
        if choice.finish_reason is not None:
            raw = choice.finish_reason
            self._finish = {"unified": _CHAT_FINISH.get(raw, "other"), "raw": raw}
        delta = choice.delta
        if delta is None:
            return parts
        extra = delta.model_extra or {}
        reasoning = extra.get("reasoning_content") or extra.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            if not self._reasoning:
                self._reasoning = True
                parts.append({"type": "reasoning-start", "id": "reasoning-0"})
            parts.append({"type": "reasoning-delta", "id": "reasoning-0", "delta": reasoning})
        text = delta.content
        if delta.refusal and self._refusal_as_text:
            self._refused = True
            text = (text or "") + delta.refusal
        if text:
            self._close_reasoning(parts)
            if not self._text:
                self._text = True
                parts.append({"type": "text-start", "id": "txt-0"})
            parts.append({"type": "text-delta", "id": "txt-0", "delta": text})
        if delta.tool_calls is not None:
            self._close_reasoning(parts)
            for call in delta.tool_calls:
                self._tool_delta(call, parts)
        if extra:
            self._extras(extra, parts)
        return parts

    def end(self) -> list[StreamPart]:
        """What the AI SDK's ``flush`` sends: open parts closed, tool calls, then ``finish``."""
        parts: list[StreamPart] = []
        self._close_reasoning(parts)
        if self._text:
            parts.append({"type": "text-end", "id": "txt-0"})
        if self._pending:
            index, (call_id, _) = next(iter(self._pending.items()))
            raise _malformed(f"tool call delta {index} ({call_id}) never named its function")
        for call_id, name, args in self._tools.values():
            parts.append({"type": "tool-input-end", "id": call_id})
            parts.append(
                {"type": "tool-call", "toolCallId": call_id, "toolName": name, "input": args or "{}"}
            )
        finish = self._finish.copy()
        if self._refused and finish["unified"] == "stop":
            finish["unified"] = "content-filter"
        usage, metadata = _chat_usage(self._usage)
        done: FinishPart = {
            "type": "finish",
            "finishReason": finish,
            "usage": usage,
            "providerMetadata": {self._key: metadata},
        }
        parts.append(done)
        return parts

    def _tool_delta(self, call: Any, parts: list[StreamPart]) -> None:
        index = getattr(call, "index", None)  # some compatible servers send no index
        function = call.function
        if index is None:
            index = len(self._tools)
            if index not in self._tools and (not call.id or function is None or not function.name):
                raise _malformed("a tool call delta without an index starts without an id and function name")
        entry = self._tools.get(index)
        if entry is None:
            pending = self._pending.setdefault(index, [call.id, ""])
            pending[0] = pending[0] or call.id
            if function is not None and function.arguments is not None:
                pending[1] = f"{pending[1]}{function.arguments}"
            if function is None or function.name is None:
                return
            del self._pending[index]
            call_id, args = pending[0], pending[1] or ""
            if not call_id:
                raise _malformed(f"tool call delta {index} names its function without an id")
            self._tools[index] = [call_id, function.name, args]
            parts.append({"type": "tool-input-start", "id": call_id, "toolName": function.name})
            if args:
                parts.append({"type": "tool-input-delta", "id": call_id, "delta": args})
            return
        if function is None:
            return
        entry[2] += function.arguments or ""
        parts.append({"type": "tool-input-delta", "id": entry[0], "delta": function.arguments or ""})

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


def _chat_usage(usage: Any) -> tuple[UsageV3, JsonObject]:
    """v3 usage (the AI SDK's ``convertOpenAICompatibleChatUsage``) and the provider metadata counts."""
    if usage is None:
        empty: InputTokensV3 = {"total": None, "noCache": None, "cacheRead": None, "cacheWrite": None}
        return {"inputTokens": empty, "outputTokens": {"total": None, "text": None, "reasoning": None}}, {}
    prompt = usage.prompt_tokens or 0
    completion = usage.completion_tokens or 0
    prompt_details, details = usage.prompt_tokens_details, usage.completion_tokens_details
    cached = (prompt_details.cached_tokens if prompt_details is not None else None) or 0
    reasoning = (details.reasoning_tokens if details is not None else None) or 0
    result: UsageV3 = {
        "inputTokens": {"total": prompt, "noCache": prompt - cached, "cacheRead": cached, "cacheWrite": None},
        "outputTokens": {"total": completion, "text": completion - reasoning, "reasoning": reasoning},
        "raw": usage.to_dict(),
    }
    metadata: JsonObject = {}
    if details is not None and details.accepted_prediction_tokens is not None:
        metadata["acceptedPredictionTokens"] = details.accepted_prediction_tokens
    if details is not None and details.rejected_prediction_tokens is not None:
        metadata["rejectedPredictionTokens"] = details.rejected_prediction_tokens
    return result, metadata
