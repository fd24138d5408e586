"""runstream's span store: the run's OpenTelemetry spans kept as Mastra's AI-tracing records,
with scores and feedback, served by ``/api/observability`` (see docs/otel.md).

:class:`SpanStore` (SQLite) needs only the standard library, :class:`PostgresSpanStore` the
``postgres`` extra (psycopg); :func:`install_span_store` and
:class:`StoreSpanProcessor` need the OpenTelemetry SDK (``pip install 'runstream[otel]'``) and
are imported from :mod:`runstream.observability.processor`.
"""

from runstream.observability.store import PostgresSpanStore, SpanStore, TraceQuery

__all__ = ["PostgresSpanStore", "SpanStore", "TraceQuery"]
