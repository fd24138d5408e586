"""Anthropic Messages on the official ``anthropic`` SDK (``stream=True``, raw events).

Requests and parts follow the AI SDK's ``@ai-sdk/anthropic`` 3.0 (what Mastra 1.71 runs): the
body as its ``getArgs`` builds it (the model's output-token ceiling as ``max_tokens``, thinking
budgets added to it, ``eager_input_streaming`` tools, camelCase ``providerOptions.anthropic``
such as ``thinking.budgetTokens``, ``cacheControl``, ``sendReasoning``, ``effort``), the prompt
as ``_anthropic_prompt`` converts it, the stream as ``_anthropic_stream`` maps it. Any other
``providerOptions.anthropic`` key is merged into the body as the vendor names it. The SDK is
imported when a model is built, so it stays an optional extra.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, NotRequired, TypedDict

from typing_extensions import Unpack

from runstream._json import JsonValue
from runstream.models._anthropic_prompt import CacheControl, anthropic_messages
from runstream.models._anthropic_stream import AnthropicMapper, CitationDocument
from runstream.models._common import (
    AbortScope,
    ClientOptions,
    ProviderModel,
    call_error,
    connection_error,
    merge_options,
    open_stream,
    retries_for,
    sdk_client_arguments,
    stream_parts,
    unsupported,
    vendor_message,
    without_sdk_retries,
)
from runstream.models.base import FunctionToolSpec, ModelCallError, ModelRequest, ModelStream
from runstream.models.parts import CallWarning

if TYPE_CHECKING:
    from anthropic import AsyncAnthropic

__all__ = ["AnthropicModel", "anthropic_messages", "translate_error"]

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

# providerOptions.anthropic keys the AI SDK reads (camelCase); the rest go into the body as they are.
_OPTION_KEYS = frozenset(
    (
        "thinking",
        "sendReasoning",
        "effort",
        "speed",
        "inferenceGeo",
        "cacheControl",
        "metadata",
        "disableParallelToolUse",
        "structuredOutputMode",
        "toolStreaming",
        "anthropicBeta",
    )
)


_LEGACY = re.compile(r"claude-(?:instant(?:-|$)|v?2(?=$|[-.:])|3(?=$|[-.]))")


def model_capabilities(model_id: str) -> tuple[int, bool, bool]:
    """``(max output tokens, structured output, known model)`` as the AI SDK's table has them."""
    for names, tokens, structured in (
        (("claude-opus-5",), 128_000, True),
        (("claude-opus-4-8", "claude-opus-4-7", "claude-fable-5", "claude-sonnet-5"), 128_000, True),
        (("claude-sonnet-4-6", "claude-opus-4-6"), 128_000, True),
        (("claude-sonnet-4-5", "claude-opus-4-5", "claude-haiku-4-5"), 64_000, True),
        (("claude-opus-4-1",), 32_000, True),
        (("claude-sonnet-4-",), 64_000, False),
        (("claude-opus-4-",), 32_000, False),
        (("claude-3-haiku",), 4096, False),
    ):
        if any(name in model_id for name in names):
            return tokens, structured, True
    if _LEGACY.search(model_id):
        return 4096, False, False
    if "claude-" in model_id:
        return 128_000, True, False
    return 4096, False, False


