"""The options of one run: :class:`RunOptions`, the one frozen value that ``Agent.stream()`` /
``generate()``, continuation turns, restored runs and the server all use.

Callers give options as keywords (:class:`StreamOptions`: ``max_steps=3``, Mastra's camelCase in
``default_options``); :meth:`RunOptions.of` reads them once into the frozen value, through
:class:`StreamOptions` as a pydantic model (each field's reader in its annotation; an unknown
option is an error naming it); :meth:`RunOptions.loop_config` derives the loop's configuration
from it and the agent's defaults; :meth:`RunOptions.to_json` / :meth:`RunOptions.from_json` are
its form in a saved run. Also the input normalisation the options share.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import MISSING, asdict, dataclass, field, replace
from dataclasses import fields as dataclass_fields
from typing import Annotated, Any, Literal, Protocol, cast

from pydantic import PlainValidator, SkipValidation, ValidationInfo, with_config
from typing_extensions import TypedDict

from runstream._config_mapping import (
    CONFIG,
    ConfigKeyError,
    camel,
    checked,
    one_of,
    positive_int,
    read_typed_dict,
)
from runstream._json import JsonObject, JsonValue
from runstream.abort import AbortSignal
from runstream.delegation import DelegationConfig, DelegationRun
from runstream.errors import ConfigurationTypeError
from runstream.memory import MemoryScope
from runstream.models.base import LanguageModel, ModelSettings, PromptMessage, ToolChoice
from runstream.request_context import Dynamic, RequestContext
from runstream.run._callbacks import Callback, RunCallbacks
from runstream.run._prepare_step import InvalidOptionError as InvalidOptionError
from runstream.run._prepare_step import normalize_tool_choice
from runstream.run._run_snapshot import UnsupportedRunStateError
from runstream.run._run_state import ApprovalPolicy, LoopConfig, PrepareStep
from runstream.scoring import AgentScorer, RunScorer, TaskCompletion, run_scorers
from runstream.stop_conditions import StopCondition
from runstream.structured import ErrorStrategy, StructuredOutput
from runstream.tools import Tool, ToolArgs, ToolContext

MessagesInput = str | Sequence[str] | Sequence[Mapping[str, object]]
"""A prompt, prompts, or ``{"role", "content"}`` messages (content: a string or the parts)."""
ToolsInput = Iterable[Tool] | Mapping[str, Tool]


@with_config(CONFIG)
class ToolCallConcurrency(TypedDict, total=False):
    """Mastra's ``toolCallConcurrency: {limit, strategy}``: at most ``limit`` tool calls of a step
    run at once, ``"available"`` (start each as a slot frees) or ``"called"`` (in call order)."""

    limit: Annotated[int | None, checked(positive_int)]
    strategy: Annotated[Literal["available", "called"] | None, checked(one_of("available", "called"))]


def _option(convert: Callable[[Any], object]) -> PlainValidator:
    """How :meth:`RunOptions.of` reads an option of :class:`StreamOptions`: ``convert`` checks
    and normalises it (its error, whatever the class, becomes an :class:`InvalidOptionError`
    with the same message); ``None`` is kept (the option is left unset)."""

    def read(value: Any) -> object:
        if value is None:
            return None
        try:
            return convert(value)
        except (ConfigKeyError, InvalidOptionError):
            raise
        except (TypeError, ValueError) as exc:  # the checks' tree errors too: one class
            raise InvalidOptionError(str(exc)) from exc

    return PlainValidator(read)


def _function(value: Any, info: ValidationInfo) -> object:
    if value is not None and not callable(value):
        raise InvalidOptionError(f"{info.field_name} must be a function, got {type(value).__name__}")
    return value


_CALLBACK = PlainValidator(_function)


@with_config(CONFIG)
class StreamOptions(TypedDict, total=False):
    """The keyword options of ``Agent.stream()`` / ``generate()``, as callers give them: also the
    model :meth:`RunOptions.of` reads them by (each annotation's reader normalises the value into
    the :class:`RunOptions` field of that name; ``SkipValidation``: taken as given;
    ``tests/test_run_options.py`` checks the two name the same options). See ``Agent.stream`` for
    what each does."""

    max_steps: SkipValidation[int | None]
    tool_choice: Annotated[str | Mapping[str, Any] | None, _option(normalize_tool_choice)]
    include_raw_chunks: Annotated[bool, _option(bool)]
    structured_output: Annotated[Any, _option(StructuredOutput.coerce)]
    output_processors: Annotated[Iterable[Any] | None, _option(tuple)]
    input_processors: Annotated[Iterable[Any] | None, _option(tuple)]
    max_processor_retries: SkipValidation[int | None]
    model_settings: SkipValidation[ModelSettings | None]
    abort_signal: SkipValidation[AbortSignal | None]
    context: Annotated[Sequence[Mapping[str, Any]], _option(_context)]
    memory: Annotated[MemoryScope | Mapping[str, Any] | None, _option(MemoryScope.coerce)]
    disable_background_tasks: Annotated[bool, _option(bool)]
    is_task_complete: Annotated[TaskCompletion | Mapping[str, Any] | None, _option(TaskCompletion.coerce)]
    client_tools: Annotated[Iterable[Tool] | Mapping[str, Tool], _option(by_name)]
    request_context: Annotated[RequestContext | Mapping[str, Any] | None, _option(RequestContext.coerce)]
    on_chunk: Annotated[Callback | None, _CALLBACK]
    on_step_finish: Annotated[Callback | None, _CALLBACK]
    on_finish: Annotated[Callback | None, _CALLBACK]
    on_error: Annotated[Callback | None, _CALLBACK]
    on_abort: Annotated[Callback | None, _CALLBACK]
    instructions: SkipValidation[str | Dynamic[str] | None]
    system: Annotated[str | Sequence[str] | None, _option(system_messages)]
    model: SkipValidation[LanguageModel | Dynamic[LanguageModel] | None]
    active_tools: Annotated[Sequence[str] | None, _option(tuple)]
    require_tool_approval: SkipValidation[bool | ApprovalPolicy]
    tool_call_concurrency: Annotated[int | ToolCallConcurrency | None, _option(_concurrency)]
    stop_when: Annotated[StopCondition | Sequence[StopCondition], _option(_conditions)]
    prepare_step: SkipValidation[PrepareStep | None]
    delegation: Annotated[DelegationConfig | Mapping[str, Any] | None, _option(DelegationConfig.coerce)]
    scorers: Annotated[Mapping[str, Any] | Sequence[Any] | None, _option(run_scorers)]
    return_scorer_data: Annotated[bool, _option(bool)]


class AgentDefaults(Protocol):
    """What an agent gives a run when the run's options leave it open (``Agent`` is one)."""

    @property
    def id(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def max_steps(self) -> int: ...
    @property
    def tool_choice(self) -> ToolChoice | None: ...
    @property
    def structured_output(self) -> StructuredOutput | None: ...
    @property
    def output_processors(self) -> list[Any]: ...
    @property
    def input_processors(self) -> list[Any]: ...
    @property
    def max_processor_retries(self) -> int: ...
    @property
    def model_settings(self) -> ModelSettings: ...
    @property
    def durable(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class RequestPolicy:
    """What an agent's author lets a request set beyond tightening its options (nothing, by
    default). Give an agent one with ``agent.request_policy = RequestPolicy(...)``; applied by
    :mod:`runstream.trust`.

    ``provider_options``: per provider, the option names a request may set
    (``{"openai": {"reasoningEffort"}}``); ``headers``: header names (any case) a request may
    send to the provider; ``request_context``: the keys a request's ``requestContext`` may set.
    """

    provider_options: Mapping[str, frozenset[str] | set[str]] = field(default_factory=dict)
    headers: frozenset[str] | set[str] = frozenset()
    request_context: frozenset[str] | set[str] = frozenset()


DEFAULT_POLICY = RequestPolicy()


OPTIONS_VERSION = 2
"""The version of :meth:`RunOptions.to_json`'s format (1: before it had one; its structured
output was the bare schema)."""


@dataclass(frozen=True)  # not slots: see _made
class RunOptions:
    """The options of one run, normalised. Build it with :meth:`of` (from ``stream()``'s
    keywords); ``None`` / empty means "the agent's" where the agent has a default."""

    max_steps: int | None = None
    tool_choice: ToolChoice | None = None
    include_raw_chunks: bool = False
    structured_output: StructuredOutput | None = None
    output_processors: tuple[Any, ...] | None = None
    input_processors: tuple[Any, ...] | None = None
    max_processor_retries: int | None = None
    model_settings: ModelSettings | None = None
    abort_signal: AbortSignal | None = None
    context: tuple[PromptMessage, ...] = ()
    """Extra messages for the model, not part of the conversation (not saved)."""
    memory: MemoryScope | None = None
    disable_background_tasks: bool = False
    is_task_complete: TaskCompletion | None = None
    client_tools: Mapping[str, Tool] = field(default_factory=dict)
    """Tools the caller executes (see :func:`client_tool`)."""
    request_context: RequestContext = field(default_factory=RequestContext)
    on_chunk: Callback | None = None
    on_step_finish: Callback | None = None
    on_finish: Callback | None = None
    on_error: Callback | None = None
    on_abort: Callback | None = None
    instructions: str | Dynamic[str] | None = None
    """Replaces the agent's instructions for this call (Mastra's per-call ``instructions``)."""
    system: tuple[str, ...] = ()
    """System messages added after the instructions (Mastra's ``system``)."""
    model: LanguageModel | Dynamic[LanguageModel] | None = None
    """Replaces the agent's model for this call; not kept when a run is restored elsewhere."""
    active_tools: tuple[str, ...] | None = None
    """Only these tools are offered (and run) in this call."""
    require_tool_approval: bool | ApprovalPolicy = False
    """``True``: every tool call of this run waits for approval; a function decides per call
    (it gets ``{"toolName", "args", "requestContext"}``)."""
    stop_when: tuple[StopCondition, ...] = ()
    prepare_step: PrepareStep | None = None
    tool_call_concurrency: int | None = None
    tool_call_strategy: Literal["available", "called"] = "available"
    delegation: DelegationConfig | None = None
    """Hooks around the run's sub-agent calls (Mastra's ``delegation``, ``runstream.delegation``)."""
    scorers: Mapping[str, RunScorer] | None = None
    """The run's own scorers (Mastra's per-call ``scorers``): they replace the agent's for this
    run (``{}``: none); ``None``: the agent's."""
    return_scorer_data: bool = False
    """Return what the scorers see with the result (Mastra's ``returnScorerData``:
    ``scoringData`` in the full output)."""

    @classmethod
    def of(cls, options: Mapping[str, object], *, where: str = "stream()") -> RunOptions:
        """Read ``stream()``'s keyword options (Python's names or Mastra's camelCase); ``None``
        leaves an option unset. An unknown option is a ``ConfigKeyError`` naming it."""
        return cls._made(_fields(options, where) if options else {})

    @classmethod
    def _made(cls, fields: Mapping[str, object]) -> RunOptions:
        """An instance with these fields over the defaults. A frozen dataclass's ``__init__``
        sets each of its 30 fields through ``object.__setattr__``, a third of a run's setup
        before its first chunk; :meth:`of` has read every value already, so the instance's
        ``__dict__`` is filled directly (the same value ``cls(**fields)`` gives)."""
        options = object.__new__(cls)
        values = options.__dict__
        values.update(_DEFAULTS)
        values["client_tools"] = {}
        values["request_context"] = RequestContext()
        values.update(fields)
        return options

    def replaced(self, options: Mapping[str, object], *, where: str = "resume") -> RunOptions:
        """These options with the given ones (``stream()``'s keywords) replacing theirs, one by
        one: Mastra's ``resumeStream(data, options)`` and ``approveToolCall({runId, ...options})``."""
        return RunOptions._made({**vars(self), **_fields(options, where)})

    @property
    def callbacks(self) -> RunCallbacks:
        return RunCallbacks(self.on_chunk, self.on_step_finish, self.on_finish, self.on_error, self.on_abort)

    @property
    def has_callbacks(self) -> bool:
        """Whether any ``on_*`` callback is set (without building :attr:`callbacks`)."""
        return not (
            self.on_chunk is None
            and self.on_step_finish is None
            and self.on_finish is None
            and self.on_error is None
            and self.on_abort is None
        )

    def call_tools(self, tools: Mapping[str, Tool]) -> dict[str, Tool]:
        """The tools of this call: the agent's plus the client tools, only ``active_tools`` (in
        that order), each needing approval when ``require_tool_approval`` is ``True``."""
        merged = {**tools, **self.client_tools}
        if self.active_tools is not None:
            unknown = [name for name in self.active_tools if name not in merged]
            if unknown:
                raise InvalidOptionError(
                    f"active_tools names no tool: {', '.join(map(repr, unknown))} "
                    f"(the run has: {', '.join(merged) or 'none'})"
                )
            merged = {name: merged[name] for name in self.active_tools}
        if self.require_tool_approval is True:
            merged = {name: with_approval(tool) for name, tool in merged.items()}
        return merged

    def loop_config(
        self, agent: AgentDefaults, *, model: LanguageModel, tools: Mapping[str, Tool], signal: AbortSignal
    ) -> LoopConfig:
        """The loop's configuration: these options over ``agent``'s defaults (the one place a run's
        options become loop settings; the agent adds instructions, background tasks and checks)."""

        scope = self.memory
        settings = self.model_settings or agent.model_settings
        if settings.max_retries is None:  # Mastra's agents retry a model call only when told to
            settings = replace(settings, max_retries=0)
        cfg = LoopConfig(agent.id, model, dict(tools), model_settings=settings, abort_signal=signal)
        cfg.agent_name = agent.name
        cfg.client_tools = frozenset(self.client_tools)
        cfg.max_steps = self.max_steps if self.max_steps is not None else agent.max_steps
        cfg.tool_choice = self.tool_choice or agent.tool_choice
        cfg.include_raw_chunks = self.include_raw_chunks
        cfg.structured_output = self.structured_output or agent.structured_output
        cfg.output_processors = list(
            self.output_processors if self.output_processors is not None else agent.output_processors
        )
        cfg.input_processors = list(
            self.input_processors if self.input_processors is not None else agent.input_processors
        )
        if self.max_processor_retries is not None:
            cfg.max_processor_retries = self.max_processor_retries
        else:
            cfg.max_processor_retries = agent.max_processor_retries
        cfg.context = list(self.context)
        if scope is not None:
            cfg.thread_id = scope.thread_id
            cfg.resource_id = scope.resource_id
        cfg.durable = agent.durable
        cfg.request_context = self.request_context
        cfg.tool_call_strategy = self.tool_call_strategy
        cfg.stop_when = list(self.stop_when)
        cfg.prepare_step = self.prepare_step
        if callable(self.require_tool_approval):
            cfg.approval_policy = self.require_tool_approval
        if self.tool_call_concurrency is not None:
            cfg.tool_call_concurrency = self.tool_call_concurrency
        if self.delegation is not None:  # per run: whether a hook bailed
            run = DelegationRun(self.delegation)
            cfg.delegation = run
            cfg.stop_when.append(run.stop_after_bail)
        return cfg

    def to_json(self) -> RunOptionsJson:
        """The options a restored run gets back, by their Mastra names; those that are code
        (processors, callbacks, signals, functions) are left out and come from the agent's defaults."""
        structured = self.structured_output
        return {
            "optionsVersion": OPTIONS_VERSION,
            "maxSteps": self.max_steps,
            "toolChoice": self.tool_choice,
            "includeRawChunks": self.include_raw_chunks,
            "structuredOutput": {
                "schema": structured.schema,
                "errorStrategy": structured.error_strategy,
                "fallbackValue": structured.fallback_value,
            }
            if structured is not None
            else None,
            "maxProcessorRetries": self.max_processor_retries,
            "modelSettings": asdict(self.model_settings) if self.model_settings is not None else None,
            "memory": self.memory.to_json() if self.memory else None,
            "disableBackgroundTasks": self.disable_background_tasks,
            "context": list(self.context),
            "requestContext": self.request_context.to_json(),
            "instructions": self.instructions if isinstance(self.instructions, str) else None,
            "system": list(self.system),
            "activeTools": list(self.active_tools) if self.active_tools is not None else None,
            "requireToolApproval": self.require_tool_approval is True,
            "toolCallConcurrency": {"limit": self.tool_call_concurrency, "strategy": self.tool_call_strategy},
            "clientTools": {
                name: {"description": tool.description, "inputSchema": tool.input_schema}
                for name, tool in self.client_tools.items()
            },
            "scorers": _scorers_json(self.scorers),
            "returnScorerData": self.return_scorer_data,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunOptions:
        """Options saved by :meth:`to_json`, of this version or an older one, read as
        ``stream()``'s options are (by their Mastra names). An unknown version or key fails
        (:class:`~runstream.run._run_state.UnsupportedRunStateError`) rather than continuing a run
        with an option dropped."""
        version = data.get("optionsVersion", 1)
        if version not in (1, OPTIONS_VERSION) or isinstance(version, bool):
            raise UnsupportedRunStateError(
                f"saved run options of version {version!r}: this runstream reads versions 1 to {OPTIONS_VERSION}"
            )
        unknown = sorted(set(data) - set(RunOptionsJson.__annotations__))
        if unknown:
            raise UnsupportedRunStateError(f"saved run options have an unknown option {unknown[0]!r}")
        saved: dict[str, object] = {key: value for key, value in data.items() if key != "optionsVersion"}
        structured = data.get("structuredOutput")
        if structured and version == 1:  # version 1 kept the bare schema
            saved["structuredOutput"] = {"schema": structured}
        settings = data.get("modelSettings")
        saved["modelSettings"] = ModelSettings(**settings) if settings else None
        saved["clientTools"] = [
            client_tool(name, description=spec.get("description", ""), input_schema=spec.get("inputSchema"))
            for name, spec in (data.get("clientTools") or {}).items()
        ]
        return cls.of(saved, where="saved run options")


class _StructuredOutputJson(TypedDict):
    schema: JsonObject
    errorStrategy: ErrorStrategy
    fallbackValue: JsonValue


class _ClientToolJson(TypedDict):
    description: str
    inputSchema: JsonObject


class _ScorerJson(TypedDict):
    scorer: str
    """The scorer's name (a restored run looks it up as a name given in ``scorers``)."""
    sampling: float


class RunOptionsJson(TypedDict):
    """:meth:`RunOptions.to_json`: the options that are data, by their Mastra names (each a key
    :class:`StreamOptions` reads; ``tests/test_run_options.py`` checks), and the format's version."""

    optionsVersion: int
    maxSteps: int | None
    toolChoice: ToolChoice | None
    includeRawChunks: bool
    structuredOutput: _StructuredOutputJson | None
    maxProcessorRetries: int | None
    modelSettings: JsonObject | None
    memory: JsonObject | None
    disableBackgroundTasks: bool
    context: list[PromptMessage]
    requestContext: JsonObject
    instructions: str | None
    system: list[str]
    activeTools: list[str] | None
    requireToolApproval: bool
    toolCallConcurrency: ToolCallConcurrency
    clientTools: dict[str, _ClientToolJson]
    scorers: dict[str, _ScorerJson] | None
    returnScorerData: bool


def _scorers_json(scorers: Mapping[str, RunScorer] | None) -> dict[str, _ScorerJson] | None:
    """A run's own scorers by name: a restored run (on another worker too) finds them again
    among the agent's and the runtime's (a scorer known to neither is skipped there, logged)."""
    if scorers is None:
        return None
    return {
        key: {
            "scorer": entry.scorer.id if isinstance(entry, AgentScorer) else entry.scorer,
            "sampling": entry.rate,
        }
        for key, entry in scorers.items()
    }


_DEFAULTS = {
    option.name: option.default for option in dataclass_fields(RunOptions) if option.default is not MISSING
}


@with_config(CONFIG)
class DefaultOptions(StreamOptions, total=False):
    """An agent's ``default_options``: ``stream()``'s options (read as :class:`StreamOptions`
    reads them) and its ``run_id`` / ``until_idle`` keywords (checked where ``stream()`` checks them)."""

    run_id: SkipValidation[str | None]
    until_idle: SkipValidation[bool | Mapping[str, object] | None]


def read_default_options(defaults: Mapping[str, object]) -> DefaultOptions:
    """An agent's ``default_options`` (Mastra's names or Python's) by their Python names, read;
    an unknown option or a bad value is an error naming it."""
    return read_typed_dict(DefaultOptions, defaults, where="default_options")


def normalize_messages(messages: MessagesInput | None) -> list[PromptMessage]:
    """Accept a string, a list of strings, or ``{"role", "content"}`` messages."""
    if messages is None:
        return []
    if isinstance(messages, str):
        messages = [messages]
    out: list[PromptMessage] = []
    for message in messages:
        if isinstance(message, str):
            out.append({"role": "user", "content": [{"type": "text", "text": message}]})
            continue
        if not isinstance(message, Mapping) or "role" not in message:
            raise InvalidOptionError("a message must be a string or a mapping with 'role' and 'content'")
        role = message["role"]
        if role not in ("user", "assistant", "system", "tool"):
            raise InvalidOptionError(f"unknown message role {role!r}")
        content: Any = message.get("content", "")  # the caller's: a string or parts (not checked)
        if role == "system":
            out.append({"role": "system", "content": content if isinstance(content, str) else str(content)})
        else:  # the caller's parts, taken as the message they say they are (not checked)
            parts = (
                [{"type": "text", "text": content}]
                if isinstance(content, str)
                else [dict(p) for p in content]
            )
            out.append(cast(PromptMessage, {"role": role, "content": parts}))
    return out


def _runs_on_the_client(args: ToolArgs, ctx: ToolContext) -> None:
    raise RuntimeError(f"{ctx.tool_name} is a client tool: the caller executes it, not the loop")


def client_tool(
    name: str, *, description: str = "", input_schema: Mapping[str, JsonValue] | None = None
) -> Tool:
    """A tool the caller executes (``stream(client_tools=[...])``): the model only sees its schema."""
    return Tool(name, _runs_on_the_client, description=description, input_schema=input_schema)


_KEYWORDS = {"untilIdle": "until_idle", "runId": "run_id"}
"""Mastra's spellings of ``stream()``'s own keyword arguments (not options of the mapping)."""


def by_name(tools: Iterable[Tool] | Mapping[str, Tool]) -> dict[str, Tool]:
    """The tools by name; a plain function is refused with what to do instead."""
    items = list(tools.values() if isinstance(tools, Mapping) else tools)
    for item in items:
        if not isinstance(item, Tool):
            name = getattr(item, "__name__", type(item).__name__)
            raise ConfigurationTypeError(
                f"tools=: {name!r} is a {type(item).__name__}, not a Tool; decorate it with @tool"
                f" (from runstream import tool) or pass tool({name}) to make one of it"
            )
    return {tool.name: tool for tool in items}


def system_messages(system: str | Sequence[str] | None) -> tuple[str, ...]:
    if system is None:
        return ()
    messages = (system,) if isinstance(system, str) else tuple(system)
    if not all(isinstance(message, str) for message in messages):
        raise InvalidOptionError("system must be a string or a list of strings")
    return messages


def with_approval(tool: Tool) -> Tool:
    """A copy of ``tool`` whose calls wait for approval."""
    if tool.require_approval:
        return tool
    gated = copy.copy(tool)
    gated.require_approval = True
    return gated


def _concurrency(value: object) -> int | ToolCallConcurrency:
    if isinstance(value, Mapping):
        return read_typed_dict(ToolCallConcurrency, value, where="tool_call_concurrency")
    return positive_int("tool_call_concurrency", value)


def _context(value: Iterable[Mapping[str, object]]) -> tuple[PromptMessage, ...]:
    return tuple(normalize_messages(list(value)))


def _conditions(value: StopCondition | Sequence[StopCondition]) -> tuple[StopCondition, ...]:
    return (value,) if callable(value) else tuple(value)


def _fields(options: Mapping[str, object], where: str) -> dict[str, object]:
    """The :class:`RunOptions` fields ``stream()``'s ``options`` set, read by :class:`StreamOptions`
    (an option given as ``None`` sets none)."""
    try:
        read = read_typed_dict(StreamOptions, options, where=where)
    except ConfigKeyError:
        unknown = next((key for key in options if key not in _SPELLINGS), None)
        if isinstance(unknown, str) and unknown in _KEYWORDS:  # a keyword argument of its own
            raise ConfigKeyError(
                f"{where}: unknown option {unknown!r}; did you mean {_KEYWORDS[unknown]}=...?"
                f" (Mastra's {unknown!r} is the keyword argument {_KEYWORDS[unknown]!r} here)"
            ) from None
        raise
    fields: dict[str, object] = {name: value for name, value in read.items() if value is not None}
    concurrency = read.get("tool_call_concurrency")
    if isinstance(concurrency, dict):  # a limit and a strategy (a number: the limit alone)
        fields["tool_call_concurrency"] = concurrency.get("limit")
        fields["tool_call_strategy"] = concurrency.get("strategy") or "available"
    return fields


_SPELLINGS = frozenset(StreamOptions.__annotations__) | {
    camel(name) for name in StreamOptions.__annotations__
}
"""The keys :class:`StreamOptions` takes."""
