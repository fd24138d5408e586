"""RunOutput: replay to any number of consumers, derived streams, aggregates, cancellation."""

from __future__ import annotations

import asyncio
import tracemalloc
from collections.abc import AsyncIterator
from typing import Any

import pytest

from runstream import Agent, tool
from runstream.abort import AbortController
from runstream.chunks import AnyChunk, DataChunk, StartChunk, TextDeltaChunk
from runstream.errors import StateConflictError
from runstream.models.base import StreamPart
from runstream.output import RunOutput
from runstream.run._run_state import RunState
from runstream.testing import ScriptedModel

START: StreamPart = {"type": "stream-start", "warnings": []}
USAGE = {"inputTokens": 4, "outputTokens": 2, "totalTokens": 6}


def reply(*deltas: str) -> list[StreamPart]:
    return [
        START,
        {"type": "text-start", "id": "t"},
        *({"type": "text-delta", "id": "t", "delta": d} for d in deltas),
        {"type": "text-end", "id": "t"},
        {"type": "finish", "finishReason": "stop", "usage": USAGE},
    ]


def gated_agent(release: asyncio.Event) -> Agent:
    """An agent whose run holds in the middle (a tool waits for ``release``), then answers."""

    @tool
    async def wait_for_release() -> str:
        await release.wait()
        return "released"

    model = ScriptedModel(
        calls=[
            [
                START,
                {"type": "tool-call", "toolCallId": "c1", "toolName": "wait_for_release", "input": "{}"},
                {"type": "finish", "finishReason": "tool-calls", "usage": USAGE},
            ],
            reply("all ", "done"),
        ]
    )
    return Agent("a", model=model, tools=[wait_for_release])


async def read_all(out: RunOutput, sink: list[AnyChunk], seen: asyncio.Event | None = None) -> None:
    """Collect every chunk; set ``seen`` once the tool call went by."""
    async for chunk in out.full_stream:
        sink.append(chunk)
        if seen is not None and chunk.type == "tool-call":
            seen.set()


async def test_consumers_started_at_different_times_each_see_every_chunk() -> None:
    release = asyncio.Event()
    out = await gated_agent(release).stream("go")
    early: list[AnyChunk] = []
    middle: list[AnyChunk] = []
    early_saw_call = asyncio.Event()
    middle_saw_call = asyncio.Event()
    async with asyncio.timeout(5):
        first = asyncio.create_task(read_all(out, early, early_saw_call))
        await early_saw_call.wait()
        second = asyncio.create_task(read_all(out, middle, middle_saw_call))
        await middle_saw_call.wait()
        assert middle == early
        release.set()
        await asyncio.gather(first, second)
        late: list[AnyChunk] = []
        await read_all(out, late)

    assert [c.type for c in early][:3] == ["start", "step-start", "tool-call"]
    assert early[-1].type == "finish"
    for other in (middle, late):
        assert len(other) == len(early)
        assert other == early  # equal chunks (deltas are kept compactly and recreated)


async def test_text_stream_yields_only_text_deltas() -> None:
    out = await Agent("a", model=ScriptedModel(calls=[reply("Hel", "lo", "!")])).stream("hi")
    assert [t async for t in out.text_stream] == ["Hel", "lo", "!"]
    assert [c.type async for c in out.full_stream][-1] == "finish"


async def test_object_stream_yields_partial_objects() -> None:
    model = ScriptedModel(calls=[reply('{"items": [1', ", 2]", ', "n": 2}')])
    out = await Agent("a", model=model).stream("list", structured_output={"schema": {"type": "object"}})
    assert [o async for o in out.object_stream] == [
        {"items": [1]},
        {"items": [1, 2]},
        {"items": [1, 2], "n": 2},
    ]
    assert await out.object == {"items": [1, 2], "n": 2}


async def test_aggregates_drive_the_stream_without_a_consumer() -> None:
    release = asyncio.Event()
    release.set()
    out = await gated_agent(release).stream("go")
    async with asyncio.timeout(5):
        text, usage, steps, calls, results, reason = await asyncio.gather(
            out.text, out.usage, out.steps, out.tool_calls, out.tool_results, out.finish_reason
        )
    assert text == "all done"
    assert usage == {"inputTokens": 8, "outputTokens": 4, "totalTokens": 12}
    assert len(steps) == 2
    assert [c.payload["toolName"] for c in calls] == ["wait_for_release"]
    assert [c.payload["result"] for c in results] == ["released"]
    assert reason == "stop"
    assert out.status == "success"
    replay = [c.type async for c in out.full_stream]
    assert (replay[0], replay[-1]) == ("start", "finish")


