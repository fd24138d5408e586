"""Anthropic Messages stream events to provider parts, as ``@ai-sdk/anthropic`` 3.0 maps them.

Part for part what the AI SDK's ``doStream`` transform emits (Mastra 1.71 bundles it): part ids
are block indexes (the loop gives text a fresh id per model call, as Mastra's input stream does;
reasoning keeps the index), source ids are generated. Server tools (web search, web fetch, code execution, tool
search) stream as ``tool-input-*`` / ``tool-call`` / ``tool-result`` parts with
``providerExecuted``; the finish part carries the v3 ``finishReason`` (``{unified, raw}``), the
v3 usage and ``providerMetadata.anthropic`` as the AI SDK reports them.
"""

from __future__ import annotations

import json
from typing import Any, NotRequired, TypedDict

from runstream._ids import new_id
from runstream._json import JsonObject, JsonValue
from runstream.models.base import StreamPart
from runstream.models.parts import (
    FinishPart,
    FinishReason,
    FinishReasonV3,
    OutputTokensV3,
    ProviderMetadata,
    SourcePart,
    TextEndPart,
    TextStartPart,
    ToolCallPart,
    ToolResultPart,
    UsageV3,
)

_STOP_REASONS: dict[str, FinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "tool_use": "tool-calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "content-filter",
}

_SERVER_TOOLS = (
    "web_fetch",
    "web_search",
    "code_execution",
    "text_editor_code_execution",
    "bash_code_execution",
)
_CODE_TOOLS = ("text_editor_code_execution", "bash_code_execution")


class CitationDocument(TypedDict):
    """A prompt document with citations enabled, as document citations index it."""

    title: str | None  # a fetched web page's may be missing
    mediaType: str | None
    filename: NotRequired[str]


class _Iteration(TypedDict):
    """One entry of the vendor's ``usage.iterations``."""

    type: str
    model: NotRequired[str | None]
    input_tokens: NotRequired[int | None]
    output_tokens: NotRequired[int | None]
    cache_creation_input_tokens: NotRequired[int | None]
    cache_read_input_tokens: NotRequired[int | None]


class _OutputDetails(TypedDict, total=False):
    thinking_tokens: int | None


class _Usage(TypedDict, total=False):
    """The vendor's ``usage`` (``message_start``, then each ``message_delta``), as read."""

    input_tokens: int | None
    output_tokens: int | None
    cache_creation_input_tokens: int | None
    cache_read_input_tokens: int | None
    output_tokens_details: _OutputDetails | None
    iterations: list[_Iteration] | None


class _Skill(TypedDict):
    type: str
    skill_id: str
    version: str


class _Container(TypedDict):
    """The vendor's ``container`` (code execution's, with the skills it loaded)."""

    id: str
    expires_at: str
    skills: NotRequired[list[_Skill] | None]


class _AppliedEdit(TypedDict):
    type: str
    cleared_tool_uses: NotRequired[int]
    cleared_thinking_turns: NotRequired[int]
    cleared_input_tokens: NotRequired[int]


class _ContextManagement(TypedDict):
    """The vendor's ``context_management`` of a ``message_delta``."""

    applied_edits: NotRequired[list[_AppliedEdit] | None]


class _StopDelta(TypedDict, total=False):
    """A ``message_delta``'s ``delta``."""

    stop_reason: str | None
    stop_sequence: str | None
    stop_details: JsonValue
    container: _Container | None


class _MessageDelta(TypedDict, total=False):
    """A ``message_delta`` event (its usage read through :class:`_Usage`, kept as JSON too)."""

    delta: _StopDelta
    usage: _Usage | None
    context_management: _ContextManagement | None


class _Caller(TypedDict, total=False):
    type: str
    tool_id: str


class _ContentBlock(TypedDict, total=False):
    """A ``content_block_start``'s block (or a pre-filled one of ``message_start``): the keys
    the mapper reads from text, thinking, tool use and server tool result blocks."""

    type: str
    id: str
    name: str
    input: JsonValue
    caller: _Caller | None
    data: str
    server_name: str
    tool_use_id: str
    content: JsonValue
    is_error: bool | None


class _Message(TypedDict, total=False):
    """``message_start``'s message."""

    id: str
    model: str
    usage: _Usage | None
    container: _Container | None
    stop_reason: str | None
    content: list[_ContentBlock] | None


