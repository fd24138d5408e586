"""Vendor errors, timeouts and abort, the same for every provider (retries: test_retries.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from runstream.abort import AbortController, AbortError
from runstream.models.anthropic import AnthropicModel
from runstream.models.base import LanguageModel, ModelCallError, ModelRequest, ModelSettings, StreamPart
from runstream.models.openai import OpenAIChatModel, OpenAIResponsesModel

from .loopback import LoopbackServer, Reply, collect, error_of, fixture, json_reply

KINDS = ["responses", "chat", "anthropic"]
TEXT = {
    "responses": "openai_responses_text.sse",
    "chat": "openai_chat_text.sse",
    "anthropic": "anthropic_text.sse",
}
TRUNCATED = {
    "responses": "openai_responses_truncated.sse",
    "chat": "openai_chat_truncated.sse",
    "anthropic": "anthropic_truncated.sse",
}
FIRST_DELTA = {"responses": 5, "chat": 2, "anthropic": 4}
"""Events in each text transcript up to and including its first text delta."""

OPENAI_ERROR = {"type": "requests", "param": None, "code": "rate_limit_exceeded"}


def error_body(kind: str, message: str) -> dict[str, Any]:
    if kind == "anthropic":
        return {"type": "error", "error": {"type": "rate_limit_error", "message": message}}
    return {"error": {**OPENAI_ERROR, "message": message}}


def make(kind: str, server: LoopbackServer, **kw: Any) -> LanguageModel:
    if kind == "anthropic":
        return AnthropicModel("claude-test-model", api_key="k", base_url=server.url(), **kw)
    cls = OpenAIResponsesModel if kind == "responses" else OpenAIChatModel
    return cls("gpt-4.1", api_key="k", base_url=server.url("/v1"), **kw)


def request(signal: Any = None, **settings: Any) -> ModelRequest:
    prompt = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    return ModelRequest(prompt=prompt, abort_signal=signal, settings=ModelSettings(**settings))


@pytest.mark.parametrize("kind", KINDS)
async def test_mid_stream_failure_is_not_retried(kind: str, loopback: LoopbackServer) -> None:
    loopback.queue(Reply(fixture(TRUNCATED[kind]), complete=False), Reply(fixture(TEXT[kind])))
    parts = await collect((await make(kind, loopback).stream(request())).parts)
    assert parts[-1]["type"] == "error"
    assert len(loopback.requests) == 1


@pytest.mark.parametrize("kind", KINDS)
async def test_read_timeout_ends_with_an_error_part(kind: str, loopback: LoopbackServer) -> None:
    loopback.queue(Reply(fixture(TEXT[kind]), stall_after=FIRST_DELTA[kind]))
    stream = await make(kind, loopback, timeout=0.2).stream(request())
    parts = await collect(stream.parts)
    assert parts[-2]["type"] == "text-delta"
    status, message, retryable = error_of(parts[-1])
    assert (status, retryable) == (None, True)
    assert message.startswith("Connection error: ")


@pytest.mark.parametrize("kind", KINDS)
async def test_request_timeout_raises(kind: str, loopback: LoopbackServer) -> None:
    loopback.queue(Reply(stall_after=0))
    with pytest.raises(ModelCallError) as caught:
        await make(kind, loopback, timeout=0.2, max_retries=0).stream(request())
    assert caught.value.retryable and caught.value.status_code is None


@pytest.mark.parametrize("kind", KINDS)
async def test_abort_before_the_call_sends_nothing(kind: str, loopback: LoopbackServer) -> None:
    controller = AbortController()
    controller.abort("user cancelled")
    with pytest.raises(AbortError) as caught:
        await make(kind, loopback).stream(request(controller.signal))
    assert caught.value.reason == "user cancelled"
    assert loopback.requests == []


@pytest.mark.parametrize("kind", KINDS)
async def test_abort_while_waiting_for_the_response(kind: str, loopback: LoopbackServer) -> None:
    loopback.queue(Reply(stall_after=0))
    controller = AbortController()
    call = asyncio.create_task(make(kind, loopback).stream(request(controller.signal)))
    await loopback.stalled.wait()
    controller.abort()
    with pytest.raises(AbortError):
        await asyncio.wait_for(call, 5)
    await asyncio.wait_for(loopback.disconnected.wait(), 5)


@pytest.mark.parametrize("kind", KINDS)
async def test_abort_during_retry_backoff(kind: str, loopback: LoopbackServer) -> None:
    loopback.queue(json_reply(429, error_body(kind, "Slow down"), **{"retry-after": "30"}))
    controller = AbortController()
    call = asyncio.create_task(make(kind, loopback).stream(request(controller.signal)))
    await loopback.wait_requests(1)
    controller.abort()
    with pytest.raises(AbortError):
        await asyncio.wait_for(call, 5)
    assert len(loopback.requests) == 1


@pytest.mark.parametrize("kind", KINDS)
async def test_abort_while_waiting_for_the_next_event_closes_the_stream(
    kind: str, loopback: LoopbackServer
) -> None:
    loopback.queue(Reply(fixture(TEXT[kind]), stall_after=FIRST_DELTA[kind]))
    controller = AbortController()
    stream = await make(kind, loopback).stream(request(controller.signal))
    parts: list[StreamPart] = []
    first_delta = asyncio.Event()

    async def consume() -> int:
        async for part in stream.parts:
            parts.append(part)
            if part["type"] == "text-delta":
                first_delta.set()
        task = asyncio.current_task()
        assert task is not None
        return task.cancelling()

    consumer = asyncio.create_task(consume())
    await first_delta.wait()
    await loopback.stalled.wait()
    controller.abort()
    assert await asyncio.wait_for(consumer, 5) == 0  # the provider's own cancel was taken back
    assert [p["type"] for p in parts] == ["stream-start", "response-metadata", "text-start", "text-delta"]
    await asyncio.wait_for(loopback.disconnected.wait(), 5)


@pytest.mark.parametrize("kind", KINDS)
async def test_abort_between_parts_stops_before_reading_on(kind: str, loopback: LoopbackServer) -> None:
    loopback.queue(Reply(fixture(TEXT[kind]), stall_after=FIRST_DELTA[kind]))
    controller = AbortController()
    parts = (await make(kind, loopback).stream(request(controller.signal))).parts
    while (await anext(parts))["type"] != "text-delta":
        pass
    controller.abort()
    with pytest.raises(StopAsyncIteration):
        await anext(parts)
    await asyncio.wait_for(loopback.disconnected.wait(), 5)


@pytest.mark.parametrize("kind", KINDS)
async def test_closing_the_parts_early_closes_the_stream(kind: str, loopback: LoopbackServer) -> None:
    loopback.queue(Reply(fixture(TEXT[kind]), stall_after=FIRST_DELTA[kind]))
    parts = (await make(kind, loopback).stream(request())).parts
    assert (await anext(parts))["type"] == "stream-start"
    await parts.aclose()  # type: ignore[attr-defined]
    await asyncio.wait_for(loopback.disconnected.wait(), 5)
