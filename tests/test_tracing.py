"""Tracing with the GenAI semantic conventions: invoke_agent, chat and execute_tool spans, opt-in
content capture, background task spans linked to their run, continuation turns linked to tasks."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NonRecordingSpan, SpanContext, StatusCode, TraceFlags

from runstream import Agent, ToolContext, tool
from runstream import _tracing as tracing
from runstream.memory import Memory
from runstream.models.base import ModelRequest, ModelStream
from runstream.runtime import Runstream
from runstream.storage import InMemoryStorage
from runstream.testing import ScriptedModel
from tests.otel_testkit import named, spans

__all__ = ["spans"]

USAGE = {"inputTokens": 3, "outputTokens": 2, "totalTokens": 5}


@tool
def divide(a: int, b: int) -> float:
    """Divide a by b."""
    return a / b


def tool_call(call_id: str, name: str, args: str) -> dict[str, Any]:
    return {"type": "tool-call", "toolCallId": call_id, "toolName": name, "input": args}


def say(text: str) -> list[dict[str, Any]]:
    return [
        {"type": "text-start", "id": "t"},
        {"type": "text-delta", "id": "t", "delta": text},
        {"type": "text-end", "id": "t"},
        {"type": "finish", "finishReason": "stop", "usage": USAGE},
    ]


def calculator() -> Agent:
    model = ScriptedModel(
        calls=[
            [
                tool_call("c1", "divide", '{"a": 6, "b": 3}'),
                tool_call("c2", "divide", '{"a": 1, "b": 0}'),
                {"type": "finish", "finishReason": "tool-calls", "usage": USAGE},
            ],
            say("2"),
        ]
    )
    return Agent("calc", name="Calculator", instructions="Divide.", model=model, tools=[divide])


@pytest.fixture
def capture() -> Iterator[None]:
    tracing.configure(capture_content=True)
    yield
    tracing.configure(capture_content=None)


async def test_agent_chat_and_tool_spans(spans: InMemorySpanExporter) -> None:
    await (await calculator().stream("6/3 and 1/0", model_settings=None)).consume()
    (agent,) = named(spans, "invoke_agent")
    assert agent.name == "invoke_agent Calculator"
    assert agent.attributes is not None
    assert agent.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert agent.attributes["gen_ai.agent.id"] == "calc"
    assert agent.attributes["gen_ai.agent.name"] == "Calculator"
    assert agent.attributes["gen_ai.provider.name"] == "scripted"
    assert agent.attributes["runstream.run.status"] == "success"
    assert agent.attributes["gen_ai.response.finish_reasons"] == ("stop",)
    assert agent.attributes["gen_ai.usage.input_tokens"] == 6  # the run's total over two calls
    assert agent.attributes["gen_ai.usage.output_tokens"] == 4
    chats = named(spans, "chat ")
    assert [c.name for c in chats] == ["chat scripted-model", "chat scripted-model"]
    for chat in chats:
        assert chat.parent is not None and chat.parent.span_id == agent.context.span_id
        assert chat.attributes is not None
        assert chat.attributes["gen_ai.operation.name"] == "chat"
        assert chat.attributes["gen_ai.request.model"] == "scripted-model"
        assert chat.attributes["gen_ai.usage.input_tokens"] == 3
        assert chat.attributes["gen_ai.usage.output_tokens"] == 2
        assert "gen_ai.input.messages" not in chat.attributes  # content is opt-in
    assert [c.attributes["gen_ai.response.finish_reasons"] for c in chats if c.attributes] == [
        ("tool_call",),
        ("stop",),
    ]
    tools = sorted(
        named(spans, "execute_tool"), key=lambda s: str((s.attributes or {})["gen_ai.tool.call.id"])
    )
    assert [t.name for t in tools] == ["execute_tool divide", "execute_tool divide"]
    assert all(t.parent is not None and t.parent.span_id == agent.context.span_id for t in tools)
    ok, failed = tools
    assert ok.attributes is not None and failed.attributes is not None
    assert ok.attributes["gen_ai.operation.name"] == "execute_tool"
    assert ok.attributes["gen_ai.tool.type"] == "function"
    assert ok.attributes["gen_ai.tool.description"] == "Divide a by b."
    assert "gen_ai.tool.call.arguments" not in ok.attributes
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.attributes["error.type"] == "ZeroDivisionError"


async def test_content_capture_is_opt_in(spans: InMemorySpanExporter, capture: None) -> None:
    await (await calculator().stream("6/3 and 1/0")).consume()
    first, second = named(spans, "chat ")
    assert first.attributes is not None and second.attributes is not None
    assert json.loads(str(first.attributes["gen_ai.system_instructions"])) == [
        {"type": "text", "content": "Divide."}
    ]
    assert json.loads(str(first.attributes["gen_ai.input.messages"])) == [
        {"role": "user", "parts": [{"type": "text", "content": "6/3 and 1/0"}]}
    ]
    (output,) = json.loads(str(first.attributes["gen_ai.output.messages"]))
    assert output["finish_reason"] == "tool_call"
    assert [p["name"] for p in output["parts"]] == ["divide", "divide"]
    later = json.loads(str(second.attributes["gen_ai.input.messages"]))
    assert later[-1]["parts"][0] == {"type": "tool_call_response", "id": "c1", "response": 2.0}
    assert json.loads(str(second.attributes["gen_ai.output.messages"]))[0]["parts"] == [
        {"type": "text", "content": "2"}
    ]
    ok = next(t for t in named(spans, "execute_tool") if (t.attributes or {})["gen_ai.tool.call.id"] == "c1")
    assert ok.attributes is not None
    assert json.loads(str(ok.attributes["gen_ai.tool.call.arguments"])) == {"a": 6, "b": 3}
    assert json.loads(str(ok.attributes["gen_ai.tool.call.result"])) == 2.0


async def test_a_failed_model_call_marks_its_chat_span(spans: InMemorySpanExporter) -> None:
    model = ScriptedModel(calls=[{"throwOnCall": {"message": "quota exceeded"}}])
    await (await Agent("a", model=model).stream("hi")).consume()
    (chat,) = named(spans, "chat ")
    assert chat.status.status_code is StatusCode.ERROR and "quota exceeded" in (chat.status.description or "")
    assert chat.attributes is not None and chat.attributes["error.type"] == "ScriptedError"
    (agent,) = named(spans, "invoke_agent")
    assert agent.status.status_code is StatusCode.ERROR


@tool(background=True)
async def research(topic: str, ctx: ToolContext) -> dict[str, str]:
    """Research a topic (in the background)."""
    return {"topic": topic}


async def research_until_idle() -> None:
    """A run whose background task wakes a continuation turn (thread ``t``, resource ``u``)."""
    model = ScriptedModel(
        calls=[
            [
                tool_call("c1", "research", '{"topic": "sol"}'),
                {"type": "finish", "finishReason": "tool-calls", "usage": USAGE},
            ],
            say("Started."),
            say("Done."),
        ]
    )
    agent = Agent("bg", model=model, tools=[research], memory=Memory())
    runtime = Runstream(agents=[agent], storage=InMemoryStorage(), background_tasks={"enabled": True})
    async with runtime:
        out = await agent.stream("research sol", memory={"thread": "t", "resource": "u"}, until_idle=True)
        await out.consume()


async def test_background_task_and_continuation_turn_spans(spans: InMemorySpanExporter) -> None:
    await research_until_idle()
    first, second = sorted(named(spans, "invoke_agent"), key=lambda s: s.start_time or 0)
    (task,) = named(spans, "execute_tool research")
    assert task.attributes is not None
    assert task.attributes["runstream.background_task.attempt"] == 1
    task_id = task.attributes["runstream.background_task.id"]
    # The task's span has a trace of its own, linked to the run that started it.
    assert task.parent is None and task.context.trace_id != first.context.trace_id
    (started_by,) = task.links
    assert (started_by.context.trace_id, started_by.context.span_id) == (
        first.context.trace_id,
        first.context.span_id,
    )
    # The continuation turn is linked to the task that triggered it.
    assert second.attributes is not None and second.attributes["runstream.continuation"] is True
    assert first.attributes is not None and "runstream.continuation" not in first.attributes
    (triggered_by,) = second.links
    assert triggered_by.context.span_id == task.context.span_id
    assert triggered_by.attributes is not None
    assert triggered_by.attributes["runstream.background_task.id"] == task_id
    assert second.attributes["gen_ai.conversation.id"] == "t"


@dataclass
class _TraceWatchingModel:
    """Answers at once, noting the trace id of the span that is current while it is called."""

    seen: list[int] = field(default_factory=list)
    provider: str = "test"
    model_id: str = "watcher"
    specification_version: str = "v2"

    async def stream(self, request: ModelRequest) -> ModelStream:
        self.seen.append(trace.get_current_span().get_span_context().trace_id)
        return ModelStream(parts=_parts(say("ok")))


async def _parts(parts: list[dict[str, Any]]) -> AsyncIterator[Any]:
    for part in parts:
        yield part


async def test_the_model_is_called_within_the_runs_trace() -> None:
    # Traced or not (the SDK of another test may be installed), the span current during the
    # model call belongs to the trace the run started in, wherever its stream is read.
    caller = NonRecordingSpan(
        SpanContext(trace_id=0xA1B2, span_id=0xC3, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))
    )
    model = _TraceWatchingModel()
    agent = Agent("a", model=model)
    with trace.use_span(caller):
        read_elsewhere = await agent.stream("hi")
        await (await agent.stream("hi")).consume()  # read where it started
    await read_elsewhere.consume()
    assert model.seen == [0xA1B2, 0xA1B2]
