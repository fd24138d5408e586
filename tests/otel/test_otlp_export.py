"""``runstream serve`` exports OTLP when the standard ``OTEL_*`` variables say so: a real server
process sends real OTLP/HTTP protobuf to a collector endpoint this test runs."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest

from examples.otlp_receiver import Span, receiver
from tests.mcp.conftest import start_http_server


class Collector:
    """Keeps what the example receiver got on ``/v1/traces``: spans (name → attributes) and the
    services that sent them."""

    def __init__(self) -> None:
        self.spans: dict[str, dict[str, Any]] = {}
        self.service_names: set[str] = set()
        self.paths: set[str] = set()
        self.changed = threading.Condition()

    def receive(self, path: str, spans: list[Span]) -> None:
        with self.changed:
            self.paths.add(path)
            for service, name, attributes in spans:
                self.service_names.add(service)
                self.spans[name] = attributes
            self.changed.notify_all()

    def wait_for(self, *names: str) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: set(names) <= set(self.spans), timeout=20), self.spans


@pytest.fixture
def collector() -> Iterator[tuple[Collector, str]]:
    """examples/otlp_receiver.py's receiver in this process, on a free port."""
    received = Collector()
    server = receiver(0, received.receive)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield received, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def test_serve_exports_genai_spans_over_otlp(collector: tuple[Collector, str]) -> None:
    received, endpoint = collector
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_SERVICE_NAME": "calc-service",
        "OTEL_BSP_SCHEDULE_DELAY": "50",
        "RUNSTREAM_API_TOKEN": "",
    }
    process, base = start_http_server(
        "-m", "runstream", "serve", "examples.ecosystem:runtime", "--port", "0", env=env
    )
    try:
        answer = httpx2.post(f"{base}/api/agents/calc/generate", json={"messages": "divide 6 3"}, timeout=20)
        assert answer.status_code == 200 and answer.json()["text"] == "The result is 2.0."
        received.wait_for("invoke_agent calc", "chat rule-model", "execute_tool divide")
    finally:
        process.terminate()
        process.wait(10)
    assert received.paths == {"/v1/traces"}
    assert received.service_names == {"calc-service"}
    agent = received.spans["invoke_agent calc"]
    assert agent["gen_ai.operation.name"] == "invoke_agent" and agent["gen_ai.agent.id"] == "calc"
    chat = received.spans["chat rule-model"]
    assert chat["gen_ai.provider.name"] == "rules"
    assert chat["gen_ai.usage.input_tokens"] == 4 and chat["gen_ai.usage.output_tokens"] == 2
    assert received.spans["execute_tool divide"]["gen_ai.tool.name"] == "divide"


@pytest.mark.parametrize(
    ("env", "wanted"),
    [
        ({}, []),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, ["otlp"]),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, ["otlp"]),
        ({"OTEL_TRACES_EXPORTER": "console,otlp"}, ["console", "otlp"]),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, []),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, []),
    ],
)
def test_which_exporters_the_environment_asks_for(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], wanted: list[str]
) -> None:
    from runstream._telemetry import _wanted_exporters

    for name in (
        "OTEL_SDK_DISABLED",
        "OTEL_TRACES_EXPORTER",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    ):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert _wanted_exporters() == wanted
