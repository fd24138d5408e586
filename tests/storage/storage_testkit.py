"""Record factories shared by the storage tests (fixed timestamps, so tests are deterministic)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from runstream.storage import MessageRole, StoredMessage, TaskRecord, TaskStatus, Thread

BASE = datetime(2024, 1, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return BASE + timedelta(seconds=seconds)


def thread(
    thread_id: str = "t1",
    resource_id: str = "r1",
    *,
    created: float = 0,
    updated: float | None = None,
    title: str | None = None,
    metadata: dict[str, Any] | None = None,
) -> Thread:
    return Thread(
        id=thread_id,
        resource_id=resource_id,
        title=title,
        metadata=metadata or {},
        created_at=at(created),
        updated_at=at(created if updated is None else updated),
    )


def text_content(text: str) -> dict[str, Any]:
    return {"format": 2, "parts": [{"type": "text", "text": text}], "content": text}


def message(
    message_id: str,
    thread_id: str = "t1",
    resource_id: str = "r1",
    *,
    created: float = 0,
    role: MessageRole = "user",
    text: str | None = None,
) -> StoredMessage:
    return StoredMessage(
        id=message_id,
        thread_id=thread_id,
        resource_id=resource_id,
        role=role,
        content=text_content(text if text is not None else message_id),
        created_at=at(created),
    )


def tool_call_message(message_id: str, tool_call_id: str, *, created: float = 0) -> StoredMessage:
    """An assistant message whose tool invocation still holds the background placeholder."""
    return StoredMessage(
        id=message_id,
        thread_id="t1",
        resource_id="r1",
        role="assistant",
        created_at=at(created),
        content={
            "format": 2,
            "parts": [
                {"type": "step-start"},
                {
                    "type": "tool-invocation",
                    "toolInvocation": {
                        "state": "call",
                        "toolCallId": tool_call_id,
                        "toolName": "research",
                        "args": {"query": "q"},
                    },
                },
            ],
        },
    )


def task(task_id: str, *, status: TaskStatus = "pending", created: float = 0, **fields: Any) -> TaskRecord:
    values: dict[str, Any] = {
        "tool_name": "research",
        "tool_call_id": f"call-{task_id}",
        "args": {"query": task_id},
        "agent_id": "agent-1",
        "run_id": "run-1",
    }
    values.update(fields)
    return TaskRecord(id=task_id, status=status, created_at=at(created), **values)
