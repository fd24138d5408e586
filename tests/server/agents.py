"""Deterministic agents for the server tests: the reply depends on the prompt, not on call order.

One shared server serves many tests (and the Node scripts), so the model decides from what it is
asked: ``weather`` calls a server tool, ``research <topic>`` a background tool, ``client`` the
client tool ``clientEcho``, ``delete`` a tool that needs approval, ``order`` a tool that suspends
(``research ask...`` suspends in the background), ``fail`` breaks mid-stream,
``slow`` streams for a long time; anything else is greeted. A tool result gets a summary, and
an until-idle continuation turn says the background work is done.

Workflows: ``approval`` drafts a post, suspends for a reviewer's decision, then publishes;
``gated`` waits in its first step until the test opens the gate named by its input.
"""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from typing import Any

from runstream import Agent, ToolContext, ToolError, tool
from runstream.memory import Memory
from runstream.models.base import ModelRequest, ModelStream
from runstream.runtime import Runstream
from runstream.storage import InMemoryStorage, Storage
from runstream.testing import ScriptedModel
from runstream.vector import SqliteVector
from runstream.workflows import Step, StepContext, Workflow

USAGE = {"inputTokens": 5, "outputTokens": 3, "totalTokens": 8}
GREETING = ["Hello ", "from ", "runstream!"]
DELETED: list[str] = []
"""Every path ``delete_file`` really deleted (the security tests check approvals hold)."""


def say(*deltas: str, delay_ms: float = 0) -> list[dict[str, Any]]:
    return [
        {"type": "stream-start", "warnings": []},
        {"type": "text-start", "id": "t"},
        *({"type": "text-delta", "id": "t", "delta": d, "delayMs": delay_ms} for d in deltas),
        {"type": "text-end", "id": "t"},
        {"type": "finish", "finishReason": "stop", "usage": USAGE},
    ]


def call_tool(name: str, args: dict[str, Any]) -> list[dict[str, Any]]:
    call_id = f"call-{uuid.uuid4().hex[:10]}"
    text = json.dumps(args)
    return [
        {"type": "stream-start", "warnings": []},
        {"type": "tool-input-start", "id": call_id, "toolName": name},
        {"type": "tool-input-delta", "id": call_id, "delta": text},
        {"type": "tool-input-end", "id": call_id},
        {"type": "tool-call", "toolCallId": call_id, "toolName": name, "input": text},
        {"type": "finish", "finishReason": "tool-calls", "usage": USAGE},
    ]


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content or [] if p.get("type") == "text")


def reply(prompt: list[dict[str, Any]]) -> Any:
    if any(m["role"] == "system" and "ran as background tasks" in _text(m) for m in prompt):
        return say("All ", "background ", "work ", "is ", "done.")
    last = prompt[-1]
    if last["role"] == "tool":
        value = last["content"][-1].get("output", {}).get("value")
        if isinstance(value, str) and value.startswith("Background task started"):
            return say("Working ", "on ", "it.")
        return say("Tool ", "said: ", json.dumps(value))
    text = _text(last).strip().lower()
    if text.startswith("weather"):
        return call_tool("get_weather", {"city": "Paris"})
    if text.startswith("research"):
        return call_tool("research", {"topic": text.removeprefix("research").strip() or "sol"})
    if text.startswith("client"):
        return call_tool("clientEcho", {"text": "ping"})
    if text.startswith("order"):
        return call_tool("place_order", {"item": "tea"})
    if text.startswith("delete"):
        return call_tool("delete_file", {"path": "/tmp/report.txt"})
    if text.startswith("fail"):
        return {"parts": say("Partial ")[:3], "streamError": {"afterParts": 3, "error": "model exploded"}}
    if text.startswith("slow"):
        return say(*(f"w{i} " for i in range(200)), delay_ms=20)
    return say(*GREETING)


class PromptModel:
    """A :class:`~runstream.models.LanguageModel` answering by :func:`reply`."""

    provider = "test"
    model_id = "prompt-model"
    specification_version = "v2"

    async def stream(self, request: ModelRequest) -> ModelStream:
        return await ScriptedModel(calls=[reply(request.prompt)]).stream(request)


