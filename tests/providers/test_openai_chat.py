"""Chat Completions, from OpenAI and from OpenAI-compatible servers, through the real SDK."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from runstream.models.base import ModelRequest, ModelSettings
from runstream.models.openai import OpenAIChatModel, chat_messages

from .loopback import LoopbackServer, Reply, collect, error_of, fixture

CREATED = datetime(2025, 3, 6, 19, 55, 58, tzinfo=UTC)
HI = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]


def finish(
    unified: str,
    raw: str,
    prompt: int,
    completion: int,
    raw_usage: dict[str, Any],
    meta: dict[str, Any],
    **counts: int,
) -> dict[str, Any]:
    """A v3 ``finish`` part as ``@ai-sdk/openai-compatible`` makes it."""
    cached, reasoning = counts.get("cached", 0), counts.get("reasoning", 0)
    return {
        "type": "finish",
        "finishReason": {"unified": unified, "raw": raw},
        "usage": {
            "inputTokens": {
                "total": prompt,
                "noCache": prompt - cached,
                "cacheRead": cached,
                "cacheWrite": None,
            },
            "outputTokens": {"total": completion, "text": completion - reasoning, "reasoning": reasoning},
            "raw": raw_usage,
        },
        "providerMetadata": meta,
    }


def openai_usage(prompt: int, completion: int, cached: int = 0) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


PREDICTION = {"openai": {"acceptedPredictionTokens": 0, "rejectedPredictionTokens": 0}}


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
        finish("stop", "stop", 19, 10, openai_usage(19, 10, cached=3), PREDICTION, cached=3),
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
        finish("tool-calls", "tool_calls", 82, 54, openai_usage(82, 54), PREDICTION),
    ]


async def test_refusal_streams_as_text_and_finishes_content_filter(loopback: LoopbackServer) -> None:
    """OpenAI's refusal; a compatible server's is dropped, as @ai-sdk/openai-compatible does (kit: chat-refusal)."""
    parts = await run(loopback, "openai_chat_refusal.sse")
    assert [p["delta"] for p in parts if p["type"] == "text-delta"] == [
        "I'm sorry, ",
        "I can't assist with that.",
    ]
    assert parts[-1]["finishReason"] == {"unified": "content-filter", "raw": "stop"}


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
        finish(
            "stop",
            "stop",
            12,
            30,
            {
                "prompt_tokens": 12,
                "completion_tokens": 30,
                "total_tokens": 42,
                "completion_tokens_details": {"reasoning_tokens": 24},
            },
            {"vllm": {}},
            reasoning=24,
        ),
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
            "content": None,
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
        finish(
            "stop",
            "stop",
            9,
            6,
            {"prompt_tokens": 9, "completion_tokens": 6, "total_tokens": 15},
            {"openrouter": {}},
        ),
    ]


KIT = Path(__file__).parents[1] / "vendor_kit" / "fixtures" / "chat"


def kit_sse(name: str, cut: int | None = None) -> bytes:
    """A vendor-kit Chat Completions fixture framed as the API frames it (``cut``: the first n events,
    no ``[DONE]``)."""
    lines = [line for line in (KIT / f"{name}.chunks.txt").read_text().splitlines() if line.strip()]
    events = [f"data: {line}\n\n".encode() for line in lines]
    return b"".join(events[:cut]) if cut is not None else b"".join(events) + b"data: [DONE]\n\n"


async def run_compatible(server: LoopbackServer, body: bytes) -> list[dict[str, Any]]:
    server.queue(Reply(body))
    stream = await model(server, provider="openai-compatible").stream(ModelRequest(prompt=HI))
    return await collect(stream.parts)


async def test_parallel_tool_calls_complete_at_the_end_of_the_stream(loopback: LoopbackServer) -> None:
    """As Mastra's recording (kit case chat-parallel-tools): deltas as they come, calls at the end."""
    parts = await run_compatible(loopback, kit_sse("parallel-tools"))
    assert [(p["type"], p.get("id") or p.get("toolCallId"), p.get("delta")) for p in parts[2:-1]] == [
        ("tool-input-start", "call_kitP1", None),
        ("tool-input-delta", "call_kitP1", '{"city": '),
        ("tool-input-start", "call_kitP2", None),
        ("tool-input-delta", "call_kitP2", '{"expression": "2+2"}'),
        ("tool-input-delta", "call_kitP1", '"Oslo"}'),
        ("tool-input-end", "call_kitP1", None),
        ("tool-call", "call_kitP1", None),
        ("tool-input-end", "call_kitP2", None),
        ("tool-call", "call_kitP2", None),
    ]
    assert parts[-1]["finishReason"] == {"unified": "tool-calls", "raw": "tool_calls"}
    assert parts[-1]["providerMetadata"] == {
        "openai-compatible": {"acceptedPredictionTokens": 0, "rejectedPredictionTokens": 0}
    }


