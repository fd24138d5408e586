"""A tool's ``to_model_output`` (Mastra's ``toModelOutput``): the model sees what it returns,
this run and the next ones on the thread, while the stream and the run's messages keep the
whole result (as Mastra's message list does; the sub-agent tool uses it, recorded ``x-pt15``)."""

from __future__ import annotations

from typing import Any

import pytest

from runstream import Agent, Tool, tool
from runstream.memory import Memory
from runstream.runtime import Runstream
from runstream.testing import ScriptedModel

USAGE = {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2}
THREAD = {"thread": "t", "resource": "u"}


def say(text: str) -> list[dict[str, Any]]:
    return [
        {"type": "text-start", "id": "t"},
        {"type": "text-delta", "id": "t", "delta": text},
        {"type": "text-end", "id": "t"},
        {"type": "finish", "finishReason": "stop", "usage": USAGE},
    ]


@tool(to_model_output=lambda result: {"type": "text", "value": result["summary"]})
async def lookup(topic: str) -> dict[str, str]:
    """Look a topic up."""
    return {"summary": f"{topic} in short", "raw": "a long document"}


def tool_outputs(model: ScriptedModel, call: int) -> list[Any]:
    return [p["output"] for m in model.recorded[call].prompt if m["role"] == "tool" for p in m["content"]]


async def test_the_model_sees_the_model_output_and_the_stream_the_result() -> None:
    calls = [
        [
            {"type": "tool-call", "toolCallId": "c1", "toolName": "lookup", "input": '{"topic": "sol"}'},
            {"type": "finish", "finishReason": "tool-calls", "usage": USAGE},
        ],
        say("ok"),
        say("again"),
    ]
    model = ScriptedModel(calls=calls)
    agent = Agent("a", model=model, tools=[lookup], memory=Memory())
    async with Runstream(agents=[agent]):
        first = await agent.generate("hi", memory=THREAD)
        await agent.generate("more", memory=THREAD)
    assert first["toolResults"][0]["result"] == {"summary": "sol in short", "raw": "a long document"}
    assert tool_outputs(model, 1) == [{"type": "text", "value": "sol in short"}]
    assert tool_outputs(model, 2) == [{"type": "text", "value": "sol in short"}]  # from memory
    (tool_message,) = [m for m in first["messages"] if m["role"] == "tool"]
    assert tool_message["content"][0]["output"]["type"] == "json"  # the run keeps the result


def test_to_model_output_must_be_a_function() -> None:
    with pytest.raises(TypeError, match="to_model_output"):
        Tool("t", lambda args, ctx: None, to_model_output="text")  # type: ignore[arg-type]
