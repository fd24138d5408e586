"""A model step as a part source: however its provider stream ends (run out, aborted, failed,
the consumer gone), the stream is closed, the step ends with the right chunks, and a run with
callbacks (``agent_loop`` drives the part source) streams the same as one without (``RunOutput`` inline)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from runstream import AbortController, Agent
from runstream.chunks import AnyChunk
from runstream.models.base import ModelRequest, ModelStream, StreamPart

USAGE = {"inputTokens": 1, "outputTokens": 2, "totalTokens": 3}


class WatchedModel:
    """Streams two deltas, then (after ``held`` is set) fails, hangs or finishes; records
    whether its part stream was closed."""

    provider = "test"
    model_id = "watched"
    specification_version = "v2"

    def __init__(self, then: str) -> None:
        self.then = then
        self.held = asyncio.Event()
        self.closed = asyncio.Event()

    async def stream(self, request: ModelRequest) -> ModelStream:
        return ModelStream(parts=self._parts())

    async def _parts(self) -> AsyncIterator[StreamPart]:
        try:
            yield {"type": "stream-start", "warnings": []}
            yield {"type": "text-start", "id": "t"}
            yield {"type": "text-delta", "id": "t", "delta": "one "}
            yield {"type": "text-delta", "id": "t", "delta": "two"}
            self.held.set()
            if self.then == "fail":
                raise ConnectionError("the provider went away")
            if self.then == "hang":
                await asyncio.Event().wait()
            yield {"type": "text-end", "id": "t"}
            yield {"type": "finish", "finishReason": "stop", "usage": USAGE}
        finally:
            self.closed.set()


async def collect(agent: Agent, **options: Any) -> list[AnyChunk]:
    out = await agent.stream("hi", **options)
    return [chunk async for chunk in out.full_stream]


def types(chunks: list[AnyChunk]) -> list[str]:
    return [chunk.type for chunk in chunks]


def ignore(_: AnyChunk) -> None:
    pass


DRIVERS = pytest.mark.parametrize(
    "options", [{}, {"on_chunk": ignore}], ids=["RunOutput inline", "agent_loop"]
)


@DRIVERS
async def test_a_provider_failing_mid_stream_ends_the_step_with_its_error(options: dict[str, Any]) -> None:
    model = WatchedModel("fail")
    async with asyncio.timeout(5):
        chunks = await collect(Agent("a", model=model), **options)
    assert types(chunks) == [
        "start",
        "step-start",
        "text-start",
        "text-delta",
        "text-delta",
        "error",
        "step-finish",
        "finish",
    ], options
    error = chunks[5].payload["error"]
    assert isinstance(error, ConnectionError) and "went away" in str(error)
    assert chunks[-1].payload["stepResult"]["reason"] == "error"
    assert model.closed.is_set()


@DRIVERS
async def test_a_read_cancelled_while_the_provider_hangs_closes_its_stream(options: dict[str, Any]) -> None:
    """An abort cannot interrupt a provider waiting on the network (providers watch the
    signal themselves); the reader's cancellation does, and closes the stream."""
    model = WatchedModel("hang")
    controller = AbortController()
    out = await Agent("a", model=model).stream("hi", abort_signal=controller.signal, **options)
    seen: list[AnyChunk] = []

    async def read() -> None:
        async for chunk in out.full_stream:
            seen.append(chunk)

    async with asyncio.timeout(5):
        reading = asyncio.create_task(read())
        await model.held.wait()
        controller.abort("enough")
        reading.cancel()
        await asyncio.gather(reading, return_exceptions=True)
        await model.closed.wait()
    assert types(seen)[:5] == ["start", "step-start", "text-start", "text-delta", "text-delta"], options
    assert out.status == "aborted"


@DRIVERS
async def test_a_stopped_stream_is_not_pulled_again_after_an_abort_between_parts(
    options: dict[str, Any],
) -> None:
    model = WatchedModel("finish")
    controller = AbortController()
    out = await Agent("a", model=model).stream("hi", abort_signal=controller.signal, **options)
    seen: list[AnyChunk] = []
    async with asyncio.timeout(5):
        async for chunk in out.full_stream:
            seen.append(chunk)
            if chunk.type == "text-delta":
                controller.abort("after the first delta")
    assert types(seen) == ["start", "step-start", "text-start", "text-delta", "abort", "finish"], options
    assert seen[-1].payload["stepResult"]["reason"] == "aborted"
    assert model.closed.is_set()  # closed before its second delta was asked for
    assert not model.held.is_set()


async def test_a_consumer_gone_mid_part_closes_the_provider_stream() -> None:
    model = WatchedModel("hang")
    out = await Agent("a", model=model).stream("hi")

    async def read() -> None:
        async for _ in out.full_stream:
            pass

    async with asyncio.timeout(5):
        reading = asyncio.create_task(read())
        await model.held.wait()
        reading.cancel()
        await asyncio.gather(reading, return_exceptions=True)
        await model.closed.wait()
    assert out.status == "aborted"


class MalformedModel:
    """Sends a text delta without its ``delta``, before or after the stream's start."""

    provider = "test"
    model_id = "malformed"
    specification_version = "v2"

    def __init__(self, started: bool) -> None:
        self.started = started

    async def stream(self, request: ModelRequest) -> ModelStream:
        return ModelStream(parts=self._parts())

    async def _parts(self) -> AsyncIterator[StreamPart]:
        if self.started:
            yield {"type": "stream-start", "warnings": []}
        yield {"type": "text-delta", "id": "t"}
        yield {"type": "finish", "finishReason": "stop", "usage": USAGE}


@DRIVERS
@pytest.mark.parametrize("started", [True, False], ids=["after its start", "before its start"])
async def test_a_malformed_part_ends_the_step_with_an_error(options: dict[str, Any], started: bool) -> None:
    """Whether the part took the function-call path (the step under way) or a sub-stream of
    its own (before ``step-start``), the step fails, not the run's machinery."""
    async with asyncio.timeout(5):
        chunks = await collect(Agent("a", model=MalformedModel(started)), **options)
    assert types(chunks) == ["start", "step-start", "error", "step-finish", "finish"]
    assert isinstance(chunks[2].payload["error"], KeyError)
    assert chunks[-1].payload["stepResult"]["reason"] == "error"
