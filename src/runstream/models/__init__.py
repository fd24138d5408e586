"""Model protocol and providers."""

from runstream.models.base import (
    FinishReason,
    FunctionToolSpec,
    LanguageModel,
    ModelCallError,
    ModelRequest,
    ModelSettings,
    ModelStream,
    PromptMessage,
    StreamPart,
    Usage,
)

__all__ = [
    "FinishReason",
    "FunctionToolSpec",
    "LanguageModel",
    "ModelCallError",
    "ModelRequest",
    "ModelSettings",
    "ModelStream",
    "PromptMessage",
    "StreamPart",
    "Usage",
]
