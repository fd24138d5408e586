"""Anthropic Messages: recorded transcripts through the real SDK to exact parts.

The parts are the AI SDK's (``@ai-sdk/anthropic`` 3.0, as Mastra 1.71 runs it; the vendor kit's
recordings in tests/vendor_kit/golden prove them): part ids are block indexes (the loop, as Mastra,
gives text a fresh id per model call), source ids are generated.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from runstream.models.anthropic import AnthropicModel
from runstream.models.base import ModelCallError, ModelRequest, ModelSettings

from .loopback import LoopbackServer, Reply, collect, error_of, fixture

HI = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]


def model(server: LoopbackServer, **kw: Any) -> AnthropicModel:
    return AnthropicModel("claude-sonnet-4-5", api_key="sk-ant-test", base_url=server.url(), **kw)


UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


def named(parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Generated source ids (fresh uuid4 strings) as ``<source:N>`` in order of appearance."""
    names: dict[str, str] = {}
    out = []
    for part in parts:
        part = dict(part)
        value = part.get("id")
        if isinstance(value, str) and UUID.match(value):
            part["id"] = names.setdefault(value, f"<source:{len(names) + 1}>")
        out.append(part)
    return out


async def run(server: LoopbackServer, name: str, **request: Any) -> list[dict[str, Any]]:
    server.queue(Reply(fixture(name)))
    stream = await model(server).stream(ModelRequest(prompt=HI, **request))
    return named(await collect(stream.parts))


async def test_text_citation_and_cache_usage(loopback: LoopbackServer) -> None:
    parts = await run(loopback, "anthropic_text.sse")
    citation = {
        "type": "web_search_result_location",
        "cited_text": "Hello world",
        "url": "https://example.com/hello",
        "title": "Hello page",
        "encrypted_index": "Eo8BCioIAhgB",
    }
    raw_usage = {
        "input_tokens": 25,
        "cache_creation_input_tokens": 10,
        "cache_read_input_tokens": 100,
        "output_tokens": 15,
    }
    assert parts == [
        {"type": "stream-start", "warnings": []},
        {"type": "response-metadata", "id": "msg_text_01", "modelId": "claude-sonnet-4-5-20250929"},
        {"type": "text-start", "id": "0"},
        {"type": "text-delta", "id": "0", "delta": "Hello"},
        {"type": "text-delta", "id": "0", "delta": " world!"},
        {
            "type": "source",
            "sourceType": "url",
            "id": "<source:1>",
            "url": "https://example.com/hello",
            "title": "Hello page",
            "providerMetadata": {"anthropic": {"citedText": "Hello world", "encryptedIndex": "Eo8BCioIAhgB"}},
        },
        {"type": "text-end", "id": "0", "providerMetadata": {"anthropic": {"citations": [citation]}}},
        {
            "type": "finish",
            "finishReason": {"unified": "stop", "raw": "end_turn"},
            "usage": {
                "inputTokens": {"total": 135, "noCache": 25, "cacheRead": 100, "cacheWrite": 10},
                "outputTokens": {"total": 15},
                "raw": raw_usage,
            },
            "providerMetadata": {
                "anthropic": {
                    "usage": raw_usage,
                    "cacheCreationInputTokens": 10,
                    "stopSequence": None,
                    "iterations": None,
                    "container": None,
                    "contextManagement": None,
                }
            },
        },
    ]
    request = loopback.requests[0]
    assert request.path == "/v1/messages"
    assert request.headers["authorization"] == "Bearer sk-ant-test"
    assert request.body == {  # the model's output-token ceiling, as the AI SDK's table has it
        "max_tokens": 64_000,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        "model": "claude-sonnet-4-5",
        "stream": True,
    }


