"""Google Gemini (Generative Language API) on the official ``google-genai`` SDK.

``POST /v1beta/models/{model}:streamGenerateContent?alt=sse``, the stream mapped to parts as the
AI SDK's ``@ai-sdk/google`` maps it (what ``google/<model>`` is in Mastra): text and thought
blocks numbered per call (``"0"``, ``"1"`` ...), ``thoughtSignature`` as
``providerMetadata.google.thoughtSignature`` on the part that carried it, function calls with
ids made here (Gemini sends none), grounding chunks as ``source`` parts, code execution as
provider-executed tool calls, and a v3 ``finish`` (``{unified, raw}`` reason, nested usage).

The body is :func:`~runstream.models._google_body.google_body`'s, sent through the SDK's
``extra_body``: the SDK's own serialisation would re-encode thought signatures as URL-safe
base64, upper-case schema types and add ``property_ordering``, so the request would no longer
be the one Mastra sends. The SDK still makes the call: URL, key, headers, timeout, SSE
parsing, typed responses and errors. It is imported when a model is built (an optional extra).
"""

from __future__ import annotations

import base64
import json
import secrets
import string
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, TypedDict

from typing_extensions import Unpack

from runstream._json import JsonObject
from runstream.models._common import (
    AbortScope,
    ClientOptions,
    ProviderModel,
    call_error,
    connection_error,
    open_stream,
    retries_for,
    stream_parts,
)
from runstream.models._google_body import google_body
from runstream.models.base import ModelCallError, ModelRequest, ModelStream, StreamPart
from runstream.models.parts import (
    FileStreamPart,
    FinishPart,
    FinishReason,
    FinishReasonV3,
    MetadataPart,
    ProviderMetadata,
    SourcePart,
    ToolCallPart,
    UsageV3,
)

if TYPE_CHECKING:
    from google.genai import Client
    from google.genai.types import GenerateContentResponse, HttpOptions

DEFAULT_BASE_URL = "https://generativelanguage.googleapis.com/v1beta"

_FINISH_REASONS: dict[str, FinishReason] = {
    "MAX_TOKENS": "length",
    "IMAGE_SAFETY": "content-filter",
    "RECITATION": "content-filter",
    "SAFETY": "content-filter",
    "BLOCKLIST": "content-filter",
    "PROHIBITED_CONTENT": "content-filter",
    "SPII": "content-filter",
    "MALFORMED_FUNCTION_CALL": "error",
}

_ALPHANUMERIC = string.digits + string.ascii_uppercase + string.ascii_lowercase


def generate_id() -> str:
    """A 16-character id, as the AI SDK's ``generateId`` makes tool call and source ids."""
    return "".join(secrets.choice(_ALPHANUMERIC) for _ in range(16))


def split_base_url(base_url: str) -> tuple[str, str]:
    """``(host URL, API version)`` of a base URL given the AI SDK's way (``…/v1beta``)."""
    root, _, last = base_url.rstrip("/").rpartition("/")
    if root and last.startswith("v1"):
        return root, last
    return base_url.rstrip("/"), "v1beta"


