"""A typed consumer of runstream's public types: checked by mypy --strict and pyright
(tests/test_typing.py), never run. Each ``assert_type`` pins what the checkers must infer."""

from __future__ import annotations

from typing import Any, assert_type

from runstream import Agent, RunOutput
from runstream.chunks import (
    AgentChunk,
    DataChunk,
    ErrorPayload,
    TextDeltaChunk,
    TextDeltaPayload,
    ToolCallChunk,
    ToolCallPayload,
    ToolResultChunk,
    Usage,
)
from runstream.output import StepRecord


async def consume(agent: Agent) -> str:
    out = await agent.stream("hi")
    assert_type(out, RunOutput)
    text = ""
    async for chunk in out.full_stream:
        assert_type(chunk, AgentChunk)
        if chunk.type == "text-delta":  # narrows the union, and so the payload
            assert_type(chunk, TextDeltaChunk)
            assert_type(chunk.payload, TextDeltaPayload)
            text += chunk.payload["text"]
        elif chunk.type == "tool-call":
            assert_type(chunk.payload, ToolCallPayload)
            name: str = chunk.payload["toolName"]
            args: Any = chunk.payload.get("args")
            del name, args
        elif chunk.type == "error":
            assert_type(chunk.payload, ErrorPayload)
        elif isinstance(chunk, DataChunk):  # a tool's ctx.writer.custom({"type": "data-..."})
            assert_type(chunk.data, Any)
            assert_type(chunk.name, str)
            assert_type(chunk.type.startswith("data-"), bool)
    match await anext(aiter(out.full_stream)):
        case TextDeltaChunk(payload):
            assert_type(payload, TextDeltaPayload)
        case DataChunk(data):
            assert_type(data, Any)
        case _:
            pass
    async for piece in out.text_stream:
        assert_type(piece, str)
    assert_type(await out.text, str)
    assert_type(await out.usage, Usage)
    assert_type((await out.usage)["totalTokens"], int)
    assert_type(await out.tool_calls, list[ToolCallChunk])
    assert_type(await out.tool_results, list[ToolResultChunk])
    assert_type(await out.steps, list[StepRecord])
    assert_type((await out.steps)[0]["text"], str)
    assert_type(await out.finish_reason, str | None)
    return text
