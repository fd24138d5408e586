"""OpenTelemetry spans with the GenAI semantic conventions.

Uses ``opentelemetry-api`` only (a no-op until the application installs an SDK and a tracer
provider; ``runstream serve`` does when ``OTEL_*`` variables ask for it, see
:mod:`runstream._telemetry`). Spans are started explicitly with their parent rather than made
"current": the loop is an async generator, and a current span would leak into the consumer's
context across ``yield``.

* ``invoke_agent {agent}`` — one per run (``gen_ai.operation.name=invoke_agent``, agent id and
  name, ``gen_ai.conversation.id`` = thread; with content capture, the run's new input and its
  answer as ``gen_ai.input.messages`` / ``gen_ai.output.messages``). A continuation turn of an until-idle stream has
  span links to the background tasks that triggered it.
* ``chat {model}`` — one per model call: provider, request model and settings, response id and
  model, ``gen_ai.usage.input_tokens`` / ``output_tokens``, ``gen_ai.response.finish_reasons``.
* ``execute_tool {tool}`` — one per tool execution, and one per background task attempt; the
  latter is linked to the run that started it through the ``traceparent`` stored with the task,
  so the link holds when another process runs the task.

Prompts, completions, tool arguments and results are recorded only when content capture is on:
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`` or ``configure(capture_content=True)``.
"""

from __future__ import annotations

import contextvars
import json
import os
from collections import OrderedDict
from collections.abc import Awaitable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Protocol, TypeVar

from opentelemetry import trace
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    NoOpTracer,
    ProxyTracer,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
)
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import AttributeValue

CAPTURE_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
TRACEPARENT_KEY = "traceparent"
TASK_SPAN_KEY = "taskTraceparent"

_tracer = trace.get_tracer("runstream")
_propagator = TraceContextTextMapPropagator()
_capture: bool | None = None
_capture_env = os.environ.get(CAPTURE_ENV, "").strip().lower() in ("1", "true", "yes")
_T = TypeVar("_T")

_task_spans: OrderedDict[str, SpanContext] = OrderedDict()
"""Task id → its latest attempt's span, for continuation links in this process (bounded)."""
_MAX_TASK_SPANS = 10_000
_continuation_links: contextvars.ContextVar[tuple[Link, ...]] = contextvars.ContextVar(
    "runstream_continuation_links", default=()
)


def configure(*, capture_content: bool | None = None) -> None:
    """Turn content capture on or off (``None``: follow the environment variable, read again)."""
    global _capture, _capture_env
    _capture = capture_content
    _capture_env = os.environ.get(CAPTURE_ENV, "").strip().lower() in ("1", "true", "yes")


def capture_content() -> bool:
    return _capture if _capture is not None else _capture_env


def _untraced_child(parent: Span | None) -> Span | None:
    """The span the API's no-op tracer would start under ``parent`` (``None``: the current one),
    when no SDK is installed (the proxy tracer has no real one): that tracer gives back a
    non-recording parent itself. Found here without building the new span's attributes and
    context (per run, step and tool call)."""
    if not isinstance(_tracer, ProxyTracer) or not isinstance(_tracer._tracer, NoOpTracer):
        return None  # an SDK decides (it may record a child of a non-recording parent)
    if parent is None:
        parent = trace.get_current_span()
    return parent if isinstance(parent, NonRecordingSpan) else None


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str, separators=(",", ":"))


def _provider(provider: str) -> str:
    """``openai.responses`` → ``openai`` (the convention's ``gen_ai.provider.name`` values)."""
    return provider.split(".", 1)[0]


def _record_error(span: Span, error: BaseException | str | None) -> None:
    if error is None:
        return
    if isinstance(error, BaseException):
        span.record_exception(error)
        span.set_attribute("error.type", type(error).__name__)
    else:
        span.set_attribute("error.type", "Error")
    span.set_status(Status(StatusCode.ERROR, str(error)))


# -- workflow runs -------------------------------------------------------------------------------
def start_workflow_span(workflow_id: str, run_id: str, resource_id: str | None = None) -> Span:
    """A workflow run's span (a start, or a resume): its steps' spans go under it; it carries
    the run's resource (a confined caller's trace lists show its own workflow runs)."""
    untraced = _untraced_child(None)
    if untraced is not None:
        return untraced
    attributes = {
        "gen_ai.operation.name": "invoke_workflow",
        "runstream.workflow.id": workflow_id,
        "runstream.run.id": run_id,
    }
    if resource_id is not None:
        attributes["runstream.resource.id"] = resource_id
    return _tracer.start_span(f"invoke_workflow {workflow_id}", kind=SpanKind.INTERNAL, attributes=attributes)


