"""Provider stream parts as the AI SDK's ``LanguageModelV2StreamPart`` (and the v3 additions the
providers stream) defines them: one ``TypedDict`` per ``type``, joined in :data:`StreamPart`.

They are plain dicts at runtime (a ``TypedDict`` costs nothing per token); the types let mypy check
every ``part["..."]`` a provider writes or the loop reads, narrowed by ``part["type"] == ...``.
``Any`` is left where vendor or user JSON flows: provider metadata values, tool results, raw events.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal, NotRequired, TypeAlias, TypedDict

FinishReason = Literal["stop", "length", "content-filter", "tool-calls", "error", "other", "unknown"]

ProviderMetadata: TypeAlias = dict[str, dict[str, Any]]
"""``Record<provider, Record<string, JSON>>``: each vendor's own JSON under its name."""


class Usage(TypedDict, total=False):
    """v2 usage (flat token counts)."""

    inputTokens: int
    outputTokens: int
    totalTokens: int
    reasoningTokens: int
    cachedInputTokens: int
    cacheCreationInputTokens: int


class InputTokensV3(TypedDict, total=False):
    total: int | None
    noCache: int | None
    cacheRead: int | None
    cacheWrite: int | None


class OutputTokensV3(TypedDict, total=False):
    total: int | None
    text: int | None
    reasoning: int | None


class UsageV3(TypedDict):
    """v3 usage (token counts split by kind, plus the vendor's raw usage)."""

    inputTokens: InputTokensV3
    outputTokens: OutputTokensV3
    raw: NotRequired[object]


class FinishReasonV3(TypedDict):
    """v3 finish reason: the unified reason and the vendor's own."""

    unified: FinishReason
    raw: NotRequired[str | None]


class CallWarning(TypedDict):
    """``LanguageModelV2CallWarning``: ``unsupported-setting``, ``unsupported-tool``, ``other``
    (v3 adds ``unsupported``/``compatibility`` with ``feature``)."""

    type: str
    setting: NotRequired[str]
    feature: NotRequired[str]
    tool: NotRequired[object]
    details: NotRequired[str]
    message: NotRequired[str]


class StreamStartPart(TypedDict):
    type: Literal["stream-start"]
    warnings: list[CallWarning]


class TextStartPart(TypedDict):
    type: Literal["text-start"]
    id: str
    providerMetadata: NotRequired[ProviderMetadata]


class TextDeltaPart(TypedDict):
    type: Literal["text-delta"]
    id: str
    delta: str
    providerMetadata: NotRequired[ProviderMetadata]


class TextEndPart(TypedDict):
    type: Literal["text-end"]
    id: str
    providerMetadata: NotRequired[ProviderMetadata]


class ReasoningStartPart(TypedDict):
    type: Literal["reasoning-start"]
    id: str
    providerMetadata: NotRequired[ProviderMetadata]


class ReasoningDeltaPart(TypedDict):
    type: Literal["reasoning-delta"]
    id: str
    delta: str
    providerMetadata: NotRequired[ProviderMetadata]


class ReasoningEndPart(TypedDict):
    type: Literal["reasoning-end"]
    id: str
    providerMetadata: NotRequired[ProviderMetadata]


class ToolInputStartPart(TypedDict):
    type: Literal["tool-input-start"]
    id: str
    toolName: str
    providerMetadata: NotRequired[ProviderMetadata]
    providerExecuted: NotRequired[bool]
    dynamic: NotRequired[bool]
    title: NotRequired[str]


class ToolInputDeltaPart(TypedDict):
    type: Literal["tool-input-delta"]
    id: str
    delta: str
    providerMetadata: NotRequired[ProviderMetadata]


class ToolInputEndPart(TypedDict):
    type: Literal["tool-input-end"]
    id: str
    providerMetadata: NotRequired[ProviderMetadata]


class ToolCallPart(TypedDict):
    """A complete tool call; ``input`` is the arguments' JSON text."""

    type: Literal["tool-call"]
    toolCallId: str
    toolName: str
    input: str
    providerExecuted: NotRequired[bool]
    dynamic: NotRequired[bool]
    providerMetadata: NotRequired[ProviderMetadata]


class ToolResultPart(TypedDict):
    """The result of a provider-executed tool (the vendor's JSON)."""

    type: Literal["tool-result"]
    toolCallId: str
    toolName: str
    result: NotRequired[Any]
    isError: NotRequired[bool]
    providerExecuted: NotRequired[bool]
    dynamic: NotRequired[bool]
    preliminary: NotRequired[bool]
    providerMetadata: NotRequired[ProviderMetadata]


class SourcePart(TypedDict):
    """A cited source: ``url`` (``url``, ``title``) or ``document`` (``mediaType``, ``title``, ``filename``)."""

    type: Literal["source"]
    sourceType: Literal["url", "document"]
    id: str
    url: NotRequired[str | None]
    title: NotRequired[str | None]
    mediaType: NotRequired[str | None]
    filename: NotRequired[str | None]
    providerMetadata: NotRequired[ProviderMetadata]


class FileStreamPart(TypedDict):
    """A generated file (base64 text or bytes)."""

    type: Literal["file"]
    mediaType: str
    data: str | bytes
    providerMetadata: NotRequired[ProviderMetadata]


class ResponseMetadataPart(TypedDict):
    type: Literal["response-metadata"]
    id: NotRequired[str | None]
    modelId: NotRequired[str | None]
    timestamp: NotRequired[datetime | None]


class FinishPart(TypedDict):
    type: Literal["finish"]
    finishReason: FinishReason | FinishReasonV3
    usage: Usage | UsageV3
    providerMetadata: NotRequired[ProviderMetadata | None]


class ErrorPart(TypedDict):
    """The stream failed mid-way; ``error`` is an exception or the vendor's error value."""

    type: Literal["error"]
    error: object


class RawPart(TypedDict):
    """A vendor event as it came (only with ``include_raw_chunks``)."""

    type: Literal["raw"]
    rawValue: object


StreamPart: TypeAlias = (
    StreamStartPart
    | TextStartPart
    | TextDeltaPart
    | TextEndPart
    | ReasoningStartPart
    | ReasoningDeltaPart
    | ReasoningEndPart
    | ToolInputStartPart
    | ToolInputDeltaPart
    | ToolInputEndPart
    | ToolCallPart
    | ToolResultPart
    | SourcePart
    | FileStreamPart
    | ResponseMetadataPart
    | FinishPart
    | ErrorPart
    | RawPart
)
"""One provider stream part (``LanguageModelV2StreamPart``), tagged by ``type``."""

BlockPart: TypeAlias = (
    TextStartPart | TextDeltaPart | TextEndPart | ReasoningStartPart | ReasoningDeltaPart | ReasoningEndPart
)
"""A part of a text or reasoning block."""

MetadataPart: TypeAlias = (
    TextStartPart
    | TextDeltaPart
    | TextEndPart
    | ReasoningStartPart
    | ReasoningDeltaPart
    | ReasoningEndPart
    | ToolInputStartPart
    | ToolInputDeltaPart
    | ToolInputEndPart
    | ToolCallPart
    | ToolResultPart
    | SourcePart
    | FileStreamPart
)
"""The parts that may carry ``providerMetadata``."""

StreamPartType = Literal[
    "stream-start",
    "text-start",
    "text-delta",
    "text-end",
    "reasoning-start",
    "reasoning-delta",
    "reasoning-end",
    "tool-input-start",
    "tool-input-delta",
    "tool-input-end",
    "tool-call",
    "tool-result",
    "source",
    "file",
    "response-metadata",
    "finish",
    "error",
    "raw",
]
