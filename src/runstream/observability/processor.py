"""An OpenTelemetry span processor that keeps runstream's spans in a :class:`SpanStore`.

The same spans the OTLP exporter sees (one instrumentation, two observers, each optional): the
SDK's :class:`BatchSpanProcessor` queues finished spans (bounded queue, periodic flush, flushed at
shutdown, a full queue drops rather than blocks a run) and its worker thread converts each batch
to Mastra's AI-tracing records and writes them.

Background task spans have an OTel trace of their own, linked to the run that started them, and a
continuation turn of an until-idle stream is linked to the tasks that woke it (docs/otel.md). The
store puts them in the run's trace: when such a span starts, its trace is mapped onto the linked
span's (stored) trace, with the linked span as its parent, so a run, its background tasks and
the turns they woke are one trace with one span tree.
"""

from __future__ import annotations

import functools
import random
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import INVALID_SPAN_CONTEXT, StatusCode

from runstream.errors import ConfigurationError
from runstream.observability.records import ENTITY_ATTRIBUTES, ENTITY_TYPES, SPAN_TYPES
from runstream.observability.store import SpanStore

_MAX_TRACES = 10_000


@dataclass(slots=True)
class _Trace:
    """Where an OTel trace's spans are stored, and what its spans inherit."""

    trace_id: str
    root_parent: str | None
    sampled: bool
    resource_id: str | None = None
    thread_id: str | None = None
    run_id: str | None = None
    agent_id: str | None = None
    agent_name: str | None = None


@functools.lru_cache(maxsize=64)
def _second(seconds: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))


def iso_ns(nanoseconds: int) -> str:
    """Epoch nanoseconds as the store's UTC ISO 8601 text (milliseconds, ``Z``): the same text
    as :func:`~runstream.observability.store.iso`, made per span without a ``datetime``."""
    seconds, rest = divmod(nanoseconds, 1_000_000_000)
    return f"{_second(seconds)}.{rest // 1_000_000:03d}Z"


def _hex_trace(value: int) -> str:
    return f"{value:032x}"


def _hex_span(value: int) -> str:
    return f"{value:016x}"


def _trace_of(span: ReadableSpan) -> int:
    context = span.get_span_context()
    return context.trace_id if context is not None else 0


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


class _Traces:
    """OTel trace id → :class:`_Trace` (bounded: the oldest traces are forgotten first)."""

    def __init__(self, sample_rate: float) -> None:
        self.sample_rate = sample_rate
        self._known: OrderedDict[int, _Trace] = OrderedDict()
        self._runs: OrderedDict[str, tuple[_Trace, str]] = OrderedDict()

    def run_context(self, run_id: str) -> dict[str, str | None]:
        """Where a run's spans are stored (for its log records); empty if unknown or unsampled."""
        found = self._runs.get(run_id)
        if found is None or not found[0].sampled:
            return {}
        known, span_id = found
        return {
            "traceId": known.trace_id,
            "spanId": span_id,
            "resourceId": known.resource_id,
            "threadId": known.thread_id,
            "entityId": known.agent_id,
            "entityName": known.agent_name,
        }

    def get(self, trace_id: int) -> _Trace | None:
        return self._known.get(trace_id)

    def started(self, span: Span) -> None:
        context = span.get_span_context()
        attributes = span.attributes or {}
        known = self._known.get(context.trace_id)
        if known is None:
            known = self._root(span)
            self._known[context.trace_id] = known
            while len(self._known) > _MAX_TRACES:
                self._known.popitem(last=False)
        if attributes.get("gen_ai.operation.name") == "invoke_agent" and known.agent_id is None:
            known.agent_id = _text(attributes.get("gen_ai.agent.id"))
            known.agent_name = _text(attributes.get("gen_ai.agent.name"))
        for key, name in (
            ("resource_id", "runstream.resource.id"),
            ("thread_id", "gen_ai.conversation.id"),
            ("run_id", "runstream.run.id"),
        ):
            if getattr(known, key) is None and isinstance(attributes.get(name), str):
                setattr(known, key, attributes[name])
        run_id = attributes.get("runstream.run.id")
        if attributes.get("gen_ai.operation.name") == "invoke_agent" and isinstance(run_id, str):
            self._runs[run_id] = (known, _hex_span(context.span_id))
            while len(self._runs) > _MAX_TRACES:
                self._runs.popitem(last=False)

    def _root(self, span: Span) -> _Trace:
        """A new OTel trace: its own, or the trace of the run or task it is linked to."""
        for link in span.links:
            kind = (link.attributes or {}).get("runstream.link")
            if kind in ("started_by_run", "continuation_of_task") and link.context.is_valid:
                linked = self._known.get(link.context.trace_id)
                if linked is not None:
                    return _Trace(
                        linked.trace_id,
                        _hex_span(link.context.span_id),
                        linked.sampled,
                        linked.resource_id,
                        linked.thread_id,
                        linked.run_id,
                        linked.agent_id,
                        linked.agent_name,
                    )
                return _Trace(
                    _hex_trace(link.context.trace_id), _hex_span(link.context.span_id), self._sample()
                )
        return _Trace(_hex_trace(span.get_span_context().trace_id), None, self._sample())

    def _sample(self) -> bool:
        return self.sample_rate >= 1.0 or random.random() < self.sample_rate


