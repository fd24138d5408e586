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
from typing import Any, Literal

from runstream.tools import Tool, ToolArgumentsError

Disposition = Literal["foreground", "deferred", "awaited"]

BACKGROUND_ARG = "_background"

BACKGROUND_ARG_SCHEMA: dict[str, Any] = {
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
    enabled: bool
    timeout_ms: int | None = None
    max_retries: int | None = None
    default_disposition: Disposition = "deferred"


@dataclass(slots=True)
class AgentBackgroundConfig:
    """An agent's background settings (Mastra's ``AgentBackgroundConfig``)."""

    tools: dict[str, ToolBackgroundEntry] | Literal["all"] | None = None
    disabled: bool = False

    @classmethod
    def coerce(cls, value: AgentBackgroundConfig | Mapping[str, Any] | None) -> AgentBackgroundConfig:
        if value is None:
            return cls()
        if isinstance(value, AgentBackgroundConfig):
            return value
        tools = value.get("tools")
        entries: dict[str, ToolBackgroundEntry] | Literal["all"] | None
        if tools == "all" or tools is None:
            entries = tools
        else:
            entries = {}
            for name, entry in dict(tools).items():
                if isinstance(entry, bool):
                    entries[name] = ToolBackgroundEntry(enabled=entry)
                else:
                    entries[name] = ToolBackgroundEntry(
                        enabled=bool(entry.get("enabled", True)),
                        timeout_ms=entry.get("timeoutMs", entry.get("timeout_ms")),
                        max_retries=entry.get("maxRetries", entry.get("max_retries")),
                        default_disposition=entry.get("defaultDisposition", "deferred"),
                    )
        return cls(tools=entries, disabled=bool(value.get("disabled", False)))


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
    if agent.tools == "all":
        own = tool.background
        return ToolBackgroundEntry(
            enabled=True,
            timeout_ms=own.timeout_ms if own else None,
            max_retries=own.max_retries if own else None,
            default_disposition=own.default_disposition if own else "deferred",
        )
    if isinstance(agent.tools, dict):
        entry = agent.tools.get(_base_name(tool.name))  # sub-agents/workflows by bare name, as Mastra
        if entry is not None:
            return entry if entry.enabled else None
    own = tool.background
    if own is None or not own.enabled:
        return None
    return ToolBackgroundEntry(True, own.timeout_ms, own.max_retries, own.default_disposition)


def resolve(entry: ToolBackgroundEntry, override: Any) -> Resolved:
    """Apply the model's ``_background`` override to an eligible tool."""
    if override is not None and not isinstance(override, Mapping):
        raise ToolArgumentsError(f"{BACKGROUND_ARG} must be an object, got {type(override).__name__}")
    override = override or {}
    disposition: Disposition = entry.default_disposition
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


def tool_schema_with_override(tool: Tool) -> dict[str, Any]:
    """An eligible tool's input schema, with the optional ``_background`` argument added."""
    schema = copy.deepcopy(tool.input_schema)
    schema.setdefault("properties", {})[BACKGROUND_ARG] = BACKGROUND_ARG_SCHEMA
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
    names = [name for name, tool in tools.items() if eligibility(tool, config) is not None]
    if names:
        warnings.warn(
            f"agent {agent_id!r}: {', '.join(names)} should run in the background, but no background "
            "task manager is configured, so they run in the foreground and the run waits for them. "
            "Register the agent with Runstream(agents=[...], background_tasks={'enabled': True}).",
            ForegroundFallbackWarning,
            stacklevel=3,
        )
