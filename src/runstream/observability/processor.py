"""An OpenTelemetry span processor that keeps runstream's spans in a :class:`SpanStore`.

The same spans the OTLP exporter sees (one instrumentation, two observers, each optional). A
finished span is encoded (its ids, name, times, error, attributes and links as they are) and
queued (bounded queue, periodic flush, flushed at shutdown, a full queue drops rather than blocks
a run), and a worker thread writes each batch: a row per trace, its spans' entries in one JSON
document with the trace's context once and how many are roots (the trace list's rows, made when
it is read).
Mastra's records are built when read (:mod:`.records`). On the run's own thread the processor
does little: a dictionary look-up when a trace or an agent run starts, an encoding and four
items queued when a span ends (see :data:`_FIELDS` for why nothing else is held).

Background task spans have an OTel trace of their own, linked to the run that started them, and a
continuation turn of an until-idle stream is linked to the tasks that woke it (docs/otel.md). The
store puts them in the run's trace: when such a span starts, its trace is mapped onto the linked
span's (stored) trace, with the linked span as its parent, so a run, its background tasks and
the turns they woke are one trace with one span tree.
"""

from __future__ import annotations

import json
import logging
import os
import random
import threading
import weakref
from collections import OrderedDict, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import groupby, repeat, starmap
from typing import cast

import orjson
from opentelemetry import trace
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY, attach, detach, set_value
from opentelemetry.context import Context as OtelContext
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.trace import Link, SpanContext, StatusCode

from runstream.errors import ConfigurationError
from runstream.observability.records import SpanEntry, TraceContext, iso_ns
from runstream.observability.store import SpanBatch, SpanStore

_MAX_TRACES = 10_000
_ERROR = StatusCode.ERROR
"""Looked up once: an enum member's look-up through its class is a Python call on 3.11."""
_log = logging.getLogger(__name__)


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


def _hex_trace(value: int) -> str:
    return f"{value:032x}"


def _hex_span(value: int) -> str:
    return f"{value:016x}"


def _trace_of(span: ReadableSpan) -> int:
    context = span.get_span_context()
    return context.trace_id if context is not None else 0


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


_FILLED_BY = ("invoke_agent", "invoke_workflow")
"""The spans whose attributes fill in their trace's context (agent, resource, thread, run)."""


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
        """Learn what a trace's spans inherit from a span that starts a trace, comes from
        another process, or runs an agent or a workflow (:meth:`StoreSpanProcessor.on_start`
        passes no other)."""
        attributes = _attributes(span)
        operation = attributes.get("gen_ai.operation.name")
        context = span.get_span_context()
        known = self._known.get(context.trace_id)
        if known is None:
            known = self._root(span)
            self._known[context.trace_id] = known
            while len(self._known) > _MAX_TRACES:
                self._known.popitem(last=False)
        if operation == "invoke_agent" and known.agent_id is None:
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
        if operation == "invoke_agent" and isinstance(run_id, str):
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


def _context(trace_id: int, known: _Trace | None, service_name: str | None) -> TraceContext:
    """A trace's :data:`~runstream.observability.records.TRACE_CONTEXT` for its stored batch."""
    otel = _hex_trace(trace_id)
    if known is None:
        known = _Trace(otel, None, True)
    return {
        "traceId": known.trace_id,
        "otelTraceId": otel,
        "rootParent": known.root_parent,
        "resourceId": known.resource_id,
        "threadId": known.thread_id,
        "runId": known.run_id,
        "agentId": known.agent_id,
        "agentName": known.agent_name,
        "serviceName": service_name,
    }


def _json_default(value: object) -> object:
    """A mapping as a dict (attributes of a span of another SDK); anything else as text."""
    return dict(value) if isinstance(value, Mapping) else str(value)


def _attributes(span: ReadableSpan) -> Mapping[str, object]:
    """The span's attributes: the SDK's bounded mapping keeps them in a dict, read as it is
    (its mapping protocol is a Python call per key, and a look-up of a missing key raises);
    another SDK's mapping as it comes (:func:`_json_default` copies it for JSON)."""
    held = span._attributes
    return held._dict if type(held) is BoundedAttributes else (span.attributes or {})


def _links(links: Sequence[Link]) -> list[tuple[str, str]]:
    """Links as ``(traceId, spanId)`` hex pairs."""
    return [(_hex_trace(link.context.trace_id), _hex_span(link.context.span_id)) for link in links]


def _entry(span: ReadableSpan, context: SpanContext, parent: SpanContext | None) -> SpanEntry:
    """A span of another SDK as its :data:`SpanEntry` (through its public properties)."""
    status, links = span.status, span.links
    return (
        context.span_id,
        None if parent is None else parent.span_id,
        span.name,
        span.start_time or 0,
        span.end_time,
        (status.description or "Error") if status.status_code is _ERROR else None,
        span.attributes or {},
        _links(links) if links else None,
    )


