"""Record <-> row mapping shared by every backend.

A *row* is a flat ``dict`` keyed by column name: JSON fields are encoded to ``str``, datetimes are
aware UTC ``datetime`` objects (SQL backends convert them to their own type when binding). The
rows written are typed (:class:`ThreadRow`, :class:`MessageRow`, ...); a row read back is a
:data:`FetchedRow`, whatever the driver returned (SQLite gives datetimes back as text), which the
``*_from_row`` readers turn into a record. The in-memory backend stores the written rows, so it
applies exactly the validation and JSON round-trip the SQL backends do, and its reads are copies
by construction.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import fields, replace
from datetime import UTC, datetime
from typing import Any, TypedDict

from runstream._json import JsonValue
from runstream.storage.errors import InvalidArgumentError
from runstream.storage.records import (
    MESSAGE_ROLES,
    TASK_STATUSES,
    MessageRole,
    Resource,
    StoredMessage,
    TaskRecord,
    TaskStatus,
    TaskUpdate,
    Thread,
    utc_now,
)

FetchedRow = Mapping[str, Any]
"""A row as the database driver returns it: a column's value is whatever the driver decoded
(asyncpg's and sqlite3's rows are untyped); the ``*_from_row`` readers build the typed record."""


class ThreadRow(TypedDict):
    id: str
    resource_id: str
    title: str | None
    metadata: str
    created_at: datetime
    updated_at: datetime


class ResourceRow(TypedDict):
    id: str
    working_memory: str | None
    metadata: str
    created_at: datetime
    updated_at: datetime


class MessageRow(TypedDict):
    id: str
    thread_id: str
    resource_id: str
    role: MessageRole
    type: str
    content: str
    created_at: datetime


class TaskRow(TypedDict):
    """A :class:`TaskRecord` as columns: the same names, JSON fields encoded."""

    id: str
    status: TaskStatus
    tool_name: str
    tool_call_id: str
    args: str
    agent_id: str
    run_id: str
    thread_id: str | None
    resource_id: str | None
    result: str | None
    error: str | None
    created_at: datetime
    started_at: datetime | None
    suspended_at: datetime | None
    completed_at: datetime | None
    retry_count: int
    max_retries: int
    timeout_ms: int
    suspend_payload: str | None
    resume_data: str | None
    metadata: str


THREAD_COLUMNS = ("id", "resource_id", "title", "metadata", "created_at", "updated_at")
RESOURCE_COLUMNS = ("id", "working_memory", "metadata", "created_at", "updated_at")
MESSAGE_COLUMNS = ("id", "thread_id", "resource_id", "role", "type", "content", "created_at")
TASK_COLUMNS = tuple(f.name for f in fields(TaskRecord))


def encode_json(value: object, *, what: str) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise InvalidArgumentError(f"{what} is not JSON-serialisable: {exc}") from exc


def encode_json_object(value: Mapping[str, object], *, what: str) -> str:
    if not isinstance(value, Mapping):
        raise InvalidArgumentError(f"{what} must be a mapping, got {type(value).__name__}")
    return encode_json(dict(value), what=what)


def decode_json(text: str | None) -> Any:
    """The JSON value ``text`` holds: typed ``Any``, as the record field it is read into says
    what it is (a JSON object, or a tool's own value)."""
    return None if text is None else json.loads(text)


def to_utc(value: datetime, *, what: str) -> datetime:
    """Normalise to UTC; naive datetimes are refused rather than guessed at."""
    if not isinstance(value, datetime):
        raise InvalidArgumentError(f"{what} must be a datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidArgumentError(f"{what} is a naive datetime; pass a timezone-aware one")
    return value.astimezone(UTC)


def optional_utc(value: datetime | None, *, what: str) -> datetime | None:
    return None if value is None else to_utc(value, what=what)


def datetime_to_text(value: datetime) -> str:
    """Fixed-width UTC text (``2024-01-02T03:04:05.000006``): sorts in chronological order."""
    return value.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds")


def parse_datetime(value: datetime | str) -> datetime:
    """Read a datetime column: a native value, or the text :func:`datetime_to_text` wrote."""
    if isinstance(value, datetime):
        return value.astimezone(UTC)
    return datetime.fromisoformat(value).replace(tzinfo=UTC)


def parse_optional_datetime(value: datetime | str | None) -> datetime | None:
    return None if value is None else parse_datetime(value)


def thread_to_row(thread: Thread) -> ThreadRow:
    return {
        "id": thread.id,
        "resource_id": thread.resource_id,
        "title": thread.title,
        "metadata": encode_json_object(thread.metadata, what="thread metadata"),
        "created_at": to_utc(thread.created_at, what="thread created_at"),
        "updated_at": to_utc(thread.updated_at, what="thread updated_at"),
    }


def thread_from_row(row: FetchedRow) -> Thread:
    return Thread(
        id=row["id"],
        resource_id=row["resource_id"],
        title=row["title"],
        metadata=decode_json(row["metadata"]),
        created_at=parse_datetime(row["created_at"]),
        updated_at=parse_datetime(row["updated_at"]),
    )


def resource_to_row(resource: Resource) -> ResourceRow:
    return {
        "id": resource.id,
        "working_memory": resource.working_memory,
        "metadata": encode_json_object(resource.metadata, what="resource metadata"),
        "created_at": to_utc(resource.created_at, what="resource created_at"),
        "updated_at": to_utc(resource.updated_at, what="resource updated_at"),
    }


def resource_from_row(row: FetchedRow) -> Resource:
    return Resource(
        id=row["id"],
        working_memory=row["working_memory"],
        metadata=decode_json(row["metadata"]),
        created_at=parse_datetime(row["created_at"]),
        updated_at=parse_datetime(row["updated_at"]),
    )


def updated_resource(
    existing: Resource | None,
    resource_id: str,
    working_memory: str | None,
    metadata: Mapping[str, JsonValue] | None,
) -> Resource:
    """``existing`` (or a new record) with the update applied: Mastra's ``updateResource``
    (``working_memory`` replaced when given, ``metadata`` shallow-merged)."""
    if working_memory is not None and not isinstance(working_memory, str):
        raise InvalidArgumentError(f"working memory of resource {resource_id} must be a string")
    resource = existing or Resource(id=resource_id)
    if working_memory is not None:
        resource.working_memory = working_memory
    if metadata is not None:
        resource.metadata = {**resource.metadata, **metadata}
    resource.updated_at = utc_now()
    return resource


def message_to_row(message: StoredMessage) -> MessageRow:
    if message.role not in MESSAGE_ROLES:
        raise InvalidArgumentError(f"message {message.id} has unknown role {message.role!r}")
    return {
        "id": message.id,
        "thread_id": message.thread_id,
        "resource_id": message.resource_id,
        "role": message.role,
        "type": message.type,
        "content": encode_json_object(message.content, what=f"message {message.id} content"),
        "created_at": to_utc(message.created_at, what=f"message {message.id} created_at"),
    }


def tool_call_ids(row: MessageRow) -> list[str]:
    """The tool-call ids a message row's parts hold (``tool-invocation`` parts of an assistant
    message): the keys of every backend's tool-call index (``find_tool_call_message``)."""
    if row["role"] != "assistant" or '"tool-invocation"' not in row["content"]:
        return []
    parts = json.loads(row["content"]).get("parts")
    ids = []
    for part in parts if isinstance(parts, list) else []:
        invocation = part.get("toolInvocation") if isinstance(part, dict) else None
        call_id = invocation.get("toolCallId") if isinstance(invocation, dict) else None
        if part.get("type") == "tool-invocation" and isinstance(call_id, str):
            ids.append(call_id)
    return ids


def message_from_row(row: FetchedRow) -> StoredMessage:
    return StoredMessage(
        id=row["id"],
        thread_id=row["thread_id"],
        resource_id=row["resource_id"],
        role=row["role"],
        type=row["type"],
        content=decode_json(row["content"]),
        created_at=parse_datetime(row["created_at"]),
    )


def task_to_row(task: TaskRecord) -> TaskRow:
    if task.status not in TASK_STATUSES:
        raise InvalidArgumentError(f"task {task.id} has unknown status {task.status!r}")

    def what(column: str) -> str:
        return f"task {task.id} {column}"

    def optional_json(value: object, column: str) -> str | None:
        return None if value is None else encode_json(value, what=what(column))

    return {
        "id": task.id,
        "status": task.status,
        "tool_name": task.tool_name,
        "tool_call_id": task.tool_call_id,
        "args": encode_json_object(task.args, what=what("args")),
        "agent_id": task.agent_id,
        "run_id": task.run_id,
        "thread_id": task.thread_id,
        "resource_id": task.resource_id,
        "result": optional_json(task.result, "result"),
        "error": optional_json(task.error, "error"),
        "created_at": to_utc(task.created_at, what=what("created_at")),
        "started_at": optional_utc(task.started_at, what=what("started_at")),
        "suspended_at": optional_utc(task.suspended_at, what=what("suspended_at")),
        "completed_at": optional_utc(task.completed_at, what=what("completed_at")),
        "retry_count": task.retry_count,
        "max_retries": task.max_retries,
        "timeout_ms": task.timeout_ms,
        "suspend_payload": optional_json(task.suspend_payload, "suspend_payload"),
        "resume_data": optional_json(task.resume_data, "resume_data"),
        "metadata": encode_json_object(task.metadata, what=what("metadata")),
    }


def task_from_row(row: FetchedRow) -> TaskRecord:
    return TaskRecord(
        id=row["id"],
        status=row["status"],
        tool_name=row["tool_name"],
        tool_call_id=row["tool_call_id"],
        args=decode_json(row["args"]),
        agent_id=row["agent_id"],
        run_id=row["run_id"],
        thread_id=row["thread_id"],
        resource_id=row["resource_id"],
        result=decode_json(row["result"]),
        error=decode_json(row["error"]),
        created_at=parse_datetime(row["created_at"]),
        started_at=parse_optional_datetime(row["started_at"]),
        suspended_at=parse_optional_datetime(row["suspended_at"]),
        completed_at=parse_optional_datetime(row["completed_at"]),
        retry_count=row["retry_count"],
        max_retries=row["max_retries"],
        timeout_ms=row["timeout_ms"],
        suspend_payload=decode_json(row["suspend_payload"]),
        resume_data=decode_json(row["resume_data"]),
        metadata=decode_json(row["metadata"]),
    )


TASK_UPDATABLE_COLUMNS = frozenset(TASK_COLUMNS) - {"id"}


def check_task_update(changes: TaskUpdate) -> None:
    """Unknown field names are refused rather than silently ignored."""
    unknown = sorted(set(changes) - TASK_UPDATABLE_COLUMNS)
    if unknown:
        raise InvalidArgumentError(f"cannot update task field(s): {', '.join(unknown)}")


def apply_task_update(task: TaskRecord, changes: TaskUpdate) -> TaskRecord:
    check_task_update(changes)
    return replace(task, **changes)


def task_changes(task_id: str, fields: TaskUpdate) -> dict[str, object]:
    """``fields`` as column values, validated and encoded exactly as a whole record would be
    (for a SQL ``UPDATE`` that sets only them)."""
    placeholder = TaskRecord(
        id=task_id, status="pending", tool_name="", tool_call_id="", args={}, agent_id="", run_id=""
    )
    row: Mapping[str, object] = task_to_row(apply_task_update(placeholder, fields))
    return {column: row[column] for column in fields}
