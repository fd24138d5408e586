"""How the loop treats the model's finish reasons (as Mastra does)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from runstream import Agent
from runstream.chunks import AnyChunk
from runstream.testing import ScriptedModel


def answer(reason: str, usage: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    return [
        {"type": "stream-start", "warnings": []},
        {"type": "text-start", "id": "t"},
        {"type": "text-delta", "id": "t", "delta": "Hello."},
        {"type": "text-end", "id": "t"},
        {
            "type": "finish",
            "finishReason": reason,
            "usage": usage or {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2},
        },
    ]


async def run(model: ScriptedModel, **options: Any) -> list[AnyChunk]:
    out = await Agent("a", model=model).stream("Hi", **options)
    async with asyncio.timeout(5):
        return [chunk async for chunk in out.full_stream]


def step_reasons(chunks: list[AnyChunk]) -> list[tuple[str, bool]]:
    return [
        (c.payload["stepResult"]["reason"], c.payload["stepResult"]["isContinued"])
        for c in chunks
        if c.type == "step-finish"
    ]


@pytest.mark.parametrize("reason", ["other", "unknown"])
async def test_an_unexplained_stop_goes_on_until_the_step_limit(reason: str) -> None:
    model = ScriptedModel(calls=[answer(reason), answer(reason), answer(reason)])
    chunks = await run(model, max_steps=3)
    assert step_reasons(chunks) == [("other", True), ("other", True), ("other", False)]
    assert model.call_count == 3
    # Each later step sees what the model already said.
    assert model.recorded[1].prompt[-1]["role"] == "assistant"


@pytest.mark.parametrize("reason", ["stop", "length", "content-filter"])
async def test_a_stated_stop_ends_the_run(reason: str) -> None:
    model = ScriptedModel(calls=[answer(reason), answer("stop")])
    chunks = await run(model, max_steps=3)
    assert step_reasons(chunks) == [(reason, False)]
    assert model.call_count == 1


async def test_an_error_reason_without_an_error_part_is_an_error() -> None:
    chunks = await run(ScriptedModel(calls=[answer("error")]))
    assert [c.type for c in chunks][-3:] == ["error", "step-finish", "finish"]
    error = next(c for c in chunks if c.type == "error").payload["error"]
    assert str(error) == 'Agent stream finished with finishReason "error" but no error payload was provided'
    assert step_reasons(chunks) == [("error", False)]


async def test_a_usage_without_totals_counts_what_it_has() -> None:
    usage = {"inputTokens": None, "outputTokens": 4, "totalTokens": None}
    chunks = await run(ScriptedModel(calls=[answer("stop", usage)]))
    step = next(c for c in chunks if c.type == "step-finish").payload["output"]["usage"]
    assert step["totalTokens"] == 4 and step["inputTokens"] is None
