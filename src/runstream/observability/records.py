"""Mastra's AI-tracing span record, built from a stored span when it is read.

The processor stores each span as it is (ids, name, times in nanoseconds, error text, its
OpenTelemetry attributes and links) with its trace's context (stored trace id, resource, thread,
run, agent, service) once per batch; everything else — the span's type, entity, run, ISO times,
duration, and Mastra's record (``attributes`` with model, usage, finish reason, tool outcome…;
``input``/``output``; ``error``; ``links``) — is derived here, on the read path, so writing a
span costs no more than encoding what it already holds.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import NotRequired, TypeAlias, TypedDict

SPAN_TYPES = {
    "invoke_agent": "agent_run",
    "chat": "model_generation",
    "execute_tool": "tool_call",
    "invoke_workflow": "workflow_run",
    "workflow_step": "workflow_step",
}
"""``gen_ai.operation.name`` → Mastra's span type (anything else is ``generic``)."""
ENTITY_TYPES = {"tool_call": "tool", "workflow_run": "workflow_run", "workflow_step": "workflow_step"}
ENTITY_ATTRIBUTES = {
    "tool_call": "gen_ai.tool.name",
    "workflow_run": "runstream.workflow.id",
    "workflow_step": "runstream.workflow.step.id",
}
"""Span type → the attribute naming its entity (other spans belong to their trace's agent)."""
_DETAILS = {
    "provider": "gen_ai.provider.name",
    "model": "gen_ai.request.model",
    "responseModel": "gen_ai.response.model",
    "responseId": "gen_ai.response.id",
    "agentId": "gen_ai.agent.id",
    "toolType": "gen_ai.tool.type",
    "toolDescription": "gen_ai.tool.description",
    "toolCallId": "gen_ai.tool.call.id",
    "outcome": "runstream.tool.outcome",
    "status": "runstream.run.status",
    "step": "runstream.step",
    "continuation": "runstream.continuation",
    "backgroundTaskId": "runstream.background_task.id",
    "attempt": "runstream.background_task.attempt",
    "workflowId": "runstream.workflow.id",
}


TRACE_CONTEXT = (
    "traceId",
    "otelTraceId",
    "rootParent",
    "resourceId",
    "threadId",
    "runId",
    "agentId",
    "agentName",
    "serviceName",
)
"""What a stored batch says once about its OTel trace's spans (the processor's ``_Trace``):
the stored trace id, the OTel one, the parent of its root span (a task's trace hangs under the
run's span), and what its spans inherit."""


class TraceContext(TypedDict):
    """:data:`TRACE_CONTEXT`'s values."""

    traceId: str
    otelTraceId: str
    rootParent: str | None
    resourceId: str | None
    threadId: str | None
    runId: str | None
    agentId: str | None
    agentName: str | None
    serviceName: str | None


SpanEntry: TypeAlias = tuple[
    int, int | None, str, int, int | None, str | None, Mapping[str, object], Sequence[Sequence[str]] | None
]
"""A span as the processor stores it: span id and parent span id (``None`` for the OTel root),
name, start and end (epoch ns), error text, attributes, links (``[traceId, spanId]`` hex pairs)."""


class RawSpan(TypedDict):
    """What :func:`mastra_span` reads of a stored span besides its columns."""

    attributes: Mapping[str, object]
    error: str | None
    links: Sequence[Sequence[str]] | None
    otelTraceId: str | None


class SpanColumns(TypedDict):
    """A stored span's columns: the names the store's queries, trace list and metrics use."""

    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str
    span_type: str
    entity_type: str | None
    entity_id: str | None
    entity_name: str | None
    resource_id: str | None
    thread_id: str | None
    run_id: str | None
    service_name: str | None
    environment: str | None
    has_error: int
    status: str
    started_at: str
    ended_at: str | None
    duration_ms: float | None
    input_tokens: int | None
    output_tokens: int | None
    provider: str | None
    model: str | None
    raw: NotRequired[RawSpan]
    """A processor's span: its OTel data (:func:`span_columns`)."""
    record: NotRequired[Mapping[str, object]]
    """A span given as Mastra's record (``SpanStore.write_spans``), as given."""


