"""Prompt messages as the AI SDK's ``LanguageModelV2Prompt`` defines them: one ``TypedDict`` per
``role`` joined in :data:`PromptMessage`, and one per content part ``type``.

Plain dicts at runtime. ``Any`` is left where the user's or a vendor's JSON flows: a tool call's
parsed arguments, a tool result's JSON value, ``providerOptions`` values.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypeAlias, TypedDict

from runstream._json import JsonObject

ProviderOptions: TypeAlias = dict[str, dict[str, Any]]
"""``Record<provider, Record<string, JSON>>`` (what a part carries back to its vendor)."""


class TextOutput(TypedDict):
    type: Literal["text", "error-text"]
    value: str


class JsonOutput(TypedDict):
    type: Literal["json", "error-json"]
    value: Any


class ContentOutput(TypedDict):
    type: Literal["content"]
    value: list[JsonObject]


class DeniedOutput(TypedDict):
    type: Literal["execution-denied"]
    reason: NotRequired[str | None]


ToolResultOutput: TypeAlias = TextOutput | JsonOutput | ContentOutput | DeniedOutput
"""A tool result as the model reads it (``LanguageModelV2ToolResultOutput``)."""


class TextPart(TypedDict):
    type: Literal["text"]
    text: str
    providerOptions: NotRequired[ProviderOptions]


class ReasoningPart(TypedDict):
    type: Literal["reasoning"]
    text: str
    providerOptions: NotRequired[ProviderOptions]


class FilePart(TypedDict):
    """A file: base64 text, bytes or a URL; ``mediaType`` may be a wildcard (``image/*``)."""

    type: Literal["file"]
    data: str | bytes
    mediaType: str
    filename: NotRequired[str | None]
    providerOptions: NotRequired[ProviderOptions]


class ToolCallPart(TypedDict):
    """A tool call the assistant made; ``input`` is its parsed arguments (the model's JSON)."""

    type: Literal["tool-call"]
    toolCallId: str
    toolName: str
    input: Any
    providerExecuted: NotRequired[bool]
    providerOptions: NotRequired[ProviderOptions]


class ToolResultPart(TypedDict):
    """A tool's result; ``input`` (runstream's, as Mastra's message list keeps it) is the call's
    arguments, which no vendor is sent."""

    type: Literal["tool-result"]
    toolCallId: str
    toolName: str
    output: ToolResultOutput
    input: NotRequired[Any]
    providerOptions: NotRequired[ProviderOptions]


class ToolApprovalResponsePart(TypedDict):
    """A user's answer to a tool approval request (v3; sent to no vendor)."""

    type: Literal["tool-approval-response"]
    approvalId: str
    approved: bool
    reason: NotRequired[str]


UserPart: TypeAlias = TextPart | FilePart
AssistantPart: TypeAlias = TextPart | ReasoningPart | FilePart | ToolCallPart | ToolResultPart
"""An assistant turn's content (a ``tool-result`` here is a provider-executed tool's)."""


class SystemMessage(TypedDict):
    role: Literal["system"]
    content: str
    providerOptions: NotRequired[ProviderOptions]


class UserMessage(TypedDict):
    role: Literal["user"]
    content: list[UserPart]
    providerOptions: NotRequired[ProviderOptions]


class AssistantMessage(TypedDict):
    role: Literal["assistant"]
    content: list[AssistantPart]
    providerOptions: NotRequired[ProviderOptions]


class ToolMessage(TypedDict):
    role: Literal["tool"]
    content: list[ToolResultPart | ToolApprovalResponsePart]
    providerOptions: NotRequired[ProviderOptions]


PromptMessage: TypeAlias = SystemMessage | UserMessage | AssistantMessage | ToolMessage
"""One prompt message (``LanguageModelV2Prompt`` element), tagged by ``role``."""

PromptPart: TypeAlias = TextPart | ReasoningPart | FilePart | ToolCallPart | ToolResultPart
"""Any content part of a prompt message."""