async def test_thinking_signature_redaction_and_parallel_tool_calls(loopback: LoopbackServer) -> None:
    parts = await run(loopback, "anthropic_thinking_tools.sse")
    signature = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"
    redacted = "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIw"
    raw_usage = {
        "input_tokens": 120,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": 210,
        "output_tokens_details": {"thinking_tokens": 90},
    }
    assert parts[2:] == [
        {"type": "reasoning-start", "id": "0"},
        {"type": "reasoning-delta", "id": "0", "delta": "Two cities,"},
        {"type": "reasoning-delta", "id": "0", "delta": " so two tool calls."},
        {
            "type": "reasoning-delta",
            "id": "0",
            "delta": "",
            "providerMetadata": {"anthropic": {"signature": signature}},
        },
        {"type": "reasoning-end", "id": "0"},
        {"type": "reasoning-start", "id": "1", "providerMetadata": {"anthropic": {"redactedData": redacted}}},
        {"type": "reasoning-end", "id": "1"},
        {"type": "text-start", "id": "2"},
        {"type": "text-delta", "id": "2", "delta": "Checking both."},
        {"type": "text-end", "id": "2"},
        {"type": "tool-input-start", "id": "toolu_01", "toolName": "get_weather"},
        {"type": "tool-input-delta", "id": "toolu_01", "delta": '{"city": "San'},
        {"type": "tool-input-delta", "id": "toolu_01", "delta": ' Francisco"}'},
        {"type": "tool-input-end", "id": "toolu_01"},
        {
            "type": "tool-call",
            "toolCallId": "toolu_01",
            "toolName": "get_weather",
            "input": '{"city": "San Francisco"}',
        },
        {"type": "tool-input-start", "id": "toolu_02", "toolName": "get_weather"},
        {"type": "tool-input-delta", "id": "toolu_02", "delta": '{"city": "New York"}'},
        {"type": "tool-input-end", "id": "toolu_02"},
        {
            "type": "tool-call",
            "toolCallId": "toolu_02",
            "toolName": "get_weather",
            "input": '{"city": "New York"}',
        },
        {
            "type": "finish",
            "finishReason": {"unified": "tool-calls", "raw": "tool_use"},
            "usage": {
                "inputTokens": {"total": 120, "noCache": 120, "cacheRead": 0, "cacheWrite": 0},
                "outputTokens": {"total": 210, "text": 120, "reasoning": 90},
                "raw": raw_usage,
            },
            "providerMetadata": {
                "anthropic": {
                    "usage": raw_usage,
                    "cacheCreationInputTokens": 0,
                    "stopSequence": None,
                    "iterations": None,
                    "container": None,
                    "contextManagement": None,
                }
            },
        },
    ]


async def test_refusal_finishes_content_filter(loopback: LoopbackServer) -> None:
    parts = await run(loopback, "anthropic_refusal.sse")
    assert parts[3] == {"type": "text-delta", "id": "0", "delta": "I can't help with that."}
    assert parts[-1]["finishReason"] == {"unified": "content-filter", "raw": "refusal"}


async def test_error_event_becomes_error_part_with_the_error_types_status(loopback: LoopbackServer) -> None:
    parts = await run(loopback, "anthropic_error.sse")
    assert [p["type"] for p in parts] == [
        "stream-start",
        "response-metadata",
        "text-start",
        "text-delta",
        "error",
    ]
    assert error_of(parts[-1]) == (529, "Overloaded", True)


async def test_dropped_connection_yields_an_error_part(loopback: LoopbackServer) -> None:
    loopback.queue(Reply(fixture("anthropic_truncated.sse"), complete=False))
    stream = await model(loopback).stream(ModelRequest(prompt=HI))
    parts = named(await collect(stream.parts))
    assert parts[-2] == {"type": "text-delta", "id": "0", "delta": "Hello"}
    assert error_of(parts[-1]) == (
        None,
        "Connection error: peer closed connection without sending complete message body (incomplete chunked read)",
        True,
    )


async def test_stream_closed_without_message_stop_yields_an_error_part(loopback: LoopbackServer) -> None:
    loopback.queue(Reply(fixture("anthropic_truncated.sse"), framing="eof"))
    stream = await model(loopback).stream(ModelRequest(prompt=HI))
    parts = await collect(stream.parts)
    assert error_of(parts[-1]) == (None, "Anthropic stream ended before its terminal event", True)


async def test_raw_chunks(loopback: LoopbackServer) -> None:
    parts = await run(loopback, "anthropic_refusal.sse", include_raw_chunks=True)
    raw = [p["rawValue"]["type"] for p in parts if p["type"] == "raw"]
    assert raw == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]