class _Block:
    """One open content block: text, reasoning or a tool call being streamed."""

    __slots__ = ("citations", "first", "id", "input", "input_type", "kind", "meta", "name", "server", "tool")

    def __init__(self, kind: str, part_id: str) -> None:
        self.kind = kind
        self.id = part_id
        self.name = ""
        self.input = ""
        self.first = True
        self.server = False
        self.tool: str | None = None  # the vendor's name of a server tool
        self.input_type: str | None = None
        self.citations: list[JsonObject] = []
        self.meta: ProviderMetadata | None = None


def _unified(reason: str | None, json_tool: bool = False) -> FinishReason:
    if reason == "tool_use" and json_tool:
        return "stop"
    return _STOP_REASONS.get(reason or "", "other")


class AnthropicMapper:
    """Raw Messages events (SDK models) to parts, state kept across one stream."""

    __slots__ = (
        "_blocks",
        "_cache_write",
        "_container",
        "_context",
        "_documents",
        "_finish",
        "_json",
        "_json_used",
        "_kind",
        "_mcp",
        "_raw_usage",
        "_stop_details",
        "_stop_sequence",
        "_usage",
        "done",
    )

    def __init__(self, documents: list[CitationDocument] | None = None, *, json_tool: bool = False) -> None:
        self.done = False
        self._json = json_tool  # structured output through the "json" tool (models without output_config)
        self._json_used = False
        self._blocks: dict[int, _Block] = {}
        self._kind: str | None = None  # the type of the block being streamed
        self._usage: _Usage = {
            "input_tokens": 0,
            "output_tokens": 0,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        }
        self._raw_usage: JsonObject | None = None
        """The vendor's usage as it came (every key, for ``providerMetadata``)."""
        self._cache_write: int | None = None
        self._stop_sequence: str | None = None
        self._stop_details: JsonObject | None = None
        self._container: JsonObject | None = None
        self._context: JsonObject | None = None
        self._finish: FinishReasonV3 = {"unified": "other", "raw": None}
        self._documents = documents or []  # the prompt's documents, which document citations index
        self._mcp: dict[str, _Block] = {}  # MCP tool calls by id, for their results

    def map(self, event: Any) -> list[StreamPart]:
        kind = event.type
        if kind == "content_block_delta":
            return self._delta(event.index, event.delta)
        if kind == "content_block_start":
            return self._block_start(event.index, event.content_block.to_dict())
        if kind == "content_block_stop":
            self._kind = None
            block = self._blocks.pop(event.index, None)
            return [] if block is None else self._block_stop(block)
        if kind == "message_start":
            message = event.message.to_dict()
            return self._message_start(message, message.get("usage") or {})
        if kind == "message_delta":
            delta = event.to_dict()
            self._message_delta(delta, delta.get("usage") or {})
        elif kind == "message_stop":
            self.done = True
        return []

    # -- message events ------------------------------------------------------------------------

    def _message_start(self, message: _Message, raw_json: JsonObject) -> list[StreamPart]:
        """``raw_json``: the message's usage as JSON (all of it goes into ``providerMetadata``)."""
        raw = message.get("usage") or {}
        usage = self._usage
        usage["input_tokens"] = raw.get("input_tokens") or 0
        usage["cache_read_input_tokens"] = raw.get("cache_read_input_tokens") or 0
        usage["cache_creation_input_tokens"] = raw.get("cache_creation_input_tokens") or 0
        self._raw_usage = dict(raw_json)
        self._cache_write = raw.get("cache_creation_input_tokens")
        container = message.get("container")
        if container is not None:
            self._container = {
                "expiresAt": container.get("expires_at"),
                "id": container.get("id"),
                "skills": None,
            }
        if message.get("stop_reason") is not None:
            unified = _unified(message["stop_reason"], self._json_used)
            self._finish = {"unified": unified, "raw": message["stop_reason"]}
        parts: list[StreamPart] = [
            {"type": "response-metadata", "id": message.get("id"), "modelId": message.get("model")}
        ]
        for block in message.get("content") or ():
            if block.get("type") == "tool_use":  # a pre-filled tool call
                text = json.dumps(block.get("input") or {}, separators=(",", ":"), ensure_ascii=False)
                call_id, name = block["id"], block["name"]
                parts += [
                    {"type": "tool-input-start", "id": call_id, "toolName": name},
                    {"type": "tool-input-delta", "id": call_id, "delta": text},
                    {"type": "tool-input-end", "id": call_id},
                    {"type": "tool-call", "toolCallId": call_id, "toolName": name, "input": text},
                ]
        return parts

    def _message_delta(self, event: _MessageDelta, raw_json: JsonObject) -> None:
        """``raw_json``: the event's usage as JSON (merged into the kept raw usage)."""
        raw = event.get("usage") or {}
        usage = self._usage
        if raw.get("input_tokens") is not None:
            usage["input_tokens"] = raw["input_tokens"]
        usage["output_tokens"] = raw.get("output_tokens") or 0
        if raw.get("output_tokens_details") is not None:
            usage["output_tokens_details"] = raw["output_tokens_details"]
        if raw.get("cache_read_input_tokens") is not None:
            usage["cache_read_input_tokens"] = raw["cache_read_input_tokens"]
        if raw.get("iterations") is not None:
            usage["iterations"] = raw["iterations"]
        if raw.get("cache_creation_input_tokens") is not None:
            usage["cache_creation_input_tokens"] = self._cache_write = raw["cache_creation_input_tokens"]
        delta = event.get("delta") or {}
        reason = delta.get("stop_reason")
        self._finish = {"unified": _unified(reason, self._json_used), "raw": reason}
        self._stop_sequence = delta.get("stop_sequence")
        self._stop_details = _stop_details(delta.get("stop_details"))
        container = delta.get("container")
        self._container = None if container is None else _container(container)
        context = event.get("context_management")
        if context:
            self._context = _context_management(context)
        self._raw_usage = {**(self._raw_usage or {}), **raw_json}

    def end(self) -> FinishPart | None:
        """The finish part (after ``message_stop``), or None when the stream was cut."""
        if not self.done:
            return None
        usage = self._usage
        iterations = usage.get("iterations")
        meta: JsonObject = {
            "usage": self._raw_usage if self._raw_usage is not None else None,
            "cacheCreationInputTokens": self._cache_write,
            "stopSequence": self._stop_sequence,
        }
        if self._stop_details is not None:
            meta["stopDetails"] = self._stop_details
        meta["iterations"] = [_iteration(it) for it in iterations] if iterations else None
        meta["container"] = self._container
        meta["contextManagement"] = self._context
        return {
            "type": "finish",
            "finishReason": self._finish.copy(),
            "usage": _v3_usage(usage, self._raw_usage),
            "providerMetadata": {"anthropic": meta},
        }

    # -- content blocks ------------------------------------------------------------------------

    def _block_start(self, index: int, part: _ContentBlock) -> list[StreamPart]:
        kind = part.get("type")
        self._kind = kind
        if kind == "text" and self._json:
            return []
        if kind == "text" or kind == "compaction":
            block = self._blocks[index] = _Block("text", str(index))
            start: TextStartPart = {"type": "text-start", "id": block.id}
            if kind == "compaction":
                start["providerMetadata"] = {"anthropic": {"type": "compaction"}}
            return [start]
        if kind == "thinking":
            self._blocks[index] = _Block("reasoning", str(index))
            return [{"type": "reasoning-start", "id": str(index)}]
        if kind == "redacted_thinking":
            self._blocks[index] = _Block("reasoning", str(index))
            meta = {"anthropic": {"redactedData": part.get("data")}}
            return [{"type": "reasoning-start", "id": str(index), "providerMetadata": meta}]
        if kind == "tool_use" and self._json and part.get("name") == "json":
            self._json_used = True
            block = self._blocks[index] = _Block("text", str(index))
            return [{"type": "text-start", "id": block.id}]
        if kind == "tool_use":
            return self._tool_start(index, part)
        if kind == "server_tool_use":
            return self._server_tool_start(index, part)
        if kind == "mcp_tool_use":
            return [_mcp_call(part, self._mcp)]
        return _tool_result(kind, part, self._documents, self._mcp)

    def _tool_start(self, index: int, part: _ContentBlock) -> list[StreamPart]:
        block = self._blocks[index] = _Block("tool", part["id"])
        block.name = part["name"]
        block.input = _initial_input(part.get("input"))
        block.first = not block.input
        caller = part.get("caller")
        if caller:
            block.meta = {
                "anthropic": {"caller": {"type": caller.get("type"), "toolId": caller.get("tool_id")}}
            }
        return [{"type": "tool-input-start", "id": block.id, "toolName": block.name}]

    def _server_tool_start(self, index: int, part: _ContentBlock) -> list[StreamPart]:
        name = part.get("name", "")
        block = _Block("tool", part["id"])
        block.server = True
        if name in _SERVER_TOOLS:
            block.tool = "code_execution" if name in _CODE_TOOLS else name
            block.input_type = (
                name
                if name in _CODE_TOOLS
                else "programmatic-tool-call"
                if name == "code_execution"
                else None
            )
            block.input = _initial_input(part.get("input"))
            block.first = not block.input
        elif name in ("tool_search_tool_regex", "tool_search_tool_bm25", "advisor"):
            block.tool = name
            block.input = "{}" if name == "advisor" else ""
        else:
            return []
        block.name = block.tool
        self._blocks[index] = block
        return [
            {"type": "tool-input-start", "id": block.id, "toolName": block.name, "providerExecuted": True}
        ]

    def _block_stop(self, block: _Block) -> list[StreamPart]:
        if block.kind == "text":
            end: TextEndPart = {"type": "text-end", "id": block.id}
            if block.citations:
                end["providerMetadata"] = {"anthropic": {"citations": block.citations}}
            return [end]
        if block.kind == "reasoning":
            return [{"type": "reasoning-end", "id": block.id}]
        text = block.input or "{}"
        if block.tool == "code_execution":
            text = _programmatic(text)
        call: ToolCallPart = {
            "type": "tool-call",
            "toolCallId": block.id,
            "toolName": block.name,
            "input": text,
        }
        if block.server:
            call["providerExecuted"] = True
        if block.meta is not None:
            call["providerMetadata"] = block.meta
        return [{"type": "tool-input-end", "id": block.id}, call]

    def _delta(self, index: int, delta: Any) -> list[StreamPart]:
        kind = delta.type
        if kind == "text_delta":
            if self._json:
                return []
            block = self._blocks.get(index)
            return [{"type": "text-delta", "id": block.id if block else str(index), "delta": delta.text}]
        if kind == "thinking_delta":
            return [{"type": "reasoning-delta", "id": str(index), "delta": delta.thinking}]
        if kind == "signature_delta":
            if self._kind != "thinking":
                return []
            meta = {"anthropic": {"signature": delta.signature}}
            return [{"type": "reasoning-delta", "id": str(index), "delta": "", "providerMetadata": meta}]
        if kind == "input_json_delta":
            return self._input_delta(index, delta.partial_json)
        if kind == "citations_delta":
            return self._citation(index, delta.citation.to_dict())
        if kind == "compaction_delta":
            content = getattr(delta, "content", None)
            block = self._blocks.get(index)
            return (
                []
                if content is None or block is None
                else [{"type": "text-delta", "id": block.id, "delta": content}]
            )
        return []

    def _input_delta(self, index: int, text: str) -> list[StreamPart]:
        block = self._blocks.get(index)
        if block is not None and block.kind == "text" and self._json and text:
            return [{"type": "text-delta", "id": block.id, "delta": text}]
        if not text or block is None or block.kind != "tool":
            return []
        if block.first and block.input_type is not None:  # the AI SDK tags code execution input
            text = f'{{"type": "{block.input_type}",{text[1:]}'
        block.input += text
        block.first = False
        return [{"type": "tool-input-delta", "id": block.id, "delta": text}]

    def _citation(self, index: int, citation: JsonObject) -> list[StreamPart]:
        block = self._blocks.get(index)
        kind = citation.get("type")
        if block is not None and block.kind == "text" and kind == "web_search_result_location":
            block.citations.append(citation)
        if kind == "web_search_result_location":
            meta = pick(citation, citedText="cited_text", encryptedIndex="encrypted_index")
            return [_url_source(citation, {"anthropic": meta})]
        if kind not in ("page_location", "char_location"):
            return []
        index_ = citation.get("document_index")
        if not isinstance(index_, int) or not 0 <= index_ < len(self._documents):
            return []
        doc = self._documents[index_]
        if kind == "page_location":
            meta = pick(
                citation,
                citedText="cited_text",
                startPageNumber="start_page_number",
                endPageNumber="end_page_number",
            )
        else:
            meta = pick(
                citation,
                citedText="cited_text",
                startCharIndex="start_char_index",
                endCharIndex="end_char_index",
            )
        title = _text(citation.get("document_title")) or doc.get("title")
        document: SourcePart = {"type": "source", "sourceType": "document", "id": new_id()}
        document["mediaType"] = doc.get("mediaType")
        document["title"] = title
        if doc.get("filename") is not None:
            document["filename"] = doc["filename"]
        document["providerMetadata"] = {"anthropic": meta}
        return [document]


