"""When a run stops early: Mastra's (the AI SDK's) ``stopWhen`` conditions.

A condition gets ``{"steps": [...]}``, the run's finished steps as ``await out.steps`` shows
them, and returns whether the run stops after the current step (sync or async). The step that
meets one ends the run as ``max_steps`` does: its ``step-finish`` says ``isContinued: false``
and ``finish`` follows (recorded from Mastra: ``x-pt13``, ``x-pt14``)::

    await agent.stream("...", stop_when=[has_tool_call("submit"), step_count_is(8)])
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

StopCondition = Callable[[dict[str, Any]], bool | Awaitable[bool]]


def step_count_is(count: int) -> StopCondition:
    """Stop once the run has had ``count`` steps."""

    def condition(event: dict[str, Any]) -> bool:
        return len(event["steps"]) == count

    return condition


def has_tool_call(tool_name: str) -> StopCondition:
    """Stop after a step that called ``tool_name``."""

    def condition(event: dict[str, Any]) -> bool:
        steps = event["steps"]
        return bool(steps) and any(call["toolName"] == tool_name for call in steps[-1].get("toolCalls", []))

    return condition


async def should_stop(conditions: Sequence[StopCondition], steps: Sequence[Mapping[str, Any]]) -> bool:
    """Whether any condition says the run stops after its latest step."""
    for condition in conditions:
        verdict = condition({"steps": list(steps)})
        if inspect.isawaitable(verdict):
            verdict = await verdict
        if verdict:
            return True
    return False
