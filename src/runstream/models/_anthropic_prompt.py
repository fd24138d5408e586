"""An AI SDK prompt as Anthropic Messages ``system`` and ``messages``, as ``@ai-sdk/anthropic`` 3.0
builds them (``convertToAnthropicMessagesPrompt``).

Consecutive user and tool messages form one user message, consecutive assistant messages one
assistant message. Reasoning goes back as ``thinking`` (with its signature) or
``redacted_thinking`` (with its data) blocks; provider-executed tool calls and results go back
as ``server_tool_use`` and ``*_tool_result`` blocks; ``providerOptions.anthropic.cacheControl``
(or ``cache_control``) on a part, or on a message for its last part, becomes ``cache_control``
(at most four breakpoints).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any, Literal, TypedDict

from runstream._json import JsonObject, JsonValue
from runstream.errors import InvalidInputError
from runstream.models._anthropic_stream import pick
from runstream.models._common import file_data
from runstream.models.base import PromptMessage
from runstream.models.parts import CallWarning
from runstream.models.prompt import (
    FilePart,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolMessage,
    ToolResultPart,
    UserMessage,
)

MAX_CACHE_BREAKPOINTS = 4
_SERVER_TOOLS = (
    "code_execution",
    "web_fetch",
    "web_search",
    "tool_search_tool_regex",
    "tool_search_tool_bm25",
)


class AnthropicMessage(TypedDict):
    """One entry of the Messages API's ``messages`` (a later ``system`` message rides here too)."""

    role: Literal["system", "user", "assistant"]
    content: list[JsonObject]


def compact_json(value: object) -> str:
    """``JSON.stringify``: no spaces, non-ASCII kept."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _anthropic(options: object) -> Mapping[str, Any]:
    inner = options.get("anthropic") if isinstance(options, Mapping) else None
    return inner if isinstance(inner, Mapping) else {}


class CacheControl:
    """Hands out ``cache_control`` values, at most four, with the AI SDK's warnings."""

    __slots__ = ("count", "warnings")

    def __init__(self, warnings: list[CallWarning]) -> None:
        self.count = 0
        self.warnings = warnings

    def get(self, options: object, where: str, *, can_cache: bool = True) -> JsonValue:
        meta = _anthropic(options)
        value: JsonValue = meta.get("cacheControl") or meta.get("cache_control")
        if not value:
            return None
        if not can_cache:
            details = f"cache_control cannot be set on {where}. It will be ignored."
            self.warnings.append(
                {
                    "type": "unsupported",
                    "feature": "cache_control on non-cacheable context",
                    "details": details,
                }
            )
            return None
        self.count += 1
        if self.count > MAX_CACHE_BREAKPOINTS:
            details = (
                f"Maximum {MAX_CACHE_BREAKPOINTS} cache breakpoints exceeded (found {self.count}). "
                "This breakpoint will be ignored."
            )
            self.warnings.append(
                {"type": "unsupported", "feature": "cacheControl breakpoint limit", "details": details}
            )
            return None
        return value


def _cached(block: JsonObject, cache: JsonValue) -> JsonObject:
    if cache:
        block["cache_control"] = cache
    return block


def _groups(prompt: list[PromptMessage]) -> list[tuple[str, list[PromptMessage]]]:
    groups: list[tuple[str, list[PromptMessage]]] = []
    for message in prompt:
        kind = "user" if message["role"] == "tool" else message["role"]
        if groups and groups[-1][0] == kind:
            groups[-1][1].append(message)
        else:
            groups.append((kind, [message]))
    return groups


def anthropic_messages(
    prompt: list[PromptMessage],
    *,
    warnings: list[CallWarning] | None = None,
    cache: CacheControl | None = None,
    send_reasoning: bool = True,
    betas: set[str] | None = None,
) -> tuple[list[JsonObject] | None, list[AnthropicMessage]]:
    """``(system, messages)`` for a prompt; ``system`` is None when the prompt has none."""
    warnings = [] if warnings is None else warnings
    cache = CacheControl(warnings) if cache is None else cache
    betas = set() if betas is None else betas
    system: list[JsonObject] | None = None
    messages: list[AnthropicMessage] = []
    groups = _groups(prompt)
    for i, (kind, group) in enumerate(groups):
        if kind == "system":
            content = [
                _cached(
                    {"type": "text", "text": m["content"]},
                    cache.get(m.get("providerOptions"), "system message"),
                )
                for m in group
                if m["role"] == "system"  # all of the group: narrows the type
            ]
            if i == 0 or system is None:
                system = content
            else:  # a system message later in the conversation
                messages.append({"role": "system", "content": content})
                betas.add("mid-conversation-system-2026-04-07")
        elif kind == "user":
            messages.append({"role": "user", "content": _user_content(group, cache, warnings, betas)})
        elif kind == "assistant":
            last = i == len(groups) - 1
            content = _assistant_content(group, cache, warnings, send_reasoning, last)
            messages.append({"role": "assistant", "content": _tool_use_last(content)})
        else:
            raise InvalidInputError(f"Unsupported role: {kind}")
    return system, messages


