"""The agentic loop, driven through ``Agent`` and ``ScriptedModel``."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from runstream import (
    AbortController,
    AbortError,
    Agent,
    ProcessorContext,
    RunFailedError,
    RunNotFoundError,
    StepView,
    tool,
)
from runstream.chunks import AnyChunk, DataChunk
from runstream.models.base import ModelRequest, ModelStream, StreamPart
from runstream.output import RunOutput
from runstream.testing import ScriptedError, ScriptedModel
from runstream.tools import ToolContext, ToolNotFoundError

USAGE = {"inputTokens": 10, "outputTokens": 5, "totalTokens": 15}
START: StreamPart = {"type": "stream-start", "warnings": []}


def finish(reason: str = "stop", usage: dict[str, int] = USAGE) -> StreamPart:
    return {"type": "finish", "finishReason": reason, "usage": usage}


def reply(*deltas: str, usage: dict[str, int] = USAGE) -> list[StreamPart]:
    """A model call that answers with text."""
    return [
        START,
        {"type": "text-start", "id": "t"},
        *({"type": "text-delta", "id": "t", "delta": d} for d in deltas),
        {"type": "text-end", "id": "t"},
        finish("stop", usage),
    ]


def call(call_id: str, name: str, args: Any) -> StreamPart:
    return {"type": "tool-call", "toolCallId": call_id, "toolName": name, "input": json.dumps(args)}


def tool_step(*calls: StreamPart, usage: dict[str, int] = USAGE) -> list[StreamPart]:
    """A model call that only calls tools."""
    return [START, *calls, finish("tool-calls", usage)]


async def collect(out: RunOutput) -> list[AnyChunk]:
    async with asyncio.timeout(5):
        return [chunk async for chunk in out.full_stream]


def types(chunks: list[AnyChunk]) -> list[str]:
    return [c.type for c in chunks]


def of_type(chunks: list[AnyChunk], type_: str) -> list[AnyChunk]:
    return [c for c in chunks if c.type == type_]


def last_tool_message(model: ScriptedModel) -> list[dict[str, Any]]:
    message = model.recorded[-1].prompt[-1]
    assert message["role"] == "tool"
    content: list[dict[str, Any]] = message["content"]
    return content


@tool
def ping() -> str:
    return "pong"


# ---------------------------------------------------------------------------------------------
# Text, tools, steps
# ---------------------------------------------------------------------------------------------


async def test_plain_text() -> None:
    model = ScriptedModel.text("Hello there", chunk_size=1)
    agent = Agent("greeter", model=model, instructions="Be brief.")
    out = await agent.stream("hi", run_id="run-1")
    chunks = await collect(out)
    assert types(chunks) == [
        "start",
        "step-start",
        "text-start",
        "text-delta",
        "text-delta",
        "text-end",
        "step-finish",
        "finish",
    ]
    assert {c.run_id for c in chunks} == {"run-1"}
    assert chunks[0].payload == {"id": "greeter", "messageId": out.message_id}
    assert [c.payload["text"] for c in of_type(chunks, "text-delta")] == ["Hello ", "there"]
    assert chunks[-1].payload["stepResult"] == {"reason": "stop", "isContinued": False}
    assert await out.text == "Hello there"
    assert await out.finish_reason == "stop"
    assert out.status == "success"
    assert model.recorded[0].prompt == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
    ]


async def test_parallel_tool_calls_stream_output_live_and_report_results_in_call_order() -> None:
    finished: list[str] = []
    fast_done = asyncio.Event()
    seen_while_slow_running: list[str] = []

    @tool
    async def slow(ctx: ToolContext) -> str:
        await ctx.writer.write("slow started")
        await fast_done.wait()
        finished.append("slow")
        return "slow result"

    @tool
    async def fast(ctx: ToolContext) -> str:
        await ctx.writer.write("fast started")
        await ctx.writer.custom({"type": "data-progress", "data": {"pct": 100}})
        finished.append("fast")
        fast_done.set()
        return "fast result"

    model = ScriptedModel(
        calls=[tool_step(call("c1", "slow", {}), call("c2", "fast", {})), reply("both done")]
    )
    out = await Agent("a", model=model, tools=[slow, fast]).stream("go")
    chunks: list[AnyChunk] = []
    async for chunk in out.full_stream:
        chunks.append(chunk)
        if chunk.type in ("tool-output", "data-progress") and "slow" not in finished:
            seen_while_slow_running.append(chunk.type)

    assert finished == ["fast", "slow"]
    assert seen_while_slow_running == ["tool-output", "tool-output", "data-progress"]
    tool_types = [t for t in types(chunks) if t.startswith(("tool-", "data-"))]
    assert tool_types == [
        "tool-call",
        "tool-call",
        "tool-output",
        "tool-output",
        "data-progress",
        "tool-result",
        "tool-result",
    ]
    outputs = of_type(chunks, "tool-output")
    assert [(c.payload["toolCallId"], c.payload["output"], c.from_) for c in outputs] == [
        ("c1", "slow started", "USER"),
        ("c2", "fast started", "USER"),
    ]
    data = of_type(chunks, "data-progress")[0]
    assert isinstance(data, DataChunk)
    assert data.run_id == out.run_id
    assert data.data == {"pct": 100}
    assert [c.payload["result"] for c in of_type(chunks, "tool-result")] == ["slow result", "fast result"]
    assert [(p["toolCallId"], p["output"]) for p in last_tool_message(model)] == [
        ("c1", {"type": "text", "value": "slow result"}),
        ("c2", {"type": "text", "value": "fast result"}),
    ]
    assert [c.payload["toolCallId"] for c in await out.tool_results] == ["c1", "c2"]
    assert await out.text == "both done"


async def test_tool_error_is_reported_and_the_model_answers() -> None:
    @tool
    def lookup(key: str) -> str:
        raise RuntimeError(f"database down while reading {key}")

    model = ScriptedModel(
        calls=[tool_step(call("c1", "lookup", {"key": "k"})), reply("Sorry, the lookup failed.")]
    )
    out = await Agent("a", model=model, tools=[lookup]).stream("look it up")
    chunks = await collect(out)
    (error,) = of_type(chunks, "tool-error")
    # Mastra wraps whatever a tool throws: the wire names it "Error" (x-v24-tool-error-class);
    # the tool's own exception is the cause.
    assert json.loads(error.to_json())["payload"] == {
        "error": {"message": "database down while reading k", "name": "Error"},
        "args": {"key": "k"},
        "toolCallId": "c1",
        "toolName": "lookup",
    }
    assert isinstance(error.payload["error"].__cause__, RuntimeError)
    assert of_type(chunks, "tool-result") == []
    assert last_tool_message(model)[0]["output"] == {
        "type": "error-text",
        "value": "database down while reading k",
    }
    assert await out.text == "Sorry, the lookup failed."
    assert out.status == "success"


async def test_unknown_tool_gives_tool_not_found_error() -> None:
    model = ScriptedModel(calls=[tool_step(call("c1", "pnig", {})), reply("I used the wrong name.")])
    out = await Agent("a", model=model, tools=[ping]).stream("ping")
    chunks = await collect(out)
    (error,) = of_type(chunks, "tool-error")
    assert isinstance(error.payload["error"], ToolNotFoundError)
    assert json.loads(error.to_json())["payload"]["error"]["name"] == "ToolNotFoundError"
    assert 'Tool "pnig" not found. Available tools: ping.' in str(error.payload["error"])
    assert model.call_count == 2
    assert await out.text == "I used the wrong name."


async def test_invalid_arguments_are_reported_to_the_model_which_recovers() -> None:
    calls: list[int] = []

    @tool
    def square(n: int) -> int:
        calls.append(n)
        return n * n

    model = ScriptedModel(
        calls=[
            tool_step(
                call("c1", "square", {"n": "four"}),
                {"type": "tool-call", "toolCallId": "c2", "toolName": "square", "input": "{not json"},
            ),
            tool_step(call("c3", "square", {"n": 4})),
            reply("16"),
        ]
    )
    out = await Agent("a", model=model, tools=[square]).stream("square four")
    chunks = await collect(out)
    # Arguments that fail the schema come back as the tool's result, as in Mastra ...
    invalid = of_type(chunks, "tool-result")[0].payload["result"]
    assert invalid["error"] is True and "- n: Input should be a valid integer" in invalid["message"]
    assert invalid["validationErrors"]["fields"]["n"]["errors"] == [
        "Input should be a valid integer, unable to parse string as an integer"
    ]
    # ... while arguments that are not even JSON are a tool error (with no arguments to show).
    (bad_json,) = of_type(chunks, "tool-error")
    assert "args" not in bad_json.payload
    assert str(bad_json.payload["error"]) == (
        'Tool "square" received invalid arguments \u2014 the provided JSON could not be parsed. '
        "Please provide valid JSON arguments."
    )
    assert (
        "args" not in next(c for c in of_type(chunks, "tool-call") if c.payload["toolCallId"] == "c2").payload
    )
    assert [p["output"]["type"] for p in model.recorded[1].prompt[-1]["content"]] == ["json", "error-text"]
    assert [c.payload["result"] for c in of_type(chunks, "tool-result")][1:] == [16]
    assert calls == [4]
    assert await out.text == "16"


async def test_max_steps_stops_the_loop() -> None:
    model = ScriptedModel(calls=[tool_step(call("c1", "ping", {}))])
    out = await Agent("a", model=model, tools=[ping], max_steps=5).stream("ping forever", max_steps=2)
    chunks = await collect(out)
    assert model.call_count == 2
    assert [c.payload["stepResult"]["isContinued"] for c in of_type(chunks, "step-finish")] == [True, False]
    assert chunks[-1].type == "finish"
    assert chunks[-1].payload["stepResult"]["reason"] == "tool-calls"
    assert len(await out.steps) == 2


async def test_tool_choice_none_offers_no_tools() -> None:
    model = ScriptedModel.text("no tools", "with tools")
    agent = Agent("a", model=model, tools=[ping])
    await (await agent.stream("hi", tool_choice="none")).consume()
    await (await agent.stream("hi")).consume()
    assert [(r.tools, r.tool_choice) for r in model.recorded] == [
        ([], {"type": "none"}),
        (["ping"], {"type": "auto"}),
    ]


# ---------------------------------------------------------------------------------------------
# Model failures
# ---------------------------------------------------------------------------------------------


def assert_failed_run(chunks: list[AnyChunk], out: RunOutput, message: str) -> None:
    assert types(chunks)[-3:] == ["error", "step-finish", "finish"]
    error = chunks[-3].payload["error"]
    assert str(error) == message
    assert chunks[-2].payload["stepResult"]["reason"] == "error"
    assert chunks[-1].payload["stepResult"]["reason"] == "error"
    assert out.error is error
    assert out.status == "failed"


async def test_model_error_part() -> None:
    model = ScriptedModel(
        calls=[
            [
                START,
                {"type": "text-start", "id": "t"},
                {"type": "text-delta", "id": "t", "delta": "partial"},
                {
                    "type": "error",
                    "error": {"message": "overloaded", "name": "APICallError", "statusCode": 529},
                },
            ]
        ]
    )
    out = await Agent("a", model=model).stream("hi")
    chunks = await collect(out)
    assert_failed_run(chunks, out, "overloaded")
    assert json.loads(chunks[-3].to_json())["payload"]["error"] == {
        "message": "overloaded",
        "name": "APICallError",
    }
    assert out.state.finish_reason == "error"
    with pytest.raises(RunFailedError, match="overloaded"):  # awaited, the run's error is raised
        await out.finish_reason


async def test_model_call_raising() -> None:
    model = ScriptedModel(calls=[{"throwOnCall": {"message": "401 unauthorized", "name": "APICallError"}}])
    out = await Agent("a", model=model).stream("hi")
    chunks = await collect(out)
    assert types(chunks) == ["start", "step-start", "error", "step-finish", "finish"]
    assert_failed_run(chunks, out, "401 unauthorized")
    assert isinstance(out.error, ScriptedError)


async def test_stream_raising_midway_ends_with_error() -> None:
    model = ScriptedModel(
        calls=[{"parts": reply("one ", "two"), "streamError": {"afterParts": 3, "error": "socket closed"}}]
    )
    out = await Agent("a", model=model).stream("hi")
    chunks = await collect(out)
    assert [c.payload["text"] for c in of_type(chunks, "text-delta")] == ["one "]
    assert_failed_run(chunks, out, "socket closed")


# ---------------------------------------------------------------------------------------------
# Abort
# ---------------------------------------------------------------------------------------------


def slow_reply() -> dict[str, Any]:
    """A reply whose second delta would come an hour later (the scripted wait is abortable)."""
    parts = reply("first ", "second")
    parts[3] = {**parts[3], "delayMs": 3_600_000}
    return {"parts": parts}


async def test_abort_via_run_output() -> None:
    model = ScriptedModel(calls=[slow_reply()])
    out = await Agent("a", model=model).stream("hi")
    chunks: list[AnyChunk] = []
    async with asyncio.timeout(5):
        async for chunk in out.full_stream:
            chunks.append(chunk)
            if chunk.type == "text-delta":
                out.abort("user pressed stop")
    assert types(chunks)[-3:] == ["text-delta", "abort", "finish"]
    assert chunks[-2].payload == {}
    assert out.status == "aborted"
    assert await out.finish_reason == "aborted"
    assert await out.text == ""
    # The finish describes the step the abort cut short: its text so far and its response.
    finish_payload = chunks[-1].payload
    assert finish_payload["output"]["text"] == "first "
    assert finish_payload["output"]["steps"] == []
    assert finish_payload["metadata"]["modelId"] == model.model_id


async def test_a_step_without_response_metadata_gets_an_id_and_time() -> None:
    out = await Agent("a", model=ScriptedModel(calls=[reply("hi")])).stream("hi")
    step_finish = of_type(await collect(out), "step-finish")[0].payload
    response = step_finish["output"]["steps"][0]["response"]
    assert response["id"] == step_finish["metadata"]["id"] and response["id"]
    assert {"timestamp", "modelId", "modelVersion", "modelProvider"} <= set(response)


async def test_abort_via_signal_passed_in() -> None:
    controller = AbortController()
    model = ScriptedModel(calls=[slow_reply()])
    out = await Agent("a", model=model).stream("hi", abort_signal=controller.signal)
    chunks: list[AnyChunk] = []
    async with asyncio.timeout(5):
        async for chunk in out.full_stream:
            chunks.append(chunk)
            if chunk.type == "text-delta":
                controller.abort()
    assert types(chunks)[-2:] == ["abort", "finish"]
    assert out.status == "aborted"


async def test_signal_aborted_before_the_run_never_calls_the_model() -> None:
    controller = AbortController()
    controller.abort()
    model = ScriptedModel.text("never")
    out = await Agent("a", model=model).stream("hi", abort_signal=controller.signal)
    assert types(await collect(out)) == ["start", "abort", "finish"]
    assert model.call_count == 0


async def abort_during_tool(reason: object) -> tuple[list[AnyChunk], RunOutput, list[object], ScriptedModel]:
    """Run a tool that sleeps until its abort signal fires, and abort the run while it sleeps."""
    seen: list[object] = []
    started = asyncio.Event()

    @tool
    async def sleeper(ctx: ToolContext) -> str:
        started.set()
        seen.append(await ctx.abort_signal.wait())
        raise AbortError("Tool execution aborted")

    model = ScriptedModel(calls=[tool_step(call("c1", "sleeper", {})), reply("should not run")])
    out = await Agent("a", model=model, tools=[sleeper]).stream("work")
    consumer = asyncio.create_task(collect(out))
    await started.wait()
    out.abort(reason)
    return await consumer, out, seen, model


async def test_sleeping_tool_sees_the_abort_signal() -> None:
    chunks, _, seen, model = await abort_during_tool("stop the tool")
    assert seen == ["stop the tool"]
    assert model.call_count == 1
    assert chunks[-1].type == "finish"


async def test_abort_during_tool_execution_ends_with_abort_then_finish() -> None:
    chunks, out, _, _ = await abort_during_tool(None)
    assert types(chunks)[-2:] == ["abort", "finish"]
    assert out.status == "aborted"
    assert await out.finish_reason == "aborted"


# ---------------------------------------------------------------------------------------------
# Human in the loop
# ---------------------------------------------------------------------------------------------


def approval_agent(executed: list[int]) -> tuple[Agent, ScriptedModel]:
    @tool(require_approval=True)
    def delete_files(count: int) -> str:
        executed.append(count)
        return f"deleted {count}"

    model = ScriptedModel(calls=[tool_step(call("c1", "delete_files", {"count": 3})), reply("Done.")])
    return Agent("a", model=model, tools=[delete_files]), model


async def test_approval_stops_the_run_and_approve_continues_it() -> None:
    executed: list[int] = []
    agent, model = approval_agent(executed)
    out = await agent.stream("clean up")
    chunks = await collect(out)
    assert types(chunks) == ["start", "step-start", "tool-call", "tool-call-approval"]
    approval = chunks[-1].payload
    assert (approval["toolCallId"], approval["toolName"], approval["args"]) == (
        "c1",
        "delete_files",
        {"count": 3},
    )
    assert json.loads(approval["resumeSchema"])["required"] == ["approved"]
    assert out.status == "suspended"
    assert executed == []

    resumed = await agent.approve_tool_call(run_id=out.run_id, tool_call_id="c1")
    assert resumed is not out
    chunks = await collect(resumed)
    assert types(chunks) == [  # the run goes on where it stopped: no second start (as in Mastra)
        "tool-result",
        "step-finish",
        "step-start",
        "text-start",
        "text-delta",
        "text-end",
        "step-finish",
        "finish",
    ]
    assert {c.run_id for c in chunks} == {out.run_id}
    assert chunks[0].payload["result"] == "deleted 3"
    assert executed == [3]
    assert last_tool_message(model)[0]["output"] == {"type": "text", "value": "deleted 3"}
    assert await resumed.text == "Done."
    with pytest.raises(RunNotFoundError):
        await agent.approve_tool_call(run_id=out.run_id, tool_call_id="c1")


async def test_decline_reports_denial_and_tells_the_model() -> None:
    executed: list[int] = []
    agent, model = approval_agent(executed)
    out = await agent.stream("clean up")
    first = await collect(out)
    resumed = await agent.decline_tool_call(run_id=out.run_id, tool_call_id="c1", reason="too risky")
    chunks = await collect(resumed)
    (denied,) = of_type(chunks, "tool-output-denied")
    assert denied.payload == {
        "toolCallId": "c1",
        "toolName": "delete_files",
        "args": {"count": 3},
        "approval": {"id": "c1", "approved": False, "reason": "too risky"},
    }
    assert of_type(chunks, "tool-result") == []
    assert executed == []
    # The model reads the reason as the call's result (a decline is not a tool failure).
    assert last_tool_message(model)[0]["output"] == {"type": "text", "value": "too risky"}
    assert chunks[-1].type == "finish"
    # The resumed run streams as a new response message (as in Mastra).
    assert chunks[-1].payload["messageId"] not in (None, first[0].payload["messageId"])


async def test_suspended_tool_resumes_with_resume_data() -> None:
    seen: list[Any] = []

    @tool(resume_schema={"type": "object", "properties": {"ok": {"type": "boolean"}}})
    async def deploy(env: str, ctx: ToolContext) -> str:
        seen.append(ctx.resume_data)
        if ctx.resume_data is None:
            await ctx.suspend({"confirm": env})
        return f"deployed to {env}: {ctx.resume_data}"

    model = ScriptedModel(calls=[tool_step(call("c1", "deploy", {"env": "prod"})), reply("Deployed.")])
    agent = Agent("a", model=model, tools=[deploy])
    out = await agent.stream("deploy")
    chunks = await collect(out)
    assert types(chunks)[-1] == "tool-call-suspended"
    suspended = chunks[-1].payload
    assert suspended["suspendPayload"] == {"confirm": "prod"}
    assert json.loads(suspended["resumeSchema"]) == {  # a draft-07 JSON Schema, as Mastra sends it
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {"ok": {"type": "boolean"}},
    }
    assert await out.suspend_payload == {"confirm": "prod"}
    assert out.status == "suspended"

    resumed = await agent.resume_stream({"ok": True}, run_id=out.run_id)
    chunks = await collect(resumed)
    assert of_type(chunks, "tool-result")[0].payload["result"] == "deployed to prod: {'ok': True}"
    assert seen == [None, {"ok": True}]
    assert types(chunks)[-1] == "finish"
    assert await resumed.text == "Deployed."


async def test_continuing_an_unknown_run_raises_run_not_found() -> None:
    agent = Agent("a", model=ScriptedModel.text("hi"))
    with pytest.raises(RunNotFoundError):
        await agent.resume_stream({}, run_id="nope")
    with pytest.raises(RunNotFoundError):
        await agent.approve_tool_call(run_id="nope")
    finished = await agent.stream("hi")
    await finished.consume()
    with pytest.raises(RunNotFoundError):
        await agent.decline_tool_call(run_id=finished.run_id)


async def test_approving_a_call_that_is_not_waiting_raises_value_error() -> None:
    executed: list[int] = []
    agent, _ = approval_agent(executed)
    out = await agent.stream("clean up")
    await out.consume()
    with pytest.raises(ValueError, match=r"'other' .* is not waiting for approval"):
        await agent.approve_tool_call(run_id=out.run_id, tool_call_id="other")
    with pytest.raises(ValueError, match="is not suspended"):
        await agent.resume_stream({}, run_id=out.run_id, tool_call_id="c1")
    resumed = await agent.approve_tool_call(run_id=out.run_id, tool_call_id="c1")
    await resumed.consume()
    assert executed == [3]


# ---------------------------------------------------------------------------------------------
# Output processors
# ---------------------------------------------------------------------------------------------


class Redactor:
    """Drops deltas containing 'drop', rewrites 'secret', trips on 'forbidden'."""

    id = "redactor"

    async def process_output_stream(self, chunk: AnyChunk, ctx: ProcessorContext) -> AnyChunk | None:
        if chunk.type != "text-delta":
            return chunk
        text = chunk.payload["text"]
        if "forbidden" in text:
            ctx.abort("forbidden word", metadata={"word": "forbidden"})
        if "drop" in text:
            return None
        if "secret" in text:
            chunk.payload["text"] = "[redacted] "
        return chunk


class StepJudge:
    """Asks for a retry when the step's text says 'wrong'."""

    id = "judge"

    def __init__(self) -> None:
        self.retry_counts: list[int] = []

    async def process_output_step(self, step: StepView, ctx: ProcessorContext) -> None:
        self.retry_counts.append(ctx.retry_count)
        if "wrong" in step.text:
            ctx.abort("answer was wrong", retry=True, metadata={"attempt": ctx.retry_count})


