"""``background-task-started`` precedes every other event of its task, whatever the timing.

The started chunk belongs to the turn (the loop delivers it between model parts) while the
task's own events come from the task manager, which may run the task before the model's next
part arrives: the demo's case (memory, until-idle, a background call, a slow part after it).
"""

from __future__ import annotations

import asyncio
import io
import re
from pathlib import Path
from typing import Any

from rich.console import Console

from runstream import Agent, ToolContext, tool
from runstream.chunks import AnyChunk
from runstream.demo.research import run_demo
from runstream.memory import Memory
from runstream.runtime import Runstream
from runstream.storage import SqliteStorage
from runstream.testing import Delay, ScriptedModel, Text, ToolCall

MEMORY = {"thread": "t1", "resource": "u1"}


@tool(background=True)
async def research(topic: str, ctx: ToolContext) -> dict[str, Any]:
    """Research a topic (slow)."""
    await ctx.writer.write({"status": "reading", "topic": topic})
    await asyncio.sleep(0.05)
    return {"topic": topic, "summary": "fine"}


def first_event_of_each_task(chunks: list[AnyChunk]) -> dict[str, str]:
    first: dict[str, str] = {}
    for chunk in chunks:
        if chunk.type.startswith("background-task-") and "taskId" in chunk.payload:
            first.setdefault(chunk.payload["taskId"], chunk.type)
    return first


def slow_after_the_calls() -> ScriptedModel:
    return ScriptedModel.turns(
        [
            ToolCall("research", {"topic": "solana"}),
            Delay(300),  # the task runs (and reports) before the model's next part
            ToolCall("research", {"topic": "ethereum"}),
            Delay(300),  # before the finish part
        ],
        Text("Research started."),
        Text("Both are fine."),
    )


async def test_until_idle_with_memory_announces_each_task_before_its_events(tmp_path: Path) -> None:
    agent = Agent("researcher", model=slow_after_the_calls(), tools=[research], memory=Memory())
    storage = SqliteStorage(tmp_path / "order.db")
    async with Runstream(agents=[agent], storage=storage, background_tasks={"enabled": True}):
        out = await agent.stream("Research", memory=MEMORY, until_idle=True)
        async with asyncio.timeout(20):
            chunks = [chunk async for chunk in out.full_stream]
    types = [c.type for c in chunks]
    assert types.count("background-task-started") == 2
    assert types.count("background-task-running") == 2
    assert types.count("background-task-completed") == 2
    assert set(first_event_of_each_task(chunks).values()) == {"background-task-started"}
    assert types[-1] == "finish" and await out.text == "Research started."


async def test_a_plain_stream_announces_its_tasks() -> None:
    agent = Agent("researcher", model=slow_after_the_calls(), tools=[research], memory=Memory())
    async with Runstream(agents=[agent], background_tasks={"enabled": True}):
        out = await agent.stream("Research", memory=MEMORY)
        chunks = [chunk async for chunk in out.full_stream]
    assert set(first_event_of_each_task(chunks).values()) == {"background-task-started"}
    assert [c.type for c in chunks].count("background-task-started") == 2


async def test_the_demo_prints_started_before_running_for_every_task(tmp_path: Path) -> None:
    buffer = io.StringIO()
    await run_demo(Console(file=buffer, width=400, color_system=None), db_path=tmp_path / "demo.db")
    lines = re.findall(r"\[(background-task-[a-z]+)\] (call-[a-z]+)", buffer.getvalue())
    first: dict[str, str] = {}
    for kind, call_id in lines:
        first.setdefault(call_id, kind)
    assert first == {"call-sol": "background-task-started", "call-eth": "background-task-started"}
