"""The per-call options of ``Agent.stream()`` (kept so continuation turns and resumed runs can
reuse them), their JSON form in a saved run, and the input normalisation they share."""

from __future__ import annotations

import copy
import functools
import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeGuard, TypeVar, cast

from runstream._callbacks import RunCallbacks
from runstream._config_mapping import one_of, positive_int, read_config
from runstream.abort import AbortSignal
from runstream.delegation import DelegationConfig, DelegationRun
from runstream.memory import MemoryScope
from runstream.models.base import LanguageModel, ModelSettings, PromptMessage
from runstream.request_context import Dynamic, RequestContext, resolve
from runstream.scoring import TaskCompletion
from runstream.stop_conditions import StopCondition
from runstream.structured import StructuredOutput
from runstream.tools import Tool, ToolContext

MessagesInput = str | Sequence[str] | Sequence[Mapping[str, Any]]


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
            raise TypeError("a message must be a string or a mapping with 'role' and 'content'")
        role = message["role"]
        if role not in ("user", "assistant", "system", "tool"):
            raise ValueError(f"unknown message role {role!r}")
        content = message.get("content", "")
        if role == "system":
            out.append({"role": "system", "content": content if isinstance(content, str) else str(content)})
        elif isinstance(content, str):
            out.append({"role": role, "content": [{"type": "text", "text": content}]})
        else:
            out.append({"role": role, "content": [dict(part) for part in content]})
    return out


def normalize_tool_choice(choice: str | Mapping[str, Any] | None) -> dict[str, Any] | None:
    if choice is None:
        return None
    if isinstance(choice, str):
        if choice not in ("auto", "none", "required"):
            raise ValueError(f"tool_choice must be 'auto', 'none', 'required' or a tool, not {choice!r}")
        return {"type": choice}
    return dict(choice)


def options_to_json(options: RunOptions) -> dict[str, Any]:
    """The run options a restored run can get back (code-valued ones fall back to the agent's)."""
    structured = StructuredOutput.coerce(options.structured_output)
    return {
        "maxSteps": options.max_steps,
        "toolChoice": normalize_tool_choice(options.tool_choice),
        "includeRawChunks": options.include_raw_chunks,
        "structuredOutput": structured.schema if structured is not None else None,
        "maxProcessorRetries": options.max_processor_retries,
        "memory": {"thread": options.memory.thread_id, "resource": options.memory.resource_id}
        if options.memory
        else None,
        "disableBackgroundTasks": options.disable_background_tasks,
        "context": options.context,
        "requestContext": options.request_context.to_json(),
        "instructions": options.instructions if isinstance(options.instructions, str) else None,
        "system": options.system,
        "activeTools": options.active_tools,
        "requireToolApproval": options.require_tool_approval is True,
        "toolCallConcurrency": {
            "limit": options.tool_call_concurrency,
            "strategy": options.tool_call_strategy,
        },
        "clientTools": {
            name: {"description": tool.description, "inputSchema": tool.input_schema}
            for name, tool in options.client_tools.items()
        },
    }


def options_from_json(data: Mapping[str, Any]) -> RunOptions:
    return RunOptions(
        max_steps=data.get("maxSteps"),
        tool_choice=data.get("toolChoice"),
        include_raw_chunks=bool(data.get("includeRawChunks")),
        structured_output={"schema": data["structuredOutput"]} if data.get("structuredOutput") else None,
        max_processor_retries=data.get("maxProcessorRetries"),
        memory=MemoryScope.coerce(data.get("memory")),
        disable_background_tasks=bool(data.get("disableBackgroundTasks")),
        context=list(data.get("context") or []),
        request_context=RequestContext(data.get("requestContext") or {}),
        instructions=data.get("instructions"),
        system=list(data.get("system") or []),
        active_tools=data.get("activeTools"),
        require_tool_approval=bool(data.get("requireToolApproval")),
        **concurrency_options(data.get("toolCallConcurrency")),
        client_tools={
            name: client_tool(
                name, description=spec.get("description", ""), input_schema=spec.get("inputSchema")
            )
            for name, spec in (data.get("clientTools") or {}).items()
        },
    )