async def test_stream_processor_drops_and_rewrites_chunks() -> None:
    model = ScriptedModel(calls=[reply("keep ", "drop this ", "secret ", "end")])
    out = await Agent("a", model=model, output_processors=[Redactor()]).stream("hi")
    chunks = await collect(out)
    assert [c.payload["text"] for c in of_type(chunks, "text-delta")] == ["keep ", "[redacted] ", "end"]
    assert types(chunks)[-2:] == ["step-finish", "finish"]


async def test_text_aggregate_reflects_processed_stream() -> None:
    model = ScriptedModel(calls=[reply("keep ", "drop this ", "secret ", "end")])
    out = await Agent("a", model=model, output_processors=[Redactor()]).stream("hi")
    assert await out.text == "keep [redacted] end"


async def test_stream_processor_tripwire_ends_the_run() -> None:
    model = ScriptedModel(calls=[reply("fine ", "forbidden ", "never streamed")])
    out = await Agent("a", model=model, output_processors=[Redactor()]).stream("hi")
    chunks = await collect(out)
    assert types(chunks)[-5:] == ["text-start", "text-delta", "tripwire", "step-finish", "finish"]
    tripwire = {"reason": "forbidden word", "metadata": {"word": "forbidden"}, "processorId": "redactor"}
    assert chunks[-3].payload == tripwire
    assert chunks[-1].payload["stepResult"]["reason"] == "tripwire"
    assert out.tripwire == tripwire
    assert out.status == "tripwire"


