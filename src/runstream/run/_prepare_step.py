"""``prepare_step``: change one step before the model is called (Mastra's ``prepareStep``).

The function (sync or async) gets the step as ``{"stepNumber" (0-based), "steps", "messages",
"model", "tools", "toolChoice", "activeTools", "system", "requestContext"}`` and returns
``None`` (no change) or a mapping of what this step uses instead: ``model``, ``toolChoice``,
``activeTools`` (the tool names offered, and run, in this step), ``messages`` (the prompt's
conversation for this step, system messages excluded) and ``system`` (its system messages,
a string or a list). Keys may be snake_case too; an unknown key is an error naming it. The
changes last one step; the run's conversation is not rewritten.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any, cast

from pydantic import SkipValidation, with_config
from typing_extensions import TypedDict

from runstream._config_mapping import CONFIG, read_typed_dict
from runstream.errors import ConfigurationError, ConfigurationTypeError, InvalidInputError
from runstream.models.base import LanguageModel, PromptMessage, ToolChoice
from runstream.run._run_state import LoopConfig, RunState, StepPreparation
from runstream.tools import Tool


@with_config(CONFIG)
class _StepChanges(TypedDict, total=False):
    """What a ``prepare_step`` function may return (Mastra's names or Python's), each taken as
    given (checked where it is used)."""

    model: SkipValidation[object]
    tool_choice: SkipValidation[str | Mapping[str, object] | None]
    active_tools: SkipValidation[Iterable[str] | None]
    messages: SkipValidation[Iterable[Mapping[str, object]] | None]
    """(The caller's messages, taken as the prompt messages they say they are.)"""
    system: SkipValidation[str | Iterable[str] | None]


async def prepared_step(cfg: LoopConfig, state: RunState) -> tuple[LoopConfig, list[PromptMessage] | None]:
    """The configuration of the coming step (and its conversation, if replaced)."""
    assert cfg.prepare_step is not None
    event: StepPreparation = {
        "stepNumber": state.step_number - 1,
        "steps": list(state.steps),
        "messages": list(state.messages),
        "model": cfg.model,
        "tools": list(cfg.tools),
        "toolChoice": cfg.tool_choice,
        "activeTools": list(cfg.tools),
        "system": [str(message["content"]) for message in cfg.system],
        "requestContext": cfg.request_context,
    }
    result = cfg.prepare_step(event)
    if inspect.isawaitable(result):
        result = await result
    if result is None:
        return cfg, None
    changes = read_typed_dict(_StepChanges, result, where="prepare_step result")
    step_cfg = cfg
    if changes.get("model") is not None:
        if not isinstance(changes["model"], LanguageModel):
            raise ConfigurationTypeError(
                f"prepare_step result model must be a model, got {type(changes['model']).__name__}"
            )
        step_cfg = replace(step_cfg, model=changes["model"])
    if changes.get("tool_choice") is not None:
        step_cfg = replace(step_cfg, tool_choice=normalize_tool_choice(changes["tool_choice"]))
    active, system = changes.get("active_tools"), changes.get("system")
    if active is not None:
        step_cfg = replace(step_cfg, tools=_active(cfg, active))
    if system is not None:
        texts = [system] if isinstance(system, str) else list(system)
        step_cfg = replace(step_cfg, system=[{"role": "system", "content": str(text)} for text in texts])
    messages = changes.get("messages")
    return step_cfg, cast(list[PromptMessage], list(messages)) if messages is not None else None


def _active(cfg: LoopConfig, names: Iterable[str]) -> dict[str, Tool]:
    unknown = [name for name in names if name not in cfg.tools]
    if unknown:
        raise ConfigurationError(
            f"prepare_step result activeTools names no tool: {', '.join(map(repr, unknown))}"
        )
    return {name: cfg.tools[name] for name in names}


class InvalidOptionError(InvalidInputError, TypeError):
    """A run option whose value cannot be used. Also a ``TypeError``: the checks it reports
    raised either builtin before the error tree, and code may catch those."""


_NAMED_CHOICES: dict[str, ToolChoice] = {
    "auto": {"type": "auto"},
    "none": {"type": "none"},
    "required": {"type": "required"},
}


def normalize_tool_choice(choice: str | Mapping[str, Any] | None) -> ToolChoice | None:
    if choice is None:
        return None
    if isinstance(choice, str):
        named = _NAMED_CHOICES.get(choice)
        if named is None:
            raise InvalidOptionError(
                f"tool_choice must be 'auto', 'none', 'required' or a tool, not {choice!r}"
            )
        return named.copy()
    return cast(ToolChoice, dict(choice))  # the caller's, as given