def _initial_input(value: JsonValue) -> str:
    if isinstance(value, dict) and value:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return ""


def _programmatic(text: str) -> str:
    """Code execution input without a ``type`` gets the AI SDK's ``programmatic-tool-call`` tag."""
    try:
        parsed = json.loads(text)
    except ValueError:
        return text
    if isinstance(parsed, dict) and "code" in parsed and "type" not in parsed:
        return json.dumps(
            {"type": "programmatic-tool-call", **parsed}, separators=(",", ":"), ensure_ascii=False
        )
    return text


def _mcp_call(part: _ContentBlock, calls: dict[str, _Block]) -> ToolCallPart:
    meta = {"anthropic": {"type": "mcp-tool-use", "serverName": part.get("server_name")}}
    block = _Block("mcp", part["id"])
    block.name, block.meta = part.get("name", ""), meta
    calls[part["id"]] = block
    return {
        "type": "tool-call",
        "toolCallId": part["id"],
        "toolName": block.name,
        "input": json.dumps(part.get("input"), separators=(",", ":"), ensure_ascii=False),
        "providerExecuted": True,
        "dynamic": True,
        "providerMetadata": meta,
    }


def pick(source: object, **names: str) -> JsonObject:
    """``{out: source[in]}`` for the keys ``source`` has: JSON drops what JavaScript leaves
    ``undefined``, so a key the vendor did not send stays out (an explicit null stays)."""
    if not isinstance(source, dict):
        return {}
    return {out: source[name] for out, name in names.items() if name in source}