async def test_step_tripwire_with_retry_sends_feedback() -> None:
    judge = StepJudge()
    model = ScriptedModel(calls=[reply("wrong answer"), reply("right answer")])
    agent = Agent(
        "a", model=model, instructions="Answer.", output_processors=[judge], max_processor_retries=2
    )
    out = await agent.stream("question")
    chunks = await collect(out)
    first_step = of_type(chunks, "step-finish")[0].payload
    assert first_step["stepResult"] == {
        "reason": "retry",
        "isContinued": True,
        "retryReason": "answer was wrong",
        "retryMetadata": {"attempt": 0},
        "retryProcessorId": "judge",
    }
    assert model.call_count == 2
    feedback = model.recorded[1].prompt[1]
    assert feedback["role"] == "system"
    assert "answer was wrong" in feedback["content"]
    assert model.recorded[1].prompt[0] == {"role": "system", "content": "Answer."}
    assert judge.retry_counts == [0, 1]
    assert await out.text == "right answer"
    assert out.tripwire is None
    # The rejected step's record shows its message and why; the accepted step ends the retries.
    rejected = chunks[-1].payload["output"]["steps"][0]
    assert rejected["response"]["messages"] == [
        {"role": "assistant", "content": [{"type": "text", "text": "wrong answer"}]}
    ]
    assert rejected["tripwire"]["reason"] == "answer was wrong"
    assert first_step["processorRetryCount"] == 1
    assert chunks[-1].payload["processorRetryCount"] == 0