class LogRecord(TypedDict):
    """Mastra's log record, as the store keeps and lists it."""

    logId: str
    timestamp: str
    level: str
    message: str
    data: dict[str, str]
    traceId: str | None
    spanId: str | None
    runId: str | None
    resourceId: str | None
    threadId: str | None
    entityType: str | None
    entityId: str | None
    entityName: str | None
    serviceName: str | None
    environment: str | None
    source: str | None
    metadata: None


@functools.lru_cache(maxsize=64)
def _second(seconds: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))


def iso_ns(nanoseconds: int) -> str:
    """Epoch nanoseconds as the store's UTC ISO 8601 text (milliseconds, ``Z``): the same text
    as :func:`~runstream.observability.store.iso`, made without a ``datetime``."""
    seconds, rest = divmod(nanoseconds, 1_000_000_000)
    return f"{_second(seconds)}.{rest // 1_000_000:03d}Z"


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) else None


def span_columns(trace: TraceContext, entry: SpanEntry) -> SpanColumns:
    """A span stored by the processor as its columns and ``raw`` (what :func:`mastra_span`
    reads); ``trace``: its batch's context."""
    span_id, parent, name, start, end, error, attributes, links = entry
    get = attributes.get
    span_type = SPAN_TYPES.get(str(get("gen_ai.operation.name")), "generic")
    entity: tuple[str | None, str | None, str | None] = (None, None, None)
    if span_type in ENTITY_ATTRIBUTES:
        entity_name = _text(get(ENTITY_ATTRIBUTES[span_type]))
        entity = (ENTITY_TYPES[span_type], entity_name, entity_name)
    elif trace["agentId"] is not None:
        entity = ("agent", trace["agentId"], trace["agentName"])
    return {
        "trace_id": trace["traceId"],
        "span_id": f"{span_id:016x}",
        "parent_span_id": f"{parent:016x}" if parent is not None else trace["rootParent"],
        "name": name,
        "span_type": span_type,
        "entity_type": entity[0],
        "entity_id": entity[1],
        "entity_name": entity[2],
        "resource_id": trace["resourceId"],
        "thread_id": trace["threadId"],
        "run_id": _text(get("runstream.run.id")) or trace["runId"],
        "service_name": trace["serviceName"],
        "environment": None,
        "has_error": 0 if error is None else 1,
        "status": "ok" if error is None else "error",
        "started_at": iso_ns(start),
        "ended_at": iso_ns(end) if end else None,
        "duration_ms": (end - start) / 1e6 if end else None,
        "input_tokens": _int(get("gen_ai.usage.input_tokens")),
        "output_tokens": _int(get("gen_ai.usage.output_tokens")),
        "provider": _text(get("gen_ai.provider.name")),
        "model": _text(get("gen_ai.request.model")),
        "raw": {
            "attributes": attributes,
            "error": error,
            "links": links,
            "otelTraceId": trace["otelTraceId"],
        },
    }


FACT_COLUMNS = (
    "upto",
    "position",
    "trace_id",
    "span_type",
    "entity_type",
    "entity_id",
    "entity_name",
    "resource_id",
    "thread_id",
    "run_id",
    "service_name",
    "environment",
    "has_error",
    "started_ms",
    "duration_ms",
    "input_tokens",
    "output_tokens",
    "provider",
    "model",
)
"""A span's row of ``ai_span_facts`` (what metrics and discovery read): its batch's ``upto``
(retention) and its ``position`` in the batch, the :class:`SpanColumns` metrics read, its start
as epoch milliseconds (``started_ms``: ``started_at``'s precision, compared as it)."""
SpanFacts: TypeAlias = tuple[
    str, str, str | None, str | None, str | None, str | None, str | None, str | None, str | None,
    str | None, int, int | None, float | None, int | None, int | None, str | None, str | None,
]  # fmt: skip
"""A span's :data:`FACT_COLUMNS` but ``upto`` and ``position`` (its batch's, and its place in it)."""


