"""The ChunkType → AI SDK UI message chunk mapping, and the /chat route's request handling."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import httpx2 as httpx

from runstream.server.ui_stream import UIStreamEncoder
from tests.server.conftest import Live, blocks, chunks_of, parse_block
from tests.server.test_auth_and_isolation import by_token

APPROVAL = {
    "type": "tool-call-approval",
    "runId": "r1",
    "payload": {"toolCallId": "c1", "toolName": "delete_file", "args": {"path": "x"}, "resumeSchema": "{}"},
}
DENIED = {
    "type": "tool-output-denied",
    "runId": "r1",
    "payload": {"toolCallId": "c1", "approval": {"reason": "no"}},
}


def feed(encoder: UIStreamEncoder, *chunks: dict[str, Any]) -> list[dict[str, Any]]:
    return [part for chunk in chunks for part in encoder.feed(chunk)] + encoder.close()


def test_v5_keeps_to_v5_parts() -> None:
    parts = feed(UIStreamEncoder(5), APPROVAL, DENIED)
    assert [p["type"] for p in parts] == ["data-tool-call-approval", "tool-output-error"]
    assert parts[0]["id"] == "c1" and parts[0]["data"]["runId"] == "r1"
    assert parts[1] == {"type": "tool-output-error", "toolCallId": "c1", "errorText": "no"}


def test_v6_adds_approval_parts() -> None:
    parts = feed(UIStreamEncoder(6), APPROVAL, DENIED)
    assert parts[0] == {"type": "tool-approval-request", "approvalId": "r1::c1", "toolCallId": "c1"}
    assert [p["type"] for p in parts[1:]] == ["data-tool-call-approval", "tool-output-denied"]


def test_one_start_and_one_finish_for_many_turns() -> None:
    turn = [
        {"type": "start", "payload": {}},
        {"type": "step-start", "payload": {"messageId": "m1"}},
        {"type": "step-finish", "payload": {}},
        {"type": "finish", "payload": {"stepResult": {"reason": "stop"}}},
    ]
    task = {"type": "background-task-progress", "runId": "r", "payload": {"taskIds": ["t"], "elapsedMs": 5}}
    parts = feed(UIStreamEncoder(5), *turn, task, *turn)
    assert [p["type"] for p in parts] == [
        "start",
        "start-step",
        "finish-step",
        "data-background-task-progress",
        "start-step",
        "finish-step",
        "finish",
    ]
    assert parts[0]["messageId"] == "m1" and "id" not in parts[3]  # progress has no task id
    assert parts[-1]["finishReason"] == "stop"


def test_finish_reasons_outside_the_ui_enum_become_other() -> None:
    parts = feed(UIStreamEncoder(5), {"type": "finish", "payload": {"stepResult": {"reason": "suspended"}}})
    assert parts == [{"type": "start", "messageId": None}, {"type": "finish", "finishReason": "other"}]


def test_chat_route(client: httpx.Client) -> None:
    message = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "weather?"}]}
    response = client.post(
        "/chat/assistant", json={"id": "c", "messages": [message], "trigger": "submit-message"}
    )
    assert response.headers["x-vercel-ai-ui-message-stream"] == "v1"
    parts = chunks_of(response.content)
    kinds = [p["type"] for p in parts]
    assert kinds[0] == "start" and kinds[-1] == "finish"
    assert "tool-input-start" in kinds and "tool-input-delta" in kinds
    available = next(p for p in parts if p["type"] == "tool-output-available")
    assert available["output"] == {"city": "Paris", "sky": "sunny", "celsius": 21}
    assert client.post("/chat/assistant?v=9", json={"messages": [message]}).status_code == 400


def test_chat_with_memory_runs_only_the_new_messages(client: httpx.Client) -> None:
    memory = {"thread": "ui-memory-thread", "resource": "ui-user"}
    history: list[dict[str, Any]] = []
    for text in ("hello", "hello again"):
        history.append({"id": f"u{len(history)}", "role": "user", "parts": [{"type": "text", "text": text}]})
        parts = chunks_of(
            client.post("/chat/assistant", json={"messages": history, "memory": memory}).content
        )
        history.append(
            {"id": parts[0]["messageId"], "role": "assistant", "parts": [{"type": "text", "text": "..."}]}
        )
    stored = client.get("/api/memory/threads/ui-memory-thread/messages").json()["messages"]
    assert [m["role"] for m in stored] == ["user", "assistant", "user", "assistant"]  # no duplicates
    assert [json.dumps(m["content"]["parts"][0].get("text")) for m in stored if m["role"] == "user"] == [
        '"hello"',
        '"hello again"',
    ]


def _user(text: str) -> dict[str, Any]:
    return {"id": f"u-{uuid.uuid4().hex[:6]}", "role": "user", "parts": [{"type": "text", "text": text}]}


def _text(parts: list[dict[str, Any]]) -> str:
    return "".join(p["delta"] for p in parts if p["type"] == "text-delta")


def test_resume_a_chat_stream_after_a_reload(live: Live, client: httpx.Client) -> None:
    chat_id = f"chat-{uuid.uuid4().hex[:8]}"
    assert client.get(f"/chat/assistant/{chat_id}/stream").status_code == 204  # nothing yet
    body = {"id": chat_id, "messages": [_user("slow")], "trigger": "submit-message"}
    first: list[dict[str, Any]] = []
    with client.stream("POST", "/chat/assistant?resumable=true", json=body) as response:
        for block in blocks(response):
            _, data = parse_block(block)
            if data is not None:
                first.append(json.loads(data))
            if len(first) == 5:
                break  # the page reloads: the connection drops mid-stream
    again = client.get(f"/chat/assistant/{chat_id}/stream")
    assert again.status_code == 200 and again.headers["x-vercel-ai-ui-message-stream"] == "v1"
    replayed = chunks_of(again.content)
    assert replayed[:5] == first  # the same response, from its start
    assert replayed[-1] == {"type": "finish", "finishReason": "stop"} and again.content.endswith(
        b"data: [DONE]\n\n"
    )
    assert _text(replayed) == "".join(f"w{i} " for i in range(200))  # the run went on without a reader
    assert client.get(f"/chat/assistant/{chat_id}/stream").status_code == 204  # it has ended
    assert client.get(f"/chat/nope/{chat_id}/stream").status_code == 404


def test_only_resumable_chat_streams_can_be_resumed(live: Live, client: httpx.Client) -> None:
    chat_id = f"chat-{uuid.uuid4().hex[:8]}"
    with client.stream(
        "POST", "/chat/assistant", json={"id": chat_id, "messages": [_user("slow")]}
    ) as response:
        next(blocks(response))
        assert client.get(f"/chat/assistant/{chat_id}/stream").status_code == 204


def test_a_chat_stream_resumes_only_for_its_owner(app_factory: Callable[..., str]) -> None:
    url = app_factory(auth=by_token)
    alice, bob = (
        httpx.Client(base_url=url, headers={"Authorization": f"Bearer {name}"}, timeout=20)
        for name in ("alice", "bob")
    )
    body = {"id": "shared-chat-id", "messages": [_user("slow")]}
    with alice, bob, alice.stream("POST", "/chat/assistant?resumable=true", json=body) as response:
        next(blocks(response))
        assert bob.get("/chat/assistant/shared-chat-id/stream").status_code == 204
        with alice.stream("GET", "/chat/assistant/shared-chat-id/stream") as resumed:
            assert resumed.status_code == 200
