"""SSE framing byte for byte, heartbeats, and what the wire JSON leaves out."""

from __future__ import annotations

import json
import math
import re

import httpx2 as httpx

from runstream.chunks import StepStartChunk
from runstream.server.sse import DONE, data_frame
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


def test_error_mid_stream_is_in_band(client: httpx.Client) -> None:
    body = client.post("/api/agents/assistant/stream", json={"messages": "fail"}).content
    kinds = [json.loads(e[6:])["type"] for e in body.decode().split("\n\n") if e.startswith("data: {")]
    assert kinds[-3:] == ["error", "step-finish", "finish"]
    assert body.endswith(b"data: [DONE]\n\n")
