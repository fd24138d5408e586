"""The typed public surface: the quick-start names at the package root, one error tree, a chunk
union that narrows at runtime with ``match`` (for type checkers: tests/test_typing.py), ``py.typed``."""

from __future__ import annotations

from pathlib import Path
from typing import get_args

import pytest

import runstream
from runstream import Agent, AgentChunk, RunstreamError, StateConflictError, StreamChunk, ToolContext, tool
from runstream.chunks import DataChunk, TextDeltaChunk, ToolCallChunk
from runstream.testing import ScriptedModel


def test_the_quick_start_imports_from_the_package_root() -> None:
    for name in ("Agent", "tool", "ToolContext", "Memory", "MemoryScope", "Runstream", "SqliteStorage"):
        assert name in runstream.__all__ and hasattr(runstream, name), name
    assert (Path(runstream.__file__).parent / "py.typed").is_file()


def test_the_console_renderer_is_public() -> None:
    from runstream import console

    assert set(console.__all__) == {"ConsoleRenderer", "render"}
    assert "ConsoleRenderer" in runstream.__all__ and runstream.ConsoleRenderer is console.ConsoleRenderer


def test_the_tree_is_exported_at_the_package_root() -> None:
    import inspect

    from runstream import errors

    tree = {
        name
        for name, value in vars(errors).items()
        if inspect.isclass(value) and issubclass(value, RunstreamError)
    }
    assert tree == {
        "RunstreamError",
        "InvalidInputError",
        "InvalidTypeError",
        "ConfigurationError",
        "ConfigurationTypeError",
        "NotFoundError",
        "StateConflictError",
        "RunFailedError",
        "ToolError",
    }
    for name in tree:
        assert name in runstream.__all__ and getattr(runstream, name) is getattr(errors, name), name


@tool(require_approval=True)
async def wipe(path: str) -> str:
    """Wipe a path."""
    return path


async def test_a_state_conflict_is_its_own_class() -> None:
    parts = [
        {"type": "tool-call", "toolCallId": "c1", "toolName": "wipe", "input": '{"path": "/"}'},
        {"type": "finish", "finishReason": "tool-calls", "usage": {}},
    ]
    agent = Agent("a", model=ScriptedModel(calls=[parts]), tools=[wipe])
    out = await agent.stream("wipe it")
    assert [c.type async for c in out.full_stream][-1] == "tool-call-approval"
    with pytest.raises(StateConflictError, match="is not waiting for approval"):
        await agent.approve_tool_call(run_id=out.run_id, tool_call_id="nope")


def describe(chunk: StreamChunk) -> str:
    match chunk:
        case TextDeltaChunk(payload):
            return f"text {payload['text']}"
        case ToolCallChunk(payload):
            return f"call {payload['toolName']}"
        case DataChunk(data):
            return f"{chunk.name} {data}"
        case _:
            return chunk.type


def test_chunks_narrow_with_match() -> None:
    assert describe(TextDeltaChunk("r", {"id": "t", "text": "hi"})) == "text hi"
    assert describe(ToolCallChunk("r", {"toolCallId": "c", "toolName": "wipe"})) == "call wipe"
    assert describe(DataChunk("data-progress", 3)) == "progress 3"


async def test_a_tools_data_chunks_are_members_of_the_agent_chunk_union() -> None:
    """``full_stream`` yields :data:`AgentChunk`, and a tool's ``data-*`` chunks are among its
    members (``DataChunk``), with their wire JSON as Mastra writes it."""

    @tool
    async def report(ctx: ToolContext) -> str:
        await ctx.writer.custom({"type": "data-progress", "data": {"pct": 50}, "id": "p1"})
        return "done"

    call = {"type": "tool-call", "toolCallId": "c1", "toolName": "report", "input": "{}"}
    script = [
        [call, {"type": "finish", "finishReason": "tool-calls", "usage": {}}],
        [{"type": "finish", "finishReason": "stop", "usage": {}}],
    ]
    out = await Agent("a", model=ScriptedModel(calls=script), tools=[report]).stream("go")
    data = [chunk async for chunk in out.full_stream if isinstance(chunk, DataChunk)]
    assert [(c.type, c.name, c.data) for c in data] == [("data-progress", "progress", {"pct": 50})]
    assert isinstance(data[0], get_args(AgentChunk))
    assert data[0].to_json() == (
        f'{{"type":"data-progress","data":{{"pct":50}},"id":"p1","runId":"{out.run_id}","from":"USER"}}'
    )