def _runs_on_the_client(args: dict[str, Any], ctx: ToolContext) -> None:
    raise RuntimeError(f"{ctx.tool_name} is a client tool: the caller executes it, not the loop")


def client_tool(name: str, *, description: str = "", input_schema: Mapping[str, Any] | None = None) -> Tool:
    """A tool the caller executes (``stream(client_tools=[...])``): the model only sees its schema."""
    return Tool(name, _runs_on_the_client, description=description, input_schema=input_schema)


def by_name(tools: Iterable[Tool] | Mapping[str, Tool]) -> dict[str, Tool]:
    return {tool.name: tool for tool in (tools.values() if isinstance(tools, Mapping) else tools)}


@dataclass(slots=True)
class RunOptions:
    """The per-call options of ``stream()``, kept so continuation turns can reuse them."""

    max_steps: int | None = None
    tool_choice: str | Mapping[str, Any] | None = None
    include_raw_chunks: bool = False
    structured_output: Any = None
    output_processors: list[Any] | None = None
    input_processors: list[Any] | None = None
    max_processor_retries: int | None = None
    model_settings: ModelSettings | None = None
    abort_signal: AbortSignal | None = None
    memory: MemoryScope | None = None
    disable_background_tasks: bool = False
    context: list[PromptMessage] = field(default_factory=list)
    is_task_complete: TaskCompletion | None = None
    client_tools: dict[str, Tool] = field(default_factory=dict)
    request_context: RequestContext = field(default_factory=RequestContext)
    callbacks: RunCallbacks = field(default_factory=RunCallbacks)
    instructions: str | Dynamic[str] | None = None
    """Replaces the agent's instructions for this call (Mastra's per-call ``instructions``)."""
    system: list[str] = field(default_factory=list)
    """System messages added after the instructions (Mastra's ``system``)."""
    model: LanguageModel | Dynamic[LanguageModel] | None = None
    """Replaces the agent's model for this call; not kept when a run is restored elsewhere."""
    active_tools: list[str] | None = None
    """Only these tools are offered (and run) in this call."""
    require_tool_approval: bool | Callable[[dict[str, Any]], Any] = False
    """``True``: every tool call of this run waits for approval; a function decides per call
    (it gets ``{"toolName", "args", "requestContext"}``)."""
    stop_when: list[StopCondition] = field(default_factory=list)
    prepare_step: Callable[[dict[str, Any]], Any] | None = None
    tool_call_concurrency: int | None = None
    tool_call_strategy: Literal["available", "called"] = "available"
    delegation: DelegationConfig | None = None
    """Hooks around the run's sub-agent calls (Mastra's ``delegation``)."""


ToolsInput = Iterable[Tool] | Mapping[str, Tool]


def is_model(value: Any) -> TypeGuard[LanguageModel]:
    """A language model (it streams and names itself)."""
    return hasattr(value, "stream") and hasattr(value, "model_id")


def is_function(value: Any) -> bool:
    """A per-request function rather than the value itself."""
    return callable(value) and not isinstance(value, LanguageModel | Mapping | Tool)


def system_messages(system: str | Sequence[str] | None) -> list[str]:
    if system is None:
        return []
    messages = [system] if isinstance(system, str) else list(system)
    if not all(isinstance(message, str) for message in messages):
        raise TypeError("system must be a string or a list of strings")
    return messages


def call_tools(tools: dict[str, Tool], options: RunOptions) -> dict[str, Tool]:
    """The tools of one call: only ``active_tools`` (in that order), each needing approval
    when ``require_tool_approval`` is set."""
    if options.active_tools is not None:
        unknown = [name for name in options.active_tools if name not in tools]
        if unknown:
            raise ValueError(
                f"active_tools names no tool: {', '.join(map(repr, unknown))} "
                f"(the run has: {', '.join(tools) or 'none'})"
            )
        tools = {name: tools[name] for name in options.active_tools}
    if options.require_tool_approval is True:
        tools = {name: with_approval(tool) for name, tool in tools.items()}
    return tools