_FIELDS = 4
"""Queue items a finished span takes: its OTel trace id, its start (epoch ns), whether it is its
OTel trace's root, and its :data:`~runstream.observability.records.SpanEntry` encoded (JSON).

Nothing the cyclic collector tracks is held until the write: appended flat (one ``extend`` of a
short-lived tuple, atomic under the GIL), a span leaves only integers, a flag and bytes in the
queue. Queued as containers (a tuple or two a span, holding the SDK's attribute dict), W3's
220 spans a block of runs kept the collector's young generation full: a collection in almost
every run instead of one in three, and the objects alive mid-run promoted until full
collections ran, ~14 µs of collector time a stored span where encoding one on the run's thread
costs well under a microsecond."""


def _encode_slowly(entry: SpanEntry) -> bytes | None:
    """``entry`` as JSON (orjson, as :meth:`StoreSpanProcessor.on_end` tries first). What orjson
    refuses (an integer beyond 64 bits, text with a lone surrogate) goes through the standard
    library, a lone surrogate as ``?`` (the stored document must stay readable); ``None`` (the
    span is dropped) if that fails too (a non-finite number besides)."""
    try:
        return orjson.dumps(entry, default=_json_default)
    except TypeError:  # (orjson.JSONEncodeError is a TypeError)
        try:
            text = json.dumps(entry, default=_json_default, ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError):
            return None
        return text.encode(errors="replace")


