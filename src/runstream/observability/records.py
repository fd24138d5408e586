"""Mastra's AI-tracing span record, built from a stored span when it is read.

The processor stores a span's columns and its OpenTelemetry attributes, status and links as
they are; the translation into Mastra's record (``attributes`` with model, usage, finish
reason, tool outcome…; ``input``/``output``; ``error``; ``links``) happens here, on the read
path, so writing a span costs no more than encoding what it already holds.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

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


def _loads(value: Any) -> Any:
    if not isinstance(value, str):
        return None
    try:
        return json.loads(value)
    except ValueError:
        return value


def mastra_span(row: Mapping[str, Any], raw: Mapping[str, Any]) -> dict[str, Any]:
    """The record of a span stored by the processor: ``row`` holds its columns, ``raw`` its
    OpenTelemetry ``attributes``, ``error`` (status description), ``links`` and ``otelTraceId``."""
    attributes: Mapping[str, Any] = raw.get("attributes") or {}
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