class AnthropicModel(ProviderModel["AsyncAnthropic"]):
    """``POST /v1/messages`` with ``stream=True`` (what ``anthropic/<model>`` resolves to)."""

    def __init__(
        self, model_id: str, *, client: AsyncAnthropic | None = None, **options: Unpack[ClientOptions]
    ) -> None:
        super().__init__(model_id, "anthropic", client, options)

    def _new_client(self, options: ClientOptions) -> AsyncAnthropic:
        from anthropic import AsyncAnthropic

        return AsyncAnthropic(**sdk_client_arguments(options))

    def _without_sdk_retries(self, client: AsyncAnthropic) -> AsyncAnthropic:
        return without_sdk_retries(client)

    async def stream(self, request: ModelRequest) -> ModelStream:
        body, warnings, betas = self._body(request)
        client = self.client
        headers = dict(request.settings.headers or {})
        if betas:
            given = [b.strip() for b in headers.pop("anthropic-beta", "").split(",") if b.strip()]
            headers["anthropic-beta"] = ",".join(dict.fromkeys([*given, *betas]))
        rest = {
            key: value
            for key, value in body.items()
            if key not in ("model", "max_tokens", "messages", "stream")
        }
        scope = AbortScope(request.abort_signal)

        async def call() -> _FirstEventRead:
            stream = await client.messages.create(
                model=self.model_id,
                max_tokens=body["max_tokens"],
                messages=body["messages"],
                stream=True,
                extra_body=rest,
                extra_headers=headers or None,
            )
            return await _FirstEventRead.read(stream)

        source = await open_stream(
            scope,
            call,
            _translate_call_error,
            max_retries=retries_for(request, self.max_retries),
            policy=self.retry,
            what=f"anthropic/{self.model_id}",
        )
        parts = stream_parts(
            source,
            AnthropicMapper(_citation_documents(request), json_tool=self._json_tool(request) is not None),
            scope,
            warnings=warnings,
            raw=_raw if request.include_raw_chunks else None,
            translate=translate_error,
            vendor="Anthropic",
        )
        return ModelStream(parts, request={"body": body}, response={"headers": dict(source.response.headers)})

    def _json_tool(self, request: ModelRequest) -> FunctionToolSpec | None:
        """The AI SDK's ``json`` tool, for structured output from a model without ``output_config``."""
        fmt = request.response_format
        schema = fmt.get("schema") if fmt is not None and fmt["type"] == "json" else None
        if schema is None:
            return None
        options = request.settings.provider_options.get("anthropic") or {}
        mode = options.get("structuredOutputMode", "auto")
        if mode == "outputFormat" or (mode == "auto" and model_capabilities(self.model_id)[1]):
            return None
        return {
            "type": "function",
            "name": "json",
            "description": "Respond with a JSON object.",
            "inputSchema": schema,
        }

    def _body(self, request: ModelRequest) -> tuple[dict[str, Any], list[CallWarning], list[str]]:
        """The request body, the warnings and the ``anthropic-beta`` values, as ``getArgs`` makes them."""
        settings = request.settings
        given = dict(settings.provider_options.get("anthropic") or {})
        options = {key: given.pop(key) for key in list(given) if key in _OPTION_KEYS}
        warnings = unsupported(request, "seed", "presence_penalty", "frequency_penalty")
        max_output, structured, known = model_capabilities(self.model_id)
        if not known and settings.max_output_tokens is None:
            details = (
                f'The model "{self.model_id}" is unknown. The max output tokens have been limited to '
                f"{max_output}. Set maxOutputTokens explicitly to override this limit."
            )
            warnings.append({"type": "compatibility", "feature": "maxOutputTokens", "details": details})
        temperature = settings.temperature
        if temperature is not None and not 0 <= temperature <= 1:
            temperature = min(max(temperature, 0.0), 1.0)
            warnings.append({"type": "unsupported-setting", "setting": "temperature"})
        cache = CacheControl(warnings)
        betas: set[str] = set()
        system, messages = anthropic_messages(
            request.prompt,
            warnings=warnings,
            cache=cache,
            send_reasoning=options.get("sendReasoning", True) is not False,
            betas=betas,
        )
        max_tokens = settings.max_output_tokens or max_output
        body: dict[str, Any] = {"model": self.model_id, "max_tokens": max_tokens}
        for key, value in (
            ("temperature", temperature),
            ("top_k", settings.top_k),
            ("top_p", settings.top_p),
            ("stop_sequences", settings.stop_sequences),
        ):
            if value is not None:
                body[key] = value
        thinking = _thinking(options.get("thinking"), warnings)
        if thinking is not None:
            body["thinking"] = thinking
            if thinking["type"] != "disabled":
                for key in ("temperature", "top_k", "top_p"):
                    if body.pop(key, None) is not None:
                        warnings.append({"type": "unsupported-setting", "setting": _SETTING[key]})
                body["max_tokens"] = max_tokens + thinking.get("budget_tokens", 0)
        elif "temperature" in body and "top_p" in body:  # Anthropic takes one of the two
            del body["top_p"]
            warnings.append({"type": "unsupported-setting", "setting": "topP"})
        if known and body["max_tokens"] > max_output:
            body["max_tokens"] = max_output
        _output_config(body, options, request.response_format, structured, warnings)
        for key, name in (
            ("speed", "speed"),
            ("inferenceGeo", "inference_geo"),
            ("cacheControl", "cache_control"),
        ):
            if options.get(key):
                body[name] = options[key]
        metadata = options.get("metadata")
        if isinstance(metadata, Mapping) and metadata.get("userId") is not None:
            body["metadata"] = {"user_id": metadata["userId"]}
        if system is not None:
            body["system"] = system
        body["messages"] = messages
        json_tool = self._json_tool(request)
        _tools(body, request, options, cache, betas, structured and json_tool is None, json_tool)
        body["stream"] = True
        merge_options(body, given)
        if options.get("speed") == "fast":
            betas.add("fast-mode-2026-02-01")
        extra = options.get("anthropicBeta")
        return body, warnings, sorted(betas) + list(extra if isinstance(extra, list) else [])