class GoogleModel(ProviderModel["Client"]):
    """Gemini ``streamGenerateContent`` (what ``google/<model>`` resolves to)."""

    def __init__(
        self, model_id: str, *, client: Client | None = None, **options: Unpack[ClientOptions]
    ) -> None:
        super().__init__(model_id, "google", client, options)

    def _new_client(self, options: ClientOptions) -> Client:
        from google import genai

        host, version = split_base_url(options.get("base_url") or DEFAULT_BASE_URL)
        http = _http_options(options.get("headers"))
        http.base_url, http.api_version = host, version
        timeout = options.get("timeout")
        if timeout is not None:
            http.timeout = int(timeout * 1000)
        return genai.Client(api_key=options.get("api_key"), http_options=http)

    async def stream(self, request: ModelRequest) -> ModelStream:
        from google.genai import types

        body, warnings = google_body(request, self.model_id)
        settings = request.settings
        options = _http_options(settings.headers)
        options.extra_body = body  # the whole body: see the module docstring
        config = types.GenerateContentConfig(http_options=options)
        models = self.client.aio.models
        scope = AbortScope(request.abort_signal)

        async def call() -> _Chunks:
            chunks = await models.generate_content_stream(
                model=self.model_id, contents=[types.Content(role="user")], config=config
            )
            try:  # the request is made on the first read
                first = await chunks.__anext__()
            except StopAsyncIteration:
                return _Chunks(chunks, None)
            except BaseException:
                await _aclose(chunks)
                raise
            return _Chunks(chunks, first)

        source = await open_stream(
            scope,
            call,
            translate_error,
            max_retries=retries_for(request, self.max_retries),
            policy=self.retry,
            what=f"google/{self.model_id}",
        )
        parts = stream_parts(
            source,
            _GoogleMapper(include_raw=request.include_raw_chunks),
            scope,
            warnings=warnings,
            raw=None,
            translate=translate_error,
            vendor="Google",
        )
        return ModelStream(parts, request={"body": body}, response={"headers": dict(source.headers)})


def _http_options(headers: Mapping[str, str] | None) -> HttpOptions:
    """The SDK makes one attempt: runstream retries (``_common``), so there is one retry policy."""
    from google.genai import types

    retry = types.HttpRetryOptions(attempts=1)
    return types.HttpOptions(retry_options=retry, headers=dict(headers) if headers else None)


class _End:
    """Marks the end of the vendor stream for the mapper (Gemini sends no terminal event)."""


_END = _End()


class _Chunks:
    """The SDK's async generator of responses, its first one already read, then :data:`_END`."""

    __slots__ = ("_chunks", "_first", "_over", "headers")

    def __init__(
        self, chunks: AsyncIterator[GenerateContentResponse], first: GenerateContentResponse | None
    ) -> None:
        self._chunks = chunks
        self._first = first
        self._over = first is None
        http = first.sdk_http_response if first is not None else None
        self.headers: dict[str, str] = dict(http.headers or {}) if http is not None else {}

    async def __anext__(self) -> GenerateContentResponse | _End:
        first = self._first
        if first is not None:
            self._first = None
            return first
        if self._over:
            raise StopAsyncIteration
        try:
            return await self._chunks.__anext__()
        except StopAsyncIteration:
            self._over = True
            return _END

    async def close(self) -> None:
        await _aclose(self._chunks)


async def _aclose(chunks: AsyncIterator[Any]) -> None:
    """Close the SDK's generator (its HTTP response is closed as its generators unwind)."""
    aclose = getattr(chunks, "aclose", None)
    if aclose is not None:
        await aclose()


def translate_error(exc: Exception) -> ModelCallError:
    """A ``google-genai`` exception (or a malformed stream) as a :class:`ModelCallError`; the
    message is the one of Google's error JSON (``{"error": {"code", "message", "status"}}``)."""
    import httpx2
    from google.genai import errors

    if isinstance(exc, errors.APIError):
        body = exc.details
        message = exc.message or exc.status or f"HTTP {exc.code}"
        headers = getattr(exc.response, "headers", None)
        return call_error(str(message), status_code=exc.code, body=body, headers=headers)
    if isinstance(exc, httpx2.TransportError):
        return connection_error(exc)
    return call_error(f"Malformed Google stream: {exc!r}")


def _signature(part: Any) -> ProviderMetadata | None:
    signature = part.thought_signature
    if not signature:
        return None
    return {"google": {"thoughtSignature": base64.b64encode(signature).decode("ascii")}}


def _with_pm(part: MetadataPart, meta: ProviderMetadata | None) -> MetadataPart:
    if meta is not None:
        part["providerMetadata"] = meta
    return part


