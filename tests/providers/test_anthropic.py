"""Anthropic Messages: recorded transcripts through the real SDK to exact parts."""

from __future__ import annotations

from typing import Any

from runstream.models.anthropic import AnthropicModel
from runstream.models.base import ModelRequest, ModelSettings

from .loopback import LoopbackServer, Reply, collect, error_of, fixture

HI = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]


def model(server: LoopbackServer, **kw: Any) -> AnthropicModel:
    return AnthropicModel("claude-test-model", api_key="sk-ant-test", base_url=server.url(), **kw)


async def run(server: LoopbackServer, name: str, **request: Any) -> list[dict[str, Any]]:
    server.queue(Reply(fixture(name)))
    stream = await model(server).stream(ModelRequest(prompt=HI, **request))
    return await collect(stream.parts)


async def test_text_citation_and_cache_usage(loopback: LoopbackServer) -> None:
    parts = await run(loopback, "anthropic_text.sse")
    assert parts == [
        {"type": "stream-start", "warnings": []},
        {"type": "response-metadata", "id": "msg_text_01", "modelId": "claude-sonnet-4-5-20250929"},
        {"type": "text-start", "id": "0"},
        {"type": "text-delta", "id": "0", "delta": "Hello"},
        {"type": "text-delta", "id": "0", "delta": " world!"},
        {
            "type": "source",
            "sourceType": "url",
            "id": "msg_text_01-src-1",
            "url": "https://example.com/hello",
            "title": "Hello page",
        },
        {"type": "text-end", "id": "0"},
        {
            "type": "finish",
            "finishReason": "stop",
            "usage": {
                "inputTokens": 25,
                "outputTokens": 15,
                "cachedInputTokens": 100,
                "cacheCreationInputTokens": 10,
                "totalTokens": 40,
            },
            "providerMetadata": {"anthropic": {"cacheCreationInputTokens": 10, "stopSequence": None}},
        },
    ]
    request = loopback.requests[0]
    assert request.path == "/v1/messages"
    assert request.headers["authorization"] == "Bearer sk-ant-test"
    assert request.body == {
        "max_tokens": 4096,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        "model": "claude-test-model",
        "stream": True,
    }


async def test_thinking_signature_redaction_and_parallel_tool_calls(loopback: LoopbackServer) -> None:
    parts = await run(loopback, "anthropic_thinking_tools.sse")
    signature = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"
    redacted = "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIw"
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
            "finishReason": "tool-calls",
            "usage": {
                "inputTokens": 120,
                "outputTokens": 210,
                "cachedInputTokens": 0,
                "cacheCreationInputTokens": 0,
                "reasoningTokens": 90,
                "totalTokens": 330,
            },
            "providerMetadata": {"anthropic": {"cacheCreationInputTokens": 0, "stopSequence": None}},
        },
    ]


async def test_refusal_finishes_content_filter(loopback: LoopbackServer) -> None:
    parts = await run(loopback, "anthropic_refusal.sse")
    assert parts[3] == {"type": "text-delta", "id": "0", "delta": "I can't help with that."}
    assert parts[-1]["finishReason"] == "content-filter"


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
    parts = await collect(stream.parts)
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
    assert parts[0]["warnings"] == [{"type": "unsupported-setting", "setting": "seed"}]
    sent = loopback.requests[0]
    assert sent.headers["anthropic-beta"] == "fine-grained-tool-streaming-2025-05-14"
    assert sent.body == {
        "max_tokens": 1000,
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
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": '{"temp": 18}',
                        "is_error": False,
                    },
                    {"type": "text", "text": "And tomorrow?"},
                ],
            },
        ],
        "model": "claude-test-model",
        "stream": True,
        "system": [{"type": "text", "text": "Be terse."}],
        "temperature": 0.3,
        "top_k": 5,
        "stop_sequences": ["\n\nHuman:"],
        "tools": [{"name": "get_weather", "description": "Weather", "input_schema": {"type": "object"}}],
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


async def test_web_search_results_and_document_citations_become_sources(loopback: LoopbackServer) -> None:
    parts = await run(loopback, "anthropic_web_search.sse")
    assert [p for p in parts if p["type"] == "source"] == [
        {
            "type": "source",
            "sourceType": "url",
            "id": "msg_web_01-src-1",
            "url": "https://weather.example/sf",
            "title": "SF weather",
        },
        {
            "type": "source",
            "sourceType": "url",
            "id": "msg_web_01-src-2",
            "url": "https://news.example/fog",
            "title": "Fog report",
        },
        {
            "type": "source",
            "sourceType": "document",
            "id": "msg_web_01-src-3",
            "mediaType": "text/plain",
            "title": "Forecast",
            "providerMetadata": {"anthropic": {"citedText": "Sunny all week"}},
        },
    ]
    assert not any(p["type"].startswith("tool-") for p in parts)  # the server-side tool call is not ours
    assert parts[-1]["finishReason"] == "stop"