async def test_step_retries_exhausted_end_with_tripwire() -> None:
    model = ScriptedModel(calls=[reply("wrong answer")])
    out = await Agent("a", model=model, output_processors=[StepJudge()], max_processor_retries=1).stream("q")
    chunks = await collect(out)
    assert model.call_count == 2
    assert types(chunks)[-3:] == ["tripwire", "step-finish", "finish"]
    assert chunks[-3].payload["reason"] == "answer was wrong"
    assert chunks[-1].payload["stepResult"]["reason"] == "tripwire"
    assert out.status == "tripwire"
    assert out.tripwire is not None and out.tripwire["retry"] is True


# ---------------------------------------------------------------------------------------------
# Raw chunks, usage, sub-agents
# ---------------------------------------------------------------------------------------------


async def test_include_raw_chunks() -> None:
    parts = [START, {"type": "raw", "rawValue": {"vendor": "event"}}, *reply("hi")[1:]]
    model = ScriptedModel(calls=[parts])
    agent = Agent("a", model=model)
    without = await collect(await agent.stream("hi"))
    with_raw = await collect(await agent.stream("hi", include_raw_chunks=True))
    assert "raw" not in types(without)
    assert [c.payload for c in of_type(with_raw, "raw")] == [{"vendor": "event"}]
    assert [r.include_raw_chunks for r in model.recorded] == [False, True]