class _GoogleMapper:
    """``GenerateContentResponse`` chunks to parts (the AI SDK's ``doStream`` transform)."""

    __slots__ = (
        "_blocks",
        "_code_call",
        "_finish",
        "_grounding",
        "_include_raw",
        "_metadata",
        "_reasoning",
        "_response_id",
        "_server_call",
        "_sources",
        "_text",
        "_tool_calls",
        "_url_context",
        "_usage",
        "done",
    )

    def __init__(self, *, include_raw: bool) -> None:
        self.done = False
        self._include_raw = include_raw
        self._response_id = False
        self._usage: Any = None
        self._finish: FinishReasonV3 = {"unified": "other"}
        self._metadata: ProviderMetadata | None = None
        self._grounding: Any = None
        self._url_context: Any = None
        self._text: str | None = None
        self._reasoning: str | None = None
        self._blocks = 0
        self._sources: set[str] = set()
        self._tool_calls = False
        self._code_call: str | None = None
        self._server_call: str | None = None

    def map(self, event: GenerateContentResponse | _End) -> list[StreamPart]:
        if isinstance(event, _End):
            self.done = True
            return self._close_blocks()
        out: list[StreamPart] = []
        if self._include_raw:
            out.append({"type": "raw", "rawValue": raw_value(event)})
        if not self._response_id and event.response_id is not None:
            self._response_id = True
            out.append({"type": "response-metadata", "id": event.response_id})
        if event.usage_metadata is not None:
            self._usage = event.usage_metadata  # (made a dict once, at the end)
        candidate = event.candidates[0] if event.candidates else None
        if candidate is None:
            return out
        if candidate.grounding_metadata is not None:
            self._grounding = pick(_dump(candidate.grounding_metadata), GROUNDING_SHAPE)
        if candidate.url_context_metadata is not None:
            self._url_context = pick(_dump(candidate.url_context_metadata), URL_CONTEXT_SHAPE)
        if candidate.grounding_metadata is not None:
            for source in extract_sources(self._grounding):
                url = source.get("url")
                if source["sourceType"] == "url" and url is not None and url not in self._sources:
                    self._sources.add(url)
                    out.append(source)
        content = candidate.content
        if content is not None and content.parts:
            for part in content.parts:
                out.extend(self._part(part))
            for part in content.parts:
                if part.function_call is not None:
                    out.extend(self._function_call(part))
        if candidate.finish_reason is not None:
            self._finished(event, candidate)
        return out

    def end(self) -> FinishPart | None:
        usage = None if self._usage is None else pick(_dump(self._usage), USAGE_SHAPE)
        return {
            "type": "finish",
            "finishReason": self._finish,
            "usage": v3_usage(usage),
            "providerMetadata": self._metadata,
        }

    def _finished(self, event: GenerateContentResponse, candidate: Any) -> None:
        raw = _enum_value(candidate.finish_reason)
        if raw == "STOP":
            unified: FinishReason = "tool-calls" if self._tool_calls else "stop"
        else:
            unified = _FINISH_REASONS.get(raw, "other")
        self._finish = {"unified": unified, "raw": raw}
        ratings = candidate.safety_ratings
        feedback = event.prompt_feedback
        usage = event.usage_metadata
        self._metadata = {
            "google": {
                "promptFeedback": pick(_dump(feedback), FEEDBACK_SHAPE) if feedback is not None else None,
                "groundingMetadata": self._grounding,
                "urlContextMetadata": self._url_context,
                "safetyRatings": [pick(_dump(r), RATING_SHAPE) for r in ratings]
                if ratings is not None
                else None,
                "usageMetadata": pick(_dump(usage), USAGE_SHAPE) if usage is not None else None,
                "finishMessage": candidate.finish_message,
                "serviceTier": _enum_value(tier)
                if (tier := getattr(self._usage, "service_tier", None))
                else None,
            }
        }

    def _close_blocks(self) -> list[StreamPart]:
        out: list[StreamPart] = []
        if self._text is not None:
            out.append({"type": "text-end", "id": self._text})
            self._text = None
        if self._reasoning is not None:
            out.append({"type": "reasoning-end", "id": self._reasoning})
            self._reasoning = None
        return out

    def _part(self, part: Any) -> list[StreamPart]:
        if part.executable_code is not None and part.executable_code.code:
            self._code_call = call_id = generate_id()
            code = part.executable_code
            args = {"language": _enum_value(code.language), "code": code.code}
            return [
                {
                    "type": "tool-call",
                    "toolCallId": call_id,
                    "toolName": "code_execution",
                    "input": _json(args),
                    "providerExecuted": True,
                }
            ]
        if part.code_execution_result is not None:
            if self._code_call is None:
                return []
            result = part.code_execution_result
            value = {"outcome": _enum_value(result.outcome), "output": result.output or ""}
            return [
                {
                    "type": "tool-result",
                    "toolCallId": self._code_call,
                    "toolName": "code_execution",
                    "result": value,
                }
            ]
        if part.text is not None:
            return self._text_part(part)
        if part.inline_data is not None:
            return self._file(part)
        if part.tool_call is not None:
            return [self._server_tool_call(part)]
        if part.tool_response is not None:
            return [self._server_tool_result(part)]
        return []

    def _text_part(self, part: Any) -> list[StreamPart]:
        meta = _signature(part)
        text: str = part.text
        if not text:
            if meta is not None and self._text is not None:
                return [{"type": "text-delta", "id": self._text, "delta": "", "providerMetadata": meta}]
            return []
        out: list[StreamPart] = []
        if part.thought:
            if self._text is not None:
                out.append({"type": "text-end", "id": self._text})
                self._text = None
            if self._reasoning is None:
                self._reasoning = str(self._blocks)
                self._blocks += 1
                out.append(_with_pm({"type": "reasoning-start", "id": self._reasoning}, meta))
            out.append(_with_pm({"type": "reasoning-delta", "id": self._reasoning, "delta": text}, meta))
            return out
        if self._reasoning is not None:
            out.append({"type": "reasoning-end", "id": self._reasoning})
            self._reasoning = None
        if self._text is None:
            self._text = str(self._blocks)
            self._blocks += 1
            out.append(_with_pm({"type": "text-start", "id": self._text}, meta))
        out.append(_with_pm({"type": "text-delta", "id": self._text, "delta": text}, meta))
        return out

    def _file(self, part: Any) -> list[StreamPart]:
        out = self._close_blocks()
        blob = part.inline_data
        google: JsonObject = {}
        if part.thought:
            google["thought"] = True
        signature = _signature(part)
        if signature is not None:
            google.update(signature["google"])
        data = base64.b64encode(blob.data or b"").decode("ascii")
        file: FileStreamPart = {"type": "file", "mediaType": blob.mime_type, "data": data}
        out.append(_with_pm(file, {"google": google} if google else None))
        return out

    def _server_tool_call(self, part: Any) -> StreamPart:
        call = part.tool_call
        call_id = call.id or generate_id()
        self._server_call = call_id
        tool_type = _enum_value(call.tool_type)
        return {
            "type": "tool-call",
            "toolCallId": call_id,
            "toolName": f"server:{tool_type}",
            "input": _json(call.args or {}),
            "providerExecuted": True,
            "dynamic": True,
            "providerMetadata": _server_meta(part, call_id, tool_type),
        }

    def _server_tool_result(self, part: Any) -> StreamPart:
        response = part.tool_response
        call_id = self._server_call or response.id or generate_id()
        self._server_call = None
        tool_type = _enum_value(response.tool_type)
        return {
            "type": "tool-result",
            "toolCallId": call_id,
            "toolName": f"server:{tool_type}",
            "result": response.response or {},
            "providerMetadata": _server_meta(part, call_id, tool_type),
        }

    def _function_call(self, part: Any) -> list[StreamPart]:
        """A complete ``functionCall`` (the Gemini API streams no partial arguments)."""
        call = part.function_call
        if call.name is None:
            return []
        meta = _signature(part)
        call_id = call.id or generate_id()
        name = call.name
        args = None if call.args is None else _json(call.args)
        out: list[StreamPart] = [
            _with_pm({"type": "tool-input-start", "id": call_id, "toolName": name}, meta)
        ]
        if args is not None:
            out.append(_with_pm({"type": "tool-input-delta", "id": call_id, "delta": args}, meta))
        out.append(_with_pm({"type": "tool-input-end", "id": call_id}, meta))
        tool_call: ToolCallPart = {
            "type": "tool-call",
            "toolCallId": call_id,
            "toolName": name,
            "input": args or "{}",
        }
        out.append(_with_pm(tool_call, meta))
        self._tool_calls = True
        return out