def _user_content(
    group: list[PromptMessage], cache: CacheControl, warnings: list[CallWarning], betas: set[str]
) -> list[JsonObject]:
    out: list[JsonObject] = []
    for message in group:
        if message["role"] == "tool":
            results = message["content"]
            for j, result in enumerate(results):
                if result["type"] != "tool-approval-response":
                    last = j == len(results) - 1
                    out.append(_tool_result(result, message, last, cache, warnings, betas))
        elif message["role"] == "user":
            out += _user_blocks(message, cache, betas)
    return out


def _user_blocks(message: UserMessage, cache: CacheControl, betas: set[str]) -> list[JsonObject]:
    out: list[JsonObject] = []
    content = message["content"]
    for j, part in enumerate(content):
        last = j == len(content) - 1
        control = cache.get(part.get("providerOptions"), "user message part")
        if control is None and last:
            control = cache.get(message.get("providerOptions"), "user message")
        if part["type"] == "text":
            out.append(_cached({"type": "text", "text": part["text"]}, control))
        else:
            out.append(_cached(_file_block(part, betas), control))
    return out


def _file_block(part: FilePart, betas: set[str]) -> JsonObject:
    media_type = str(part["mediaType"])
    kind, value = file_data(part)
    url: JsonObject | None = {"type": "url", "url": value} if kind == "url" else None
    if media_type.startswith("image/"):
        image = "image/jpeg" if media_type == "image/*" else media_type
        return {"type": "image", "source": url or {"type": "base64", "media_type": image, "data": value}}
    if media_type not in ("application/pdf", "text/plain"):
        raise InvalidInputError(f"Anthropic does not take {media_type} file parts")
    options = _anthropic(part.get("providerOptions"))
    if media_type == "application/pdf":
        betas.add("pdfs-2024-09-25")
        source = url or {"type": "base64", "media_type": "application/pdf", "data": value}
    else:
        text = base64.b64decode(value).decode("utf-8") if url is None else ""
        source = url or {"type": "text", "media_type": "text/plain", "data": text}
    block: JsonObject = {"type": "document", "source": source}
    title = options.get("title") or part.get("filename")
    if title is not None:
        block["title"] = title
    if options.get("context"):
        block["context"] = options["context"]
    citations = options.get("citations")
    if isinstance(citations, Mapping) and citations.get("enabled"):
        block["citations"] = {"enabled": True}
    return block


def _tool_result(
    part: ToolResultPart,
    message: ToolMessage,
    last: bool,
    cache: CacheControl,
    warnings: list[CallWarning],
    betas: set[str],
) -> JsonObject:
    output: Mapping[str, Any] = part["output"]
    out_options = output.get("providerOptions")
    if out_options is None and output.get("type") == "content":
        out_options = next(
            (p.get("providerOptions") for p in output["value"] if p.get("providerOptions")), None
        )
    control = cache.get(part.get("providerOptions"), "tool result part")
    if control is None:
        control = cache.get(out_options, "tool result output")
    if control is None and last:
        control = cache.get(message.get("providerOptions"), "tool result message")
    kind = output.get("type")
    value: JsonValue
    if kind == "content":
        value = [b for p in output["value"] if (b := _content_block(p, warnings, betas)) is not None]
    elif kind in ("text", "error-text"):
        value = output.get("value")
    elif kind == "execution-denied":
        value = output.get("reason") or "Tool call execution denied."
    else:
        value = compact_json(output.get("value"))
    block: JsonObject = {"type": "tool_result", "tool_use_id": part["toolCallId"], "content": value}
    if kind in ("error-text", "error-json"):
        block["is_error"] = True
    return _cached(block, control)


def _content_block(
    part: Mapping[str, Any], warnings: list[CallWarning], betas: set[str]
) -> JsonObject | None:
    kind = part.get("type")
    if kind == "text":
        return {"type": "text", "text": part["text"]}
    if kind == "image-data":
        return {
            "type": "image",
            "source": {"type": "base64", "media_type": part["mediaType"], "data": part["data"]},
        }
    if kind == "image-url":
        return {"type": "image", "source": {"type": "url", "url": part["url"]}}
    if kind == "file-url":
        return {"type": "document", "source": {"type": "url", "url": part["url"]}}
    if kind == "file-data" and part.get("mediaType") == "application/pdf":
        betas.add("pdfs-2024-09-25")
        return {
            "type": "document",
            "source": {"type": "base64", "media_type": part["mediaType"], "data": part["data"]},
        }
    if kind == "custom" and _anthropic(part.get("providerOptions")).get("type") == "tool-reference":
        return {
            "type": "tool_reference",
            "tool_name": _anthropic(part.get("providerOptions")).get("toolName"),
        }
    message = f"unsupported tool content part type: {kind}"
    if kind == "file-data":
        message += f" with media type: {part.get('mediaType')}"
    warnings.append({"type": "other", "message": message})
    return None