async def test_usage_is_summed_over_steps() -> None:
    model = ScriptedModel(
        calls=[
            tool_step(
                call("c1", "ping", {}), usage={"inputTokens": 10, "outputTokens": 2, "totalTokens": 12}
            ),
            reply("pong!", usage={"inputTokens": 20, "outputTokens": 3, "totalTokens": 23}),
        ]
    )
    out = await Agent("a", model=model, tools=[ping]).stream("ping")
    chunks = await collect(out)
    total = {"inputTokens": 30, "outputTokens": 5, "totalTokens": 35}
    assert await out.usage == total
    assert [c.payload["output"]["usage"]["totalTokens"] for c in of_type(chunks, "step-finish")] == [12, 23]
    finish_usage = chunks[-1].payload["output"]["usage"]
    assert {k: finish_usage[k] for k in total} == total


async def test_agent_as_tool_wraps_sub_agent_chunks_in_tool_output() -> None:
    sub_model = ScriptedModel.text("Paris is in France.")
    researcher = Agent("researcher", model=sub_model, description="Researches topics")
    model = ScriptedModel(
        calls=[tool_step(call("c1", "agent-researcher", {"prompt": "Where is Paris?"})), reply("France.")]
    )
    out = await Agent("main", model=model, agents=[researcher]).stream("where?")
    chunks = await collect(out)
    assert model.recorded[0].tools == ["agent-researcher"]
    outputs = of_type(chunks, "tool-output")
    inner = [c.payload["output"] for c in outputs]
    assert types(inner) == [
        "start",
        "step-start",
        "text-start",
        "text-delta",
        "text-end",
        "step-finish",
        "finish",
    ]
    assert {c.payload["toolCallId"] for c in outputs} == {"c1"}
    assert len({c.run_id for c in inner}) == 1 and inner[0].run_id != out.run_id
    wire = json.loads(outputs[3].to_json())
    assert wire["payload"]["output"]["payload"]["text"] == "Paris is in France."
    (result,) = of_type(chunks, "tool-result")
    assert result.payload["result"]["text"] == "Paris is in France."
    asked = {"role": "user", "content": [{"type": "text", "text": "where?"}]}
    prompt = {"role": "user", "content": [{"type": "text", "text": "Where is Paris?"}]}
    # The sub-agent sees what the user asked the calling agent (as context), then its prompt.
    assert sub_model.recorded[0].prompt[-2:] == [asked, prompt]
    sub_finish = inner[-1].payload
    assert sub_finish["messages"]["all"][:2] == [asked, prompt]
    assert sub_finish["messages"]["user"] == [prompt]
    assert await out.text == "France."