def start_step_span(parent: Span | None, workflow_id: str, step_id: str) -> Span:
    """A workflow step's span, under ``parent`` (``None``: the current span, a nested workflow's
    step running inside its outer step)."""
    untraced = _untraced_child(parent)
    if untraced is not None:
        return untraced
    attributes = {
        "gen_ai.operation.name": "workflow_step",
        "runstream.workflow.id": workflow_id,
        "runstream.workflow.step.id": step_id,
    }
    context = trace.set_span_in_context(parent) if parent is not None else None
    return _tracer.start_span(f"workflow_step {step_id}", context=context, attributes=attributes)


def end_workflow_span(span: Span, status: str, error: BaseException | str | None = None) -> None:
    """End a workflow run's or step's span with its status (``failed``: an error)."""
    if span.is_recording():
        span.set_attribute("runstream.run.status", status)
        if status == "failed":
            _record_error(span, error or "failed")
    span.end()


# -- agent runs ----------------------------------------------------------------------------------
def start_agent_span(
    agent_id: str,
    agent_name: str,
    run_id: str,
    thread_id: str | None,
    resource_id: str | None,
    *,
    description: str = "",
    provider: str = "",
    model: str = "",
) -> Span:
    untraced = _untraced_child(None)
    if untraced is not None:
        return untraced
    attributes: dict[str, AttributeValue] = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.id": agent_id,
        "gen_ai.agent.name": agent_name,
        "runstream.run.id": run_id,
    }
    if description:
        attributes["gen_ai.agent.description"] = description
    if provider:
        attributes["gen_ai.provider.name"] = _provider(provider)
    if model:
        attributes["gen_ai.request.model"] = model
    if thread_id is not None:
        attributes["gen_ai.conversation.id"] = thread_id
    if resource_id is not None:
        attributes["runstream.resource.id"] = resource_id
    links = _continuation_links.get()
    if links:
        attributes["runstream.continuation"] = True
    return _tracer.start_span(
        f"invoke_agent {agent_name}", kind=SpanKind.INTERNAL, attributes=attributes, links=links
    )


class EndedRun(Protocol):
    """What a run's span records when the run ends (its state)."""

    @property
    def status(self) -> str: ...
    @property
    def finish_reason(self) -> str | None: ...
    @property
    def error(self) -> BaseException | None: ...
    @property
    def usage(self) -> Mapping[str, Any]: ...
    @property
    def text(self) -> str: ...
    @property
    def new_input_messages(self) -> Sequence[Mapping[str, Any]]: ...


def end_agent_span(span: Span, run: EndedRun) -> None:
    """End a run's span: its status, finish reason, error and usage (its total over its model
    calls); when content is captured, its new input and (unless it failed) its answer as
    ``gen_ai.input.messages`` / ``gen_ai.output.messages``, Mastra's agent run input and output."""
    if not span.is_recording():  # no SDK: nothing to compute
        span.end()
        return
    span.set_attribute("runstream.run.status", run.status)
    reason = finish_reason_of(run.finish_reason) if run.finish_reason else None
    if reason is not None:
        span.set_attribute("gen_ai.response.finish_reasons", [reason])
    _set_usage(span, run.usage)
    if capture_content():
        span.set_attribute("gen_ai.input.messages", _json([_message(m) for m in run.new_input_messages]))
        if run.error is None:
            message = {"role": "assistant", "parts": output_parts([run.text], ()), "finish_reason": reason}
            span.set_attribute("gen_ai.output.messages", _json([message]))
    _record_error(span, run.error)
    span.end()


def _set_usage(span: Span, usage: Mapping[str, Any]) -> None:
    if isinstance(usage.get("inputTokens"), int):
        span.set_attribute("gen_ai.usage.input_tokens", usage["inputTokens"])
    if isinstance(usage.get("outputTokens"), int):
        span.set_attribute("gen_ai.usage.output_tokens", usage["outputTokens"])


# -- model calls ---------------------------------------------------------------------------------
_SETTINGS = {
    "temperature": "gen_ai.request.temperature",
    "max_output_tokens": "gen_ai.request.max_tokens",
    "top_p": "gen_ai.request.top_p",
    "top_k": "gen_ai.request.top_k",
    "stop_sequences": "gen_ai.request.stop_sequences",
    "seed": "gen_ai.request.seed",
    "presence_penalty": "gen_ai.request.presence_penalty",
    "frequency_penalty": "gen_ai.request.frequency_penalty",
}


_UNCHANGED: AbstractContextManager[object] = nullcontext()


