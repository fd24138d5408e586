"""Conversions between MCP's tool shapes and runstream's.

An MCP tool becomes a :class:`~runstream.tools.Tool` whose JSON schema is the server's input
schema; a ``CallToolResult`` becomes the tool's result: the structured content when the server
sent one, else its text (one text block as a string), else the content blocks as JSON. A result
flagged ``isError`` raises :class:`MCPToolError`, which the loop reports as a ``tool-error``.
"""

from __future__ import annotations

import mcp_types

from runstream._json import JsonObject, JsonValue
from runstream.errors import RunstreamError


class MCPToolError(RunstreamError):
    """An MCP tool call failed: the server flagged its result as an error, or the call could not
    be made (unknown tool, connection lost)."""

    name = "MCPToolError"


def result_value(result: mcp_types.CallToolResult) -> JsonValue:
    """The value a runstream tool returns for an MCP tool result (raises on an error result)."""
    if result.is_error:
        raise MCPToolError(content_text(result.content) or "the MCP tool reported an error")
    structured: JsonObject | None = result.structured_content
    if structured is not None:
        return structured
    if result.content and all(isinstance(block, mcp_types.TextContent) for block in result.content):
        return content_text(result.content)
    return [block.model_dump(by_alias=True, exclude_none=True, mode="json") for block in result.content]


def content_text(content: list[mcp_types.ContentBlock]) -> str:
    """The text blocks of a content list, joined by newlines."""
    return "\n".join(block.text for block in content if isinstance(block, mcp_types.TextContent))


def input_schema(tool: mcp_types.Tool) -> JsonObject:
    """The tool's input schema as runstream offers it to a model (an object schema always)."""
    schema: JsonObject = dict(tool.input_schema)
    schema.setdefault("type", "object")
    schema.setdefault("properties", {})
    return schema
