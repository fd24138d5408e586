"""The records storage keeps: threads, messages, background-task records, and list results.

Datetimes are timezone-aware; storage returns them in UTC whatever zone they were saved in.
JSON-valued fields (metadata, message content, task args/results) must be JSON-serialisable:
every backend stores them as JSON, so a value reads back exactly as ``json.loads(json.dumps(v))``.
"""

from __future__ import annotations

import copy
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Generic, Literal, NotRequired, TypedDict, TypeVar

from runstream._clock import iso_datetime
from runstream._json import JsonObject

MessageRole = Literal["user", "assistant", "system", "tool"]
MESSAGE_ROLES: frozenset[str] = frozenset({"user", "assistant", "system", "tool"})

TaskStatus = Literal["pending", "running", "suspended", "completed", "failed", "cancelled", "timed_out"]
TASK_STATUSES: frozenset[str] = frozenset(
    {"pending", "running", "suspended", "completed", "failed", "cancelled", "timed_out"}
)

SortOrder = Literal["asc", "desc"]
ThreadOrderField = Literal["created_at", "updated_at"]
TaskDateField = Literal["created_at", "started_at", "completed_at"]

DEFAULT_TASK_TIMEOUT_MS = 300_000
"""Mastra's manager default (5 minutes)."""

T = TypeVar("T")


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(slots=True)
class Thread:
    """A conversation, owned by one resource (user, org, ...)."""

    id: str
    resource_id: str
    title: str | None = None
    metadata: JsonObject = field(default_factory=dict)
    created_at: datetime = field(default_factory=utc_now)
    updated_at: datetime = field(default_factory=utc_now)


@dataclass(slots=True)
class Resource:
    """A resource (user, org, ...) and what memory keeps about it across all its threads:
    Mastra's resource record, whose ``working_memory`` is resource-scoped working memory."""

    id: str
    working_memory: str | None = None
    metadata: JsonObject = field(default_factory=dict)
    created_at: datetime = field(default_factory=utc_now)
    updated_at: datetime = field(default_factory=utc_now)


class MessageContent(TypedDict):
    """A stored message's content, Mastra's DB format 2: its parts (``text``, ``reasoning``,
    ``tool-invocation``, ``step-start``, ``file``, ``source``: see :mod:`runstream._messages`),
    the plain text of an input message, and the message's metadata (background-task links).
    Storage keeps it as one JSON document; a client's saved message may carry more keys."""

    format: Literal[2]
    parts: list[Any]
    """Each a :data:`runstream._messages.StoredPart` (a layer above storage), or a part a client saved."""
    content: NotRequired[str]
    metadata: NotRequired[dict[str, Any]]
    """Background-task links (``backgroundTasks``, ``suspendedTools``: :mod:`runstream._messages`)
    and a run's metadata."""


@dataclass(slots=True)
class StoredMessage:
    """One message in Mastra's DB format 2 (see :class:`MessageContent`)."""

    id: str
    thread_id: str
    resource_id: str
    role: MessageRole
    content: MessageContent
    created_at: datetime = field(default_factory=utc_now)
    type: str = "text"


class TaskError(TypedDict, total=False):
    """Mastra's ``{message, stack}``; ``name`` only where runstream marks the text public (see
    :func:`runstream.tools.public_task_error`)."""

    message: str
    stack: str
    name: str


class TaskWire(TypedDict):
    """A task record as Mastra's ``BackgroundTask`` JSON (:meth:`TaskRecord.to_wire`)."""

    id: str
    status: TaskStatus
    toolName: str
    toolCallId: str
    args: JsonObject
    agentId: str
    runId: str
    createdAt: str
    retryCount: int
    maxRetries: int
    timeoutMs: int
    threadId: NotRequired[str]
    resourceId: NotRequired[str]
    result: NotRequired[Any]
    error: NotRequired[TaskError]
    startedAt: NotRequired[str]
    suspendedAt: NotRequired[str]
    completedAt: NotRequired[str]
    suspendPayload: NotRequired[Any]
    resumeData: NotRequired[Any]
    metadata: NotRequired[JsonObject]


