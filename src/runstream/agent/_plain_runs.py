"""A plain run's configuration, made once per agent and copied for each run.

A run called with no options (so no memory) on an agent with no task manager, whose model,
tools and instructions are values (not functions of the request), gets a :class:`LoopConfig`
that depends only on the agent's attributes, the run's abort signal and its request context.
Making it field by field is most of a run's setup before its first chunk, the same work every
time; so the agent's first such run keeps what it made (a template), and the next ones copy it
with their own signal, request context and containers.

An agent's attributes are public and may change between runs (``agent.tools["x"] = ...``,
``agent.model = ...``): a template is used only while every attribute it was made from equals
what it was then (the model: is the same object) and the tool and processor collections hold
equal entries; else the run is configured the long way and its configuration becomes the
template.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from types import UnionType
from typing import Any, Protocol, Union, get_args, get_origin, get_type_hints, is_typeddict

from runstream.abort import AbortSignal
from runstream.agent._resolving import is_model
from runstream.agent.run_options import RunOptions
from runstream.models.base import ToolChoice
from runstream.models.registry import ModelString
from runstream.request_context import RequestContext
from runstream.run._run_state import LoopConfig
from runstream.tasks.policy import warn_without_manager
from runstream.tools import Tool


class PlainAgent(Protocol):
    """The agent attributes a plain run's configuration is made from (``Agent`` is one)."""

    id: str
    name: str
    model: Any
    instructions: Any
    tools: dict[str, Tool]
    tools_resolver: Any
    toolsets: list[Any]
    output_processors: list[Any]
    input_processors: list[Any]
    model_settings: Any
    max_steps: int
    tool_choice: ToolChoice | None
    structured_output: Any
    max_processor_retries: int
    is_task_complete: Any
    durable: bool
    services: Any
    background_config: Any


def _made_from(agent: PlainAgent) -> tuple[Any, ...]:
    """What, besides the tools and processors, a plain run's configuration is made from."""
    return (
        agent.id,
        agent.name,
        agent.model,
        agent.instructions,
        agent.tools_resolver,
        agent.model_settings,
        agent.max_steps,
        agent.tool_choice,
        agent.structured_output,
        agent.max_processor_retries,
        agent.is_task_complete,
        agent.durable,
    )


def _without_services(agent: PlainAgent) -> bool:
    """The agent has no task manager nor toolsets (a run's tools and instructions would need them)."""
    services = agent.services
    return not agent.toolsets and (services is None or services.task_manager is None)


def is_plain(agent: PlainAgent) -> bool:
    """Whether a run with no options can have its configuration from a template: besides
    :func:`_without_services`, the agent's model, tools and instructions are values (not
    functions of the request) and it is not durable."""
    return (
        _without_services(agent)
        and agent.tools_resolver is None
        and not agent.durable
        and isinstance(agent.instructions, str)
        and is_model(agent.model)
        and not isinstance(agent.model, ModelString)
    )


def _is_container(hint: Any) -> bool:
    """Whether a field of this type holds a list or a dict (a ``TypedDict`` is one), maybe ``None``."""
    members = get_args(hint) if get_origin(hint) in (Union, UnionType) else (hint,)
    return any(
        get_origin(member) in (list, dict) or member in (list, dict) or is_typeddict(member)
        for member in members
    )


def _copier(cls: type[LoopConfig]) -> Callable[[LoopConfig], LoopConfig]:
    """A function copying a configuration with fresh lists and dicts (what a run may change of
    its own configuration), generated from the dataclass's fields and their resolved types.

    Generated because it is on every plain run's way to its first chunk: measured in one process,
    alternating (load 6.7), ``copy.copy`` and a loop over the containers made a 100-token run's
    first text-delta 15% later (its CPU time 4% higher) than this copy, 0.6 us."""
    # (``Memory`` is imported for type checking only; any class, not a container, stands for it)
    hints = get_type_hints(cls, localns={"Memory": object})
    lines = []
    for spec in fields(cls):
        name, value = spec.name, f"t.{spec.name}"
        hint = hints[name]
        if _is_container(hint):
            value = f"{value}.copy()"
            if type(None) in get_args(hint):
                value = f"None if t.{name} is None else {value}"
        lines.append(f"    c.{name} = {value}\n")
    names: dict[str, Any] = {"_new": object.__new__, "_cls": cls}
    exec(f"def copy(t):\n    c = _new(_cls)\n{''.join(lines)}    return c\n", names)
    copy: Callable[[LoopConfig], LoopConfig] = names["copy"]
    return copy


_copy = _copier(LoopConfig)


class PlainRuns:
    """One agent's template for plain runs (see the module's docstring)."""

    __slots__ = ("_config", "_input_processors", "_made_from", "_model", "_output_processors", "_tools")

    def __init__(self) -> None:
        self._config: LoopConfig | None = None
        self._made_from: tuple[Any, ...] = ()
        self._model: Any = None
        self._tools: dict[str, Tool] = {}
        self._output_processors: list[Any] = []
        self._input_processors: list[Any] = []

    def config(self, agent: PlainAgent, options: RunOptions, signal: AbortSignal) -> LoopConfig | None:
        """A copy of the template for a run called with no options, with its request context and
        signal; ``None`` when there is no template, the agent gained services, or an attribute the
        template was made from changed (the rest of :func:`is_plain` held for those attributes
        when it was made). Then configure the run the long way and :meth:`keep` what it made."""
        template = self._config
        if (
            template is None
            or not _without_services(agent)
            or agent.model is not self._model  # (the same object: equal is not enough for a model)
            or self._made_from != _made_from(agent)
            or self._tools != agent.tools
            or self._output_processors != agent.output_processors
            or self._input_processors != agent.input_processors
        ):
            return None
        config = _copy(template)
        config.abort_signal = signal
        config.request_context = options.request_context
        warn_without_manager(agent.id, agent.tools, agent.background_config)  # as the long way does
        return config

    def keep(self, agent: PlainAgent, config: LoopConfig) -> None:
        """Keep the configuration of a run called with no options, made the long way, as the
        template (if the agent is plain)."""
        if not is_plain(agent):
            return
        self._made_from = _made_from(agent)
        self._model = agent.model
        self._tools = dict(agent.tools)
        self._output_processors = list(agent.output_processors)
        self._input_processors = list(agent.input_processors)
        template = self._config = _copy(config)
        template.abort_signal = AbortSignal()  # (the run's own are not kept)
        template.request_context = RequestContext()