def _tool_result(
    kind: str | None, part: _ContentBlock, documents: list[CitationDocument], mcp: dict[str, _Block]
) -> list[StreamPart]:
    """A server tool's result block as a provider-executed ``tool-result`` (plus its sources)."""
    call_id = part.get("tool_use_id") or ""
    content = part.get("content")
    if kind == "web_search_tool_result":
        return _web_search_result(call_id, content)
    if kind == "web_fetch_tool_result" and isinstance(content, dict):
        if content.get("type") == "web_fetch_result":
            doc = _object(content.get("content"))
            source = _object(doc.get("source"))
            documents.append(
                {
                    "title": _text(doc.get("title")) or _text(content.get("url")),
                    "mediaType": _text(source.get("media_type")),
                }
            )
            result: JsonObject = {
                "type": "web_fetch_result",
                **pick(content, url="url", retrievedAt="retrieved_at"),
                "content": {
                    **pick(doc, type="type", title="title", citations="citations"),
                    "source": pick(source, type="type", mediaType="media_type", data="data"),
                },
            }
            return [_result(call_id, "web_fetch", result)]
        if content.get("type") == "web_fetch_tool_result_error":
            error = {"type": "web_fetch_tool_result_error", **pick(content, errorCode="error_code")}
            return [_result(call_id, "web_fetch", error, is_error=True)]
        return []
    if kind == "code_execution_tool_result" and isinstance(content, dict):
        return _code_result(call_id, content)
    if kind in ("bash_code_execution_tool_result", "text_editor_code_execution_tool_result"):
        return [_result(call_id, "code_execution", content)]
    if kind == "mcp_tool_result":
        call = mcp.pop(call_id, None)
        mcp_result = _result(call_id, call.name if call else "", content, is_error=bool(part.get("is_error")))
        mcp_result["dynamic"] = True
        if call is not None and call.meta is not None:
            mcp_result["providerMetadata"] = call.meta
        return [mcp_result]
    return []


