"""``Agent.stream(client_tools=...)``: tools the caller executes end the run with ``tool-calls``."""

from __future__ import annotations

import json
from typing import Any

from runstream import Agent, Tool, tool
from runstream.agent import client_tool
from runstream.models.base import ModelRequest, ModelStream
from runstream.testing import ScriptedModel

USAGE = {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2}
CONFIRM = client_tool(
    "confirm",
    description="Ask the user to confirm",
    input_schema={"type": "object", "properties": {"question": {"type": "string"}}},
)


@tool
async def clock() -> dict[str, str]:
    """The time."""
    return {"time": "noon"}


@tool(require_approval=True)
async def wipe() -> dict[str, bool]:
    """Wipe the disk (needs approval)."""
    return {"wiped": True}


def calls(*names: str) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = [{"type": "stream-start", "warnings": []}]
    for i, name in enumerate(names):
        args = json.dumps({"question": "Sure?"} if name == "confirm" else {})
        parts.append({"type": "tool-call", "toolCallId": f"c{i}", "toolName": name, "input": args})
    return [*parts, {"type": "finish", "finishReason": "tool-calls", "usage": USAGE}]


def reply(text: str) -> list[dict[str, Any]]:
    return [
        {"type": "stream-start", "warnings": []},
        {"type": "text-start", "id": "t"},
        {"type": "text-delta", "id": "t", "delta": text},
        {"type": "text-end", "id": "t"},
        {"type": "finish", "finishReason": "stop", "usage": USAGE},
    ]


class Recording(ScriptedModel):
    """Also keeps the tools offered in each request."""

    offered: list[list[dict[str, Any]]]

    async def stream(self, request: ModelRequest) -> ModelStream:
        self.offered = [*getattr(self, "offered", []), list(request.tools)]
        return await super().stream(request)


async def test_a_client_tool_call_ends_the_run() -> None:
    model = Recording(calls=[calls("clock", "confirm"), reply("never reached")])
    agent = Agent("a", model=model, tools=[clock])
    out = await agent.stream("what time is it, and confirm", client_tools=[CONFIRM])
    chunks = [chunk async for chunk in out.full_stream]
    kinds = [c.type for c in chunks]
    assert kinds.count("tool-call") == 2 and kinds[-2:] == ["step-finish", "finish"]
    results = [c.payload["toolName"] for c in chunks if c.type == "tool-result"]
    assert results == ["clock"]  # the client's tool is not run here
    assert chunks[-2].payload["stepResult"]["isContinued"] is False
    assert chunks[-1].payload["stepResult"]["reason"] == "tool-calls"
    assert out.state.status == "success" and out.state.finish_reason == "tool-calls"
    assert [m["role"] for m in out.state.response_messages] == ["assistant", "tool"]
    assert [p["toolName"] for p in out.state.response_messages[1]["content"]] == ["clock"]
    assert [sorted(t["name"] for t in tools) for tools in model.offered] == [["clock", "confirm"]]


async def test_the_client_sends_the_result_in_the_next_run() -> None:
    model = ScriptedModel(calls=[calls("confirm"), reply("Confirmed.")])
    agent = Agent("a", model=model)
    first = await agent.stream("confirm please", client_tools={"confirm": CONFIRM})
    await first.consume()
    assert first.state.response_messages[-1]["role"] == "assistant"  # no tool message of its own
    result = {
        "role": "tool",
        "content": [
            {
                "type": "tool-result",
                "toolCallId": "c0",
                "toolName": "confirm",
                "output": {"type": "json", "value": True},
            }
        ],
    }
    second = await agent.stream([*first.state.messages, result], client_tools=[CONFIRM])
    await second.consume()
    assert second.state.text == "Confirmed." and second.state.finish_reason == "stop"


async def test_after_an_approval_the_run_still_stops_for_the_client() -> None:
    model = ScriptedModel(calls=[calls("wipe", "confirm"), reply("never reached")])
    agent = Agent("a", model=model, tools=[wipe])
    out = await agent.stream("wipe it", client_tools=[CONFIRM])
    kinds = [chunk.type async for chunk in out.full_stream]
    assert kinds[-1] == "tool-call-approval"
    approved = await agent.approve_tool_call(run_id=out.run_id)
    chunks = [chunk async for chunk in approved.full_stream]
    assert [c.payload["result"] for c in chunks if c.type == "tool-result"] == [{"wiped": True}]
    assert chunks[-1].type == "finish" and chunks[-1].payload["stepResult"]["reason"] == "tool-calls"
    assert approved.state.status == "success"


async def test_the_loop_never_executes_a_client_tool() -> None:
    executed: list[str] = []

    async def recorded(args: dict[str, Any], ctx: Any) -> None:
        executed.append(ctx.tool_call_id)

    on_client = Tool("confirm", recorded, input_schema=CONFIRM.input_schema)
    model = ScriptedModel(calls=[calls("clock", "confirm"), reply("never reached")])
    out = await Agent("a", model=model, tools=[clock]).stream("go", client_tools=[on_client])
    await out.consume()
    assert out.state.finish_reason == "tool-calls" and executed == []
