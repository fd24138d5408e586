"""A local OTLP/HTTP trace receiver for trying ``runstream serve``'s export without a collector.

    python examples/otlp_receiver.py 4318

listens on ``http://127.0.0.1:4318`` and prints one line per span it receives on ``/v1/traces``
(the OTLP/HTTP protobuf encoding, decoded with ``opentelemetry-proto``, which the ``otel`` extra
installs): the service, the span name, and its finish reasons and token usage when it has them. It answers as a collector
does, so the exporter sees its batches accepted. For a real backend use Jaeger, the
OpenTelemetry Collector or a vendor's endpoint instead.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

MAX_BODY_BYTES = 16 * 1024 * 1024
Span = tuple[str, str, dict[str, Any]]
"""(service name, span name, attributes)."""


def spans_of(body: bytes) -> Iterator[Span]:
    """The spans of one OTLP/HTTP protobuf export request."""
    request = ExportTraceServiceRequest.FromString(body)
    for resource_spans in request.resource_spans:
        resource = {a.key: value_of(a.value) for a in resource_spans.resource.attributes}
        service = str(resource.get("service.name", "unknown_service"))
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                yield service, span.name, {a.key: value_of(a.value) for a in span.attributes}


def value_of(value: Any) -> Any:
    """An OTLP ``AnyValue`` as a Python value."""
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [value_of(v) for v in value.array_value.values]
    return getattr(value, kind) if kind else None


SHOWN = {
    "gen_ai.response.finish_reasons": "finish",
    "gen_ai.usage.input_tokens": "in",
    "gen_ai.usage.output_tokens": "out",
}


def line_of(span: Span) -> str:
    service, name, attributes = span
    shown = " ".join(f"{label}={_text(attributes[key])}" for key, label in SHOWN.items() if key in attributes)
    return f"{service}: {name} {shown}".rstrip()


def _text(value: Any) -> str:
    return ",".join(map(str, value)) if isinstance(value, list) else str(value)


def receiver(port: int, on_spans: Callable[[str, list[Span]], None]) -> ThreadingHTTPServer:
    """An HTTP server on 127.0.0.1:``port`` (0: a free one) handing each export to ``on_spans``."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if self.path != "/v1/traces" or not 0 < length <= MAX_BODY_BYTES:
                self.send_error(404 if self.path != "/v1/traces" else 400)
                return
            try:
                spans = list(spans_of(self.rfile.read(length)))
            except Exception as exc:  # a body that is not an export request
                self.send_error(400, f"not an OTLP trace export: {exc}")
                return
            on_spans(self.path, spans)
            answer = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args: Any) -> None:
            pass

    return ThreadingHTTPServer(("127.0.0.1", port), Handler)


def main(argv: list[str]) -> None:
    server = receiver(int(argv[0]) if argv else 4318, lambda _path, spans: _print(spans))
    print(f"OTLP/HTTP receiver on http://127.0.0.1:{server.server_address[1]}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()


def _print(spans: list[Span]) -> None:
    for span in spans:
        print(line_of(span), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