class StoreSpanProcessor(SpanProcessor):
    """Keeps finished spans in ``store``; ``sample_rate`` (0 to 1) of the traces are kept, whole.

    Batched off the run's path like the SDK's batch processor: a finished span is encoded and
    appended to a bounded queue (:data:`_FIELDS`) (full: the span is dropped, a run never waits), written by a
    worker thread every ``schedule_delay_millis``, as soon as ``max_export_batch_size`` are
    waiting, at :meth:`force_flush` and at :meth:`shutdown`, ``max_export_batch_size`` spans a
    transaction."""

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
        if max_queue_size < 1 or max_export_batch_size < 1 or schedule_delay_millis <= 0:
            raise ConfigurationError("queue and batch sizes must be at least 1, the delay above 0")
        self.store = store
        self.traces = _Traces(sample_rate)
        self._sampling = sample_rate < 1.0
        self.stopped = False
        self.dropped = 0
        """Spans dropped: the queue was full, or (never seen) a span could not be encoded."""
        store.fed = True
        store.run_context = self.traces.run_context
        self._queue: deque[int | bytes] = deque()
        """:data:`_FIELDS` items a span."""
        self._resource: object = None
        self._service: str | None = None
        self._max_queue = max_queue_size * _FIELDS
        self._batch = max_export_batch_size * _FIELDS
        self._delay = schedule_delay_millis / 1000
        self._wake = threading.Event()
        self._writing = threading.Lock()
        self._worker = self._start_worker()
        if hasattr(os, "register_at_fork"):
            restart = weakref.WeakMethod(self._after_fork)
            os.register_at_fork(after_in_child=lambda: (method := restart()) and method())

    def _start_worker(self) -> threading.Thread:
        worker = threading.Thread(target=self._work, name="runstream-span-store", daemon=True)
        worker.start()
        return worker

    def _after_fork(self) -> None:
        """A forked child has the queue but not the thread: its own spans only, its own worker."""
        self._queue.clear()
        self._wake = threading.Event()
        self._writing = threading.Lock()
        self._worker = self._start_worker()

    def on_start(self, span: Span, parent_context: OtelContext | None = None) -> None:
        parent = span._parent
        if parent is not None and not parent[2]:  # under a span of this process (is_remote)
            held = span._attributes
            attributes = held._dict if type(held) is BoundedAttributes else (span.attributes or {})
            if attributes.get("gen_ai.operation.name") not in _FILLED_BY:
                return  # a model or tool call: nothing to learn (most spans), checked inline
        if not self.stopped:
            self.traces.started(span)

    def on_end(self, span: ReadableSpan) -> None:
        if type(span) is not ReadableSpan or self._sampling or self.stopped:
            self._end_other(span)  # another SDK's span, a sampled store, a stopped one
            return
        # The SDK's span (most): its fields read directly, as its properties (and a Status's)
        # are a Python call each, and a SpanContext (a typed tuple) indexed.
        context, parent, status, links, held = (
            span._context,
            span._parent,
            span._status,
            span._links,
            span._attributes,
        )
        if context is None:
            return
        start = span._start_time or 0
        entry: SpanEntry = (
            context[1],
            None if parent is None else parent[1],
            span._name,
            start,
            span._end_time,
            (status._description or "Error") if status._status_code is _ERROR else None,
            held._dict if type(held) is BoundedAttributes else span.attributes or {},
            _links(links) if getattr(links, "_dq", links) else None,  # (a BoundedList's __len__ is Python)
        )
        queue = self._queue
        if len(queue) >= self._max_queue:
            self.dropped += 1
            return
        encoded: bytes | None
        try:
            encoded = orjson.dumps(entry, default=_json_default)
        except TypeError:  # (orjson.JSONEncodeError is one)
            encoded = _encode_slowly(entry)
        if encoded is None:
            self.dropped += 1
            return
        if span._resource is not self._resource:  # one provider, one resource: looked up once
            self._resource, self._service = span._resource, _service(span._resource)
        queue.extend((context[0], start, parent is None, encoded))
        if len(queue) >= self._batch and not self._wake.is_set():
            self._wake.set()

    def _end_other(self, span: ReadableSpan) -> None:
        """:meth:`on_end` for a span of another SDK (through its public properties), or when
        the store samples (a trace left out is skipped) or has stopped."""
        context = span.context
        if context is None or self.stopped:
            return
        if self._sampling:
            known = self.traces.get(context.trace_id)
            if known is not None and not known.sampled:
                return
        entry = _entry(span, context, span.parent)
        queue = self._queue
        encoded = _encode_slowly(entry) if len(queue) < self._max_queue else None
        if encoded is None:
            self.dropped += 1
            return
        if span.resource is not self._resource:
            self._resource, self._service = span.resource, _service(span.resource)
        queue.extend((context.trace_id, entry[3], span.parent is None, encoded))
        if len(queue) >= self._batch and not self._wake.is_set():
            self._wake.set()

    def _work(self) -> None:
        while not self.stopped:
            self._wake.wait(self._delay)
            self._wake.clear()
            self._write_waiting()
        self._write_waiting()

    def _write_waiting(self) -> bool:
        """Write what waits in the queue, a batch at a time (instrumentation suppressed: a
        traced database driver would otherwise add spans for the store's own writes); whether
        every batch was written."""
        written = True
        with self._writing:
            while self._queue:
                # Whole spans (a span's items are appended at once), popped in C: a Python
                # loop cost 16 bytecode instructions an item, 64 a span.
                taken = min(self._batch, len(self._queue))
                batch = list(starmap(self._queue.popleft, repeat((), taken)))
                token = attach(set_value(_SUPPRESS_INSTRUMENTATION_KEY, True))
                try:
                    self.store.write_batches(_batches(batch, self.traces, self._service))
                except Exception:  # a write failure loses the batch, never the worker
                    _log.exception("Could not write %d spans to the span store", len(batch) // _FIELDS)
                    written = False
                finally:
                    detach(token)
        return written

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Write every waiting span now (on the calling thread); ``False`` if a batch was lost."""
        return self._write_waiting()

    def shutdown(self) -> None:
        """Write what waits and stop the worker; spans that end afterwards are not kept."""
        if self.stopped:
            return
        self.stopped = True
        self._wake.set()
        self._worker.join()


def _batches(queued: Sequence[int | bytes], traces: _Traces, service: str | None) -> list[SpanBatch]:
    """Queued spans (:data:`_FIELDS` items each) as one :class:`SpanBatch` per trace: the
    trace's context once and its spans' encoded entries in one JSON document, and how many are
    its roots (the trace list's rows, made when it is read)."""
    trace_ids = cast("Sequence[int]", queued[0::_FIELDS])
    starts = cast("Sequence[int]", queued[1::_FIELDS])
    is_root = cast("Sequence[bool]", queued[2::_FIELDS])
    encoded = cast("Sequence[bytes]", queued[3::_FIELDS])
    of_trace: dict[int, list[int]] = {}  # OTel trace id → its spans' positions
    for trace_id, run in groupby(range(len(trace_ids)), trace_ids.__getitem__):
        same_trace = of_trace.get(trace_id)  # (a look-up a run of one trace's spans)
        if same_trace is None:
            of_trace[trace_id] = list(run)
        else:
            same_trace.extend(run)
    batches = []
    for trace_id, positions in of_trace.items():
        trace = _context(trace_id, traces.get(trace_id), service)
        span_starts = list(map(starts.__getitem__, positions))
        spans = b",".join(map(encoded.__getitem__, positions))
        batches.append(
            SpanBatch(
                trace_id=trace["traceId"],
                resource_id=trace["resourceId"],
                first_started=iso_ns(min(span_starts)),
                last_started=iso_ns(max(span_starts)),
                count=len(positions),
                spans=b"".join((b'{"trace":', orjson.dumps(trace), b',"spans":[', spans, b"]}")).decode(),
                # (a task's trace hangs under the run's span: its OTel root is not a trace's root)
                roots=sum(map(is_root.__getitem__, positions)) if trace["rootParent"] is None else 0,
            )
        )
    return batches


def _service(resource: object) -> str | None:
    name = resource.attributes.get("service.name") if isinstance(resource, Resource) else None
    return name if isinstance(name, str) else None


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