def span_row(span: ReadableSpan, known: _Trace | None, service_name: str | None) -> tuple[Any, ...]:
    """A finished OTel span as the store's row: the columns, and the span's own attributes,
    status and links as they are (JSON). Mastra's record is built from them when read
    (:func:`~runstream.observability.records.mastra_span`), so a write does no more than this."""
    context = span.get_span_context() or INVALID_SPAN_CONTEXT
    attributes = dict(span.attributes or {})
    get = attributes.get
    span_type = SPAN_TYPES.get(str(get("gen_ai.operation.name")), "generic")
    parent = _hex_span(span.parent.span_id) if span.parent is not None else None
    if parent is None and known is not None:
        parent = known.root_parent
    entity: tuple[str | None, str | None, str | None] = (None, None, None)
    if span_type in ENTITY_ATTRIBUTES:
        name = _text(get(ENTITY_ATTRIBUTES[span_type]))
        entity = (ENTITY_TYPES[span_type], name, name)
    elif known is not None and known.agent_id is not None:
        entity = ("agent", known.agent_id, known.agent_name)
    error = span.status.description or "Error" if span.status.status_code is StatusCode.ERROR else None
    raw = {
        "attributes": attributes,
        "error": error,
        "links": [
            [_hex_trace(link.context.trace_id), _hex_span(link.context.span_id)] for link in span.links
        ],
        "otelTraceId": _hex_trace(context.trace_id),
    }
    start, end = span.start_time or 0, span.end_time
    run_id = _text(get("runstream.run.id")) or (known.run_id if known else None)
    return (
        known.trace_id if known is not None else _hex_trace(context.trace_id),
        _hex_span(context.span_id),
        parent,
        span.name,
        span_type,
        *entity,
        known.resource_id if known is not None else None,
        known.thread_id if known is not None else None,
        run_id,
        service_name,
        None,
        0 if error is None else 1,
        iso_ns(start),
        iso_ns(end) if end else None,
        orjson.dumps({"otel": raw}, default=str).decode(),
        (end - start) / 1e6 if end else None,
        get("gen_ai.usage.input_tokens"),
        get("gen_ai.usage.output_tokens"),
        get("gen_ai.provider.name"),
        get("gen_ai.request.model"),
    )


class _StoreExporter(SpanExporter):
    def __init__(self, store: SpanStore, traces: _Traces) -> None:
        self.store = store
        self.traces = traces

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        rows = []
        for span in spans:
            service = span.resource.attributes.get("service.name") if span.resource is not None else None
            known = self.traces.get(_trace_of(span))
            rows.append(span_row(span, known, service if isinstance(service, str) else None))
        self.store.write_rows(rows)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


class StoreSpanProcessor(BatchSpanProcessor):
    """Keeps finished spans in ``store``; ``sample_rate`` (0 to 1) of the traces are kept, whole."""

    def __init__(
        self,
        store: SpanStore,
        *,
        sample_rate: float = 1.0,
        max_queue_size: int = 2048,
        schedule_delay_millis: float = 1000,
        max_export_batch_size: int = 512,
    ) -> None:
        if not 0.0 <= sample_rate <= 1.0:
            raise ConfigurationError("sample_rate must be from 0 to 1")
        self.traces = _Traces(sample_rate)
        self.stopped = False
        store.fed = True
        store.run_context = self.traces.run_context
        super().__init__(
            _StoreExporter(store, self.traces),
            max_queue_size=max_queue_size,
            schedule_delay_millis=schedule_delay_millis,
            max_export_batch_size=max_export_batch_size,
        )

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        if not self.stopped:
            self.traces.started(span)

    def shutdown(self) -> None:
        self.stopped = True
        super().shutdown()  # type: ignore[no-untyped-call]

    def on_end(self, span: ReadableSpan) -> None:
        known = self.traces.get(_trace_of(span))
        if known is None or known.sampled:
            super().on_end(span)


def install_span_store(
    store: SpanStore, *, provider: TracerProvider | None = None, sample_rate: float = 1.0
) -> StoreSpanProcessor:
    """Feed ``store`` with runstream's spans: adds a :class:`StoreSpanProcessor` to ``provider``
    (default: the global SDK provider, installed if there is none). ``shutdown()`` the provider
    or the processor to flush."""
    if provider is None:
        current = trace.get_tracer_provider()
        if isinstance(current, TracerProvider):
            provider = current
        else:
            provider = TracerProvider()
            trace.set_tracer_provider(provider)
    processor = StoreSpanProcessor(store, sample_rate=sample_rate)
    provider.add_span_processor(processor)
    return processor