def _server_meta(part: Any, call_id: str, tool_type: str) -> ProviderMetadata:
    google: JsonObject = {}
    signature = _signature(part)
    if signature is not None:
        google.update(signature["google"])
    google.update(serverToolCallId=call_id, serverToolType=tool_type)
    return {"google": google}


class GeminiUsage(TypedDict, total=False):
    """The token counts of Gemini's ``usageMetadata`` that v3 usage reads (other keys pass to ``raw``)."""

    promptTokenCount: int
    candidatesTokenCount: int
    cachedContentTokenCount: int
    thoughtsTokenCount: int


class _GroundingUrl(TypedDict, total=False):
    uri: str
    sourceUri: str
    title: str


class _RetrievedContext(TypedDict, total=False):
    uri: str
    fileSearchStore: str
    title: str


class _GroundingChunk(TypedDict, total=False):
    web: _GroundingUrl
    image: _GroundingUrl
    retrievedContext: _RetrievedContext
    maps: _GroundingUrl


class GroundingMetadata(TypedDict, total=False):
    """The part of Gemini's ``groundingMetadata`` that ``source`` parts are made of."""

    groundingChunks: list[_GroundingChunk]


def v3_usage(usage: GeminiUsage | None) -> UsageV3:
    """Gemini ``usageMetadata`` as AI SDK v3 usage (thought tokens are output tokens)."""
    if usage is None:
        return {"inputTokens": {}, "outputTokens": {}}
    prompt = usage.get("promptTokenCount") or 0
    candidates = usage.get("candidatesTokenCount") or 0
    cached = usage.get("cachedContentTokenCount") or 0
    thoughts = usage.get("thoughtsTokenCount") or 0
    return {
        "inputTokens": {"total": prompt, "noCache": prompt - cached, "cacheRead": cached},
        "outputTokens": {"total": candidates + thoughts, "text": candidates, "reasoning": thoughts},
        "raw": dict(usage),
    }


