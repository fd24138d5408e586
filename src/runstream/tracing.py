"""OpenTelemetry spans for runs, model steps and tool calls.

Uses ``opentelemetry-api`` (a no-op until the application installs an SDK and a tracer provider),
so tracing costs nothing unless someone listens. Spans are started explicitly with their parent
rather than made "current": the loop is an async generator, and a current span would leak into
the consumer's context across ``yield``.

* ``runstream.run`` — one per run: agent id, run id, thread, resource; finish reason and status.
* ``runstream.model.step`` — one per model call: provider, model, step number, token usage,
  finish reason; an error status when the call fails.
* ``runstream.tool`` — one per tool execution: tool name, call id; an error status on failure.
"""

from __future__ import annotations

from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode

_tracer = trace.get_tracer("runstream")


def start_run_span(agent_id: str, run_id: str, thread_id: str | None, resource_id: str | None) -> Span:
    attributes: dict[str, Any] = {"runstream.agent.id": agent_id, "runstream.run.id": run_id}
    if thread_id is not None:
        attributes["runstream.thread.id"] = thread_id
    if resource_id is not None:
        attributes["runstream.resource.id"] = resource_id
    return _tracer.start_span("runstream.run", attributes=attributes)


def start_child(parent: Span | None, name: str, attributes: dict[str, Any]) -> Span:
    context = trace.set_span_in_context(parent) if parent is not None else None
    return _tracer.start_span(name, context=context, attributes=attributes)


def end_step_span(span: Span, usage: dict[str, Any], finish_reason: str, error: BaseException | None) -> None:
    for key in ("inputTokens", "outputTokens", "totalTokens"):
        if isinstance(usage.get(key), int):
            span.set_attribute(f"gen_ai.usage.{key}", usage[key])
    span.set_attribute("gen_ai.response.finish_reason", finish_reason)
    if error is not None:
        span.record_exception(error)
        span.set_status(Status(StatusCode.ERROR, str(error)))
    span.end()


def end_span(span: Span, error: BaseException | str | None = None, **attributes: Any) -> None:
    for key, value in attributes.items():
        if value is not None:
            span.set_attribute(key, value)
    if isinstance(error, BaseException):
        span.record_exception(error)
    if error is not None:
        span.set_status(Status(StatusCode.ERROR, str(error)))
    span.end()
