"""Observers of a run's chunks (``runstream.output.Observer``: run callbacks, title events, a
durable run's log): they see each chunk before any consumer, what they add streams before the
chunk, one that raises ends the run with its error; and an observed run, driven by the same
``RunOutput`` as a plain one, ends its model step the same way however the provider's stream
ends (run out, aborted, failed, the consumer gone): the stream closed, the step's right chunks."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from runstream import AbortController, Agent
from runstream.chunks import AnyChunk, DataChunk, StartChunk, TextDeltaChunk, chunk_from_wire
from runstream.models.base import ModelRequest, ModelStream, StreamPart
from runstream.output import RunOutput
from runstream.run._run_state import RunState
from runstream.testing import ScriptedModel

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


DRIVERS = pytest.mark.parametrize("options", [{}, {"on_chunk": ignore}], ids=["plain", "observed"])


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


@DRIVERS
async def test_a_consumer_gone_mid_part_closes_the_provider_stream(options: dict[str, Any]) -> None:
    model = WatchedModel("hang")
    out = await Agent("a", model=model).stream("hi", **options)

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


REPLY = [
    {"type": "stream-start", "warnings": []},
    {"type": "text-start", "id": "t"},
    {"type": "text-delta", "id": "t", "delta": "one "},
    {"type": "text-delta", "id": "t", "delta": "two"},
    {"type": "text-end", "id": "t"},
    {"type": "finish", "finishReason": "stop", "usage": USAGE},
]


async def test_observers_see_every_chunk_in_order_before_any_consumer() -> None:
    """The start chunk too (it is not read ahead of the loop then), and each observer after
    the one before it."""
    seen: dict[str, list[str]] = {"first": [], "second": []}
    received: list[str] = []

    def observer(name: str, other: str | None) -> Any:
        async def observe(chunk: AnyChunk) -> tuple[AnyChunk, ...]:
            assert len(received) == len(seen[name])  # no consumer has it yet
            if other is not None:
                assert len(seen[other]) == len(seen[name]) + 1  # the earlier observer has it
            seen[name].append(chunk.type)
            return ()

        return observe

    out = await Agent("a", model=ScriptedModel(calls=[{"parts": REPLY}])).stream("hi")
    observed = RunOutput(
        _replay(out), RunState("r", "m", [], 0), AbortController(),
        observers=[observer("first", None), observer("second", "first")],
    )  # fmt: skip
    async with asyncio.timeout(5):
        async for chunk in observed.full_stream:
            received.append(chunk.type)
    assert received == seen["first"] == seen["second"]
    assert received[0] == "start" and received[-1] == "finish"


async def _replay(out: RunOutput) -> AsyncIterator[AnyChunk]:
    async for chunk in out.full_stream:
        yield chunk


async def test_what_an_observer_adds_streams_before_its_chunk_for_every_consumer() -> None:
    """A title before ``finish``: the later observers see it too, a late consumer replays it,
    and the deltas around it are kept as deltas."""
    later: list[str] = []

    async def title(chunk: AnyChunk) -> tuple[AnyChunk, ...]:
        if chunk.type == "finish":
            return (DataChunk("data-thread-title", {"title": "T"}, transient=True),)
        if chunk.type == "text-delta" and chunk.payload["text"] == "two":
            return (TextDeltaChunk("r", {"id": "t", "text": "(and) "}),)
        return ()

    async def record(chunk: AnyChunk) -> tuple[AnyChunk, ...]:
        later.append(chunk.type)
        return ()

    async def source() -> AsyncIterator[AnyChunk]:
        yield StartChunk("r", {"id": "a", "messageId": "m"})
        yield TextDeltaChunk("r", {"id": "t", "text": "one "})
        yield TextDeltaChunk("r", {"id": "t", "text": "two"})
        yield _finish()

    out = RunOutput(source(), RunState("r", "m", [], 0), AbortController(), observers=[title, record])
    first = [chunk async for chunk in out.full_stream]
    late = [chunk async for chunk in out.full_stream]
    expected = ["start", "text-delta", "text-delta", "text-delta", "data-thread-title", "finish"]
    assert types(first) == expected == later
    assert [c.payload["text"] for c in first if c.type == "text-delta"] == ["one ", "(and) ", "two"]
    assert late == first


def _finish() -> AnyChunk:
    return chunk_from_wire({"type": "finish", "runId": "r", "from": "AGENT", "payload": {}})


@pytest.mark.parametrize("at", ["start", "text-delta"])
async def test_an_observer_that_raises_ends_the_run_with_its_error(at: str) -> None:
    """As a run callback that raises does in Mastra: the consumer gets the error, the run is
    failed, and a model step in flight has its provider stream closed."""
    model = WatchedModel("finish")

    def on_chunk(chunk: AnyChunk) -> None:
        raise ValueError(f"observer broke at {chunk.type}")

    out = await Agent("a", model=model).stream("hi", on_chunk=on_chunk if at != "start" else ignore)
    if at == "start":

        async def broken(chunk: AnyChunk) -> tuple[AnyChunk, ...]:
            raise ValueError("observer broke at start")

        out = RunOutput(_replay(out), RunState("r", "m", [], 0), AbortController(), observers=[broken])
    seen: list[AnyChunk] = []
    async with asyncio.timeout(5):
        with pytest.raises(ValueError, match=f"observer broke at {at}"):
            async for chunk in out.full_stream:
                seen.append(chunk)
    assert out.status == "failed"
    assert isinstance(out.error, ValueError)
    if at == "text-delta":
        assert types(seen) == ["start", "step-start", "text-start"]
        assert model.closed.is_set() and not model.held.is_set()