async def test_get_full_output_fields() -> None:
    parts: list[StreamPart] = [
        START,
        {"type": "reasoning-start", "id": "r"},
        {"type": "reasoning-delta", "id": "r", "delta": "Let me think."},
        {"type": "reasoning-end", "id": "r"},
        {
            "type": "source",
            "sourceType": "url",
            "id": "s1",
            "url": "https://example.test",
            "title": "Example",
        },
        {"type": "file", "mediaType": "image/png", "data": b"\x89PNG"},
        *reply("Answer.")[1:],
    ]
    out = await Agent("a", model=ScriptedModel(calls=[parts])).stream("q", run_id="run-9")
    full: dict[str, Any] = await out.get_full_output()
    assert set(full) == {
        "runId",
        "text",
        "reasoningText",
        "usage",
        "totalUsage",
        "steps",
        "finishReason",
        "toolCalls",
        "toolResults",
        "sources",
        "files",
        "object",
        "error",
        "tripwire",
        "suspendPayload",
        "messages",
        "status",
    }
    assert full["runId"] == "run-9"
    assert full["text"] == "Answer."
    assert full["reasoningText"] == "Let me think."
    assert full["usage"] == full["totalUsage"] == USAGE
    assert len(full["steps"]) == 1 and full["steps"][0]["finishReason"] == "stop"
    assert full["finishReason"] == "stop"
    assert full["sources"] == [
        {"id": "s1", "sourceType": "url", "title": "Example", "url": "https://example.test"}
    ]
    assert full["files"] == [{"data": "iVBORw==", "base64": "iVBORw==", "mimeType": "image/png"}]
    assert (full["toolCalls"], full["toolResults"]) == ([], [])
    assert (full["object"], full["error"], full["tripwire"], full["suspendPayload"]) == (
        None,
        None,
        None,
        None,
    )
    assert full["messages"] == [
        {
            "role": "assistant",
            "content": [  # in the order they streamed, as Mastra keeps them
                {"type": "reasoning", "text": "Let me think."},
                {"type": "file", "data": "data:image/png;base64,iVBORw==", "mediaType": "image/png"},
                {"type": "text", "text": "Answer."},
            ],
        }
    ]
    assert full["status"] == "success"


async def test_cancelled_consumer_ends_the_run_without_hanging_others() -> None:
    parts = reply("first ", "second")
    parts[3] = {**parts[3], "delayMs": 3_600_000}
    out = await Agent("a", model=ScriptedModel(calls=[{"parts": parts}])).stream("hi")
    puller: list[AnyChunk] = []
    follower: list[AnyChunk] = []
    puller_saw_text = asyncio.Event()
    follower_caught_up = asyncio.Event()

    async def pull() -> None:
        async for chunk in out.full_stream:
            puller.append(chunk)
            if chunk.type == "text-delta":
                puller_saw_text.set()

    async def follow() -> None:
        async for chunk in out.full_stream:
            follower.append(chunk)
            if len(follower) == len(puller):
                follower_caught_up.set()

    async with asyncio.timeout(5):
        pulling = asyncio.create_task(pull())
        await puller_saw_text.wait()
        following = asyncio.create_task(follow())
        await follower_caught_up.wait()
        pulling.cancel()
        results = await asyncio.gather(pulling, following, return_exceptions=True)
        text = await out.text

    assert isinstance(results[0], asyncio.CancelledError)
    assert results[1] is None
    assert [c.type for c in follower] == ["start", "step-start", "text-start", "text-delta"]
    assert follower == puller
    assert out.status == "aborted"
    assert text == ""


async def test_interleaved_text_blocks_reach_every_consumer_and_observed_runs_alike() -> None:
    """Deltas of two blocks in turn, an empty delta and a reasoning run: consumers taking turns
    (each pulls for the other), a late one, and an observed run (with a callback) all see the
    same chunks."""
    parts: list[StreamPart] = [
        START,
        {"type": "text-start", "id": "a"},
        {"type": "text-delta", "id": "a", "delta": "one "},
        {"type": "text-delta", "id": "a", "delta": ""},
        {"type": "text-delta", "id": "a", "delta": "two "},
        {"type": "text-delta", "id": "b", "delta": "other "},
        {"type": "text-delta", "id": "a", "delta": "three "},
        {"type": "text-delta", "id": "a", "delta": "four"},
        {"type": "reasoning-delta", "id": "r", "delta": "hm"},
        {"type": "text-delta", "id": "a", "delta": "!"},
        {"type": "text-end", "id": "a"},
        {"type": "finish", "finishReason": "stop", "usage": USAGE},
    ]

    def agent() -> Agent:
        return Agent("a", model=ScriptedModel(calls=[{"parts": parts}]))

    out = await agent().stream("hi")
    first, second = out.full_stream, out.full_stream
    taking_turns: tuple[list[AnyChunk], list[AnyChunk]] = ([], [])
    async with asyncio.timeout(5):
        while True:
            one = await anext(first, None)
            other = await anext(second, None)
            if one is None and other is None:
                break
            assert one is not None and other is not None
            taking_turns[0].append(one)
            taking_turns[1].append(other)
        late = [chunk async for chunk in out.full_stream]
        wrapped = [chunk async for chunk in (await agent().stream("hi", on_chunk=lambda _: None)).full_stream]

    deltas = [(c.payload["id"], c.payload["text"]) for c in taking_turns[0] if c.type == "text-delta"]
    assert deltas == [
        ("a", "one "),
        ("a", "two "),
        ("b", "other "),
        ("a", "three "),
        ("a", "four"),
        ("a", "!"),
    ]
    assert taking_turns[1] == taking_turns[0]
    assert late == taking_turns[0]
    assert [c.to_wire()["payload"] for c in wrapped if "delta" in c.type] == [
        c.to_wire()["payload"] for c in late if "delta" in c.type
    ]
    assert [c.type for c in wrapped] == [c.type for c in late]
    assert await out.text == "one two other three four!"