async def test_a_stream_cut_before_its_end_finishes_other(loopback: LoopbackServer) -> None:
    """No finish_reason, no usage, no [DONE] (kit case chat-cut): the AI SDK closes and finishes 'other'."""
    parts = await run_compatible(loopback, kit_sse("text", cut=3))
    assert [p["type"] for p in parts[2:]] == ["text-start", "text-delta", "text-delta", "text-end", "finish"]
    assert parts[-1]["finishReason"] == {"unified": "other", "raw": None}
    assert parts[-1]["providerMetadata"] == {"openai-compatible": {}}
    assert parts[-1]["usage"]["inputTokens"]["total"] is None


async def test_a_compatible_servers_refusal_is_dropped(loopback: LoopbackServer) -> None:
    parts = await run_compatible(loopback, kit_sse("refusal"))
    assert [p["type"] for p in parts] == ["stream-start", "response-metadata", "finish"]
    assert parts[-1]["finishReason"] == {"unified": "stop", "raw": "stop"}


async def test_ollama_reasoning_field_whole_tool_call_and_bare_usage(loopback: LoopbackServer) -> None:
    parts = await run_compatible(loopback, kit_sse("ollama-tool"))
    assert [(p["type"], p.get("delta")) for p in parts[2:-1]] == [
        ("reasoning-start", None),
        ("reasoning-delta", "Need the weather tool."),
        ("reasoning-end", None),
        ("tool-input-start", None),
        ("tool-input-delta", '{"city":"Rome"}'),
        ("tool-input-end", None),
        ("tool-call", None),
    ]
    finish = parts[-1]
    assert finish["providerMetadata"] == {"openai-compatible": {}}
    assert finish["usage"]["inputTokens"] == {
        "total": 210,
        "noCache": 210,
        "cacheRead": 0,
        "cacheWrite": None,
    }


async def test_arguments_before_the_function_name_are_buffered(loopback: LoopbackServer) -> None:
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}

    def delta(tool: dict[str, Any], finish: str | None = None) -> str:
        choice = {"index": 0, "delta": {"tool_calls": [tool]} if tool else {}, "finish_reason": finish}
        return f"data: {json.dumps({**chunk, 'choices': [choice]})}\n\n"

    body = (
        delta({"index": 0, "id": "call_b", "function": {"arguments": '{"a":'}})
        + delta({"index": 0, "function": {"name": "calc", "arguments": "1}"}})
        + delta({}, "tool_calls")
        + "data: [DONE]\n\n"
    )
    parts = await run_compatible(loopback, body.encode())
    assert parts[2:5] == [
        {"type": "tool-input-start", "id": "call_b", "toolName": "calc"},
        {"type": "tool-input-delta", "id": "call_b", "delta": '{"a":1}'},
        {"type": "tool-input-end", "id": "call_b"},
    ]
    assert parts[5] == {"type": "tool-call", "toolCallId": "call_b", "toolName": "calc", "input": '{"a":1}'}


def test_compatible_messages_send_reasoning_back_in_compact_json() -> None:
    """As Mastra sent them (kit case chat-reasoning-content, second request)."""
    prompt: list[dict[str, Any]] = [
        {
            "role": "assistant",
            "content": [
                {"type": "reasoning", "text": "Check the weather."},
                {"type": "tool-call", "toolCallId": "call_1", "toolName": "w", "input": {"city": "Zürich"}},
            ],
        },
        {
            "role": "tool",
            "content": [
                {
                    "type": "tool-result",
                    "toolCallId": "call_1",
                    "toolName": "w",
                    "output": {"type": "json", "value": {"ok": True}},
                }
            ],
        },
    ]
    assistant = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "w", "arguments": '{"city":"Zürich"}'}}
        ],
    }
    tool = {"role": "tool", "tool_call_id": "call_1", "content": '{"ok":true}'}
    assert chat_messages(prompt, "system", reasoning=True) == [
        {**assistant, "reasoning_content": "Check the weather."},
        tool,
    ]
    assert chat_messages(prompt, "system") == [assistant, tool]
