"""``runstream.console``: a run rendered readably into a recording ``rich`` console."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path
from typing import Any

from rich.console import Console

from runstream import Agent, ToolContext, tool
from runstream.console import ConsoleRenderer, render
from runstream.memory import Memory
from runstream.runtime import Runstream
from runstream.storage import SqliteStorage
from runstream.testing import Reasoning, ScriptedModel, StreamError, Text, ToolCall


@tool
async def lookup(city: str, ctx: ToolContext) -> dict[str, Any]:
    """Look a city up.

    Args:
        city: The city.
    """
    await ctx.writer.write({"status": "looking"})
    return {"city": city, "notes": "x" * 500}


@tool
async def broken(city: str) -> dict[str, Any]:
    """Always fails.

    Args:
        city: The city.
    """
    raise RuntimeError(f"no data for {city}")


@tool(background=True)
async def research(topic: str) -> dict[str, Any]:
    """Research a topic in the background.

    Args:
        topic: The topic.
    """
    await asyncio.sleep(0.01)
    return {"topic": topic, "finding": "healthy"}


def recording(width: int = 100) -> Console:
    return Console(record=True, width=width, file=io.StringIO())


async def test_text_reasoning_a_tool_call_and_a_tool_error_read_as_lines() -> None:
    model = ScriptedModel.turns(
        [
            Reasoning("Look it up first."),
            ToolCall("lookup", {"city": "Paris"}),
            ToolCall("broken", {"city": "Oslo"}),
        ],
        Text("Paris is mild; Oslo is unknown."),
    )
    agent = Agent("weather", model=model, tools=[lookup, broken])
    console = recording()
    await render(await agent.stream("Weather?"), console)
    lines = console.export_text(clear=False).splitlines()
    assert lines[0] == "thinking: Look it up first."
    assert '[tool-call] lookup {"city":"Paris"}' in lines
    assert '[tool-output] {"status":"looking"}' in lines
    result = next(line for line in lines if line.startswith("[tool-result] lookup"))
    assert result.startswith('[tool-result] lookup -> {"city":"Paris","notes":"xxx') and result.endswith("…")
    assert len(result) < 140  # the 500-character result is cut
    assert "[tool-error] broken no data for Oslo" in lines
    assert "Paris is mild; Oslo is unknown." in lines
    assert lines[-1].startswith("finished: stop · tokens: input ")
    # nothing internal by default: no step boundaries, no argument deltas
    assert not any(line.startswith(("[step-", "[tool-call-delta", "[start")) for line in lines)
    # the styles: red for the tool error, dim for reasoning
    html = console.export_html(inline_styles=True)
    assert "color: #800000" in html and "no data for Oslo" in html
    assert "opacity: 0.5" in html or "font-style: italic" in html


async def test_an_error_chunk_is_red_and_verbose_shows_every_chunk() -> None:
    agent = Agent("a", model=ScriptedModel.turns([Text("partial"), StreamError("upstream down")]))
    console = recording()
    renderer = ConsoleRenderer(console, verbose=True)
    await renderer.render(await agent.stream("Hi"))
    text = console.export_text(clear=False)
    assert "[error]" in text and "upstream down" in text
    assert "[start]" in text and "[step-start]" in text and "[text-start]" in text
    assert "color: #800000" in console.export_html(inline_styles=True)


async def test_json_mode_prints_each_chunks_wire_json() -> None:
    agent = Agent("a", model=ScriptedModel.turns(Text("hello")))
    out = await agent.stream("Hi")
    console = recording(width=60)
    await render(out, console, json=True)
    lines = console.export_text(clear=False).splitlines()
    wire = [chunk.to_json() async for chunk in out.full_stream]
    assert lines == wire  # one unwrapped line per chunk, nothing else


async def test_an_until_idle_run_shows_the_task_and_the_continuation_turn(tmp_path: Path) -> None:
    model = ScriptedModel.turns(
        ToolCall("research", {"topic": "solana"}), Text("Research started."), Text("Solana is healthy.")
    )
    agent = Agent("researcher", model=model, tools=[research], memory=Memory())
    console = recording(width=120)
    async with Runstream(
        agents=[agent], storage=SqliteStorage(tmp_path / "c.db"), background_tasks={"enabled": True}
    ):
        out = await agent.stream("Research", memory={"thread": "t", "resource": "u"}, until_idle=True)
        async with asyncio.timeout(20):
            await render(out, console)
    lines = console.export_text(clear=False).splitlines()
    started = next(i for i, line in enumerate(lines) if line.startswith("[background-task-started] "))
    completed = next(i for i, line in enumerate(lines) if line.startswith("[background-task-completed] "))
    turn = next(i for i, line in enumerate(lines) if "continuation turn 1" in line)
    assert started < completed < turn
    assert '"finding":"healthy"' in lines[completed]
    assert lines[turn + 1] == "Solana is healthy."
    assert lines[-1].startswith("finished: stop · tokens:")


async def test_no_ansi_codes_when_the_output_is_not_a_terminal() -> None:
    agent = Agent(
        "weather",
        model=ScriptedModel.turns(ToolCall("broken", {"city": "Oslo"}), Text("Sorry.")),
        tools=[broken],
    )
    buffer = io.StringIO()
    await render(await agent.stream("Weather?"), Console(file=buffer, width=80))
    assert "\x1b[" not in buffer.getvalue()
    assert "[tool-error] broken no data for Oslo" in buffer.getvalue()
    colour = io.StringIO()
    agent = Agent(
        "weather",
        model=ScriptedModel.turns(ToolCall("broken", {"city": "Oslo"}), Text("Sorry.")),
        tools=[broken],
    )
    await render(await agent.stream("Weather?"), Console(file=colour, width=80, force_terminal=True))
    assert "\x1b[" in colour.getvalue()  # a terminal gets the colours