def columns_facts(columns: SpanColumns) -> SpanFacts:
    """A stored span's facts, from its :class:`SpanColumns` (:func:`span_columns`)."""
    c = columns
    return (
        *(c["trace_id"], c["span_type"], c["entity_type"], c["entity_id"], c["entity_name"]),
        *(c["resource_id"], c["thread_id"], c["run_id"], c["service_name"], c["environment"]),
        *(c["has_error"], epoch_ms(c["started_at"]), c["duration_ms"]),
        *(_count(c["input_tokens"]), _count(c["output_tokens"]), c["provider"], c["model"]),
    )


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def epoch_ms(moment: str) -> int | None:
    """ISO 8601 text as epoch milliseconds (``None`` if it is not such text; without a zone,
    local time, as ``datetime.timestamp``)."""
    try:
        parsed = datetime.fromisoformat(moment)
    except ValueError:
        return None
    return (parsed.astimezone(UTC) - _EPOCH) // timedelta(milliseconds=1)


def _count(value: object) -> int | None:
    """An integer attribute as the database keeps it (a boolean as 0 or 1, as Python's ``int``)."""
    return int(value) if isinstance(value, int) else None


def _loads(value: object) -> object:
    if not isinstance(value, str):
        return None
    try:
        return json.loads(value)
    except ValueError:
        return value


def mastra_span(row: Mapping[str, object], raw: RawSpan) -> dict[str, object]:
    """The record of a span stored by the processor: ``row`` holds its columns (a root's row of
    the trace list, or :class:`SpanColumns`), ``raw`` its OpenTelemetry data."""
    attributes = raw.get("attributes") or {}
    span_type = row["span_type"]
    error = None
    if raw.get("error") is not None:
        error = {"message": raw["error"], "name": attributes.get("error.type", "Error")}
    details = {key: attributes[name] for key, name in _DETAILS.items() if attributes.get(name) is not None}
    finish = attributes.get("gen_ai.response.finish_reasons")
    if isinstance(finish, Sequence) and not isinstance(finish, str) and finish:
        details["finishReason"] = finish[0]
    usage = {
        key: attributes[name]
        for key, name in (
            ("inputTokens", "gen_ai.usage.input_tokens"),
            ("outputTokens", "gen_ai.usage.output_tokens"),
        )
        if isinstance(attributes.get(name), int)
    }
    if usage:
        details["usage"] = usage
    if span_type == "tool_call":
        details["success"] = error is None and attributes.get("runstream.tool.outcome") != "error"
        input_value = _loads(attributes.get("gen_ai.tool.call.arguments"))
        output_value = _loads(attributes.get("gen_ai.tool.call.result"))
    else:
        input_value = _loads(attributes.get("gen_ai.input.messages"))
        output_value = _loads(attributes.get("gen_ai.output.messages"))
    started, ended = row["started_at"], row["ended_at"]
    return {
        "traceId": row["trace_id"],
        "spanId": row["span_id"],
        "parentSpanId": row["parent_span_id"],
        "name": row["name"],
        "spanType": span_type,
        "entityType": row["entity_type"],
        "entityId": row["entity_id"],
        "entityName": row["entity_name"],
        "attributes": details,
        "metadata": {"runId": row["run_id"], "otelTraceId": raw.get("otelTraceId")},
        "input": input_value,
        "output": output_value,
        "error": error,
        "links": [{"traceId": trace, "spanId": span} for trace, span in raw.get("links") or ()] or None,
        "tags": None,
        "isEvent": False,
        "startedAt": started,
        "endedAt": ended,
        "createdAt": started,
        "updatedAt": ended,
        "resourceId": row["resource_id"],
        "threadId": row["thread_id"],
        "runId": row["run_id"],
        "serviceName": row["service_name"],
        "environment": row["environment"],
        "scope": {"name": "runstream"},
    }
