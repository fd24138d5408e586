"""Tools start as soon as the model's tool-call part arrives, while the model is still streaming."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from runstream import AbortController, AbortError, Agent, ToolContext, tool
from runstream.abort import AbortSignal
from runstream.chunks import AnyChunk
from runstream.models.base import ModelRequest, ModelStream, StreamPart
from runstream.testing import ScriptedModel

USAGE = {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2}


class GatedModel:
    """First call: a tool call, then — only once ``gate`` is set — some text and the finish.
    Later calls answer "Done."."""

    provider = "test"
    model_id = "gated"
    specification_version = "v2"

    def __init__(self, gate: asyncio.Event, tool_name: str = "probe") -> None:
        self.gate = gate
        self.tool_name = tool_name
        self.calls = 0

    async def stream(self, request: ModelRequest) -> ModelStream:
        self.calls += 1
        return ModelStream(parts=self._first(request) if self.calls == 1 else self._answer())

    async def _first(self, request: ModelRequest) -> AsyncIterator[StreamPart]:
        yield {"type": "stream-start", "warnings": []}
        yield {
            "type": "tool-call",
            "toolCallId": "c1",
            "toolName": self.tool_name,
            "input": json.dumps({"q": "x"}),
        }
        await wait_or_abort(self.gate, request.abort_signal)
        yield {"type": "text-start", "id": "t"}
        yield {"type": "text-delta", "id": "t", "delta": "Still talking."}
        yield {"type": "text-end", "id": "t"}
        yield {"type": "finish", "finishReason": "tool-calls", "usage": USAGE}

    async def _answer(self) -> AsyncIterator[StreamPart]:
        yield {"type": "stream-start", "warnings": []}
        yield {"type": "text-start", "id": "a"}
        yield {"type": "text-delta", "id": "a", "delta": "Done."}
        yield {"type": "text-end", "id": "a"}
        yield {"type": "finish", "finishReason": "stop", "usage": USAGE}


async def wait_or_abort(gate: asyncio.Event, signal: AbortSignal) -> None:
    waits = {asyncio.ensure_future(gate.wait()), asyncio.ensure_future(signal.wait())}
    _, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    for waiting in pending:
        waiting.cancel()
    if signal.aborted:
        raise AbortError(signal.reason)


def probe_tool(on_run: Callable[[ToolContext], Any], **options: Any) -> Any:
    @tool(**options)
    async def probe(q: str, ctx: ToolContext) -> dict[str, str]:
        """Probe."""
        await on_run(ctx)
        return {"q": q}

    return probe


async def collect(stream: AsyncIterator[AnyChunk]) -> list[AnyChunk]:
    async with asyncio.timeout(5):
        return [chunk async for chunk in stream]


async def test_a_tool_runs_while_the_model_still_streams() -> None:
    gate = asyncio.Event()
    runs = 0

    async def on_run(ctx: ToolContext) -> None:
        nonlocal runs
        runs += 1
        await ctx.writer.write({"phase": "begin"})
        gate.set()  # the model only goes on once the tool has started: no deadlock means eager

    agent = Agent("eager", model=GatedModel(gate), tools=[probe_tool(on_run)])
    chunks = await collect((await agent.stream("Go")).full_stream)
    kinds = [c.type for c in chunks]
    assert runs == 1
    assert kinds.index("tool-call") < kinds.index("tool-output") < kinds.index("text-start")
    assert kinds.index("text-end") < kinds.index("tool-result") < kinds.index("step-finish")
    assert next(c for c in chunks if c.type == "tool-result").payload["result"] == {"q": "x"}


async def test_agents_with_approval_gated_tools_run_nothing_before_the_step_ends() -> None:
    gate = asyncio.Event()
    started: list[str] = []

    async def on_run(ctx: ToolContext) -> None:
        started.append(ctx.tool_call_id)

    @tool(require_approval=True)
    async def deploy(env: str) -> str:
        """Deploy (needs approval)."""
        return env

    gate.set()  # the model does not wait for the tool here
    agent = Agent("careful", model=GatedModel(gate), tools=[probe_tool(on_run), deploy])
    chunks = await collect((await agent.stream("Go")).full_stream)
    kinds = [c.type for c in chunks]
    assert started == ["c1"]
    assert kinds.index("text-end") < kinds.index("tool-result")


async def test_an_abort_while_the_model_streams_stops_the_started_tool() -> None:
    controller = AbortController()
    stopped = asyncio.Event()

    async def on_run(ctx: ToolContext) -> None:
        controller.abort("user left")
        try:
            await asyncio.Event().wait()  # would run forever
        finally:
            stopped.set()

    agent = Agent("eager", model=GatedModel(asyncio.Event()), tools=[probe_tool(on_run)])
    chunks = await collect((await agent.stream("Go", abort_signal=controller.signal)).full_stream)
    kinds = [c.type for c in chunks]
    assert kinds[-2:] == ["abort", "finish"]
    assert "tool-result" not in kinds and "text-start" not in kinds
    assert stopped.is_set()


async def test_an_abort_ends_the_run_even_when_a_tool_ignores_it() -> None:
    controller = AbortController()
    stopped = asyncio.Event()

    @tool
    async def stubborn(q: str) -> str:
        """Never looks at its abort signal."""
        controller.abort("user left")
        try:
            await asyncio.Event().wait()
        finally:
            stopped.set()
        return q

    model = ScriptedModel(
        calls=[
            [
                {"type": "stream-start", "warnings": []},
                {"type": "tool-call", "toolCallId": "c1", "toolName": "stubborn", "input": '{"q": "x"}'},
                {"type": "finish", "finishReason": "tool-calls", "usage": USAGE},
            ]
        ]
    )
    out = await Agent("a", model=model, tools=[stubborn]).stream("Go", abort_signal=controller.signal)
    chunks = await collect(out.full_stream)
    kinds = [c.type for c in chunks]
    assert kinds[-2:] == ["abort", "finish"] and "tool-result" not in kinds
    assert stopped.is_set()  # the tool was cancelled, not left running
