"""Mastra's run callbacks on ``stream()``/``generate()``: on_chunk, on_step_finish, on_finish,
on_error and on_abort."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from runstream import AbortController, Agent, tool
from runstream.chunks import AnyChunk
from runstream.testing import ScriptedModel

USAGE = {"inputTokens": 3, "outputTokens": 2, "totalTokens": 5}
TOOL_STEP = [
    {"type": "tool-input-start", "id": "c1", "toolName": "weather"},
    {"type": "tool-input-delta", "id": "c1", "delta": '{"city":"Oslo"}'},
    {"type": "tool-input-end", "id": "c1"},
    {"type": "tool-call", "toolCallId": "c1", "toolName": "weather", "input": '{"city":"Oslo"}'},
    {"type": "finish", "finishReason": "tool-calls", "usage": USAGE},
]


def answer(*deltas: str, delay_ms: float = 0) -> list[dict[str, Any]]:
    return [
        {"type": "reasoning-start", "id": "r"},
        {"type": "reasoning-delta", "id": "r", "delta": "thinking"},
        {"type": "reasoning-end", "id": "r"},
        {"type": "text-start", "id": "t"},
        *({"type": "text-delta", "id": "t", "delta": d, "delayMs": delay_ms} for d in deltas),
        {"type": "text-end", "id": "t"},
        {"type": "finish", "finishReason": "stop", "usage": USAGE},
    ]


@tool
def weather(city: str) -> dict[str, Any]:
    """The weather in a city."""
    return {"city": city, "tempC": 4}


async def test_callbacks_see_chunks_steps_and_the_result_before_the_consumer() -> None:
    events: list[tuple[str, Any]] = []
    agent = Agent("a", model=ScriptedModel(calls=[TOOL_STEP, answer("Cold ", "in Oslo.")]), tools=[weather])

    async def on_finish(result: dict[str, Any]) -> None:
        await asyncio.sleep(0)
        events.append(("finish", result))

    out = await agent.stream(
        "weather?",
        on_chunk=lambda chunk: events.append(("chunk", chunk.type)),
        on_step_finish=lambda step: events.append(("step", step)),
        on_finish=on_finish,
    )
    async for chunk in out.full_stream:
        events.append(("consumer", chunk.type))

    chunk_types = [value for kind, value in events if kind == "chunk"]
    assert chunk_types == [
        "tool-call-input-streaming-start",
        "tool-call-delta",
        "tool-call-input-streaming-end",
        "tool-call",
        "tool-result",
        "reasoning-delta",
        "text-delta",
        "text-delta",
    ]
    steps = [value for kind, value in events if kind == "step"]
    assert [s["finishReason"] for s in steps] == ["tool-calls", "stop"]
    assert steps[0]["toolResults"] == [
        {
            "args": {"city": "Oslo"},
            "toolCallId": "c1",
            "toolName": "weather",
            "result": {"city": "Oslo", "tempC": 4},
        }
    ]
    assert steps[1]["text"] == "Cold in Oslo." and steps[1]["toolResults"] == []
    assert steps[0]["runId"] == out.run_id
    assert steps[0]["model"] == {"modelId": "scripted-model", "provider": "scripted"}
    ((_, result),) = [(k, v) for k, v in events if k == "finish"]
    assert result["text"] == "Cold in Oslo." and result["finishReason"] == "stop"
    assert result["totalUsage"]["totalTokens"] == 10 and len(result["steps"]) == 2
    # each callback ran before the consumer saw its chunk
    first_step = next(i for i, (kind, _) in enumerate(events) if kind == "step")
    assert events[first_step + 1] == ("consumer", "step-finish")
    assert events[-2][0] == "finish" and events[-1] == ("consumer", "finish")


async def test_generate_takes_the_callbacks_too() -> None:
    results: list[dict[str, Any]] = []
    agent = Agent("a", model=ScriptedModel.text("Hi there"))
    full = await agent.generate("hi", on_finish=results.append)
    assert [r["text"] for r in results] == ["Hi there"] == [full["text"]]


async def test_on_error_gets_the_model_error() -> None:
    errors: list[Any] = []
    finished: list[str | None] = []
    model = ScriptedModel(
        calls=[[{"type": "text-start", "id": "t"}, {"type": "error", "error": {"message": "overloaded"}}]]
    )
    agent = Agent("a", model=model)
    out = await agent.stream(
        "hi", on_error=errors.append, on_finish=lambda result: finished.append(result["finishReason"])
    )
    await out.consume()
    assert len(errors) == 1 and "overloaded" in str(errors[0]["error"])
    assert finished == ["error"]


async def test_on_abort_gets_the_steps_and_the_text_so_far() -> None:
    aborts: list[dict[str, Any]] = []
    controller = AbortController()
    agent = Agent(
        "a",
        model=ScriptedModel(calls=[TOOL_STEP, answer("Cold ", "in ", "Oslo.", delay_ms=20)]),
        tools=[weather],
    )

    def on_chunk(chunk: AnyChunk) -> None:
        if chunk.type == "text-delta":
            controller.abort("user left")

    out = await agent.stream(
        "weather?", abort_signal=controller.signal, on_chunk=on_chunk, on_abort=aborts.append
    )
    kinds = [chunk.type async for chunk in out.full_stream]
    assert "abort" in kinds
    (event,) = aborts
    assert event["steps"][0]["finishReason"] == "tool-calls"
    assert event["text"].startswith("Cold")


async def test_a_failing_callback_ends_the_run_with_its_error() -> None:
    def broken(step: dict[str, Any]) -> None:
        raise RuntimeError("callback bug")

    agent = Agent("a", model=ScriptedModel.text("Hi"))
    out = await agent.stream("hi", on_step_finish=broken)
    with pytest.raises(RuntimeError, match="callback bug"):
        await out.consume()
    assert out.status == "failed"


async def test_a_callback_must_be_callable() -> None:
    agent = Agent("a", model=ScriptedModel.text("Hi"))
    with pytest.raises(TypeError, match="on_finish must be a function"):
        await agent.stream("hi", on_finish="print")  # type: ignore[arg-type]


# -- against the real Mastra: its onAbort/onError as recorded by the Node runner (meta files) --

GOLDEN = Path(__file__).parent / "conformance_data"


def scenario(name: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    spec = json.loads((GOLDEN / "scenarios" / f"{name}.json").read_text())
    meta = json.loads((GOLDEN / "golden" / f"{name}.meta.json").read_text())
    return spec, meta["callbacks"]


@pytest.mark.parametrize(
    "name", ["f-abort", "s33-abort-after-chunks", "g1-model-error-part", "g3-model-call-throws"]
)
async def test_callbacks_match_the_recorded_mastra_ones(name: str) -> None:
    spec, recorded = scenario(name)
    run = spec["run"]
    controller = AbortController()
    seen: list[dict[str, Any]] = []
    agent = Agent(spec["agent"]["id"], model=ScriptedModel.from_script(spec["model"]))
    out = await agent.stream(
        run["messages"],
        abort_signal=controller.signal,
        on_abort=lambda event: seen.append(
            {"onAbort": {"text": event["text"], "steps": len(event["steps"])}}
        ),
        on_error=lambda event: seen.append(
            {
                "onError": {
                    "error": {
                        "message": str(event["error"]),
                        "name": getattr(event["error"], "name", "Error"),
                    }
                }
            }
        ),
    )
    trigger = next((a["on"] for a in run.get("actions", []) if a["do"] == "abort"), None)
    count = 0
    deltas = 0
    async for chunk in out.full_stream:
        count += 1
        deltas += chunk.type == (trigger or {}).get("type")
        if (trigger and deltas == trigger.get("nth", 1)) or count == run.get("abortAfterChunks"):
            controller.abort()
    assert seen == recorded