def with_approval(tool: Tool) -> Tool:
    """A copy of ``tool`` whose calls wait for approval."""
    if tool.require_approval:
        return tool
    gated = copy.copy(tool)
    gated.require_approval = True
    return gated


async def resolve_model(
    value: LanguageModel | Dynamic[LanguageModel], context: RequestContext, owner: str
) -> LanguageModel:
    """A model, or what a per-request model function returns (checked)."""
    # A duck check, not isinstance(): a runtime-checkable Protocol costs ~10 µs per check, and
    # this runs at the start of every run.
    model = value if is_model(value) else await resolve(value, context)  # type: ignore[arg-type]
    if not is_model(model):
        raise TypeError(f"{owner}: the model function returned {type(model).__name__}, not a model")
    return model


async def resolve_instructions(value: str | Dynamic[str], context: RequestContext, owner: str) -> str:
    """Instructions, or what a per-request instructions function returns (checked)."""
    instructions = value if isinstance(value, str) else await resolve(value, context)
    if not isinstance(instructions, str):
        raise TypeError(f"{owner}: instructions must be a string, got {type(instructions).__name__}")
    return instructions


def concurrency_options(value: int | Mapping[str, Any] | None) -> dict[str, Any]:
    """``tool_call_concurrency=n`` or Mastra's ``{"limit": n, "strategy": "available" | "called"}``,
    as ``RunOptions`` fields."""
    if value is None:
        return {}
    if isinstance(value, Mapping):
        options = read_config(
            value,
            {"limit": positive_int, "strategy": one_of("available", "called")},
            where="tool_call_concurrency",
        )
        return {
            "tool_call_concurrency": options.get("limit"),
            "tool_call_strategy": options.get("strategy", "available"),
        }
    return {"tool_call_concurrency": positive_int("tool_call_concurrency", value)}


def loop_settings(options: RunOptions) -> dict[str, Any]:
    """The loop settings that come from a call's options alone."""
    settings: dict[str, Any] = {
        "request_context": options.request_context,
        "tool_call_strategy": options.tool_call_strategy,
        "stop_when": list(options.stop_when),
        "prepare_step": options.prepare_step,
    }
    if options.delegation is not None:  # per run: whether a hook bailed
        run = DelegationRun(options.delegation)
        settings["delegation"] = run
        settings["stop_when"].append(run.stop_after_bail)
    if callable(options.require_tool_approval):
        settings["approval_policy"] = options.require_tool_approval
    if options.tool_call_concurrency is not None:
        settings["tool_call_concurrency"] = options.tool_call_concurrency
    return settings


StreamMethod = TypeVar("StreamMethod", bound=Callable[..., Awaitable[Any]])


def with_default_options(stream: StreamMethod) -> StreamMethod:
    """Mastra's ``defaultOptions``: an agent's ``default_options`` (a mapping of ``stream()``
    options, Mastra's names or Python's, or a function of the request context returning one)
    apply to every call, under the options the call gives itself."""

    @functools.wraps(stream)
    async def with_defaults(agent: Any, messages: Any = None, **options: Any) -> Any:
        defaults = agent.default_options
        if defaults is not None:
            if not isinstance(defaults, Mapping):
                defaults = await resolve(defaults, RequestContext.coerce(options.get("request_context")))
            options = {**default_stream_options(defaults, stream), **options}
        return await stream(agent, messages, **options)

    return cast(StreamMethod, with_defaults)


def default_stream_options(defaults: Mapping[str, Any], stream: Callable[..., Any]) -> dict[str, Any]:
    """``defaults`` as ``stream()`` keyword arguments; an unknown option is an error naming it."""
    names = [name for name in inspect.signature(stream).parameters if name not in ("self", "messages")]
    return read_config(defaults, dict.fromkeys(names), where="default_options")
