"""Tracing: a span per run, per model step and per tool call, with usage and outcomes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from runstream import Agent, tool
from runstream.testing import ScriptedModel

USAGE = {"inputTokens": 3, "outputTokens": 2, "totalTokens": 5}

_EXPORTER = InMemorySpanExporter()
_PROVIDER = TracerProvider()
_PROVIDER.add_span_processor(SimpleSpanProcessor(_EXPORTER))


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    # The global provider can be set once per process; runstream's tracer is a proxy that
    # follows it, so every test shares one in-memory exporter and clears it.
    trace.set_tracer_provider(_PROVIDER)
    _EXPORTER.clear()
    yield _EXPORTER


@tool
def divide(a: int, b: int) -> float:
    """Divide a by b."""
    return a / b


async def test_run_step_and_tool_spans(spans: InMemorySpanExporter) -> None:
    def tool_call(call_id: str, args: str) -> dict[str, Any]:
        return {"type": "tool-call", "toolCallId": call_id, "toolName": "divide", "input": args}

    model = ScriptedModel(
        calls=[
            [
                tool_call("c1", '{"a": 6, "b": 3}'),
                tool_call("c2", '{"a": 1, "b": 0}'),
                {"type": "finish", "finishReason": "tool-calls", "usage": USAGE},
            ],
            [
                {"type": "text-start", "id": "t"},
                {"type": "text-delta", "id": "t", "delta": "2"},
                {"type": "text-end", "id": "t"},
                {"type": "finish", "finishReason": "stop", "usage": USAGE},
            ],
        ]
    )
    out = await Agent("calc", model=model, tools=[divide]).stream("6/3 and 1/0")
    await out.consume()
    finished = {s.name: [] for s in spans.get_finished_spans()}  # type: dict[str, list[Any]]
    for span in spans.get_finished_spans():
        finished[span.name].append(span)
    (run,) = finished["runstream.run"]
    assert run.attributes["runstream.agent.id"] == "calc"
    assert run.attributes["runstream.run.status"] == "success"
    steps = finished["runstream.model.step"]
    assert [s.attributes["gen_ai.response.finish_reason"] for s in steps] == ["tool-calls", "stop"]
    assert all(s.parent.span_id == run.context.span_id for s in steps)
    assert steps[0].attributes["gen_ai.usage.totalTokens"] == 5
    tools = sorted(finished["runstream.tool"], key=lambda s: s.attributes["runstream.tool.call_id"])
    assert [t.attributes["runstream.tool.outcome"] for t in tools] == ["result", "error"]
    assert tools[1].status.status_code is StatusCode.ERROR


async def test_a_failed_model_call_marks_its_step_span(spans: InMemorySpanExporter) -> None:
    model = ScriptedModel(calls=[{"throwOnCall": {"message": "quota exceeded"}}])
    await (await Agent("a", model=model).stream("hi")).consume()
    (step,) = [s for s in spans.get_finished_spans() if s.name == "runstream.model.step"]
    assert step.status.status_code is StatusCode.ERROR and "quota exceeded" in (step.status.description or "")
