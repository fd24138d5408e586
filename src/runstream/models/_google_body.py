"""The Gemini ``generateContent`` request body, built as the AI SDK's ``@ai-sdk/google`` builds it.

:func:`google_body` gives the body Mastra sends (``generationConfig``, ``contents``,
``systemInstruction``, ``tools``, ``toolConfig`` ...), camelCase, thought signatures passed
through as the vendor's base64 strings. The provider hands it to the SDK whole (its
``extra_body``), so what goes on the wire is exactly this.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal, TypedDict, TypeVar, cast

from runstream._json import JsonObject, JsonValue
from runstream.errors import InvalidInputError
from runstream.models._common import file_data, part_metadata
from runstream.models.base import ModelRequest, PromptMessage
from runstream.models.parts import CallWarning
from runstream.models.prompt import AssistantPart, ToolApprovalResponsePart, ToolResultPart, UserPart

SKIP_THOUGHT_SIGNATURE_VALIDATOR = "skip_thought_signature_validator"
"""The documented sentinel Gemini 3 takes for a replayed function call whose signature is lost."""

_GENERATION_OPTIONS = (
    "audioTimestamp",
    "responseModalities",
    "thinkingConfig",
    "mediaResolution",
    "imageConfig",
)
_BODY_OPTIONS = ("cachedContent", "labels", "serviceTier")
_SAFETY_CATEGORIES = (
    "HARM_CATEGORY_HATE_SPEECH",
    "HARM_CATEGORY_DANGEROUS_CONTENT",
    "HARM_CATEGORY_HARASSMENT",
    "HARM_CATEGORY_SEXUALLY_EXPLICIT",
)


def uses_gemini3_features(model_id: str) -> bool:
    """A Gemini model newer than 2.x (the AI SDK's ``usesGemini3Features``)."""
    name = model_id.lower().rsplit("/", 1)[-1]
    if not name.startswith("gemini-"):
        return False
    pre2 = name.startswith("gemini-1") or name in ("gemini-pro", "gemini-pro-vision")
    pre2 = pre2 or name.startswith("gemini-robotics-er-1.5")
    return not pre2 and not (
        name.startswith("gemini-2.") or name.startswith("gemini-2-") or name == "gemini-2"
    )


_V = TypeVar("_V")


class _Blob(TypedDict):
    mimeType: str
    data: str


class _FileData(TypedDict):
    mimeType: str
    fileUri: str


class _FunctionCall(TypedDict):
    id: str
    name: str
    args: Any  # the model's own arguments, replayed as they were parsed


class _FunctionResult(TypedDict):
    name: str
    content: Any  # a tool's result as the tool returned it


class _FunctionResponse(TypedDict):
    id: str
    name: str
    response: _FunctionResult


class _ServerToolCall(TypedDict):
    toolType: str
    args: Any
    id: str


class _ServerToolResponse(TypedDict):
    toolType: str
    response: Any
    id: str


class GeminiPart(TypedDict, total=False):
    """A Gemini ``Part`` of the request's ``contents`` (one of its data fields is set)."""

    text: str
    thought: bool
    thoughtSignature: str
    inlineData: _Blob
    fileData: _FileData
    functionCall: _FunctionCall
    functionResponse: _FunctionResponse
    toolCall: _ServerToolCall
    toolResponse: _ServerToolResponse


class GeminiContent(TypedDict):
    role: Literal["user", "model"]
    parts: list[GeminiPart]


class GeminiSystemInstruction(TypedDict):
    parts: list[GeminiPart]


def google_body(request: ModelRequest, model_id: str) -> tuple[JsonObject, list[CallWarning]]:
    """The request body and the call's warnings."""
    settings = request.settings
    options: Mapping[str, Any] = settings.provider_options.get("google") or {}
    warnings: list[CallWarning] = []
    gemma = model_id.lower().startswith("gemma-")
    gemini3 = uses_gemini3_features(model_id)
    system, contents = google_contents(request.prompt, gemini3=gemini3, gemma=gemma, warnings=warnings)
    fmt = request.response_format
    json_format = fmt is not None and fmt["type"] == "json"
    schema = fmt.get("schema") if fmt is not None else None
    generation: JsonObject = {
        "maxOutputTokens": settings.max_output_tokens,
        "temperature": settings.temperature,
        "topK": settings.top_k,
        "topP": settings.top_p,
        "frequencyPenalty": settings.frequency_penalty,
        "presencePenalty": settings.presence_penalty,
        "stopSequences": cast("list[JsonValue] | None", settings.stop_sequences),
        "seed": settings.seed,
        "responseMimeType": "application/json" if json_format else None,
        "responseSchema": (
            openapi_schema(schema)
            if json_format and schema is not None and options.get("structuredOutputs", True)
            else None
        ),
    }
    generation.update((key, options.get(key)) for key in _GENERATION_OPTIONS)
    threshold = options.get("threshold")
    safety = options.get("safetySettings")
    if safety is None and threshold is not None:
        safety = [{"category": category, "threshold": threshold} for category in _SAFETY_CATEGORIES]
    tools, tool_config = _tools(request)
    if options.get("retrievalConfig"):
        tool_config = {**(tool_config or {}), "retrievalConfig": options["retrievalConfig"]}
    # The wire TypedDicts are JSON by construction (a tool's arguments and results included), which
    # a TypedDict cannot say to the type checker: the body is JSON from here on.
    body: JsonObject = {
        "generationConfig": _defined(generation),
        "contents": cast("list[JsonValue]", contents),
        "systemInstruction": None if gemma else cast("JsonObject | None", system),
        "safetySettings": safety,
        "tools": tools,
        "toolConfig": tool_config,
    }
    body.update((key, options.get(key)) for key in _BODY_OPTIONS)
    return _defined(body), warnings


def _defined(values: dict[str, _V]) -> dict[str, _V]:
    """Without the ``None`` values (what ``JSON.stringify`` leaves out as ``undefined``)."""
    return {key: value for key, value in values.items() if value is not None}


def _tools(request: ModelRequest) -> tuple[list[JsonValue] | None, JsonObject | None]:
    if not request.tools:
        return None, None
    declarations: list[JsonValue] = []
    for tool in request.tools:
        declaration: JsonObject = {"name": tool["name"], "description": tool.get("description") or ""}
        parameters = openapi_schema(tool["inputSchema"])
        if parameters is not None:
            declaration["parameters"] = parameters
        declarations.append(declaration)
    tools: list[JsonValue] = [{"functionDeclarations": declarations}]
    choice = request.tool_choice
    if choice is None:
        return tools, None
    kind = choice["type"]
    if kind == "tool":
        return tools, {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": [choice["toolName"]]}}
    mode = {"auto": "AUTO", "none": "NONE", "required": "ANY"}.get(kind)
    if mode is None:
        raise InvalidInputError(f"unknown tool choice type {kind!r}")
    return tools, {"functionCallingConfig": {"mode": mode}}


def openapi_schema(schema: Any, root: bool = True) -> Any:
    """A JSON schema as the OpenAPI 3.0 subset Gemini takes (``convertJSONSchemaToOpenAPISchema``);
    ``None`` for an empty object schema at the root (the declaration then has no parameters)."""
    if schema is None:
        return None
    if _empty_object(schema):
        if root:
            return None
        if isinstance(schema, Mapping) and schema.get("description"):
            return {"type": "object", "description": schema["description"]}
        return {"type": "object"}
    if isinstance(schema, bool):
        return {"type": "boolean", "properties": {}}
    result: JsonObject = {}
    if schema.get("description"):
        result["description"] = schema["description"]
    if schema.get("required"):
        result["required"] = schema["required"]
    if schema.get("format"):
        result["format"] = schema["format"]
    if "const" in schema:
        result["enum"] = [schema["const"]]
    kind = schema.get("type")
    if isinstance(kind, list):
        others = [t for t in kind if t != "null"]
        if not others:
            result["type"] = "null"
        else:
            result["anyOf"] = [{"type": t} for t in others]
            if "null" in kind:
                result["nullable"] = True
    elif kind:
        result["type"] = kind
    if "enum" in schema:
        result["enum"] = schema["enum"]
    if schema.get("properties") is not None:
        result["properties"] = {k: openapi_schema(v, False) for k, v in schema["properties"].items()}
    items = schema.get("items")
    if items:
        result["items"] = (
            [openapi_schema(i, False) for i in items]
            if isinstance(items, list)
            else openapi_schema(items, False)
        )
    if schema.get("allOf"):
        result["allOf"] = [openapi_schema(s, False) for s in schema["allOf"]]
    if schema.get("anyOf"):
        _any_of(result, schema["anyOf"])
    if schema.get("oneOf"):
        result["oneOf"] = [openapi_schema(s, False) for s in schema["oneOf"]]
    if "minLength" in schema:
        result["minLength"] = schema["minLength"]
    return result


def _any_of(result: JsonObject, schemas: list[Any]) -> None:
    def is_null(s: Any) -> bool:
        return isinstance(s, Mapping) and s.get("type") == "null"

    if not any(is_null(s) for s in schemas):
        result["anyOf"] = [openapi_schema(s, False) for s in schemas]
        return
    others = [s for s in schemas if not is_null(s)]
    if len(others) == 1:
        converted = openapi_schema(others[0], False)
        if isinstance(converted, dict):
            result["nullable"] = True
            result.update(converted)
    else:
        result["anyOf"] = [openapi_schema(s, False) for s in others]
        result["nullable"] = True


def _empty_object(schema: Any) -> bool:
    return (
        isinstance(schema, Mapping)
        and schema.get("type") == "object"
        and not schema.get("properties")
        and not schema.get("additionalProperties")
    )


def google_contents(
    prompt: list[PromptMessage],
    *,
    gemini3: bool,
    gemma: bool = False,
    warnings: list[CallWarning] | None = None,
) -> tuple[GeminiSystemInstruction | None, list[GeminiContent]]:
    """An AI SDK prompt as Gemini ``systemInstruction`` and ``contents``.

    Assistant text, reasoning (``thought: true``) and function calls carry their
    ``thoughtSignature`` back; tool results become a user turn of ``functionResponse`` parts.
    """
    system: list[GeminiPart] = []
    contents: list[GeminiContent] = []
    unsigned: list[str] = []
    for message in prompt:
        if message["role"] == "system":
            if contents:
                raise InvalidInputError(
                    "system messages are only supported at the beginning of the conversation"
                )
            system.append({"text": message["content"]})
        elif message["role"] == "user":
            contents.append({"role": "user", "parts": [_user_part(part) for part in message["content"]]})
        elif message["role"] == "assistant":
            contents.append({"role": "model", "parts": _model_parts(message["content"], gemini3, unsigned)})
        elif message["role"] == "tool":
            _tool_parts(message["content"], contents, gemini3)
    if gemma and system and contents and contents[0]["role"] == "user":
        text = "\n\n".join(part["text"] for part in system)
        contents[0]["parts"].insert(0, {"text": text + "\n\n"})
    if unsigned and warnings is not None:
        names = ", ".join(f"`{name}`" for name in dict.fromkeys(unsigned))
        warnings.append(
            {
                "type": "other",
                "message": f"Replayed {len(unsigned)} `functionCall` part(s) for a Gemini 3 model without a "
                f"`thoughtSignature` (tools: {names}). Injected the documented "
                f"`{SKIP_THOUGHT_SIGNATURE_VALIDATOR}` sentinel to keep the request from failing with HTTP 400.",
            }
        )
    return ({"parts": system} if system and not gemma else None), contents


def _user_part(part: UserPart) -> GeminiPart:
    if part["type"] == "text":
        return {"text": part["text"]}
    if part["type"] != "file":
        raise InvalidInputError(f"Gemini does not take {part['type']} user parts")
    media_type = "image/jpeg" if part["mediaType"] == "image/*" else part["mediaType"]
    kind, value = file_data(part)
    if kind == "url":
        return {"fileData": {"mimeType": media_type, "fileUri": value}}
    return {"inlineData": {"mimeType": media_type, "data": value}}


def _model_parts(content: list[AssistantPart], gemini3: bool, unsigned: list[str]) -> list[GeminiPart]:
    parts: list[GeminiPart] = []
    signed_call = False
    for part in content:
        meta = part_metadata(part, "google")
        signature = str(meta["thoughtSignature"]) if meta.get("thoughtSignature") is not None else None
        if part["type"] == "text" or part["type"] == "reasoning":
            if part["text"]:
                out: GeminiPart = {"text": part["text"]}
                if part["type"] == "reasoning":
                    out["thought"] = True
                parts.append(_signed(out, signature))
        elif part["type"] == "file":
            where, data = file_data(part)
            if where == "url":
                raise InvalidInputError("File data URLs in assistant messages are not supported")
            out = {"inlineData": {"mimeType": part["mediaType"], "data": data}}
            if meta.get("thought") is True:
                out["thought"] = True
            parts.append(_signed(out, signature))
        elif part["type"] == "tool-call":
            server = _server_tool(meta)
            if signature is None and gemini3 and (server is not None or not signed_call):
                unsigned.append(part["toolName"])
                signature = SKIP_THOUGHT_SIGNATURE_VALIDATOR
            elif server is None and meta.get("thoughtSignature") is not None:
                signed_call = True
            if server is not None:
                args = part["input"]
                call: _ServerToolCall = {"toolType": server[1], "args": args, "id": server[0]}
                parts.append(_signed({"toolCall": call}, signature))
            else:
                function_call: _FunctionCall = {
                    "id": part["toolCallId"],
                    "name": part["toolName"],
                    "args": part["input"],
                }
                parts.append(_signed({"functionCall": function_call}, signature))
        elif part["type"] == "tool-result":
            server = _server_tool(meta)
            if server is not None:
                parts.append(_signed(_tool_response(part, server), signature))
    return parts


def _signed(part: GeminiPart, signature: str | None) -> GeminiPart:
    if signature is not None:
        part["thoughtSignature"] = signature
    return part


def _server_tool(meta: Mapping[str, object]) -> tuple[str, str] | None:
    """``(id, type)`` of a Gemini server-side tool call (Gemini 3 built-in tools)."""
    call_id, tool_type = meta.get("serverToolCallId"), meta.get("serverToolType")
    return (str(call_id), str(tool_type)) if call_id is not None and tool_type is not None else None


def _tool_response(part: ToolResultPart, server: tuple[str, str]) -> GeminiPart:
    output: Mapping[str, Any] = part["output"]
    response = output["value"] if output.get("type") == "json" else {}
    return {"toolResponse": {"toolType": server[1], "response": response, "id": server[0]}}


def _tool_parts(
    content: list[ToolResultPart | ToolApprovalResponsePart], contents: list[GeminiContent], gemini3: bool
) -> None:
    parts: list[GeminiPart] = []
    for part in content:
        if part["type"] != "tool-result":
            continue
        meta = part_metadata(part, "google")
        server = _server_tool(meta)
        if server is not None and contents and contents[-1]["role"] == "model":
            signature = meta.get("thoughtSignature")
            contents[-1]["parts"].append(
                _signed(_tool_response(part, server), None if signature is None else str(signature))
            )
            continue
        output: Mapping[str, Any] = part["output"]
        kind = output.get("type")
        name = part["toolName"]
        if kind == "content" and not gemini3:  # Gemini 2: one functionResponse per text item
            for item in output["value"]:
                if item.get("type") == "text":
                    response: _FunctionResult = {"name": name, "content": item["text"]}
                    parts.append(
                        {"functionResponse": {"id": part["toolCallId"], "name": name, "response": response}}
                    )
                else:
                    parts.append({"text": _json_text(item)})
            continue
        if kind == "content":
            value: Any = "\n".join(
                item["text"] if item.get("type") == "text" else _json_text(item) for item in output["value"]
            )
            value = value or "Tool executed successfully."
        elif kind == "execution-denied":
            value = output.get("reason") or "Tool call execution denied."
        else:
            value = output.get("value")
        response = {"name": name, "content": value}
        parts.append({"functionResponse": {"id": part["toolCallId"], "name": name, "response": response}})
    contents.append({"role": "user", "parts": parts})


def _json_text(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))