def _web_search_result(call_id: str, content: JsonValue) -> list[StreamPart]:
    if not isinstance(content, list):
        error = {"type": "web_search_tool_result_error", **pick(content, errorCode="error_code")}
        return [_result(call_id, "web_search", error, is_error=True)]
    items = [_object(item) for item in content]
    results: list[JsonValue] = [
        {
            **pick(item, url="url", title="title"),
            "pageAge": item.get("page_age"),
            **pick(item, encryptedContent="encrypted_content", type="type"),
        }
        for item in items
    ]
    parts: list[StreamPart] = [_result(call_id, "web_search", results)]
    parts += (_url_source(item, {"anthropic": {"pageAge": item.get("page_age")}}) for item in items)
    return parts


def _object(value: JsonValue) -> JsonObject:
    """A vendor JSON value read as an object (``{}`` for a missing one)."""
    return value if isinstance(value, dict) else {}


def _text(value: JsonValue) -> str | None:
    """A vendor JSON value read as a string (``None`` for a missing one)."""
    return value if isinstance(value, str) else None


def _url_source(found: JsonObject, metadata: ProviderMetadata) -> SourcePart:
    """A ``url`` source with the ``url`` and ``title`` the vendor sent (a missing one stays out)."""
    source: SourcePart = {"type": "source", "sourceType": "url", "id": new_id()}
    if "url" in found:
        source["url"] = _text(found["url"])
    if "title" in found:
        source["title"] = _text(found["title"])
    source["providerMetadata"] = metadata
    return source