def extract_sources(grounding: GroundingMetadata | None) -> list[SourcePart]:
    """``source`` parts of grounding chunks (web, image, retrieved context, maps)."""
    sources: list[SourcePart] = []
    for chunk in (grounding or {}).get("groundingChunks") or ():
        web, image, maps = chunk.get("web"), chunk.get("image"), chunk.get("maps")
        context = chunk.get("retrievedContext")
        if web is not None:
            sources.append(_url_source(web["uri"], web.get("title")))
        elif image is not None:
            sources.append(_url_source(image["sourceUri"], image.get("title")))
        elif context is not None:
            source = _context_source(context)
            if source is not None:
                sources.append(source)
        elif maps is not None and maps.get("uri"):
            sources.append(_url_source(maps["uri"], maps.get("title")))
    return sources


def _url_source(url: str, title: str | None) -> SourcePart:
    source: SourcePart = {"type": "source", "sourceType": "url", "id": generate_id(), "url": url}
    if title is not None:
        source["title"] = title
    return source


_DOCUMENT_TYPES = {
    ".pdf": "application/pdf",
    ".txt": "text/plain",
    ".docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    ".doc": "application/msword",
    ".md": "text/markdown",
    ".markdown": "text/markdown",
}


def _context_source(context: _RetrievedContext) -> SourcePart | None:
    uri, store = context.get("uri"), context.get("fileSearchStore")
    if uri and uri.startswith(("http://", "https://")):
        return _url_source(uri, context.get("title"))
    if not uri and not store:
        return None
    name = str(uri or store)
    extension = "." + name.rsplit(".", 1)[-1] if uri and "." in name else ""
    return {
        "type": "source",
        "sourceType": "document",
        "id": generate_id(),
        "mediaType": _DOCUMENT_TYPES.get(extension, "application/octet-stream"),
        "title": context.get("title") or "Unknown Document",
        "filename": name.rsplit("/", 1)[-1],
    }


