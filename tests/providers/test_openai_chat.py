"""Chat Completions, from OpenAI and from OpenAI-compatible servers, through the real SDK."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from runstream.models.base import ModelRequest, ModelSettings
from runstream.models.openai import OpenAIChatModel

from .loopback import LoopbackServer, Reply, collect, error_of, fixture

CREATED = datetime(2025, 3, 6, 19, 55, 58, tzinfo=UTC)
HI = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]


def model(server: LoopbackServer, model_id: str = "gpt-4o", **kw: Any) -> OpenAIChatModel:
    return OpenAIChatModel(model_id, api_key="sk-test", base_url=server.url("/v1"), **kw)


async def run(server: LoopbackServer, name: str, **kw: Any) -> list[dict[str, Any]]:
    server.queue(Reply(fixture(name)))
    stream = await model(server, **kw).stream(ModelRequest(prompt=HI))
    return await collect(stream.parts)


async def test_text_and_usage(loopback: LoopbackServer) -> None:
    parts = await run(loopback, "openai_chat_text.sse")
    assert parts == [
        {"type": "stream-start", "warnings": []},
        {
            "type": "response-metadata",
            "id": "chatcmpl-text1",
            "modelId": "gpt-4o-2024-08-06",
            "timestamp": CREATED,
        },
        {"type": "text-start", "id": "txt-0"},
        {"type": "text-delta", "id": "txt-0", "delta": "Hello"},
        {"type": "text-delta", "id": "txt-0", "delta": " world"},
        {"type": "text-delta", "id": "txt-0", "delta": "!"},
        {"type": "text-end", "id": "txt-0"},
        {
            "type": "finish",
            "finishReason": "stop",
            "usage": {
                "inputTokens": 19,
                "outputTokens": 10,
                "totalTokens": 29,
                "reasoningTokens": 0,
                "cachedInputTokens": 3,
            },
        },
    ]
    request = loopback.requests[0]
    assert request.path == "/v1/chat/completions"
    assert request.body == {
        "model": "gpt-4o",
        "stream": True,
        "messages": [{"role": "user", "content": "hi"}],
        "stream_options": {"include_usage": True},
    }


async def test_parallel_tool_calls_with_streamed_arguments(loopback: LoopbackServer) -> None:
    parts = await run(loopback, "openai_chat_tools.sse")
    assert parts[2:] == [
        {"type": "tool-input-start", "id": "call_sf", "toolName": "get_weather"},
        {"type": "tool-input-delta", "id": "call_sf", "delta": '{"ci'},
        {"type": "tool-input-delta", "id": "call_sf", "delta": 'ty": "San Francisco"}'},
        {"type": "tool-input-start", "id": "call_ny", "toolName": "get_weather"},
        {"type": "tool-input-delta", "id": "call_ny", "delta": '{"city": "New York"}'},
        {"type": "tool-input-end", "id": "call_sf"},
        {
            "type": "tool-call",
            "toolCallId": "call_sf",
            "toolName": "get_weather",
            "input": '{"city": "San Francisco"}',
        },
        {"type": "tool-input-end", "id": "call_ny"},
        {
            "type": "tool-call",
            "toolCallId": "call_ny",
            "toolName": "get_weather",
            "input": '{"city": "New York"}',
        },
        {
            "type": "finish",
            "finishReason": "tool-calls",
            "usage": {
                "inputTokens": 82,
                "outputTokens": 54,
                "totalTokens": 136,
                "reasoningTokens": 0,
                "cachedInputTokens": 0,
            },
        },
    ]


async def test_refusal_streams_as_text_and_finishes_content_filter(loopback: LoopbackServer) -> None:
    parts = await run(loopback, "openai_chat_refusal.sse")
    assert [p["delta"] for p in parts if p["type"] == "text-delta"] == [
        "I'm sorry, ",
        "I can't assist with that.",
    ]
    assert parts[-1]["finishReason"] == "content-filter"


async def test_error_object_mid_stream_ends_with_an_error_part(loopback: LoopbackServer) -> None:
    parts = await run(loopback, "openai_chat_error.sse")
    assert [p["type"] for p in parts] == [
        "stream-start",
        "response-metadata",
        "text-start",
        "text-delta",
        "error",
    ]
    assert error_of(parts[-1]) == (None, "The server had an error processing your request.", False)
    assert parts[-1]["error"].body["type"] == "server_error"


async def test_dropped_connection_yields_an_error_part(loopback: LoopbackServer) -> None:
    loopback.queue(Reply(fixture("openai_chat_truncated.sse"), complete=False))
    stream = await model(loopback).stream(ModelRequest(prompt=HI))
    parts = await collect(stream.parts)
    assert parts[-2] == {"type": "text-delta", "id": "txt-0", "delta": " world"}
    assert error_of(parts[-1]) == (
        None,
        "Connection error: peer closed connection without sending complete message body (incomplete chunked read)",
        True,
    )


async def test_compatible_server_reasoning_content(loopback: LoopbackServer) -> None:
    parts = await run(loopback, "compat_vllm_reasoning.sse", model_id="Qwen/Qwen3-8B", provider="vllm")
    assert parts[2:] == [
        {"type": "reasoning-start", "id": "reasoning-0"},
        {"type": "reasoning-delta", "id": "reasoning-0", "delta": "The user greets me."},
        {"type": "reasoning-delta", "id": "reasoning-0", "delta": " Reply briefly."},
        {"type": "reasoning-end", "id": "reasoning-0"},
        {"type": "text-start", "id": "txt-0"},
        {"type": "text-delta", "id": "txt-0", "delta": "Hi there!"},
        {"type": "text-end", "id": "txt-0"},
        {
            "type": "finish",
            "finishReason": "stop",
            "usage": {"inputTokens": 12, "outputTokens": 30, "totalTokens": 42, "reasoningTokens": 24},
        },
    ]


async def test_compatible_request_uses_max_tokens_and_its_provider_options(loopback: LoopbackServer) -> None:
    loopback.queue(Reply(fixture("openai_chat_text.sse")))
    settings = ModelSettings(
        max_output_tokens=100,
        stop_sequences=["END"],
        seed=1,
        top_k=40,
        presence_penalty=0.1,
        provider_options={"ollama": {"options": {"num_ctx": 8192}}, "openai": {"ignored": True}},
    )
    stream = await model(loopback, "llama3.2", provider="ollama").stream(
        ModelRequest(prompt=HI, settings=settings)
    )
    parts = await collect(stream.parts)
    assert parts[0]["warnings"] == [{"type": "unsupported-setting", "setting": "topK"}]
    assert loopback.requests[0].body == {
        "model": "llama3.2",
        "stream": True,
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 100,
        "stop": ["END"],
        "seed": 1,
        "presence_penalty": 0.1,
        "stream_options": {"include_usage": True},
        "options": {"num_ctx": 8192},
    }


async def test_openai_request_shape_for_tools_history_and_json(loopback: LoopbackServer) -> None:
    loopback.queue(Reply(fixture("openai_chat_text.sse")))
    prompt: list[dict[str, Any]] = [
        {"role": "system", "content": "Be terse."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "file", "mediaType": "image/jpeg", "data": "https://example.com/cat.jpg"},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "reasoning", "text": "not sent back"},
                {"type": "tool-call", "toolCallId": "call_1", "toolName": "look", "input": {}},
            ],
        },
        {
            "role": "tool",
            "content": [
                {
                    "type": "tool-result",
                    "toolCallId": "call_1",
                    "toolName": "look",
                    "output": {"type": "error-text", "value": "camera offline"},
                }
            ],
        },
    ]
    request = ModelRequest(
        prompt=prompt,
        tools=[
            {"type": "function", "name": "look", "description": "Look", "inputSchema": {"type": "object"}}
        ],
        tool_choice={"type": "required"},
        response_format={"type": "json"},
        settings=ModelSettings(max_output_tokens=50),
    )
    stream = await model(loopback).stream(request)
    await collect(stream.parts)
    body = loopback.requests[0].body
    assert body["messages"] == [
        {"role": "system", "content": "Be terse."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
            ],
        },
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "look", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "camera offline"},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {"name": "look", "description": "Look", "parameters": {"type": "object"}},
        }
    ]
    assert body["tool_choice"] == "required"
    assert body["response_format"] == {"type": "json_object"}
    assert body["max_completion_tokens"] == 50


async def test_openrouter_reasoning_citations_and_images(loopback: LoopbackServer) -> None:
    parts = await run(
        loopback, "compat_openrouter_extras.sse", model_id="openai/gpt-4o:online", provider="openrouter"
    )
    assert parts[2:] == [
        {"type": "reasoning-start", "id": "reasoning-0"},
        {"type": "reasoning-delta", "id": "reasoning-0", "delta": "Search first."},
        {"type": "reasoning-end", "id": "reasoning-0"},
        {"type": "text-start", "id": "txt-0"},
        {"type": "text-delta", "id": "txt-0", "delta": "It is sunny."},
        {
            "type": "source",
            "sourceType": "url",
            "id": "gen-1741290958-abc-src-1",
            "url": "https://weather.example/sf",
            "title": "SF weather",
        },
        {"type": "file", "mediaType": "image/png", "data": "iVBORw0KGgo="},
        {"type": "text-end", "id": "txt-0"},
        {
            "type": "finish",
            "finishReason": "stop",
            "usage": {"inputTokens": 9, "outputTokens": 6, "totalTokens": 15},
        },
    ]
