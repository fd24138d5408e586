"""OpenTelemetry SDK setup from the standard ``OTEL_*`` environment variables.

``runstream serve`` and ``runstream mcp`` call :func:`setup_from_environment`: when
``OTEL_TRACES_EXPORTER`` names ``otlp`` or ``console``, or an ``OTEL_EXPORTER_OTLP_ENDPOINT`` /
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set, it installs a tracer provider (resource from
``OTEL_SERVICE_NAME`` / ``OTEL_RESOURCE_ATTRIBUTES``, default service name ``runstream``) with a
batch processor per exporter. The OTLP exporter reads its own variables (endpoint, headers,
timeout; ``OTEL_EXPORTER_OTLP_PROTOCOL`` ``http/protobuf``, or ``grpc`` when
``opentelemetry-exporter-otlp-proto-grpc`` is installed). ``OTEL_SDK_DISABLED=true`` turns it off.
Needs the ``otel`` extra; without the SDK, tracing stays the API's no-op.
"""

from __future__ import annotations

import importlib
import logging
import os
from typing import Any

from opentelemetry import trace

logger = logging.getLogger(__name__)


def _wanted_exporters() -> list[str]:
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return []
    named = [e.strip() for e in os.environ.get("OTEL_TRACES_EXPORTER", "").split(",") if e.strip()]
    if named:
        return [] if named == ["none"] else named
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    return ["otlp"] if endpoint else []


def setup_from_environment() -> Any | None:
    """Install the SDK tracer provider the environment asks for; returns it (``shutdown()`` it
    to flush), or ``None`` when nothing is configured or the SDK is missing."""
    exporters = _wanted_exporters()
    if not exporters:
        return None
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        logger.warning("OTEL_* is set but the OpenTelemetry SDK is missing: pip install 'runstream[otel]'")
        return None
    defaults = {} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": "runstream"}
    resource = Resource.create(defaults)
    if "service.name" in defaults and "service.name=" in os.environ.get("OTEL_RESOURCE_ATTRIBUTES", ""):
        resource = Resource.create({})
    provider = TracerProvider(resource=resource)
    for name in exporters:
        provider.add_span_processor(BatchSpanProcessor(_exporter(name)))
    trace.set_tracer_provider(provider)
    return provider


def _exporter(name: str) -> Any:
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    if name != "otlp":
        raise SystemExit(f"OTEL_TRACES_EXPORTER: unsupported exporter {name!r} (use otlp or console)")
    protocol = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get(
        "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"
    )
    if protocol == "grpc":
        try:
            grpc = importlib.import_module("opentelemetry.exporter.otlp.proto.grpc.trace_exporter")
        except ImportError:
            raise SystemExit(
                "OTEL_EXPORTER_OTLP_PROTOCOL=grpc needs opentelemetry-exporter-otlp-proto-grpc"
            ) from None
        return grpc.OTLPSpanExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()
