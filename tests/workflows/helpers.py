"""Helpers for the workflow tests."""

from __future__ import annotations

from typing import Any

from runstream.chunks import to_jsonable
from runstream.workflows import Step, StepContext, WorkflowRunOutput

ANY_OBJECT = {"type": "object"}


async def collect(out: WorkflowRunOutput) -> list[dict[str, Any]]:
    """The stream as wire JSON."""
    return [to_jsonable(chunk.to_wire()) async for chunk in out.full_stream]


def types(chunks: list[dict[str, Any]]) -> list[str]:
    return [c["type"] for c in chunks]


def events(chunks: list[dict[str, Any]], type_: str) -> list[dict[str, Any]]:
    """The payloads of the chunks of one type."""
    return [c["payload"] for c in chunks if c["type"] == type_]


def returning(step_id: str, value: Any, **options: Any) -> Step:
    """A step that returns ``value``."""

    async def execute(ctx: StepContext) -> Any:
        return value

    return Step(step_id, execute, **options)


def echo(step_id: str, **options: Any) -> Step:
    """A step that returns its input."""

    async def execute(ctx: StepContext) -> Any:
        return ctx.input_data

    return Step(step_id, execute, **options)
