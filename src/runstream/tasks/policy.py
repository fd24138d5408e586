"""Which tool calls run as background tasks, and how (pure decisions, no I/O).

Layers, as in Mastra: the tool's own ``background`` config, the agent's ``background_tasks``
entry for that tool (or ``"all"``, or ``disabled``), and the model's per-call ``_background``
argument, which only modifies tools already opted in and is always stripped before the tool runs.
Dispositions: ``deferred`` (placeholder result now, real result later), ``awaited`` (runs as a task
but the step waits for it), ``foreground`` (inline).
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, TypeVar

from runstream._config_mapping import CONFIG, Count, Flag, PositiveCount, read_dataclass
from runstream._json import JsonObject
from runstream.errors import ConfigurationTypeError
from runstream.tasks.config import TaskHook
from runstream.tools import Tool, ToolArgumentsError

Disposition = Literal["foreground", "deferred", "awaited"]

T = TypeVar("T")

BACKGROUND_ARG = "_background"

BACKGROUND_ARG_SCHEMA: JsonObject = {
    "type": "object",
    "description": "Optional: how to run this call. Omit to use the tool's default.",
    "properties": {
        "enabled": {"type": "boolean", "description": "false runs the call in the foreground"},
        "disposition": {"type": "string", "enum": ["foreground", "deferred", "awaited"]},
        "timeoutMs": {"type": "number"},
        "maxRetries": {"type": "number"},
    },
    "additionalProperties": False,
}


def placeholder_text(task_id: str, tool_name: str) -> str:
    """What the model sees as the result of a deferred call (Mastra's wording)."""
    return (
        f'Background task started. Task ID: {task_id}. The tool "{tool_name}" is running in the '
        "background. You will be notified when it completes."
    )


@dataclass(slots=True)
class ToolBackgroundEntry:
    """How one tool may run in the background. In an agent's ``tools`` map, an unset field
    falls back to the tool's own ``background`` config (as in Mastra)."""

    __pydantic_config__ = CONFIG

    enabled: Flag | None = None
    timeout_ms: Count | None = None
    max_retries: Count | None = None
    default_disposition: Literal["foreground", "deferred"] | None = None

    @classmethod
    def coerce(
        cls, value: ToolBackgroundEntry | Mapping[str, object] | bool, where: str
    ) -> ToolBackgroundEntry:
        if isinstance(value, ToolBackgroundEntry):
            return value
        if isinstance(value, bool):
            return cls(enabled=value)
        return read_dataclass(cls, value, where=where)


@dataclass(slots=True)
class AgentBackgroundConfig:
    """An agent's background settings (Mastra's ``AgentBackgroundConfig``).

    ``concurrency`` caps this agent's running tasks in place of the manager's
    ``per_agent_concurrency`` (Mastra 1.71 declares it and never reads it).
    ``wait_timeout_ms`` overrides the manager's for this agent's durable loop.
    ``on_task_complete``/``on_task_failed`` are called for this agent's tasks whose tool has no
    ``on_complete``/``on_failed`` of its own.
    """

    __pydantic_config__ = CONFIG

    tools: dict[str, ToolBackgroundEntry] | Literal["all"] | None = None
    disabled: Flag = False
    concurrency: PositiveCount | None = None
    wait_timeout_ms: Count | None = None
    on_task_complete: TaskHook | None = None
    on_task_failed: TaskHook | None = None

    @classmethod
    def coerce(cls, value: AgentBackgroundConfig | Mapping[str, object] | None) -> AgentBackgroundConfig:
        if value is None:
            return cls()
        if isinstance(value, AgentBackgroundConfig):
            return value
        tools = value.get("tools") if isinstance(value, Mapping) else None
        if tools is not None and tools != "all":  # (an entry may be a bool: read each here)
            if not isinstance(tools, Mapping):
                raise ConfigurationTypeError(
                    f"background_tasks.tools must be 'all' or a mapping, got {tools!r}"
                )
            entries = {
                name: ToolBackgroundEntry.coerce(entry, f"background_tasks.tools.{name}")
                for name, entry in tools.items()
            }
            value = {**value, "tools": entries}
        return read_dataclass(cls, value, where="background_tasks")


@dataclass(slots=True)
class Resolved:
    disposition: Disposition
    timeout_ms: int | None
    max_retries: int | None


def _base_name(name: str) -> str:
    for prefix in ("agent-", "workflow-"):
        if name.startswith(prefix):
            return name[len(prefix) :]
    return name


def eligibility(tool: Tool, agent: AgentBackgroundConfig) -> ToolBackgroundEntry | None:
    """Whether (and how) a tool may run in the background; agent entries win over the tool."""
    if agent.disabled:
        return None
    own = tool.background
    entry: ToolBackgroundEntry | None = None
    if agent.tools == "all":
        entry = ToolBackgroundEntry(enabled=True)
    elif isinstance(agent.tools, dict):
        entry = agent.tools.get(_base_name(tool.name))  # sub-agents/workflows by bare name, as Mastra
    enabled = entry.enabled if entry is not None and entry.enabled is not None else None
    if enabled is None:
        enabled = own is not None and own.enabled
    if not enabled:
        return None
    return ToolBackgroundEntry(
        True,
        timeout_ms=_first(entry.timeout_ms if entry else None, own.timeout_ms if own else None),
        max_retries=_first(entry.max_retries if entry else None, own.max_retries if own else None),
        default_disposition=_first(
            entry.default_disposition if entry else None, own.default_disposition if own else None
        )
        or "deferred",
    )


def _first(*values: T | None) -> T | None:
    return next((value for value in values if value is not None), None)


def resolve(entry: ToolBackgroundEntry, override: object) -> Resolved:
    """Apply the model's ``_background`` override (the call's argument, if any) to an eligible tool."""
    if override is None:
        override = {}
    if not isinstance(override, Mapping):
        raise ToolArgumentsError(f"{BACKGROUND_ARG} must be an object, got {type(override).__name__}")
    disposition: Disposition = entry.default_disposition or "deferred"
    if "enabled" in override:
        disposition = "deferred" if override["enabled"] else "foreground"
    if override.get("disposition") is not None:
        if override["disposition"] not in ("foreground", "deferred", "awaited"):
            raise ToolArgumentsError(
                f"{BACKGROUND_ARG}.disposition must be 'foreground', 'deferred' or 'awaited', "
                f"got {override['disposition']!r}"
            )
        disposition = override["disposition"]
    timeout = override.get("timeoutMs", entry.timeout_ms)
    retries = override.get("maxRetries", entry.max_retries)
    for key, value in (("timeoutMs", timeout), ("maxRetries", retries)):
        if value is not None and (not isinstance(value, int | float) or value < 0):
            raise ToolArgumentsError(f"{BACKGROUND_ARG}.{key} must be a non-negative number, got {value!r}")
    return Resolved(
        disposition, int(timeout) if timeout is not None else None, int(retries) if retries else retries
    )


def tool_schema_with_override(tool: Tool) -> JsonObject:
    """An eligible tool's input schema, with the optional ``_background`` argument added."""
    schema = copy.deepcopy(tool.input_schema)
    properties = schema.setdefault("properties", {})
    if isinstance(properties, dict):  # (an object schema's)
        properties[BACKGROUND_ARG] = BACKGROUND_ARG_SCHEMA
    return schema


def system_prompt_section(names: list[str]) -> str:
    """The paragraph appended to the instructions when some tools may run in the background."""
    listed = ", ".join(f'"{n}"' for n in names)
    return (
        "\n\n## Background tasks\n"
        f"These tools run as background tasks: {listed}. When you call one, you get a task id at "
        "once and the real result arrives later; keep helping the user meanwhile and do not call "
        "the tool again for the same request. Add the optional `_background` argument to choose: "
        '{"disposition": "foreground"} to wait inline, "awaited" to run it as a task and wait for '
        'its result, "deferred" (default) to continue at once.'
    )


class ForegroundFallbackWarning(RuntimeWarning):
    """Tools meant for the background run in the foreground: no task manager is configured."""


def warn_without_manager(agent_id: str, tools: Mapping[str, Tool], config: AgentBackgroundConfig) -> None:
    """Warn that an agent's background tools will block its runs, as no task manager exists."""
    if config.tools is None:  # (every run without a manager asks: the common case is quick)
        for tool in tools.values():
            if tool.background is not None:
                break
        else:
            return
    names = [name for name, tool in tools.items() if eligibility(tool, config) is not None]
    if names:
        warnings.warn(
            f"agent {agent_id!r}: {', '.join(names)} should run in the background, but no background "
            "task manager is configured, so they run in the foreground and the run waits for them. "
            "Register the agent with Runstream(agents=[...], background_tasks={'enabled': True}).",
            ForegroundFallbackWarning,
            stacklevel=3,
        )
