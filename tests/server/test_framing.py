"""SSE framing byte for byte, heartbeats, and what the wire JSON leaves out."""

from __future__ import annotations

import asyncio
import json
import math
import re
from collections.abc import AsyncGenerator

import httpx2 as httpx
from starlette.types import Message

from runstream.chunks import StepStartChunk
from runstream.server.sse import DONE, MAX_BATCH_BYTES, SSEResponse, data_frame
from runstream.server.wire import chunk_json, encode_json, redact
from tests.server.conftest import Live, blocks

EVENT = re.compile(rb"data: [^\r\n]+\n\n")


def test_stream_body_is_exactly_data_events_then_done(client: httpx.Client) -> None:
    response = client.post("/api/agents/assistant/stream", json={"messages": "weather?"})
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/event-stream"
    assert response.headers["cache-control"] == "no-cache"
    assert response.headers["x-accel-buffering"] == "no"
    assert "content-length" not in response.headers
    body = response.content
    assert body.endswith(b"data: [DONE]\n\n") and b"\r" not in body
    events = EVENT.findall(body)
    assert b"".join(events) == body  # nothing but data events (no ids, no event: lines)
    for event in events[:-1]:
        json.loads(event[len(b"data: ") : -2])


def test_frames() -> None:
    assert data_frame('{"a":1}') == b'data: {"a":1}\n\n'
    assert data_frame('{"a":1}', "run:3") == b'id: run:3\ndata: {"a":1}\n\n'
    assert data_frame('"\ud800"') == b'data: "?"\n\n'  # a lone surrogate cannot break the stream
    assert DONE == b"data: [DONE]\n\n"


def test_json_is_one_line_and_never_nan() -> None:
    assert encode_json({"text": "two\nlines", "e": "é"}) == '{"text":"two\\nlines","e":"é"}'
    # As JavaScript's JSON.stringify: NaN and infinities become null; the chunk is still sent.
    assert encode_json({"x": math.nan, "y": math.inf}) == '{"x":null,"y":null}'
    assert encode_json({"x": object()}) is None
    assert encode_json({"big": 2**70}) == '{"big":1180591620717411303424}'


def test_model_request_is_redacted() -> None:
    chunk = StepStartChunk("r1", {"request": {"body": "secret"}, "messageId": "m"})
    assert json.loads(chunk_json(chunk) or "")["payload"] == {"request": {}, "messageId": "m"}
    assert chunk.payload["request"] == {"body": "secret"}  # the chunk itself is untouched
    finish = {
        "type": "finish",
        "payload": {
            "request": {},
            "metadata": {"request": {"body": "secret"}, "modelId": "m"},
            "output": {"steps": [{"request": {"body": "secret"}, "text": "hi"}]},
        },
    }
    assert redact(finish)["payload"] == {"metadata": {"modelId": "m"}, "output": {"steps": [{"text": "hi"}]}}


def test_heartbeats_are_comments_while_a_stream_is_quiet(live: Live) -> None:
    with (
        httpx.Client(base_url=live.url, timeout=10) as client,
        client.stream("GET", "/api/background-tasks/stream?resourceId=nobody") as response,
    ):
        assert response.status_code == 200
        first = next(blocks(response))
    assert first == ": keepalive"


def test_include_existing_is_true_or_false(client: httpx.Client) -> None:
    """Mastra's ``includeExisting`` (default true: running tasks first); anything else is a 400."""
    response = client.get("/api/background-tasks/stream", params={"includeExisting": "yes"})
    assert response.status_code == 400
    assert "includeExisting" in response.text


def test_error_mid_stream_is_in_band(client: httpx.Client) -> None:
    body = client.post("/api/agents/assistant/stream", json={"messages": "fail"}).content
    kinds = [json.loads(e[6:])["type"] for e in body.decode().split("\n\n") if e.startswith("data: {")]
    assert kinds[-3:] == ["error", "step-finish", "finish"]
    assert body.endswith(b"data: [DONE]\n\n")


async def _drive(response: SSEResponse, disconnect: asyncio.Event | None = None) -> list[bytes]:
    """Run an SSE response against an in-memory ASGI channel; the body writes it made."""
    writes: list[bytes] = []
    gone = disconnect or asyncio.Event()

    async def receive() -> Message:
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        if message["type"] == "http.response.body" and message.get("body"):
            writes.append(message["body"])

    await response({"type": "http"}, receive, send)
    return writes


async def test_frames_ready_together_leave_in_one_write_and_a_waited_for_frame_at_once() -> None:
    """The first frame is written at once; frames produced without a pause go out together;
    a frame that follows a pause in the run is written before the next one is produced."""

    async def frames() -> AsyncGenerator[bytes, None]:
        for n in range(4):
            yield f"data: {n}\n\n".encode()
        await asyncio.sleep(0)  # the run waits (for the model, say)
        yield b"data: late\n\n"

    writes = await _drive(SSEResponse(frames(), heartbeat_s=None))
    assert writes == [b"data: 0\n\n", b"data: 1\n\ndata: 2\n\ndata: 3\n\n", b"data: late\n\n"]
    assert b"".join(writes) == b"".join(f"data: {n}\n\n".encode() for n in range(4)) + b"data: late\n\n"


async def test_a_fast_producer_waits_for_the_socket_beyond_the_batch_limit() -> None:
    produced = 0

    async def frames() -> AsyncGenerator[bytes, None]:
        nonlocal produced
        for _ in range(10):
            produced += 1
            yield b"x" * (MAX_BATCH_BYTES // 2)

    writes = await _drive(SSEResponse(frames(), heartbeat_s=None))
    assert produced == 10
    assert max(len(w) for w in writes) <= MAX_BATCH_BYTES  # never more than a batch buffered
    assert sum(len(w) for w in writes) == 10 * (MAX_BATCH_BYTES // 2)


async def test_a_disconnect_stops_reading_and_calls_back() -> None:
    gone = asyncio.Event()
    called: list[bool] = []

    async def frames() -> AsyncGenerator[bytes, None]:
        yield b"data: 1\n\n"
        gone.set()
        await asyncio.Event().wait()  # a run that would never end on its own
        yield b"never"

    writes = await _drive(
        SSEResponse(frames(), heartbeat_s=None, on_disconnect=lambda: called.append(True)), gone
    )
    assert writes == [b"data: 1\n\n"] and called == [True]