async def test_a_sub_agent_that_fails_is_a_tool_error_naming_both_agents() -> None:
    researcher = Agent(
        "researcher", model=ScriptedModel(calls=[{"throwOnCall": {"message": "sub model down"}}])
    )
    model = ScriptedModel(
        calls=[tool_step(call("c1", "agent-researcher", {"prompt": "Where is Paris?"})), reply("Sorry.")]
    )
    chunks = await collect(
        await Agent("main", name="Supervisor", model=model, agents=[researcher]).stream("?")
    )
    inner = [c.payload["output"].type for c in of_type(chunks, "tool-output")]
    assert "error" in inner and inner[-1] == "finish"  # the sub-agent's own stream still arrives
    (error,) = of_type(chunks, "tool-error")
    assert str(error.payload["error"]) == "[Agent:Supervisor] - Failed agent tool execution for researcher"
    assert "tool-result" not in types(chunks) and types(chunks)[-1] == "finish"


async def test_a_background_override_reaches_the_conversation_but_not_the_tool() -> None:
    from runstream.runtime import Runstream
    from runstream.storage import InMemoryStorage

    seen: list[dict[str, Any]] = []

    @tool(background=True)
    async def research(topic: str) -> str:
        """Research a topic."""
        seen.append({"topic": topic})
        return f"{topic} is fast"

    args = {"topic": "sol", "_background": {"enabled": False}}
    model = ScriptedModel(calls=[tool_step(call("c1", "research", args)), reply("Done.")])
    agent = Agent("a", model=model, tools=[research])
    async with Runstream(agents=[agent], storage=InMemoryStorage(), background_tasks={"enabled": True}):
        chunks = await collect(await agent.stream("Research sol"))
    assert seen == [{"topic": "sol"}]
    assert of_type(chunks, "tool-result")[0].payload["args"] == {"topic": "sol"}
    # The model's own call, as it made it, stays in the conversation (as in Mastra).
    conversation = of_type(chunks, "finish")[0].payload["messages"]["nonUser"]
    assert [p["input"] for m in conversation[:2] for p in m["content"]] == [args, args]


