"""A runtime for the MCP, AG-UI and OpenTelemetry docs (and their tests): one agent, ``calc``.

    runstream mcp examples.ecosystem:runtime      # its agent and tools over MCP
    runstream serve examples.ecosystem:runtime    # HTTP, AG-UI at /ag-ui/calc

Set ``RUNSTREAM_EXAMPLE_MODEL`` (e.g. ``openai/gpt-4o-mini``) to use a real model. Without it the
model is a deterministic stand-in (no network, no key) that reads the conversation: ``divide A B``
calls the ``divide`` tool, ``research TOPIC`` the background ``research`` tool, ``pause SECONDS``
the ``pause`` tool, ``plan N`` the ``plan`` tool (which shows its progress in an AG-UI front end's
state), ``ask the user`` a client-side ``confirm`` tool when the client offers one;
anything else is echoed. After a tool result it answers with that result; in the follow-up turn
of a background task, with the task's result.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import os
from typing import Any

from runstream import Agent, ToolContext, tool
from runstream.abort import sleep
from runstream.memory import Memory
from runstream.models.base import ModelRequest, ModelStream
from runstream.models.registry import resolve_model
from runstream.runtime import Runstream
from runstream.testing import ScriptedModel

USAGE = {"inputTokens": 4, "outputTokens": 2, "totalTokens": 6}


def _text(message: Any) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content or [] if isinstance(part, dict))


def _say(text: str) -> list[dict[str, Any]]:
    return [
        {"type": "stream-start", "warnings": []},
        {"type": "text-start", "id": "t"},
        {"type": "text-delta", "id": "t", "delta": text},
        {"type": "text-end", "id": "t"},
        {"type": "finish", "finishReason": "stop", "usage": USAGE},
    ]


def _call(name: str, args: dict[str, Any], call_id: str) -> list[dict[str, Any]]:
    return [
        {"type": "stream-start", "warnings": []},
        {"type": "tool-call", "toolCallId": call_id, "toolName": name, "input": json.dumps(args)},
        {"type": "finish", "finishReason": "tool-calls", "usage": USAGE},
    ]


class RuleModel:
    """Answers by simple rules over the last message (see the module docstring)."""

    provider = "rules"
    model_id = "rule-model"
    specification_version = "v2"

    def __init__(self) -> None:
        self.calls = 0

    async def stream(self, request: ModelRequest) -> ModelStream:
        self.calls += 1
        return await ScriptedModel(calls=[self._reply(request)]).stream(request)

    def _reply(self, request: ModelRequest) -> list[dict[str, Any]]:
        last = request.prompt[-1]
        if last["role"] == "tool":
            value = _tool_results(last)[-1]
            if isinstance(value, str) and value.startswith("Background task started"):
                return _say("Started in the background.")
            return _say(f"The result is {json.dumps(value)}.")
        if last["role"] != "user":  # a continuation turn: answer with the latest tool result
            results = [
                v for message in request.prompt if message["role"] == "tool" for v in _tool_results(message)
            ]
            return _say(f"Follow-up: {json.dumps(results[-1] if results else None)}.")
        words = _text(last).split()
        offered = {spec["name"] for spec in request.tools}
        if len(words) == 3 and words[0] == "divide":
            return _call("divide", {"a": float(words[1]), "b": float(words[2])}, f"call-{self.calls}")
        if len(words) == 2 and words[0] == "research":
            return _call("research", {"topic": words[1]}, f"call-{self.calls}")
        if len(words) == 2 and words[0] == "pause":
            return _call("pause", {"seconds": float(words[1])}, f"call-{self.calls}")
        if len(words) == 2 and words[0] == "plan" and words[1].isdigit():
            return _call("plan", {"steps": int(words[1])}, f"call-{self.calls}")
        if " ".join(words) == "ask the user" and "confirm" in offered:
            return _call("confirm", {"question": "Proceed?"}, f"call-{self.calls}")
        return _say(f"You said: {' '.join(words)}")


def _tool_results(message: Any) -> list[Any]:
    return [part.get("output", {}).get("value") for part in message["content"] if isinstance(part, dict)]


@tool
def divide(a: float, b: float) -> float:
    """Divide a by b."""
    return a / b


@tool(background=True)
async def research(topic: str, ctx: ToolContext) -> dict[str, str]:
    """Research a topic (runs in the background)."""
    await ctx.writer.write({"status": "reading", "topic": topic})
    return {"topic": topic, "summary": f"{topic} is well studied"}


aborted = asyncio.Event()


@tool
async def pause(seconds: float, ctx: ToolContext) -> str:
    """Wait a while; stops early when the run is aborted."""
    await ctx.writer.write({"status": "waiting", "seconds": seconds})
    if await sleep(seconds, ctx.abort_signal):
        aborted.set()
        return "aborted"
    return "waited"


@tool
async def plan(steps: int, ctx: ToolContext) -> str:
    """Work through a plan of 1 to 20 steps, showing its progress in the front end's state."""
    if not 1 <= steps <= 20:
        raise ValueError("steps must be between 1 and 20")
    state: dict[str, Any] = {
        "plan": [
            {"step": n, "title": f"Step {n} of the plan", "status": "pending"} for n in range(1, steps + 1)
        ],
        "done": 0,
    }
    # The whole state each time (AG-UI gets a snapshot first, then JSON Patch deltas) ...
    await ctx.writer.custom({"type": "data-state", "data": copy.deepcopy(state)})
    for item in state["plan"]:
        item["status"] = "done"
        state["done"] = item["step"]
        await ctx.writer.custom({"type": "data-state", "data": copy.deepcopy(state)})
    # ... or a JSON Patch of it, sent as it is.
    await ctx.writer.custom(
        {"type": "data-state-delta", "data": [{"op": "add", "path": "/finished", "value": True}]}
    )
    return f"{steps} steps done"


@tool
async def was_aborted(wait_seconds: float = 10) -> bool:
    """Whether a pause was aborted (waiting up to wait_seconds for one)."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(aborted.wait(), wait_seconds)
    return aborted.is_set()


def build() -> Runstream:
    model_name = os.environ.get("RUNSTREAM_EXAMPLE_MODEL")
    calc = Agent(
        "calc",
        model=resolve_model(model_name) if model_name else RuleModel(),
        instructions="You divide numbers.",
        description="Divides numbers and echoes everything else.",
        tools=[divide, research, pause, plan, was_aborted],
        memory=Memory(),
    )
    return Runstream(agents=[calc], background_tasks={"enabled": True})


runtime = build()
