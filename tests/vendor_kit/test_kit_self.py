"""The kit's own parts: the replay server's framing and extensions, and the comparisons it adds to compare.py
(provider metadata, request bodies) catch what they must and forgive only what they may."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from . import server as replay
from .kit import metadata_difference, request_difference

FIXTURE = "\n".join(
    json.dumps(event)
    for event in (
        {"id": "c1", "choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": None}]},
        {"id": "c1", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    )
)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[replay.ReplayServer]:
    (tmp_path / "chat").mkdir()
    (tmp_path / "chat" / "two.chunks.txt").write_text(FIXTURE + "\n")
    (tmp_path / "chat" / "rate.json").write_text(
        json.dumps({"error": {"message": "slow down", "code": None}})
    )
    srv = replay.start(str(tmp_path))
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()


def _post(srv: replay.ReplayServer, path: str, body: object) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
    try:
        conn.request("POST", path, json.dumps(body), {"content-type": "application/json"})
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


def test_server_frames_chat_and_logs_requests(server: replay.ReplayServer) -> None:
    server.reset(["chat/two"])
    status, headers, body = _post(server, "/v1/chat/completions", {"model": "m"})
    assert status == 200 and headers["content-type"] == "text/event-stream"
    lines = FIXTURE.split("\n")
    assert body == f"data: {lines[0]}\n\ndata: {lines[1]}\n\ndata: [DONE]\n\n".encode()
    assert server.requests() == [
        {"path": "/v1/chat/completions", "fixture": "chat/two", "body": {"model": "m"}}
    ]


def test_server_error_status_and_headers_then_the_next_entry(server: replay.ReplayServer) -> None:
    server.reset([{"fixture": "chat/rate.json", "status": 429, "headers": {"retry-after": "0"}}, "chat/two"])
    status, headers, body = _post(server, "/v1/chat/completions", {})
    assert (status, headers["retry-after"]) == (429, "0")
    assert json.loads(body) == {"error": {"message": "slow down", "code": None}}
    status, _, body = _post(server, "/v1/chat/completions", {})
    assert status == 200 and body.endswith(b"data: [DONE]\n\n")
    status, _, _ = _post(server, "/v1/chat/completions", {})  # the last entry repeats
    assert status == 200 and len(server.requests()) == 3


def test_server_cuts_a_stream_before_its_end(server: replay.ReplayServer) -> None:
    server.reset([{"fixture": "chat/two", "cut": 1}])
    _, _, body = _post(server, "/v1/chat/completions", {})
    assert body == f"data: {FIXTURE.split(chr(10))[0]}\n\n".encode()


def _chunk(kind: str, line: int, **payload: Any) -> dict[str, Any]:
    return {"type": kind, "runId": "run-1", "payload": payload, "__line": line}


def test_metadata_equal_when_ids_are_renamed_consistently_and_mastra_bookkeeping_differs() -> None:
    golden = [
        _chunk("text-start", 1, id="a", providerMetadata={"openai": {"itemId": "msg_1"}}),
        _chunk(
            "step-finish",
            2,
            output={"steps": [{"content": [{"providerOptions": {"mastra": {"createdAt": 1}}}]}]},
            metadata={"providerMetadata": {"openai": {"responseId": "resp_1"}}},
        ),
    ]
    candidate = [
        {**golden[0], "runId": "run-2"},
        _chunk(
            "step-finish",
            2,
            output={"steps": [{"content": [{}]}]},
            metadata={"providerMetadata": {"openai": {"responseId": "resp_1"}}},
        ),
    ]
    assert metadata_difference(golden, candidate, []) is None


def test_metadata_missing_extra_or_different_is_a_difference() -> None:
    golden = [_chunk("text-start", 1, id="a", providerMetadata={"openai": {"itemId": "msg_1"}})]
    missing = [_chunk("text-start", 1, id="a")]
    extra = [_chunk("text-start", 1, id="a", providerMetadata={"openai": {"itemId": "msg_1", "phase": "x"}})]
    other = [_chunk("text-start", 1, id="a", providerMetadata={"openai": {"itemId": "msg_2"}})]
    for candidate in (missing, extra, other):
        difference = metadata_difference(golden, candidate, [])
        assert difference is not None and "payload.providerMetadata" in difference
    assert metadata_difference(missing, golden, []) is not None  # runstream adds what Mastra has not
    extra_object = [_chunk("finish", 1, response={"providerMetadata": {"openai": {"responseId": "r"}}})]
    assert metadata_difference([_chunk("finish", 1)], extra_object, []) is None  # an extra field, as level 3
    allow = [{"ignoreMetadata": [{"type": "text-start", "path": "payload.providerMetadata"}]}]
    assert metadata_difference(golden, missing, allow) is None


def _request(body: dict[str, Any]) -> dict[str, Any]:
    return {"path": "/v1/responses", "body": body}


def test_requests_forgive_only_the_schema_marker_and_random_ids() -> None:
    fixtures = '{"call_id": "call_vendor"}'
    golden = [
        _request(
            {
                "tools": [
                    {"parameters": {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"}}
                ],
                "input": [{"type": "function_call", "call_id": "call_vendor"}, {"id": "rand-js-1"}],
            }
        )
    ]
    same = [
        _request(
            {
                "tools": [{"parameters": {"type": "object"}}],
                "input": [{"type": "function_call", "call_id": "call_vendor"}, {"id": "rand-py-9"}],
            }
        )
    ]
    assert request_difference(golden, same, fixtures, []) is None
    wrong_vendor_id = json.loads(json.dumps(same).replace("call_vendor", "call_other"))
    difference = request_difference(golden, wrong_vendor_id, fixtures, [])
    assert difference is not None and "input[0].call_id" in difference
    extra = [_request({**same[0]["body"], "stream_options": {"include_usage": True}})]
    difference = request_difference(golden, extra, fixtures, [])
    assert difference is not None and "stream_options" in difference and "<missing>" in difference
    assert (
        request_difference(golden, same + same, fixtures, []) == "1 request(s) from Mastra, 2 from runstream"
    )
    allow = [{"ignoreRequest": [{"path": "stream_options"}]}]
    assert request_difference(golden, extra, fixtures, allow) is None
    longer = [_request({**same[0]["body"], "input": [*same[0]["body"]["input"], {"type": "x"}]})]
    assert request_difference(golden, longer, fixtures, []) is not None
    assert request_difference(golden, longer, fixtures, [{"ignoreRequest": [{"path": "input.2"}]}]) is None