async def test_a_first_chunk_known_up_front_is_read_without_entering_the_source() -> None:
    """A new run's ``start`` waits in the output: reading it does not run the loop (a run's
    first chunk costs no loop setup), every consumer gets it, and the source runs on the next
    read, its failure ending the stream as any other's."""
    entered: list[str] = []

    async def source() -> AsyncIterator[AnyChunk]:
        entered.append("source")
        raise RuntimeError("the loop broke")
        yield  # (an async generator)

    state = RunState("run-1", "msg-1", [], 0)
    start = StartChunk("run-1", {"id": "a", "messageId": "msg-1"})
    out = RunOutput(source(), state, AbortController(), first=start)
    first, late = out.full_stream, out.full_stream
    assert await anext(first) is start
    assert entered == []
    assert await anext(late) is start  # a second consumer replays it
    with pytest.raises(RuntimeError, match="the loop broke"):
        await anext(first)
    assert entered == ["source"]
    assert state.status == "failed"


async def test_a_relayed_run_streams_every_chunk_and_keeps_none() -> None:
    """``relay()`` is for a reader that keeps the chunks itself (an until-idle stream): the same
    chunks as ``full_stream``, none kept by the run, which then has no other stream; its
    aggregates wait for the relay to end it."""
    tokens = [f"token {i} " for i in range(50)]
    kept_out = await Agent("a", model=ScriptedModel(calls=[reply(*tokens)])).stream("hi")
    out = await Agent("a", model=ScriptedModel(calls=[reply(*tokens)])).stream("hi")
    text = asyncio.ensure_future(out.text)  # (waits for the relay's end; pulls nothing)
    kept = [(c.type, c.payload.get("text")) async for c in kept_out.full_stream]
    relayed = [(c.type, c.payload.get("text")) async for c in out.relay()]
    assert relayed == kept  # (the two runs' ids differ, their chunks' types and texts do not)
    assert await text == "".join(tokens)
    with pytest.raises(StateConflictError, match="relayed"):
        out.full_stream  # noqa: B018
    with pytest.raises(StateConflictError, match="relayed"):
        out.text_stream  # noqa: B018

    async def peak_bytes(relayed: bool) -> int:
        async def source() -> AsyncIterator[AnyChunk]:
            for i in range(2000):
                yield DataChunk("data-page", f"{i:04d}" + "x" * 1000, run_id="run-1")

        out = RunOutput(source(), RunState("run-1", "msg-1", [], 0), AbortController())
        tracemalloc.start()
        try:
            async for _ in out.relay() if relayed else out.full_stream:
                pass
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    kept_peak, relayed_peak = await peak_bytes(relayed=False), await peak_bytes(relayed=True)
    assert kept_peak > 2_000_000  # every page kept for a later reader
    assert relayed_peak < 100_000, relayed_peak  # about one page at a time


async def test_closing_a_relay_mid_run_aborts_the_run() -> None:
    """Nobody else drives a relayed run: its reader stopping ends it as a cancelled reader
    does (aborted, closed), and its aggregates answer."""
    release = asyncio.Event()
    out = await gated_agent(release).stream("hi")
    relay = out.relay()
    async with asyncio.timeout(5):
        async for chunk in relay:
            if chunk.type == "tool-call":
                break
        await relay.aclose()
        assert out.status == "aborted"
        assert await out.text == ""


async def test_a_relay_passes_on_what_observers_add() -> None:
    """An observer's chunks come just before the chunk they came with, through a relay too
    (held only until the reader takes them)."""
    run_id = "run-1"
    chunks = [TextDeltaChunk(run_id, {"id": "t", "text": t}) for t in ("a", "b", "c")]

    async def source() -> AsyncIterator[AnyChunk]:
        for chunk in chunks:
            yield chunk

    async def note_b(chunk: AnyChunk) -> list[DataChunk]:
        is_b = chunk.type == "text-delta" and chunk.payload["text"] == "b"
        return [DataChunk("data-note", "before b", run_id=run_id)] if is_b else []

    out = RunOutput(source(), RunState(run_id, "msg-1", [], 0), AbortController(), observers=[note_b])
    seen = [chunk async for chunk in out.relay()]
    assert [c.type for c in seen] == ["text-delta", "data-note", "text-delta", "text-delta"]
    assert seen[0] is chunks[0] and seen[2] is chunks[1] and seen[3] is chunks[2]