async def test_a_generated_file_is_part_of_the_step_and_its_message() -> None:
    file_part = {"type": "file", "mediaType": "image/png", "data": "iVBORw0KGgo="}
    parts = reply("See the image.")
    parts.insert(-1, file_part)
    out = await Agent("a", model=ScriptedModel(calls=[parts])).stream("draw")
    step_finish = of_type(await collect(out), "step-finish")[0].payload
    assert step_finish["output"]["steps"][0]["content"][1] == {
        "type": "file",
        "file": {"base64Data": "iVBORw0KGgo=", "mediaType": "image/png", "type": "file"},
    }
    message = step_finish["messages"]["nonUser"][0]["content"]
    assert message[1] == {
        "type": "file",
        "data": "data:image/png;base64,iVBORw0KGgo=",
        "mediaType": "image/png",
    }


async def test_a_run_that_waits_for_approval_saves_its_input_and_resumes_as_a_new_message() -> None:
    from runstream.memory import Memory
    from runstream.storage import InMemoryStorage

    executed: list[int] = []
    agent, _ = approval_agent(executed)
    agent.memory = Memory(storage=InMemoryStorage())
    scope = {"thread": "t", "resource": "u"}
    out = await agent.stream("clean up", memory=scope)
    first = await collect(out)
    # The user's message is in memory while the run waits (not lost if nobody answers).
    stored = (await agent.memory.storage.list_messages("t")).items  # type: ignore[union-attr]
    assert [m.role for m in stored] == ["user"]
    finish = (await collect(await agent.approve_tool_call(run_id=out.run_id, tool_call_id="c1")))[-1].payload
    assert finish["messages"]["user"] == []  # the input is history now
    assert [m["role"] for m in finish["messages"]["all"]] == ["user", "assistant", "tool", "assistant"]
    # The call (with its result) stays in the first message, the answer is a new one.
    before, after = finish["response"]["uiMessages"]
    assert before["id"] == first[0].payload["messageId"] and after["id"] == finish["messageId"]
    assert before["metadata"]["mastra"] == {"responseBoundary": True} and "mastra" not in after["metadata"]
    assert [p["type"] for p in before["parts"]] == ["tool-delete_files"]
    assert before["parts"][0]["state"] == "output-available"
    stored = (await agent.memory.storage.list_messages("t")).items  # type: ignore[union-attr]
    assert [m.role for m in stored] == ["user", "assistant"]


