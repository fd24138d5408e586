"""runstream's span store: the run's OpenTelemetry spans kept as Mastra's AI-tracing records,
with scores and feedback, served by ``/api/observability`` (see docs/otel.md).

:class:`SpanStore` needs only the standard library; :func:`install_span_store` and
:class:`StoreSpanProcessor` need the OpenTelemetry SDK (``pip install 'runstream[otel]'``) and
are imported from :mod:`runstream.observability.processor`.
"""

from runstream.observability.store import SpanStore, TraceQuery

__all__ = ["SpanStore", "TraceQuery"]
