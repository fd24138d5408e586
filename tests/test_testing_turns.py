"""Scripting a conversation turn by turn (``runstream.testing``) drives the real loop."""

from __future__ import annotations

import asyncio
from typing import Any

from runstream import AbortController, Agent, ToolContext, tool
from runstream.chunks import AnyChunk
from runstream.testing import (
    CallError,
    Delay,
    Finish,
    FunctionModel,
    ModelCall,
    Reasoning,
    ScriptedModel,
    StreamError,
    Text,
    ToolCall,
    Turn,
)

calls_seen: list[str] = []


@tool
async def get_weather(city: str, ctx: ToolContext) -> dict[str, Any]:
    """Get the weather for a city."""
    calls_seen.append(city)
    await ctx.writer.write({"status": f"looking up {city}"})
    return {"city": city, "tempC": 21}


async def run(model: Any, prompt: str = "Weather in Paris?") -> tuple[list[AnyChunk], str]:
    agent = Agent("weather", model=model, tools=[get_weather])
    out = await agent.stream(prompt)
    chunks = [chunk async for chunk in out.full_stream]
    return chunks, out.state.text  # (``await out.text`` raises for a failed run)


def types(chunks: list[AnyChunk]) -> list[str]:
    return [chunk.type for chunk in chunks]


async def test_a_scripted_tool_call_runs_the_tool_and_the_next_turn_sees_its_result() -> None:
    calls_seen.clear()
    model = ScriptedModel.turns(
        [Reasoning("Check the weather first."), ToolCall("get_weather", {"city": "Paris"})],
        Text("It is 21C in Paris."),
    )
    chunks, text = await run(model)
    assert calls_seen == ["Paris"]
    assert text == "It is 21C in Paris."
    kinds = types(chunks)
    assert kinds.index("reasoning-delta") < kinds.index("tool-call") < kinds.index("tool-output")
    assert kinds.index("tool-output") < kinds.index("tool-result") < kinds.index("text-delta")
    result = next(c for c in chunks if c.type == "tool-result")
    assert result.payload["result"] == {"city": "Paris", "tempC": 21}
    assert [c.payload["stepResult"]["reason"] for c in chunks if c.type == "step-finish"] == [
        "tool-calls",
        "stop",
    ]
    tool_message = model.recorded[1].prompt[-1]
    assert tool_message["role"] == "tool"
    assert tool_message["content"][0]["output"] == {"type": "json", "value": {"city": "Paris", "tempC": 21}}


async def test_text_in_words_and_a_plain_string_turn() -> None:
    chunks, text = await run(ScriptedModel.turns([Text("one two three", words=True)]))
    assert [c.payload["text"] for c in chunks if c.type == "text-delta"] == ["one ", "two ", "three"]
    assert text == "one two three"
    _, text = await run(ScriptedModel.turns("just a string"))
    assert text == "just a string"


async def test_a_stream_error_ends_the_run_with_an_error_chunk() -> None:
    chunks, text = await run(ScriptedModel.turns([Text("partial"), StreamError("vendor exploded")]))
    errors = [c for c in chunks if c.type == "error"]
    assert len(errors) == 1 and str(errors[0].payload["error"]) == "vendor exploded"
    assert types(chunks)[-1] == "finish"
    assert text == "partial"


async def test_a_failing_call_streams_nothing_but_the_error() -> None:
    chunks, _ = await run(ScriptedModel.turns(CallError("rate limited", status_code=429)))
    assert "text-delta" not in types(chunks)
    error = next(c for c in chunks if c.type == "error").payload["error"]
    assert str(error) == "rate limited" and error.statusCode == 429


async def test_finish_overrides_the_reason_and_usage() -> None:
    usage = {"inputTokens": 7, "outputTokens": 3, "totalTokens": 10}
    agent = Agent("w", model=ScriptedModel.turns([Text("cut"), Finish("length", usage)]))
    out = await agent.stream("hi")
    assert await out.finish_reason == "length"
    assert (await out.usage)["totalTokens"] == 10


async def test_a_delay_is_cut_short_by_an_abort() -> None:
    controller = AbortController()
    agent = Agent("w", model=ScriptedModel.turns([Text("first"), Delay(60_000), Text("never")]))
    out = await agent.stream("hi", abort_signal=controller.signal)
    seen: list[AnyChunk] = []
    async with asyncio.timeout(10):  # the 60 s delay does not hold the run
        async for chunk in out.full_stream:
            seen.append(chunk)
            if chunk.type == "text-end":
                controller.abort("enough")
    assert "abort" in types(seen)
    assert [c.payload["text"] for c in seen if c.type == "text-delta"] == ["first"]


async def test_a_function_model_answers_from_the_tool_result() -> None:
    def respond(call: ModelCall) -> Turn:
        if not call.tool_results:
            city = call.last_user_text.removeprefix("Weather in ").rstrip("?")
            return ToolCall("get_weather", {"city": city})
        temp = call.tool_results[-1]["output"]["value"]["tempC"]
        return Text(f"{temp}C, says the tool.")

    model = FunctionModel(respond)
    _, text = await run(model, "Weather in Oslo?")
    assert text == "21C, says the tool."
    assert model.call_count == 2 and model.recorded[0].tools == ["get_weather"]


async def test_an_async_function_model() -> None:
    async def respond(call: ModelCall) -> Turn:
        await asyncio.sleep(0)
        return Text(f"call {call.index}")

    _, text = await run(FunctionModel(respond))
    assert text == "call 0"