async def test_request_shape(loopback: LoopbackServer) -> None:
    loopback.queue(Reply(fixture("anthropic_refusal.sse")))
    prompt: list[dict[str, Any]] = [
        {"role": "system", "content": "Be terse."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Weather?"},
                {"type": "file", "mediaType": "image/png", "data": "iVBORw=="},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {
                    "type": "reasoning",
                    "text": "Think",
                    "providerOptions": {"anthropic": {"signature": "sig"}},
                },
                {"type": "reasoning", "text": "", "providerOptions": {"anthropic": {"redactedData": "red"}}},
                {"type": "reasoning", "text": "unsigned, dropped"},
                {
                    "type": "tool-call",
                    "toolCallId": "toolu_1",
                    "toolName": "get_weather",
                    "input": {"city": "SF"},
                },
            ],
        },
        {
            "role": "tool",
            "content": [
                {
                    "type": "tool-result",
                    "toolCallId": "toolu_1",
                    "toolName": "get_weather",
                    "output": {"type": "json", "value": {"temp": 18}},
                }
            ],
        },
        {"role": "user", "content": [{"type": "text", "text": "And tomorrow?"}]},
    ]
    settings = ModelSettings(
        max_output_tokens=1000,
        temperature=0.3,
        top_k=5,
        stop_sequences=["\n\nHuman:"],
        seed=3,
        headers={"anthropic-beta": "fine-grained-tool-streaming-2025-05-14"},
        provider_options={"anthropic": {"thinking": {"type": "enabled", "budget_tokens": 512}}},
    )
    request = ModelRequest(
        prompt=prompt,
        tools=[
            {
                "type": "function",
                "name": "get_weather",
                "description": "Weather",
                "inputSchema": {"type": "object"},
            }
        ],
        tool_choice={"type": "required"},
        response_format={"type": "json", "schema": {"type": "object"}},
        settings=settings,
    )
    stream = await model(loopback).stream(request)
    parts = await collect(stream.parts)
    # as the AI SDK: thinking drops temperature and topK, unsigned reasoning is not sent back
    assert parts[0]["warnings"] == [
        {"type": "unsupported-setting", "setting": "seed"},
        {"type": "other", "message": "unsupported reasoning metadata"},
        {"type": "unsupported-setting", "setting": "temperature"},
        {"type": "unsupported-setting", "setting": "topK"},
    ]
    sent = loopback.requests[0]
    assert (
        sent.headers["anthropic-beta"]
        == "fine-grained-tool-streaming-2025-05-14,structured-outputs-2025-11-13"
    )
    assert sent.body == {
        "max_tokens": 1512,  # the thinking budget comes on top
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Weather?"},
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw=="},
                    },
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "Think", "signature": "sig"},
                    {"type": "redacted_thinking", "data": "red"},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "SF"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": '{"temp":18}'},
                    {"type": "text", "text": "And tomorrow?"},
                ],
            },
        ],
        "model": "claude-sonnet-4-5",
        "stream": True,
        "system": [{"type": "text", "text": "Be terse."}],
        "stop_sequences": ["\n\nHuman:"],
        "tools": [
            {
                "name": "get_weather",
                "description": "Weather",
                "input_schema": {"type": "object"},
                "eager_input_streaming": True,
            }
        ],
        "tool_choice": {"type": "any"},
        "output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}}},
        "thinking": {"type": "enabled", "budget_tokens": 512},
    }


async def test_tool_choice_none_sends_no_tools(loopback: LoopbackServer) -> None:
    loopback.queue(Reply(fixture("anthropic_refusal.sse")))
    request = ModelRequest(
        prompt=HI,
        tools=[{"type": "function", "name": "t", "description": "", "inputSchema": {"type": "object"}}],
        tool_choice={"type": "none"},
    )
    await collect((await model(loopback).stream(request)).parts)
    assert "tools" not in loopback.requests[0].body


async def test_unknown_model_gets_the_generic_ceiling_with_a_warning(loopback: LoopbackServer) -> None:
    loopback.queue(Reply(fixture("anthropic_refusal.sse")))
    unknown = AnthropicModel("claude-test-model", api_key="sk-ant-test", base_url=loopback.url())
    parts = await collect((await unknown.stream(ModelRequest(prompt=HI))).parts)
    assert parts[0]["warnings"] == [
        {
            "type": "compatibility",
            "feature": "maxOutputTokens",
            "details": 'The model "claude-test-model" is unknown. The max output tokens have been limited to '
            "128000. Set maxOutputTokens explicitly to override this limit.",
        }
    ]
    assert loopback.requests[0].body["max_tokens"] == 128_000