_SETTING = {"temperature": "temperature", "top_k": "topK", "top_p": "topP"}


class _Thinking(TypedDict):
    """The body's ``thinking``."""

    type: Literal["enabled", "adaptive", "disabled"]
    budget_tokens: NotRequired[int]
    display: NotRequired[JsonValue]


def _thinking(value: object, warnings: list[CallWarning]) -> _Thinking | None:
    """``providerOptions.anthropic.thinking`` (``budgetTokens`` or the vendor's ``budget_tokens``)."""
    if not isinstance(value, Mapping) or value.get("type") not in ("enabled", "adaptive", "disabled"):
        return None
    thinking: _Thinking = {"type": value["type"]}
    budget = value.get("budgetTokens", value.get("budget_tokens"))
    if value["type"] == "enabled":
        if budget is None:
            warnings.append(
                {
                    "type": "compatibility",
                    "feature": "extended thinking",
                    "details": "thinking budget is required when thinking is enabled. using default budget of 1024 tokens.",
                }
            )
            budget = 1024
        thinking["budget_tokens"] = budget
    elif value["type"] == "adaptive" and value.get("display") is not None:
        thinking["display"] = value["display"]
    return thinking


def _output_config(
    body: dict[str, Any],
    options: Mapping[str, Any],
    response_format: Mapping[str, Any] | None,
    structured: bool,
    warnings: list[CallWarning],
) -> None:
    config: dict[str, Any] = {}
    if options.get("effort"):
        config["effort"] = options["effort"]
    if response_format is not None and response_format.get("type") == "json":
        mode = options.get("structuredOutputMode", "auto")
        if response_format.get("schema") is None:
            warnings.append({"type": "unsupported-setting", "setting": "responseFormat"})
        elif mode == "outputFormat" or (mode == "auto" and structured):
            config["format"] = {"type": "json_schema", "schema": response_format["schema"]}
    if config:
        body["output_config"] = config


def _tools(
    body: dict[str, Any],
    request: ModelRequest,
    options: Mapping[str, Any],
    cache: CacheControl,
    betas: set[str],
    structured: bool,
    json_tool: FunctionToolSpec | None = None,
) -> None:
    """``tools`` and ``tool_choice`` as the AI SDK's ``prepareTools`` makes them (with the ``json``
    tool: that tool required, no parallel calls)."""
    choice = request.tool_choice
    parallel = options.get("disableParallelToolUse")
    specs: list[Any] = list(request.tools)
    if json_tool is not None:
        specs.append(json_tool)
        choice, parallel = {"type": "required"}, True
    if not specs or (choice is not None and choice["type"] == "none"):
        return
    eager = options.get("toolStreaming", True) is not False
    tools = []
    for tool in specs:
        spec: dict[str, Any] = {
            "name": tool["name"],
            "description": tool["description"],
            "input_schema": tool["inputSchema"],
        }
        tool_options: Any = tool.get("providerOptions")
        control = cache.get(tool_options, "tool definition")
        if control:
            spec["cache_control"] = control
        if eager and (tool_options or {}).get("anthropic", {}).get("eagerInputStreaming", True) is not False:
            spec["eager_input_streaming"] = True
        tools.append(spec)
        if structured:
            betas.add("structured-outputs-2025-11-13")
    body["tools"] = tools
    if choice is None:
        if parallel:
            body["tool_choice"] = {"type": "auto", "disable_parallel_tool_use": parallel}
        return
    kind = choice["type"]
    tool_choice: dict[str, Any] = (
        {"type": "tool", "name": choice["toolName"]}
        if kind == "tool"
        else {"type": "any" if kind == "required" else "auto"}
    )
    if parallel is not None:
        tool_choice["disable_parallel_tool_use"] = parallel
    body["tool_choice"] = tool_choice