@dataclass(slots=True)
class TaskRecord:
    """A background-task record with Mastra's ``BackgroundTask`` fields.

    ``resume_data`` and ``metadata`` are runstream additions: the data passed to a resume, and a
    free dict for the manager's own bookkeeping. ``result``, ``suspend_payload`` and
    ``resume_data`` are the tool's own values (stored as JSON).
    """

    id: str
    status: TaskStatus
    tool_name: str
    tool_call_id: str
    args: JsonObject
    agent_id: str
    run_id: str
    thread_id: str | None = None
    resource_id: str | None = None
    result: Any = None
    error: TaskError | None = None
    created_at: datetime = field(default_factory=utc_now)
    started_at: datetime | None = None
    suspended_at: datetime | None = None
    completed_at: datetime | None = None
    retry_count: int = 0
    max_retries: int = 0
    timeout_ms: int = DEFAULT_TASK_TIMEOUT_MS
    suspend_payload: Any = None
    resume_data: Any = None
    metadata: JsonObject = field(default_factory=dict)

    def to_wire(self) -> TaskWire:
        """Mastra's camelCase JSON shape; optional fields that are ``None`` (or empty) are omitted.

        Dates are ISO 8601 UTC strings with milliseconds and a ``Z`` suffix, as JavaScript's
        ``Date.prototype.toJSON`` writes them.
        """
        wire: TaskWire = {
            "id": self.id,
            "status": self.status,
            "toolName": self.tool_name,
            "toolCallId": self.tool_call_id,
            "args": copy.deepcopy(self.args),
            "agentId": self.agent_id,
            "runId": self.run_id,
            "createdAt": iso_datetime(self.created_at),
            "retryCount": self.retry_count,
            "maxRetries": self.max_retries,
            "timeoutMs": self.timeout_ms,
        }
        if self.thread_id is not None:
            wire["threadId"] = self.thread_id
        if self.resource_id is not None:
            wire["resourceId"] = self.resource_id
        if self.result is not None:
            wire["result"] = copy.deepcopy(self.result)
        if self.error is not None:
            wire["error"] = copy.deepcopy(self.error)
        if self.started_at:
            wire["startedAt"] = iso_datetime(self.started_at)
        if self.suspended_at:
            wire["suspendedAt"] = iso_datetime(self.suspended_at)
        if self.completed_at:
            wire["completedAt"] = iso_datetime(self.completed_at)
        if self.suspend_payload is not None:
            wire["suspendPayload"] = copy.deepcopy(self.suspend_payload)
        if self.resume_data is not None:
            wire["resumeData"] = copy.deepcopy(self.resume_data)
        if self.metadata:
            wire["metadata"] = copy.deepcopy(self.metadata)
        return wire


class TaskUpdate(TypedDict, total=False):
    """Fields :meth:`Storage.update_task` may change; a key set to ``None`` clears the field."""

    status: TaskStatus
    tool_name: str
    tool_call_id: str
    args: JsonObject
    agent_id: str
    run_id: str
    thread_id: str | None
    resource_id: str | None
    result: Any
    error: TaskError | None
    created_at: datetime
    started_at: datetime | None
    suspended_at: datetime | None
    completed_at: datetime | None
    retry_count: int
    max_retries: int
    timeout_ms: int
    suspend_payload: Any
    resume_data: Any
    metadata: JsonObject


@dataclass(slots=True, frozen=True)
class TaskFilter:
    """Which task records :meth:`Storage.list_tasks` returns; unset fields do not filter.

    ``from_date`` is inclusive and ``to_date`` exclusive, both applied to ``date_field``; a
    record whose ``date_field`` is unset never matches a date bound. Results are ordered by
    ``created_at`` (ties in save order); ``page`` is zero-based and ``per_page=None`` means all.
    """

    status: TaskStatus | Collection[TaskStatus] | None = None
    agent_id: str | None = None
    run_id: str | None = None
    thread_id: str | None = None
    resource_id: str | None = None
    tool_call_id: str | None = None
    tool_name: str | None = None
    date_field: TaskDateField = "created_at"
    from_date: datetime | None = None
    to_date: datetime | None = None
    order: SortOrder = "asc"
    page: int = 0
    per_page: int | None = None


@dataclass(slots=True, frozen=True)
class Page(Generic[T]):
    """One page of a listing. ``total`` counts every match, not just this page's items."""

    items: list[T]
    total: int
    page: int
    per_page: int | None
    has_more: bool