async def test_a_durable_run_reports_its_steps_as_mastras_durable_loop() -> None:
    model = ScriptedModel(calls=[tool_step(call("c1", "lookup", {"q": "x"})), reply("Found.")])

    @tool
    def lookup(q: str) -> str:
        """Look something up."""
        return f"{q}!"

    out = await Agent("a", model=model, tools=[lookup], durable=True).stream("find x")
    chunks = await collect(out)
    starts = of_type(chunks, "step-start")
    assert {s.payload["stepId"] for s in starts} == {"durable-llm-execution"}
    assert starts[0].payload["messageId"] != starts[1].payload["messageId"]  # one message per step
    first, second = (c.payload for c in of_type(chunks, "step-finish"))
    assert first["type"] == "finish" and first["messages"] == {"all": [], "user": [], "nonUser": []}
    assert first["_durableStepContent"] == [
        {"type": "tool-call", "toolCallId": "c1", "toolName": "lookup", "args": {"q": "x"}},
        {"type": "tool-result", "toolCallId": "c1", "toolName": "lookup", "result": "x!"},
    ]
    assert second["_durableStepContent"] == [{"type": "text", "text": "Found."}]
    finish = chunks[-1].payload
    assert [s["finishReason"] for s in finish["output"]["steps"]] == ["tool-calls", "stop"]
    assert finish["output"]["steps"][0]["toolResults"][0]["result"] == "x!"
    assert finish["stepResult"]["totalUsage"] == finish["output"]["steps"][1]["usage"]


async def test_two_text_blocks_stay_two_text_parts() -> None:
    parts: list[StreamPart] = [
        START,
        {"type": "text-start", "id": "a"},
        {"type": "text-delta", "id": "a", "delta": "Hello, "},
        {"type": "text-delta", "id": "a", "delta": "world!"},
        {"type": "text-end", "id": "a"},
        {"type": "text-start", "id": "b"},
        {"type": "text-delta", "id": "b", "delta": "Second."},
        {"type": "text-end", "id": "b"},
        finish(),
    ]
    out = await Agent("a", model=ScriptedModel(calls=[parts])).stream("hi")
    step = of_type(await collect(out), "step-finish")[0].payload["output"]["steps"][0]
    assert step["content"] == [{"type": "text", "text": "Hello, world!"}, {"type": "text", "text": "Second."}]
    assert await out.text == "Hello, world!Second."


async def test_an_awaited_background_failure_links_its_tool_error_to_the_task() -> None:
    from runstream.runtime import Runstream
    from runstream.storage import InMemoryStorage

    @tool(background=True)
    async def research(topic: str) -> str:
        """Research a topic."""
        raise RuntimeError("boom")

    args = {"topic": "sol", "_background": {"disposition": "awaited"}}
    model = ScriptedModel(calls=[tool_step(call("c1", "research", args)), reply("It failed.")])
    agent = Agent("a", model=model, tools=[research])
    async with Runstream(agents=[agent], storage=InMemoryStorage(), background_tasks={"enabled": True}):
        chunks = await collect(await agent.stream("Research sol"))
    error = of_type(chunks, "tool-error")[0].payload
    task_id = of_type(chunks, "background-task-started")[0].payload["taskId"]
    assert error["providerMetadata"]["mastra"]["backgroundTask"] == {"taskId": task_id, "status": "failed"}


class _IteratorParts:
    """A provider stream that is an async iterator object rather than a generator."""

    def __init__(self, parts: list[StreamPart]) -> None:
        self._parts = iter(parts)
        self.closed = False

    def __aiter__(self) -> _IteratorParts:
        return self

    async def __anext__(self) -> StreamPart:
        try:
            return next(self._parts)
        except StopIteration:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        self.closed = True


@dataclass
class _IteratorModel:
    calls: list[list[StreamPart]]
    streams: list[_IteratorParts] = field(default_factory=list)
    provider: str = "test"
    model_id: str = "iterator-model"
    specification_version: str = "v2"

    async def stream(self, request: ModelRequest) -> ModelStream:
        self.streams.append(_IteratorParts(self.calls[len(self.streams)]))
        return ModelStream(parts=self.streams[-1])


async def test_a_provider_stream_that_is_not_a_generator_is_closed_once_its_parts_ran_out() -> None:
    # A step whose parts are an async generator ends without closing it (it ended: a no-op);
    # any other stream is closed, as it may hold a connection until then.
    model = _IteratorModel([tool_step(call("c1", "ping", {})), reply("pong")])
    out = await Agent("a", model=model, tools=[ping]).stream("ping?")
    chunks = await collect(out)
    assert [s.closed for s in model.streams] == [True, True]
    assert types(chunks).count("step-finish") == 2 and types(chunks)[-1] == "finish"
    assert of_type(chunks, "tool-result")[0].payload["result"] == "pong"
    assert await out.text == "pong"