def _citation_documents(request: ModelRequest) -> list[CitationDocument]:
    """The prompt's user documents with citations enabled, which document citations index."""
    documents: list[CitationDocument] = []
    for message in request.prompt:
        if message["role"] != "user":
            continue
        for part in message["content"]:
            if part["type"] != "file" or part.get("mediaType") not in ("application/pdf", "text/plain"):
                continue
            options = (part.get("providerOptions") or {}).get("anthropic") or {}
            if (options.get("citations") or {}).get("enabled"):
                filename = part.get("filename")
                doc: CitationDocument = {
                    "title": filename or "Untitled Document",
                    "mediaType": part["mediaType"],
                }
                if filename is not None:
                    doc["filename"] = filename
                documents.append(doc)
    return documents


class _FirstEventRead:
    """The SDK's stream with its first event already read: as the AI SDK does before it returns
    the stream, so that an ``error`` event in first place fails the call (an ``APICallError``)
    instead of streaming a plain error."""

    __slots__ = ("_first", "_stream", "response")

    def __init__(self, stream: Any, first: Any) -> None:
        self._stream = stream
        self._first = first
        self.response = stream.response

    @classmethod
    async def read(cls, stream: Any) -> _FirstEventRead:
        try:
            first = await stream.__anext__()
        except StopAsyncIteration:
            first = _END
        except BaseException:
            await stream.close()
            raise
        return cls(stream, first)

    async def __anext__(self) -> Any:
        first = self._first
        if first is None:
            return await self._stream.__anext__()
        self._first = None
        if first is _END:
            raise StopAsyncIteration
        return first

    async def close(self) -> None:
        await self._stream.close()


_END = object()


def _translate_call_error(exc: Exception) -> ModelCallError:
    return translate_error(exc, streaming=False)


def translate_error(exc: Exception, *, streaming: bool = True) -> ModelCallError:
    """An ``anthropic`` SDK exception (or a malformed stream) as a :class:`ModelCallError`.

    A stream ``error`` event surfaces as a status error with the stream's HTTP status (200); the
    status is taken from its error type. Once streaming, the AI SDK forwards its ``error`` object
    as is, which Mastra streams as a plain ``Error`` (so named here); as the stream's first event
    it fails the call like an HTTP error.
    """
    import anthropic
    import httpx2

    if isinstance(exc, anthropic.APIStatusError):
        body = exc.body
        error = body.get("error") if isinstance(body, Mapping) else None
        status = exc.status_code
        if status < 400 and isinstance(error, Mapping):
            status = _ERROR_STATUS.get(str(error.get("type")), 500)
            message = vendor_message(body, exc.message)
            failed = call_error(message, status_code=status, body=body)
            if streaming:
                failed.name = "Error"
            return failed
        headers = exc.response.headers
        return call_error(vendor_message(body, exc.message), status_code=status, body=body, headers=headers)
    if isinstance(exc, anthropic.APIConnectionError):
        return connection_error(exc)
    if isinstance(exc, httpx2.TransportError):  # the SDK does not wrap errors while streaming
        return connection_error(exc)
    if isinstance(exc, anthropic.APIError):
        return call_error(vendor_message(exc.body, exc.message), body=exc.body)
    return call_error(f"Malformed Anthropic stream: {exc!r}")


def _raw(event: Any) -> object:
    return event.to_dict()