class Gates:
    """Background research on a topic starting with ``gated`` waits until the test opens it."""

    def __init__(self) -> None:
        self._events: dict[str, threading.Event] = {}
        self._lock = threading.Lock()

    def get(self, topic: str) -> threading.Event:
        with self._lock:
            return self._events.setdefault(topic, threading.Event())

    def open(self, topic: str) -> None:
        self.get(topic).set()


TOPIC = {"type": "object", "properties": {"topic": {"type": "string"}}, "required": ["topic"]}
DECISION = {
    "type": "object",
    "properties": {"approved": {"type": "boolean"}, "note": {"type": "string"}},
    "required": ["approved"],
}


def build_workflows(gates: Gates) -> list[Workflow]:
    def draft(ctx: StepContext) -> dict[str, Any]:
        return {"text": f"A post about {ctx.input_data['topic']}"}

    async def review(ctx: StepContext) -> dict[str, Any]:
        if ctx.resume_data is None:
            await ctx.suspend({"draft": ctx.input_data["text"], "question": "Publish it?"})
        return {"text": ctx.input_data["text"], **ctx.resume_data}

    def publish(ctx: StepContext) -> dict[str, Any]:
        if not ctx.input_data["approved"]:
            return {"published": False, "note": ctx.input_data.get("note", "")}
        return {"published": True, "text": ctx.input_data["text"]}

    approval = (
        Workflow("approval", description="Draft, review, publish", input_schema=TOPIC)
        .then(Step("draft", draft, input_schema=TOPIC))
        .then(Step("review", review, resume_schema=DECISION))
        .then(Step("publish", publish))
        .commit()
    )

    async def wait(ctx: StepContext) -> dict[str, Any]:
        await asyncio.to_thread(gates.get(ctx.input_data["gate"]).wait, 30)
        return {"gate": ctx.input_data["gate"]}

    gated = (
        Workflow("gated", description="Waits for the test")
        .then(Step("wait", wait))
        .then(Step("after", lambda ctx: {"done": True}))
        .commit()
    )
    return [approval, gated]


RESEARCH_SECRET = "token=s3cr3t in /srv/research/keys.pem"
"""What ``research <broken...>`` puts in the exception it raises."""


def build_runstream(gates: Gates, storage: Storage | None = None) -> Runstream:
    @tool
    async def get_weather(city: str) -> dict[str, Any]:
        """Current weather for a city."""
        return {"city": city, "sky": "sunny", "celsius": 21}

    @tool(background=True)
    async def research(topic: str, ctx: ToolContext) -> dict[str, str]:
        """Research a topic (slow: runs in the background)."""
        await ctx.writer.write({"status": "reading", "topic": topic})
        if topic.startswith("broken"):  # a tool's own error: its text must not reach callers
            raise RuntimeError(f"cannot open {RESEARCH_SECRET}")
        if topic.startswith("refused"):  # a ToolError: its text is meant for callers
            raise ToolError("the archive refuses this topic")
        if topic.startswith("ask") and ctx.resume_data is None:
            await ctx.suspend({"question": f"Which aspect of {topic}?"})
        if topic.startswith("gated"):
            await asyncio.to_thread(gates.get(topic).wait, 30)
        found = {"topic": topic, "summary": f"{topic} explained"}
        return {**found, **ctx.resume_data} if ctx.resume_data else found

    @tool
    async def place_order(item: str, ctx: ToolContext) -> dict[str, Any]:
        """Place an order (asks the user to confirm first)."""
        if ctx.resume_data is None:
            await ctx.suspend({"confirm": f"Order {item}?"})
        return {"item": item, "confirmed": ctx.resume_data["confirmed"]}

    @tool(require_approval=True)
    async def delete_file(path: str) -> dict[str, Any]:
        """Delete a file (needs approval)."""
        DELETED.append(path)
        return {"deleted": path}

    assistant = Agent(
        "assistant",
        name="Assistant",
        description="Answers, checks the weather, researches in the background.",
        instructions="Be helpful.",
        model=PromptModel(),
        tools=[get_weather, research, delete_file, place_order],
        memory=Memory(),
    )
    plain = Agent("plain", instructions="Greets.", model=PromptModel())
    return Runstream(
        agents=[assistant, plain],
        workflows=build_workflows(gates),
        storage=storage if storage is not None else InMemoryStorage(),
        background_tasks={"enabled": True},
        vectors={"docs": SqliteVector(":memory:")},
    )
