"""A workflow offered to an agent as a tool: its chunks inside the agent's stream."""

from __future__ import annotations

import json
from typing import Any

from runstream.agent import Agent
from runstream.chunks import to_jsonable
from runstream.output import RunOutput
from runstream.testing.scripted import ScriptedError, ScriptedModel
from runstream.workflows import Step, StepContext, Workflow
from tests.workflows.helpers import returning

USAGE = {"inputTokens": 3, "outputTokens": 2, "totalTokens": 5}


def calls_tool(args: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "type": "tool-call",
            "toolCallId": "call-1",
            "toolName": "workflow-refund",
            "input": json.dumps(args),
        },
        {"type": "finish", "finishReason": "tool-calls", "usage": USAGE},
    ]


def answers(text: str) -> list[dict[str, Any]]:
    return [
        {"type": "text-start", "id": "t"},
        {"type": "text-delta", "id": "t", "delta": text},
        {"type": "text-end", "id": "t"},
        {"type": "finish", "finishReason": "stop", "usage": USAGE},
    ]


async def wire(out: RunOutput) -> list[dict[str, Any]]:
    return [to_jsonable(chunk.to_wire()) async for chunk in out.full_stream]


def refund_workflow(pay: Step) -> Workflow:
    return (
        Workflow(
            "refund",
            description="Refund an order",
            input_schema={
                "type": "object",
                "properties": {"orderId": {"type": "string"}},
                "required": ["orderId"],
            },
        )
        .then(returning("lookup", {"orderId": "o-1"}))
        .then(pay)
        .commit()
    )


def agent_with(workflow: Workflow, **tool_options: Any) -> Agent:
    model = ScriptedModel(calls=[calls_tool({"inputData": {"orderId": "o-1"}}), answers("Done.")])
    return Agent("support", model=model, tools=[workflow.as_tool(**tool_options)])


async def test_the_workflow_streams_inside_tool_output_and_returns_its_result() -> None:
    workflow = refund_workflow(returning("pay", {"refunded": True}))
    tool = workflow.as_tool()
    assert (tool.name, tool.description) == ("workflow-refund", "Refund an order")
    assert tool.input_schema["required"] == ["inputData"]

    chunks = await wire(await agent_with(workflow).stream("refund o-1"))
    wrapped = [c["payload"]["output"] for c in chunks if c["type"] == "tool-output"]

    assert [w["type"] for w in wrapped] == [
        "workflow-start",
        "workflow-step-start",
        "workflow-step-result",
        "workflow-step-start",
        "workflow-step-result",
        "workflow-finish",
    ]
    result = next(c for c in chunks if c["type"] == "tool-result")["payload"]["result"]
    assert result == {"result": {"refunded": True}, "runId": wrapped[0]["runId"]}
    assert chunks[-1]["type"] == "finish"


async def test_a_failed_workflow_returns_its_error_to_the_model() -> None:
    def pay(ctx: StepContext) -> None:
        raise ScriptedError("bank down")

    chunks = await wire(await agent_with(refund_workflow(Step("pay", pay))).stream("refund o-1"))
    result = next(c for c in chunks if c["type"] == "tool-result")["payload"]["result"]
    assert result["error"] == "bank down"


async def test_a_suspended_step_suspends_the_tool_and_resuming_the_agent_resumes_the_run() -> None:
    async def pay(ctx: StepContext) -> dict[str, bool]:
        if ctx.resume_data is None:
            await ctx.suspend({"ask": "confirm?"})
        return {"refunded": ctx.resume_data["ok"]}

    resume_schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    agent = agent_with(refund_workflow(Step("pay", pay, resume_schema=resume_schema)))
    first = await agent.stream("refund o-1")
    chunks = await wire(first)

    suspended = chunks[-1]
    assert suspended["type"] == "tool-call-suspended"
    assert suspended["payload"]["suspendPayload"] == {"ask": "confirm?"}
    assert json.loads(suspended["payload"]["resumeSchema"])["properties"] == {"ok": {"type": "boolean"}}
    run_id = next(c for c in chunks if c["type"] == "tool-output")["payload"]["output"]["runId"]

    resumed = await wire(await agent.resume_stream({"ok": True}, run_id=first.run_id, tool_call_id="call-1"))
    wrapped = [c["payload"]["output"] for c in resumed if c["type"] == "tool-output"]
    assert {w["runId"] for w in wrapped} == {run_id}
    assert wrapped[1]["payload"]["resumePayload"] == {"ok": True}
    result = next(c for c in resumed if c["type"] == "tool-result")["payload"]["result"]
    assert result == {"result": {"refunded": True}, "runId": run_id}


async def test_step_output_chunks_summarise_each_finished_step_when_asked() -> None:
    workflow = refund_workflow(returning("pay", {"refunded": True}))
    chunks = await wire(await agent_with(workflow, step_output=True).stream("refund o-1"))
    summaries = [c["payload"]["output"] for c in chunks if c["type"] == "tool-output"]
    summaries = [s for s in summaries if s["type"] == "step-output"]

    assert [s["payload"]["output"]["id"] for s in summaries] == ["lookup", "pay"]
    assert summaries[1]["payload"]["output"]["output"] == {"refunded": True}
    assert summaries[1]["payload"]["usage"]["totalTokens"] == 0