def _code_result(call_id: str, content: JsonObject) -> list[StreamPart]:
    kind = content.get("type")
    if kind in ("code_execution_result", "encrypted_code_execution_result"):
        out = "encrypted_stdout" if kind == "encrypted_code_execution_result" else "stdout"
        result: JsonObject = {
            "type": kind,
            **pick(content, **{out: out}, stderr="stderr", return_code="return_code"),
            "content": content.get("content") or [],
        }
        return [_result(call_id, "code_execution", result)]
    if kind == "code_execution_tool_result_error":
        error = {"type": kind, **pick(content, errorCode="error_code")}
        return [_result(call_id, "code_execution", error, is_error=True)]
    return []


def _result(call_id: str, name: str, result: JsonValue, *, is_error: bool = False) -> ToolResultPart:
    part: ToolResultPart = {"type": "tool-result", "toolCallId": call_id, "toolName": name}
    if is_error:
        part["isError"] = True
    part["result"] = result  # (the AI SDK marks the call providerExecuted, not its result)
    return part


def _v3_usage(usage: _Usage, raw: JsonObject | None) -> UsageV3:
    """``convertAnthropicMessagesUsage``: input totals include cache reads and writes."""
    write = usage.get("cache_creation_input_tokens") or 0
    read = usage.get("cache_read_input_tokens") or 0
    details = usage.get("output_tokens_details") or {}
    reasoning = details.get("thinking_tokens") if isinstance(details, dict) else None
    inp, out = usage.get("input_tokens") or 0, usage.get("output_tokens") or 0
    iterations = usage.get("iterations") or []
    if iterations and not any(it.get("type") == "fallback_message" for it in iterations):
        executed = [it for it in iterations if it.get("type") in ("compaction", "message")]
        if executed:
            inp = sum(it.get("input_tokens") or 0 for it in executed)
            out = sum(it.get("output_tokens") or 0 for it in executed)
    output: OutputTokensV3 = {"total": out}
    if reasoning is not None:
        output["text"] = out - reasoning
        output["reasoning"] = reasoning
    return {
        "inputTokens": {"total": inp + write + read, "noCache": inp, "cacheRead": read, "cacheWrite": write},
        "outputTokens": output,
        "raw": raw if raw is not None else dict(usage),
    }


def _iteration(it: _Iteration) -> JsonObject:
    out: JsonObject = {"type": it.get("type")}
    if it.get("model") is not None:
        out["model"] = it["model"]
    out["inputTokens"] = it.get("input_tokens")
    out["outputTokens"] = it.get("output_tokens")
    if it.get("cache_creation_input_tokens"):
        out["cacheCreationInputTokens"] = it["cache_creation_input_tokens"]
    if it.get("cache_read_input_tokens"):
        out["cacheReadInputTokens"] = it["cache_read_input_tokens"]
    return out


def _stop_details(details: JsonValue) -> JsonObject | None:
    if not isinstance(details, dict):
        return None
    out: JsonObject = {"type": details.get("type")}
    for key, name in (
        ("category", "category"),
        ("explanation", "explanation"),
        ("recommended_model", "recommendedModel"),
    ):
        if details.get(key) is not None:
            out[name] = details[key]
    return out


def _container(container: _Container) -> JsonObject:
    skills = container.get("skills")
    return {
        "expiresAt": container.get("expires_at"),
        "id": container.get("id"),
        "skills": None
        if skills is None
        else [
            {"type": s.get("type"), "skillId": s.get("skill_id"), "version": s.get("version")} for s in skills
        ],
    }


def _context_management(value: _ContextManagement) -> JsonObject:
    edits: list[JsonValue] = []
    for edit in value.get("applied_edits") or ():
        kind = edit.get("type")
        if kind == "clear_tool_uses_20250919":
            cleared = {"clearedToolUses": edit.get("cleared_tool_uses")}
        elif kind == "clear_thinking_20251015":
            cleared = {"clearedThinkingTurns": edit.get("cleared_thinking_turns")}
        elif kind == "compact_20260112":
            edits.append({"type": kind})
            continue
        else:
            continue
        edits.append({"type": kind, **cleared, "clearedInputTokens": edit.get("cleared_input_tokens")})
    return {"appliedEdits": edits}
