"""The provider-facing model protocol.

A :class:`LanguageModel` turns a :class:`ModelRequest` into a stream of *provider stream parts*:
plain dicts shaped exactly like the AI SDK's ``LanguageModelV2StreamPart`` (``{"type":
"text-delta", "id": ..., "delta": ...}``). Dicts rather than classes because every token crosses
this boundary; the loop validates nothing on the hot path and providers build exactly these
shapes. This module imports nothing of the loop, chunks or agent: a provider is usable alone.

Prompt messages follow ``LanguageModelV2Prompt``:

* ``{"role": "system", "content": str}``
* ``{"role": "user", "content": [{"type": "text", "text"} | {"type": "file", "mediaType", "data"}]}``
* ``{"role": "assistant", "content": [text | reasoning | file | {"type": "tool-call", "toolCallId",
  "toolName", "input": <parsed args>}]}``
* ``{"role": "tool", "content": [{"type": "tool-result", "toolCallId", "toolName", "output":
  {"type": "json" | "text" | "error-text" | "error-json", "value": ...}}]}``
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal, NotRequired, Protocol, TypedDict, runtime_checkable

from runstream._json import JsonObject
from runstream.abort import AbortSignal
from runstream.errors import RunstreamError
from runstream.models import parts, prompt
from runstream.models.parts import FinishReason as FinishReason
from runstream.models.parts import Usage as Usage

StreamPart = parts.StreamPart
"""One provider stream part (``LanguageModelV2StreamPart`` shape, tagged by ``type``)."""

PromptMessage = prompt.PromptMessage
"""One prompt message (``LanguageModelV2Prompt`` element, tagged by ``role``)."""


def tool_result_output(value: Any, *, is_error: bool = False) -> prompt.ToolResultOutput:
    """A tool result as a prompt ``output``: text for strings, JSON otherwise (AI SDK's rule)."""
    if is_error:
        return {"type": "error-text", "value": str(value)}
    if isinstance(value, str):
        return {"type": "text", "value": value}
    return {"type": "json", "value": value}


class FunctionToolSpec(TypedDict):
    """A tool as offered to the model."""

    type: Literal["function"]
    name: str
    description: str
    inputSchema: JsonObject


class ToolChoice(TypedDict):
    """``{"type": "auto" | "none" | "required"}`` or ``{"type": "tool", "toolName": name}``."""

    type: Literal["auto", "none", "required", "tool"]
    toolName: NotRequired[str]


class ResponseFormat(TypedDict):
    """``LanguageModelV2CallOptions.responseFormat``: text, or JSON (with a schema, a name and a
    description when given)."""

    type: Literal["text", "json"]
    schema: NotRequired[JsonObject | None]
    name: NotRequired[str]
    description: NotRequired[str]


@dataclass(slots=True)
class ModelSettings:
    """Per-call sampling settings (``model_settings=`` on ``stream()``/``generate()``)."""

    temperature: float | None = None
    max_output_tokens: int | None = None
    top_p: float | None = None
    top_k: int | None = None
    stop_sequences: list[str] | None = None
    seed: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    max_retries: int | None = None
    headers: dict[str, str] | None = None
    provider_options: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass(slots=True)
class ModelRequest:
    """Everything a provider needs for one streamed model call."""

    prompt: list[PromptMessage]
    tools: list[FunctionToolSpec] = field(default_factory=list)
    tool_choice: ToolChoice | None = None
    response_format: ResponseFormat | None = None
    include_raw_chunks: bool = False
    settings: ModelSettings = field(default_factory=ModelSettings)
    abort_signal: AbortSignal | None = None


@dataclass(slots=True)
class ModelStream:
    """The result of :meth:`LanguageModel.stream`: the parts plus request/response info."""

    parts: AsyncIterator[StreamPart]
    request: JsonObject = field(default_factory=dict)
    """What was sent (``{"body": ...}``: the vendor's request JSON)."""
    response: JsonObject = field(default_factory=dict)
    """What came back besides the parts (``{"headers": ...}``)."""


class ModelCallError(RunstreamError):
    """A model request failed (HTTP status, vendor error). Becomes an ``error`` chunk, named
    ``AI_APICallError`` by default (the wire name of the AI SDK's ``APICallError``, as Mastra
    streams it)."""

    def __init__(
        self,
        message: str,
        *,
        status_code: int | None = None,
        name: str = "AI_APICallError",
        retryable: bool = False,
        body: object = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.name = name
        self.status_code = status_code
        self.retryable = retryable
        self.body = body
        self.retry_after = retry_after
        """Seconds the vendor asked to wait before a retry (``retry-after``), if it said."""


@runtime_checkable
class LanguageModel(Protocol):
    """A streaming chat model. ``stream`` may raise (the request failed) or yield an
    ``{"type": "error"}`` part (the stream failed mid-way); either becomes an ``error`` chunk.

    Implementations must stop promptly when ``request.abort_signal`` fires, closing any HTTP
    stream they hold.
    """

    @property
    def provider(self) -> str: ...

    @property
    def model_id(self) -> str: ...

    @property
    def specification_version(self) -> str:
        """``"v2"`` or ``"v3"`` (the AI SDK part/usage shapes the model speaks)."""
        ...

    async def stream(self, request: ModelRequest) -> ModelStream: ...