def _assistant_content(
    group: list[PromptMessage],
    cache: CacheControl,
    warnings: list[CallWarning],
    send_reasoning: bool,
    last_group: bool,
) -> list[JsonObject]:
    out: list[JsonObject] = []
    mcp_ids: set[str] = set()
    for j, message in enumerate(group):
        if message["role"] != "assistant":
            continue
        content = message["content"]
        for k, part in enumerate(content):
            last = k == len(content) - 1
            control = cache.get(part.get("providerOptions"), "assistant message part")
            if control is None and last:
                control = cache.get(message.get("providerOptions"), "assistant message")
            if part["type"] == "text":
                trim = last_group and j == len(group) - 1 and last
                out.append(_text_block(part, control, trim=trim))
            elif part["type"] == "reasoning":
                block = _reasoning_block(part, cache, warnings, send_reasoning)
                if block is not None:
                    out.append(block)
            elif part["type"] == "tool-call":
                block = _tool_call_block(part, control, warnings, mcp_ids)
                if block is not None:
                    out.append(block)
            elif part["type"] == "tool-result":
                block = _server_result_block(part, control, warnings, mcp_ids)
                if block is not None:
                    out.append(block)
    return out


def _text_block(part: TextPart, control: JsonValue, *, trim: bool) -> JsonObject:
    meta = _anthropic(part.get("providerOptions"))
    if meta.get("type") == "compaction":
        return _cached({"type": "compaction", "content": part["text"]}, control)
    block: JsonObject = {"type": "text", "text": part["text"].strip() if trim else part["text"]}
    if meta.get("citations") is not None:
        block["citations"] = meta["citations"]
    return _cached(block, control)


def _reasoning_block(
    part: ReasoningPart, cache: CacheControl, warnings: list[CallWarning], send: bool
) -> JsonObject | None:
    if not send:
        warnings.append({"type": "other", "message": "sending reasoning content is disabled for this model"})
        return None
    options = part.get("providerOptions")
    meta = _anthropic(options)
    if meta.get("signature") is not None:
        cache.get(options, "thinking block", can_cache=False)
        return {"type": "thinking", "thinking": part.get("text", ""), "signature": meta["signature"]}
    if meta.get("redactedData") is not None:
        cache.get(options, "redacted thinking block", can_cache=False)
        return {"type": "redacted_thinking", "data": meta["redactedData"]}
    warnings.append({"type": "other", "message": "unsupported reasoning metadata"})
    return None


def _tool_call_block(
    part: ToolCallPart, control: JsonValue, warnings: list[CallWarning], mcp_ids: set[str]
) -> JsonObject | None:
    meta = _anthropic(part.get("providerOptions"))
    call_id, name, args = part["toolCallId"], part["toolName"], part.get("input")
    if not part.get("providerExecuted"):
        block: JsonObject = {"type": "tool_use", "id": call_id, "name": name, "input": args}
        caller = meta.get("caller")
        if isinstance(caller, Mapping):
            if caller.get("type") in ("code_execution_20250825", "code_execution_20260120") and caller.get(
                "toolId"
            ):
                block["caller"] = {"type": caller["type"], "tool_id": caller["toolId"]}
            elif caller.get("type") == "direct":
                block["caller"] = {"type": "direct"}
        return _cached(block, control)
    if meta.get("type") == "mcp-tool-use":
        mcp_ids.add(call_id)
        server = meta.get("serverName")
        if not isinstance(server, str):
            warnings.append(
                {"type": "other", "message": "mcp tool use server name is required and must be a string"}
            )
            return None
        block = {"type": "mcp_tool_use", "id": call_id, "name": name, "input": args, "server_name": server}
        return _cached(block, control)
    input_type = args.get("type") if isinstance(args, Mapping) else None
    if name == "code_execution" and input_type in ("bash_code_execution", "text_editor_code_execution"):
        block = {"type": "server_tool_use", "id": call_id, "name": input_type, "input": args}
    elif name == "code_execution" and input_type == "programmatic-tool-call":
        rest = {key: value for key, value in args.items() if key != "type"}
        block = {"type": "server_tool_use", "id": call_id, "name": "code_execution", "input": rest}
    elif name in _SERVER_TOOLS:
        block = {"type": "server_tool_use", "id": call_id, "name": name, "input": args}
    elif name == "advisor":
        block = {"type": "server_tool_use", "id": call_id, "name": "advisor", "input": {}}
    else:
        message = f"provider executed tool call for tool {name} is not supported"
        warnings.append({"type": "other", "message": message})
        return None
    return _cached(block, control)