def made_current(span: Span) -> AbstractContextManager[object]:
    """``span`` as the current span while the block runs (no context is attached when it is
    current already, as an untraced run's span is during its model calls)."""
    if span is trace.get_current_span():
        return _UNCHANGED
    return trace.use_span(span, record_exception=False, set_status_on_exception=False)


def start_chat_span(parent: Span | None, provider: str, model: str, step: int, request: Any) -> Span:
    """A model call's span; ``request`` is the :class:`~runstream.models.base.ModelRequest`."""
    untraced = _untraced_child(parent)
    if untraced is not None:
        return untraced
    attributes: dict[str, AttributeValue] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": _provider(provider),
        "gen_ai.request.model": model,
        "runstream.step": step,
    }
    context = trace.set_span_in_context(parent) if parent is not None else None
    span = _tracer.start_span(f"chat {model}", context=context, kind=SpanKind.CLIENT, attributes=attributes)
    if not span.is_recording():  # no SDK: nothing to compute
        return span
    for field, name in _SETTINGS.items():
        value = getattr(request.settings, field, None)
        if value is not None:
            span.set_attribute(name, value)
    if capture_content():
        system = [m for m in request.prompt if m["role"] == "system"]
        if system:
            span.set_attribute(
                "gen_ai.system_instructions",
                _json([{"type": "text", "content": m["content"]} for m in system]),
            )
        span.set_attribute(
            "gen_ai.input.messages", _json([_message(m) for m in request.prompt if m["role"] != "system"])
        )
        if request.tools:
            span.set_attribute("gen_ai.tool.definitions", _json(request.tools))
    return span


def end_chat_span(
    span: Span,
    usage: Mapping[str, Any],
    finish_reason: str,
    error: BaseException | None,
    response: Mapping[str, Any],
    output: tuple[Iterable[str], Iterable[Any]],
) -> None:
    """``output``: the step's text pieces and tool calls (recorded when content is captured)."""
    if not span.is_recording():
        span.end()
        return
    _set_usage(span, usage)
    reason = finish_reason_of(finish_reason)
    span.set_attribute("gen_ai.response.finish_reasons", [reason])
    if isinstance(response.get("id"), str):
        span.set_attribute("gen_ai.response.id", response["id"])
    if isinstance(response.get("modelId"), str):
        span.set_attribute("gen_ai.response.model", response["modelId"])
    if capture_content() and error is None:
        message = {"role": "assistant", "parts": output_parts(*output), "finish_reason": reason}
        span.set_attribute("gen_ai.output.messages", _json([message]))
    _record_error(span, error)
    span.end()


def finish_reason_of(reason: str) -> str:
    """AI SDK finish reasons in the convention's words (``tool-calls`` → ``tool_call``)."""
    return {"tool-calls": "tool_call", "content-filter": "content_filter"}.get(
        reason, reason.replace("-", "_")
    )


def _message(message: Mapping[str, Any]) -> dict[str, object]:
    """A prompt message in the convention's JSON shape (role + typed parts)."""
    content = message.get("content")
    parts: list[dict[str, object]] = []
    for part in content if isinstance(content, list) else [{"type": "text", "text": str(content)}]:
        kind = part.get("type")
        if kind == "text":
            parts.append({"type": "text", "content": part.get("text", "")})
        elif kind == "tool-call":
            parts.append(
                {
                    "type": "tool_call",
                    "id": part.get("toolCallId"),
                    "name": part.get("toolName"),
                    "arguments": part.get("input"),
                }
            )
        elif kind == "tool-result":
            output = part.get("output")
            value = output.get("value") if isinstance(output, dict) else output
            parts.append({"type": "tool_call_response", "id": part.get("toolCallId"), "response": value})
        else:
            parts.append({"type": str(kind)})
    return {"role": message.get("role"), "parts": parts}


def output_parts(text_pieces: Iterable[str], calls: Iterable[Any]) -> list[dict[str, object]]:
    """A step's text and tool calls as output parts (``calls``: the loop's ``ToolCall``s)."""
    text = "".join(text_pieces)
    parts: list[dict[str, object]] = [{"type": "text", "content": text}] if text else []
    parts += [
        {"type": "tool_call", "id": c.tool_call_id, "name": c.tool_name, "arguments": c.sent_args}
        for c in calls
    ]
    return parts