# What the AI SDK's response schema keeps of each metadata object (zod drops other keys):
# True keeps a value as is, a dict keeps those keys (lists are picked item by item).
Shape: TypeAlias = "dict[str, Literal[True] | Shape]"
_TOKEN_DETAILS: Shape = {"modality": True, "tokenCount": True}
USAGE_SHAPE: Shape = {
    "cachedContentTokenCount": True,
    "thoughtsTokenCount": True,
    "promptTokenCount": True,
    "candidatesTokenCount": True,
    "totalTokenCount": True,
    "trafficType": True,
    "serviceTier": True,
    "promptTokensDetails": _TOKEN_DETAILS,
    "candidatesTokensDetails": _TOKEN_DETAILS,
}
RATING_SHAPE: Shape = dict.fromkeys(
    ("category", "probability", "probabilityScore", "severity", "severityScore", "blocked"), True
)
FEEDBACK_SHAPE: Shape = {"blockReason": True, "safetyRatings": RATING_SHAPE}
URL_CONTEXT_SHAPE: Shape = {"urlMetadata": {"retrievedUrl": True, "urlRetrievalStatus": True}}
GROUNDING_SHAPE: Shape = {
    "webSearchQueries": True,
    "imageSearchQueries": True,
    "retrievalQueries": True,
    "searchEntryPoint": {"renderedContent": True},
    "groundingChunks": {
        "web": {"uri": True, "title": True},
        "image": {"sourceUri": True, "imageUri": True, "title": True, "domain": True},
        "retrievedContext": {"uri": True, "title": True, "text": True, "fileSearchStore": True},
        "maps": {"uri": True, "title": True, "text": True, "placeId": True},
    },
    "groundingSupports": {
        "segment": {"startIndex": True, "endIndex": True, "text": True},
        "groundingChunkIndices": True,
        "supportChunkIndices": True,
        "confidenceScores": True,
    },
    "retrievalMetadata": {"webDynamicRetrievalScore": True},
}


def pick(value: Any, shape: Literal[True] | Shape) -> Any:
    """``value`` with only the keys ``shape`` names, recursively."""
    if shape is True or value is None:
        return value
    if isinstance(value, list):
        return [pick(item, shape) for item in value]
    if isinstance(value, Mapping):
        return {key: pick(value[key], inner) for key, inner in shape.items() if key in value}
    return value


def _dump(model: Any) -> Any:
    """An SDK object as the API's JSON (camelCase, unset fields left out)."""
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def raw_value(event: GenerateContentResponse) -> Any:
    """A response chunk as the API sent it, as near as the SDK's parsed object allows: its bytes in
    the standard base64 Gemini sends (the SDK's dump would give them URL-safe)."""
    value = event.model_dump(mode="json", by_alias=True, exclude_none=True, exclude={"sdk_http_response"})
    for candidate, parsed in zip(value.get("candidates") or (), event.candidates or (), strict=False):
        parts = (candidate.get("content") or {}).get("parts") or ()
        for part, typed in zip(parts, (parsed.content.parts if parsed.content else None) or (), strict=False):
            if typed.thought_signature:
                part["thoughtSignature"] = base64.b64encode(typed.thought_signature).decode("ascii")
            if typed.inline_data is not None and typed.inline_data.data is not None:
                part["inlineData"]["data"] = base64.b64encode(typed.inline_data.data).decode("ascii")
    return value


def _enum_value(value: Any) -> str:
    return str(getattr(value, "value", value))


def _json(value: Any) -> str:
    """``JSON.stringify`` of a value: compact, non-ASCII kept, an integral number without ``.0``
    (Gemini's arguments are protobuf ``Struct`` numbers: ``2`` arrives as ``2.0`` in some SDK paths)."""
    return json.dumps(_js_numbers(value), separators=(",", ":"), ensure_ascii=False)


def _js_numbers(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return int(value)
    if isinstance(value, dict):
        return {key: _js_numbers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_js_numbers(item) for item in value]
    return value
