"""Values an agent takes as given or as per-request functions (``model``, ``instructions``):
telling the two apart and resolving a function's answer for one request, checked."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from typing_extensions import TypeIs

from runstream.errors import ConfigurationTypeError
from runstream.models.base import LanguageModel
from runstream.request_context import Dynamic, RequestContext, resolve
from runstream.tools import Tool


def is_model(value: object) -> TypeIs[LanguageModel]:
    """A language model (it streams and names itself)."""
    return hasattr(value, "stream") and hasattr(value, "model_id")


def is_function(value: object) -> TypeIs[Callable[..., object]]:
    """A per-request function rather than the value itself."""
    return callable(value) and not isinstance(value, LanguageModel | Mapping | Tool)


async def resolve_model(
    value: LanguageModel | Dynamic[LanguageModel], context: RequestContext, owner: str
) -> LanguageModel:
    """A model, or what a per-request model function returns (checked)."""
    # A duck check, not isinstance(): a runtime-checkable Protocol costs ~10 µs per check, and
    # this runs at the start of every run.
    model = value if is_model(value) else await resolve(value, context)
    if not is_model(model):
        raise ConfigurationTypeError(
            f"{owner}: the model function returned {type(model).__name__}, not a model"
        )
    return model


async def resolve_instructions(value: str | Dynamic[str], context: RequestContext, owner: str) -> str:
    """Instructions, or what a per-request instructions function returns (checked)."""
    instructions = value if isinstance(value, str) else await resolve(value, context)
    if not isinstance(instructions, str):
        raise ConfigurationTypeError(
            f"{owner}: instructions must be a string, got {type(instructions).__name__}"
        )
    return instructions