# -- tools -----------------------------------------------------------------------------------------
def start_tool_span(
    parent: Span | None,
    tool_name: str,
    call_id: str,
    description: str,
    args: Any,
    *,
    links: tuple[Link, ...] = (),
) -> Span:
    untraced = _untraced_child(parent)
    if untraced is not None:
        return untraced
    attributes: dict[str, AttributeValue] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": tool_name,
        "gen_ai.tool.call.id": call_id,
        "gen_ai.tool.type": "function",
    }
    context = trace.set_span_in_context(parent) if parent is not None else None
    span = _tracer.start_span(
        f"execute_tool {tool_name}",
        context=context,
        kind=SpanKind.INTERNAL,
        attributes=attributes,
        links=links,
    )
    if span.is_recording():
        if description:
            span.set_attribute("gen_ai.tool.description", description)
        if capture_content():
            span.set_attribute("gen_ai.tool.call.arguments", _json(args))
    return span


def end_tool_span(span: Span, outcome: str, value: Any) -> None:
    if not span.is_recording():
        span.end()
        return
    span.set_attribute("runstream.tool.outcome", outcome)
    if outcome == "error":
        _record_error(span, value if isinstance(value, BaseException | str) else str(value))
    elif capture_content() and outcome == "result":
        span.set_attribute("gen_ai.tool.call.result", _json(value))
    span.end()


# -- background tasks and continuation turns -------------------------------------------------------
def traceparent(span: Span | None) -> dict[str, str]:
    """The W3C ``traceparent`` of ``span`` as task metadata (empty when nothing is traced)."""
    if span is None or not span.get_span_context().is_valid:
        return {}
    carrier: dict[str, str] = {}
    _propagator.inject(carrier, context=trace.set_span_in_context(span))
    return {TRACEPARENT_KEY: carrier[TRACEPARENT_KEY]} if TRACEPARENT_KEY in carrier else {}


def _span_context(value: Any) -> SpanContext | None:
    if not isinstance(value, str):
        return None
    context = trace.get_current_span(_propagator.extract({TRACEPARENT_KEY: value})).get_span_context()
    return context if context.is_valid else None


async def traced_task(record: Any, execution: Awaitable[_T]) -> _T:
    """Run one attempt of a background task (``record``: its ``TaskRecord``) in an
    ``execute_tool`` span of its own trace, linked to the run that started it."""
    origin = _span_context(record.metadata.get(TRACEPARENT_KEY))
    span = start_tool_span(
        None,
        record.tool_name,
        record.tool_call_id,
        "",
        record.args,
        links=(Link(origin, {"runstream.link": "started_by_run"}),) if origin is not None else (),
    )
    span.set_attribute("runstream.background_task.id", record.id)
    span.set_attribute("runstream.background_task.attempt", record.retry_count + 1)
    span.set_attribute("runstream.run.id", record.run_id)
    if span.get_span_context().is_valid:
        _task_spans[record.id] = span.get_span_context()
        while len(_task_spans) > _MAX_TASK_SPANS:
            _task_spans.popitem(last=False)
    try:
        outcome = await execution
    except BaseException as exc:
        end_tool_span(span, "error", exc)
        raise
    kind = getattr(outcome, "kind", "result")
    end_tool_span(span, kind, getattr(outcome, "value", None))
    return outcome


def task_span_metadata(task_id: str) -> dict[str, str]:
    """The finished task's span as metadata to store with its outcome (for other processes)."""
    context = _task_spans.get(task_id)
    if context is None:
        return {}
    span = trace.NonRecordingSpan(context)
    value = traceparent(span).get(TRACEPARENT_KEY)
    return {TASK_SPAN_KEY: value} if value else {}


def continuation_task_ids(
    batch: Iterable[Any], records: Mapping[str, Any]
) -> contextvars.Token[tuple[Link, ...]]:
    """Mark the turn about to start as the continuation of ``batch``'s tasks (task event chunks):
    its agent span links to their spans, known in this process or, for a task that ran in
    another one, stored with its settled record (``records``: task id → ``TaskRecord``, as the
    tasks' settled events brought them). A task with neither gets no link. Returns the token
    for :func:`end_continuation`."""
    links = []
    for chunk in batch:
        task_id = (chunk.payload or {}).get("taskId") if isinstance(chunk.payload, dict) else None
        context = _task_spans.get(task_id) if isinstance(task_id, str) else None
        record = records.get(task_id) if context is None and isinstance(task_id, str) else None
        if record is not None:
            context = _span_context(record.metadata.get(TASK_SPAN_KEY))
        if context is not None:
            attributes = {
                "runstream.link": "continuation_of_task",
                "runstream.background_task.id": str(task_id),
            }
            links.append(Link(context, attributes))
    return _continuation_links.set(tuple(links))


def end_continuation(token: contextvars.Token[tuple[Link, ...]]) -> None:
    _continuation_links.reset(token)
