"""Process B of the cross-process tracing test: ``agent_worker.py`` with an OpenTelemetry SDK
whose finished spans are printed as JSON lines (``{"event": "span", ...}``).

Usage: ``python traced_agent_worker.py POSTGRES_URL SCHEMA PREFIX``.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Sequence

from agent_worker import serve
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from scaleout_worker import say


class PrintingExporter(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        for span in spans:
            assert span.context is not None
            say(
                event="span",
                name=span.name,
                trace_id=format(span.context.trace_id, "032x"),
                span_id=format(span.context.span_id, "016x"),
                parent=span.parent is not None,
                attributes=dict(span.attributes or {}),
                links=[
                    {
                        "trace_id": format(link.context.trace_id, "032x"),
                        "span_id": format(link.context.span_id, "016x"),
                        "attributes": dict(link.attributes or {}),
                    }
                    for link in span.links
                ],
            )
        return SpanExportResult.SUCCESS


if __name__ == "__main__":
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(PrintingExporter()))
    trace.set_tracer_provider(provider)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(*sys.argv[1:4]))
