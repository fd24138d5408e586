"""The ChunkType → AI SDK UI message chunk mapping, and the /chat route's request handling."""

from __future__ import annotations

import json
from typing import Any

import httpx2 as httpx

from runstream.server.ui_stream import UIStreamEncoder
from tests.server.conftest import chunks_of

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