async def test_web_search_is_a_provider_executed_call_and_result_with_sources(
    loopback: LoopbackServer,
) -> None:
    parts = await run(loopback, "anthropic_web_search.sse")
    results = [
        {
            "url": "https://weather.example/sf",
            "title": "SF weather",
            "pageAge": None,
            "encryptedContent": "Eq0=",
            "type": "web_search_result",
        },
        {
            "url": "https://news.example/fog",
            "title": "Fog report",
            "pageAge": "1 day",
            "encryptedContent": "Eq1=",
            "type": "web_search_result",
        },
    ]
    assert parts[2:-1] == [
        {"type": "tool-input-start", "id": "srvtoolu_01", "toolName": "web_search", "providerExecuted": True},
        {"type": "tool-input-delta", "id": "srvtoolu_01", "delta": '{"query": "sf weather"}'},
        {"type": "tool-input-end", "id": "srvtoolu_01"},
        {
            "type": "tool-call",
            "toolCallId": "srvtoolu_01",
            "toolName": "web_search",
            "input": '{"query": "sf weather"}',
            "providerExecuted": True,
        },
        {
            "type": "tool-result",
            "toolCallId": "srvtoolu_01",
            "toolName": "web_search",
            "result": results,
        },
        {
            "type": "source",
            "sourceType": "url",
            "id": "<source:1>",
            "url": "https://weather.example/sf",
            "title": "SF weather",
            "providerMetadata": {"anthropic": {"pageAge": None}},
        },
        {
            "type": "source",
            "sourceType": "url",
            "id": "<source:2>",
            "url": "https://news.example/fog",
            "title": "Fog report",
            "providerMetadata": {"anthropic": {"pageAge": "1 day"}},
        },
        # the char_location citation names document 0, which the prompt does not hold: no source
        {"type": "text-start", "id": "2"},
        {"type": "text-delta", "id": "2", "delta": "Sunny."},
        {"type": "text-end", "id": "2"},
    ]
    assert parts[-1]["finishReason"] == {"unified": "stop", "raw": "end_turn"}


async def test_document_citations_name_the_prompts_cited_documents(loopback: LoopbackServer) -> None:
    loopback.queue(Reply(fixture("anthropic_web_search.sse")))
    document = {
        "type": "file",
        "mediaType": "text/plain",
        "data": "U3VubnkgYWxsIHdlZWs=",
        "filename": "forecast.txt",
        "providerOptions": {"anthropic": {"citations": {"enabled": True}}},
    }
    prompt = [{"role": "user", "content": [document, {"type": "text", "text": "Weather?"}]}]
    parts = named(await collect((await model(loopback).stream(ModelRequest(prompt=prompt))).parts))
    assert [p for p in parts if p["type"] == "source"][2] == {
        "type": "source",
        "sourceType": "document",
        "id": "<source:3>",
        "mediaType": "text/plain",
        "title": "Forecast",
        "filename": "forecast.txt",
        "providerMetadata": {
            "anthropic": {"citedText": "Sunny all week", "startCharIndex": 0, "endCharIndex": 14}
        },
    }
    assert loopback.requests[0].body["messages"][0]["content"][0] == {
        "type": "document",
        "source": {"type": "text", "media_type": "text/plain", "data": "Sunny all week"},
        "title": "forecast.txt",
        "citations": {"enabled": True},
    }


async def test_an_error_event_in_first_place_fails_the_call(loopback: LoopbackServer) -> None:
    """The AI SDK reads the first event before it returns the stream: an error there is a failed
    call (Mastra: ``AI_APICallError``); later ones stream as plain ``Error`` parts."""
    loopback.queue(Reply(fixture("anthropic_error_first.sse")), Reply(fixture("anthropic_error.sse")))
    with pytest.raises(ModelCallError) as caught:
        await model(loopback, max_retries=0).stream(ModelRequest(prompt=HI))
    default_name = ModelCallError("x").name  # the wire name of a failed call (Mastra: AI_APICallError)
    assert (caught.value.status_code, str(caught.value), caught.value.name) == (
        529,
        "Overloaded",
        default_name,
    )
    parts = await collect((await model(loopback).stream(ModelRequest(prompt=HI))).parts)
    assert parts[-1]["error"].name == "Error"


async def test_structured_output_through_the_json_tool_on_models_without_output_config(
    loopback: LoopbackServer,
) -> None:
    """As the AI SDK: a model without native structured output gets a required ``json`` tool,
    whose streamed input is the text; its ``tool_use`` stop is a plain stop."""
    loopback.queue(Reply(fixture("anthropic_json_tool.sse")))
    older = AnthropicModel("claude-sonnet-4-20250514", api_key="sk-ant-test", base_url=loopback.url())
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    request = ModelRequest(prompt=HI, response_format={"type": "json", "schema": schema})
    parts = named(await collect((await older.stream(request)).parts))
    assert parts[2:5] == [
        {"type": "text-start", "id": "0"},
        {"type": "text-delta", "id": "0", "delta": '{"city": '},
        {"type": "text-delta", "id": "0", "delta": '"Paris"}'},
    ]
    assert parts[-1]["finishReason"] == {"unified": "stop", "raw": "tool_use"}
    body = loopback.requests[0].body
    assert "output_config" not in body
    assert body["tools"] == [
        {
            "name": "json",
            "description": "Respond with a JSON object.",
            "input_schema": schema,
            "eager_input_streaming": True,
        }
    ]
    assert body["tool_choice"] == {"type": "any", "disable_parallel_tool_use": True}
