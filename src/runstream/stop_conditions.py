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
from typing import TypedDict


class StopEvent(TypedDict):
    """What a condition gets: the run's finished steps, as ``await out.steps`` shows them."""

    steps: list[Mapping[str, object]]


StopCondition = Callable[[StopEvent], bool | Awaitable[bool]]


def step_count_is(count: int) -> StopCondition:
    """Stop once the run has had ``count`` steps."""

    def condition(event: StopEvent) -> bool:
        return len(event["steps"]) == count

    return condition


def has_tool_call(tool_name: str) -> StopCondition:
    """Stop after a step that called ``tool_name``."""

    def condition(event: StopEvent) -> bool:
        steps = event["steps"]
        calls = steps[-1].get("toolCalls") if steps else None
        return isinstance(calls, list) and any(
            isinstance(call, Mapping) and call.get("toolName") == tool_name for call in calls
        )

    return condition


async def should_stop(conditions: Sequence[StopCondition], steps: Sequence[Mapping[str, object]]) -> bool:
    """Whether any condition says the run stops after its latest step."""
    for condition in conditions:
        verdict = condition({"steps": list(steps)})
        if inspect.isawaitable(verdict):
            verdict = await verdict
        if verdict:
            return True
    return False
