"""A list of models with retries (Mastra's ``model: [{model, maxRetries, enabled}]``)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from runstream import Agent
from runstream.abort import AbortController
from runstream.chunks import AnyChunk
from runstream.models import _common
from runstream.models.base import ModelCallError
from runstream.models.fallback import FallbackExhaustedError, FallbackModel
from runstream.testing import ScriptedModel

USAGE = {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2}


@pytest.fixture(autouse=True)
def backoffs(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Mastra's backoff between retries (1 s, 2 s, ...), recorded instead of slept."""
    delays: list[float] = []

    async def sleep(seconds: float) -> None:
        delays.append(seconds)

    monkeypatch.setattr(_common, "DEFAULT_RETRY_POLICY", _common.RetryPolicy(sleep=sleep))
    return delays


def reply(text: str) -> list[dict[str, Any]]:
    return [
        {"type": "stream-start", "warnings": []},
        {"type": "text-start", "id": "t"},
        {"type": "text-delta", "id": "t", "delta": text},
        {"type": "text-end", "id": "t"},
        {"type": "finish", "finishReason": "stop", "usage": USAGE},
    ]


def failing(message: str) -> dict[str, Any]:
    return {"parts": [], "throwOnCall": {"message": message, "statusCode": 503}}


def error_part(message: str) -> list[dict[str, Any]]:
    return [{"type": "stream-start", "warnings": []}, {"type": "error", "error": {"message": message}}]


async def drain(out: Any) -> list[AnyChunk]:
    async with asyncio.timeout(10):
        return [chunk async for chunk in out.full_stream]


async def test_retries_then_falls_back_to_the_next_model(backoffs: list[float]) -> None:
    primary = ScriptedModel(calls=[failing("overloaded"), error_part("still overloaded")], model_id="primary")
    disabled = ScriptedModel.text("never")
    backup = ScriptedModel(calls=[reply("from the backup")], model_id="backup")
    agent = Agent(
        "a",
        model=[
            {"model": primary, "maxRetries": 1},
            {"model": disabled, "enabled": False},
            {"model": backup},
        ],
    )
    out = await agent.stream("hi")
    chunks = await drain(out)
    assert out.state.text == "from the backup"
    assert "error" not in [c.type for c in chunks]
    assert (primary.call_count, disabled.call_count, backup.call_count) == (2, 0, 1)
    assert backoffs == [1.0]


async def test_agent_max_retries_retries_a_single_model(backoffs: list[float]) -> None:
    model = ScriptedModel(calls=[failing("503"), failing("503"), reply("third time")])
    agent = Agent("a", model=model, max_retries=2)
    out = await agent.stream("hi")
    await drain(out)
    assert out.state.text == "third time" and model.call_count == 3
    assert backoffs == [1.0, 2.0]


async def test_when_every_model_fails_the_run_ends_with_an_error_chunk() -> None:
    agent = Agent(
        "a", model=[ScriptedModel(calls=[failing("a down")]), ScriptedModel(calls=[failing("b down")])]
    )
    out = await agent.stream("hi")
    chunks = await drain(out)
    errors = [c for c in chunks if c.type == "error"]
    assert len(errors) == 1 and "all 2 models failed; last error: b down" in str(errors[0].payload["error"])
    assert isinstance(out.state.error, FallbackExhaustedError)


async def test_a_failure_after_the_answer_began_is_not_retried() -> None:
    broken = [*reply("partial")[:3], {"type": "error", "error": {"message": "cut"}}]
    first = ScriptedModel(calls=[broken])
    second = ScriptedModel.text("unused")
    out = await Agent("a", model=[first, second]).stream("hi")
    kinds = [c.type for c in await drain(out)]
    assert "text-delta" in kinds and "error" in kinds and second.call_count == 0


def test_model_list_mistakes_are_named() -> None:
    with pytest.raises(ValueError, match=r"model\[0\]: unknown option 'maxRetry'"):
        FallbackModel([{"model": ScriptedModel.text("x"), "maxRetry": 1}])
    with pytest.raises(ValueError, match="at least one enabled model"):
        FallbackModel([{"model": ScriptedModel.text("x"), "enabled": False}])
    with pytest.raises(TypeError, match=r"model\[0\].model must be a model"):
        FallbackModel([{"model": "gpt-4o"}])


class Refusing:
    """A model whose every call fails with a vendor error (counted)."""

    specification_version = "v2"
    provider = "vendor"
    model_id = "refusing"

    def __init__(self, error: Exception) -> None:
        self.error = error
        self.calls = 0

    async def stream(self, request: Any) -> Any:
        self.calls += 1
        raise self.error


async def test_an_error_that_cannot_pass_goes_to_the_next_model_at_once(backoffs: list[float]) -> None:
    primary = Refusing(ModelCallError("Invalid API key", status_code=401, retryable=False))
    backup = ScriptedModel(calls=[reply("from the backup")])
    out = await Agent("a", model=[{"model": primary, "maxRetries": 3}, {"model": backup}]).stream("hi")
    await drain(out)
    assert out.state.text == "from the backup"
    assert (primary.calls, backoffs) == (1, [])


async def test_abort_during_a_backoff_ends_the_run_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    waiting = asyncio.Event()

    async def hold(seconds: float) -> None:
        waiting.set()
        await asyncio.Event().wait()

    monkeypatch.setattr(_common, "DEFAULT_RETRY_POLICY", _common.RetryPolicy(sleep=hold))
    primary = Refusing(ModelCallError("Overloaded", status_code=529, retryable=True))
    controller = AbortController()
    out = await Agent("a", model=primary, max_retries=2).stream("hi", abort_signal=controller.signal)
    consume = asyncio.ensure_future(drain(out))
    await waiting.wait()
    controller.abort()
    kinds = [c.type for c in await consume]
    assert "abort" in kinds and primary.calls == 1