def _server_result_block(
    part: ToolResultPart, control: JsonValue, warnings: list[CallWarning], mcp_ids: set[str]
) -> JsonObject | None:
    """A provider-executed tool's result, sent back in the assistant message."""
    call_id, name = part["toolCallId"], part["toolName"]
    output: Mapping[str, Any] = part.get("output") or {}
    kind, value = output.get("type"), output.get("value")
    content: JsonValue = None
    block_type = f"{name}_tool_result"
    if call_id in mcp_ids:
        if kind in ("json", "error-json"):
            block = {
                "type": "mcp_tool_result",
                "tool_use_id": call_id,
                "is_error": kind == "error-json",
                "content": value,
            }
            return _cached(block, control)
    elif name == "code_execution":
        block_type, content = _code_result(kind, value)
    elif name in ("web_fetch", "web_search") and kind == "error-json":
        code = _error_value(value).get("errorCode") or "unavailable"
        content = {"type": f"{name}_tool_result_error", "error_code": code}
    elif name == "web_fetch" and kind == "json" and isinstance(value, Mapping):
        content = _web_fetch_content(value)
    elif name == "web_search" and kind == "json" and isinstance(value, list):
        content = [
            pick(
                r,
                url="url",
                title="title",
                page_age="pageAge",
                encrypted_content="encryptedContent",
                type="type",
            )
            for r in value
        ]
    elif (
        name in ("tool_search_tool_regex", "tool_search_tool_bm25")
        and kind == "json"
        and isinstance(value, list)
    ):
        references: list[JsonValue] = [
            {"type": "tool_reference", "tool_name": r.get("toolName")} for r in value
        ]
        block_type = "tool_search_tool_result"
        content = {"type": "tool_search_tool_search_result", "tool_references": references}
    if content is None:
        if name in (*_SERVER_TOOLS, "advisor") or call_id in mcp_ids:
            message = f"provider executed tool result output type {kind} for tool {name} is not supported"
        else:
            message = f"provider executed tool result for tool {name} is not supported"
        warnings.append({"type": "other", "message": message})
        return None
    return _cached({"type": block_type, "tool_use_id": call_id, "content": content}, control)


def _error_value(value: object) -> Mapping[str, Any]:
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            return {"errorCode": "unavailable"}
        return parsed if isinstance(parsed, Mapping) else {"errorCode": "unavailable"}
    return value if isinstance(value, Mapping) else {}


def _web_fetch_content(value: Mapping[str, Any]) -> JsonObject:
    doc = value.get("content") or {}
    source = doc.get("source") or {}
    return {
        "type": "web_fetch_result",
        **pick(value, url="url", retrieved_at="retrievedAt"),
        "content": {
            "type": "document",
            **pick(doc, title="title", citations="citations"),
            "source": pick(source, type="type", media_type="mediaType", data="data"),
        },
    }


def _code_result(kind: object, value: object) -> tuple[str, JsonValue]:
    """The block type and content a code execution result goes back as."""
    if kind in ("error-text", "error-json"):
        info = _error_value(value)
        code = info.get("errorCode") or "unknown"
        if info.get("type") == "code_execution_tool_result_error":
            return "code_execution_tool_result", {
                "type": "code_execution_tool_result_error",
                "error_code": code,
            }
        return "bash_code_execution_tool_result", {
            "type": "bash_code_execution_tool_result_error",
            "error_code": code,
        }
    if kind != "json" or not isinstance(value, Mapping) or not isinstance(value.get("type"), str):
        return "", None
    result_type = value["type"]
    if result_type in ("code_execution_result", "encrypted_code_execution_result"):
        out = "encrypted_stdout" if result_type == "encrypted_code_execution_result" else "stdout"
        content = {
            "type": result_type,
            **pick(value, **{out: out}, stderr="stderr", return_code="return_code"),
            "content": value.get("content") or [],
        }
        return "code_execution_tool_result", content
    if result_type.startswith("bash_code_execution"):
        return "bash_code_execution_tool_result", dict(value)
    return "text_editor_code_execution_tool_result", dict(value)


def _tool_use_last(content: list[JsonObject]) -> list[JsonObject]:
    """``moveToolUseBlocksToEnd``: within each stretch between thinking blocks, tool_use last."""
    result: list[JsonObject] = []
    segment: list[JsonObject] = []

    def flush() -> None:
        result.extend(b for b in segment if b["type"] != "tool_use")
        result.extend(b for b in segment if b["type"] == "tool_use")
        segment.clear()

    for block in content:
        if block["type"] in ("thinking", "redacted_thinking"):
            flush()
            result.append(block)
        else:
            segment.append(block)
    flush()
    return result
