"""OpenAI Responses API: recorded transcripts through the real SDK to exact parts."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from runstream.models.base import ModelCallError, ModelRequest, ModelSettings
from runstream.models.openai import OpenAIResponsesModel

from .loopback import LoopbackServer, Reply, collect, error_of, fixture

CREATED = datetime(2025, 3, 6, 19, 55, 58, tzinfo=UTC)
HI = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]


def model(server: LoopbackServer, model_id: str = "gpt-4.1", **kw: Any) -> OpenAIResponsesModel:
    return OpenAIResponsesModel(model_id, api_key="sk-test", base_url=server.url("/v1"), **kw)


async def run(server: LoopbackServer, name: str, **request: Any) -> list[dict[str, Any]]:
    server.queue(Reply(fixture(name)))
    stream = await model(server).stream(ModelRequest(prompt=HI, **request))
    return await collect(stream.parts)


async def test_text_with_citation_and_usage(loopback: LoopbackServer) -> None:
    parts = await run(loopback, "openai_responses_text.sse")
    citation = {
        "type": "url_citation",
        "start_index": 13,
        "end_index": 26,
        "url": "https://example.com/docs",
        "title": "Example docs",
    }
    assert parts == [
        {"type": "stream-start", "warnings": []},
        {
            "type": "response-metadata",
            "id": "resp_text_1",
            "modelId": "gpt-4.1-2025-04-14",
            "timestamp": CREATED,
        },
        {"type": "text-start", "id": "msg_text_1", "providerMetadata": {"openai": {"itemId": "msg_text_1"}}},
        {"type": "text-delta", "id": "msg_text_1", "delta": "Hello"},
        {"type": "text-delta", "id": "msg_text_1", "delta": " world!"},
        {"type": "text-delta", "id": "msg_text_1", "delta": " See the docs."},
        {
            "type": "source",
            "sourceType": "url",
            "id": "resp_text_1-src-1",
            "url": "https://example.com/docs",
            "title": "Example docs",
        },
        {
            "type": "text-end",
            "id": "msg_text_1",
            "providerMetadata": {"openai": {"itemId": "msg_text_1", "annotations": [citation]}},
        },
        {
            "type": "finish",
            "finishReason": "stop",
            "usage": {  # AI SDK v3 usage, as @ai-sdk/openai reports it
                "inputTokens": {"total": 36, "noCache": 24, "cacheRead": 12},
                "outputTokens": {"total": 9, "text": 9, "reasoning": 0},
                "raw": {
                    "input_tokens": 36,
                    "input_tokens_details": {"cached_tokens": 12},
                    "output_tokens": 9,
                    "output_tokens_details": {"reasoning_tokens": 0},
                },
            },
            "providerMetadata": {"openai": {"responseId": "resp_text_1"}},
        },
    ]
    request = loopback.requests[0]
    assert (request.method, request.path) == ("POST", "/v1/responses")
    assert request.headers["authorization"] == "Bearer sk-test"
    assert request.body == {
        "model": "gpt-4.1",
        "stream": True,
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}],
    }


async def test_reasoning_summaries_and_parallel_tool_calls(loopback: LoopbackServer) -> None:
    parts = await run(loopback, "openai_responses_reasoning_tools.sse")
    start_meta = {"openai": {"itemId": "rs_1", "reasoningEncryptedContent": None}}
    end_meta = {"openai": {"itemId": "rs_1", "reasoningEncryptedContent": "gAAAAABo-encrypted-reasoning"}}
    delta_meta = {"openai": {"itemId": "rs_1"}}
    assert parts[2:] == [
        {"type": "reasoning-start", "id": "rs_1:0", "providerMetadata": start_meta},
        {
            "type": "reasoning-delta",
            "id": "rs_1:0",
            "delta": "The user wants weather",
            "providerMetadata": delta_meta,
        },
        {
            "type": "reasoning-delta",
            "id": "rs_1:0",
            "delta": " for two cities.",
            "providerMetadata": delta_meta,
        },
        # each summary part is closed when the next starts (as Mastra's recordings show)
        {"type": "reasoning-end", "id": "rs_1:0", "providerMetadata": delta_meta},
        {"type": "reasoning-start", "id": "rs_1:1", "providerMetadata": start_meta},
        {
            "type": "reasoning-delta",
            "id": "rs_1:1",
            "delta": "I will call get_weather twice.",
            "providerMetadata": delta_meta,
        },
        {"type": "reasoning-end", "id": "rs_1:1", "providerMetadata": end_meta},
        {"type": "tool-input-start", "id": "call_sf", "toolName": "get_weather"},
        {"type": "tool-input-delta", "id": "call_sf", "delta": '{"city":'},
        {"type": "tool-input-start", "id": "call_ny", "toolName": "get_weather"},
        {"type": "tool-input-delta", "id": "call_sf", "delta": '"San Francisco"}'},
        {"type": "tool-input-delta", "id": "call_ny", "delta": '{"city":"New York"}'},
        {"type": "tool-input-end", "id": "call_sf"},
        {
            "type": "tool-call",
            "toolCallId": "call_sf",
            "toolName": "get_weather",
            "input": '{"city":"San Francisco"}',
            "providerMetadata": {"openai": {"itemId": "fc_1"}},
        },
        {"type": "tool-input-end", "id": "call_ny"},
        {
            "type": "tool-call",
            "toolCallId": "call_ny",
            "toolName": "get_weather",
            "input": '{"city":"New York"}',
            "providerMetadata": {"openai": {"itemId": "fc_2"}},
        },
        {
            "type": "finish",
            "finishReason": "tool-calls",
            "usage": {
                "inputTokens": {"total": 80, "noCache": 80, "cacheRead": 0},
                "outputTokens": {"total": 120, "text": 56, "reasoning": 64},
                "raw": {
                    "input_tokens": 80,
                    "input_tokens_details": {"cached_tokens": 0},
                    "output_tokens": 120,
                    "output_tokens_details": {"reasoning_tokens": 64},
                },
            },
            "providerMetadata": {"openai": {"responseId": "resp_tools_1"}},
        },
    ]


async def test_refusal_is_an_empty_text_part_that_finishes_stop(loopback: LoopbackServer) -> None:
    """@ai-sdk/openai 3.0.88 ignores refusal deltas: Mastra streams an empty text part and
    finishes ``stop`` (golden responses-refusal)."""
    parts = await run(loopback, "openai_responses_refusal.sse")
    assert [p["type"] for p in parts[2:]] == ["text-start", "text-end", "finish"]
    assert parts[-1]["finishReason"] == "stop"


async def test_incomplete_for_max_output_tokens_finishes_length(loopback: LoopbackServer) -> None:
    parts = await run(loopback, "openai_responses_incomplete.sse")
    assert parts[-1]["finishReason"] == {"unified": "length", "raw": "max_output_tokens"}
    assert parts[-1]["usage"]["outputTokens"]["total"] == 4


async def test_mid_stream_error_event_ends_the_stream(loopback: LoopbackServer) -> None:
    parts = await run(loopback, "openai_responses_error.sse")
    assert [p["type"] for p in parts] == [
        "stream-start",
        "response-metadata",
        "text-start",
        "text-delta",
        "error",
    ]
    message = "The server had an error while processing your request. Sorry about that!"
    assert error_of(parts[-1]) == (None, message, True)
    assert parts[-1]["error"].body["code"] == "server_error"


async def test_dropped_connection_yields_an_error_part(loopback: LoopbackServer) -> None:
    loopback.queue(Reply(fixture("openai_responses_truncated.sse"), complete=False))
    stream = await model(loopback).stream(ModelRequest(prompt=HI))
    parts = await collect(stream.parts)
    assert [p.get("delta") for p in parts if p["type"] == "text-delta"] == ["Hello", " world!"]
    status, _, retryable = error_of(parts[-1])
    assert (status, retryable) == (None, True)


async def test_stream_closed_without_terminal_event_finishes_other(loopback: LoopbackServer) -> None:
    """The AI SDK finishes a stream that ends cleanly before its terminal event with ``other``
    and no usage (golden responses-truncated)."""
    loopback.queue(Reply(fixture("openai_responses_truncated.sse"), framing="eof"))
    stream = await model(loopback).stream(ModelRequest(prompt=HI))
    parts = await collect(stream.parts)
    assert parts[-2] == {"type": "text-delta", "id": "msg_text_1", "delta": " world!"}
    assert parts[-1] == {
        "type": "finish",
        "finishReason": "other",
        "usage": {"inputTokens": {}, "outputTokens": {}},
        "providerMetadata": {"openai": {"responseId": "resp_text_1"}},
    }


async def test_raw_chunks_precede_their_parts(loopback: LoopbackServer) -> None:
    parts = await run(loopback, "openai_responses_incomplete.sse", include_raw_chunks=True)
    raw = [p["rawValue"] for p in parts if p["type"] == "raw"]
    assert raw[0]["type"] == "response.created"
    assert raw[-1]["type"] == "response.incomplete"
    assert parts[1]["type"] == "raw" and parts[2]["type"] == "response-metadata"
    delta = parts.index({"type": "text-delta", "id": "msg_len_1", "delta": "Once upon"})
    assert parts[delta - 1]["rawValue"]["delta"] == "Once upon"


async def test_settings_tools_format_and_provider_options_shape_the_request(loopback: LoopbackServer) -> None:
    loopback.queue(Reply(fixture("openai_responses_incomplete.sse")))
    settings = ModelSettings(
        temperature=0.2,
        top_p=0.9,
        max_output_tokens=64,
        seed=7,
        top_k=3,
        headers={"x-trace": "abc"},
        provider_options={"openai": {"store": False, "text": {"verbosity": "low"}}, "anthropic": {"x": 1}},
    )
    request = ModelRequest(
        prompt=[{"role": "system", "content": "Be terse."}, *HI],
        tools=[
            {
                "type": "function",
                "name": "get_weather",
                "description": "Weather",
                "inputSchema": {"type": "object"},
            }
        ],
        tool_choice={"type": "tool", "toolName": "get_weather"},
        response_format={"type": "json", "schema": {"type": "object"}, "name": "answer"},
        settings=settings,
    )
    stream = await model(loopback).stream(request)
    parts = await collect(stream.parts)
    assert parts[0] == {
        "type": "stream-start",
        "warnings": [
            {"type": "unsupported-setting", "setting": "topK"},
            {"type": "unsupported-setting", "setting": "seed"},
        ],
    }
    sent = loopback.requests[0]
    assert sent.headers["x-trace"] == "abc"
    assert sent.body == {
        "model": "gpt-4.1",
        "stream": True,
        "input": [
            {"role": "system", "content": "Be terse."},
            {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        ],
        "temperature": 0.2,
        "top_p": 0.9,
        "max_output_tokens": 64,
        "tools": [
            {
                "type": "function",
                "name": "get_weather",
                "description": "Weather",
                "parameters": {"type": "object"},
            }
        ],
        "tool_choice": {"type": "function", "name": "get_weather"},
        "text": {
            "format": {
                "type": "json_schema",
                "name": "answer",
                "schema": {"type": "object"},
                "strict": True,
            },
            "verbosity": "low",
        },
        "store": False,
    }
    assert stream.request["body"] == sent.body
    assert "include" not in sent.body  # encrypted reasoning is asked for on reasoning models only
    assert stream.response["headers"]["content-type"] == "text/event-stream"


async def test_reasoning_model_gets_developer_role_and_no_sampling(loopback: LoopbackServer) -> None:
    loopback.queue(Reply(fixture("openai_responses_incomplete.sse")))
    request = ModelRequest(
        prompt=[{"role": "system", "content": "Be terse."}, *HI], settings=ModelSettings(temperature=0.5)
    )
    stream = await model(loopback, "o4-mini").stream(request)
    parts = await collect(stream.parts)
    assert parts[0]["warnings"] == [{"type": "unsupported-setting", "setting": "temperature"}]
    body = loopback.requests[0].body
    assert body["input"][0] == {"role": "developer", "content": "Be terse."}
    assert "temperature" not in body


async def test_conversation_history_becomes_input_items(loopback: LoopbackServer) -> None:
    loopback.queue(Reply(fixture("openai_responses_incomplete.sse")))
    reasoning_meta = {"openai": {"itemId": "rs_1", "reasoningEncryptedContent": "enc"}}
    prompt: list[dict[str, Any]] = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Weather?"},
                {"type": "file", "mediaType": "image/png", "data": b"\x89PNG"},
                {"type": "file", "mediaType": "application/pdf", "data": "https://example.com/a.pdf"},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "reasoning", "text": "Think 1", "providerOptions": reasoning_meta},
                {"type": "reasoning", "text": "Think 2", "providerOptions": reasoning_meta},
                {"type": "reasoning", "text": "no item id, dropped"},
                {"type": "text", "text": "Stored.", "providerOptions": {"openai": {"itemId": "msg_1"}}},
                {"type": "text", "text": "Checking."},
                {
                    "type": "tool-call",
                    "toolCallId": "call_1",
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
                    "toolCallId": "call_1",
                    "toolName": "get_weather",
                    "output": {"type": "json", "value": {"temp": 18}},
                }
            ],
        },
    ]
    stream = await model(loopback).stream(ModelRequest(prompt=prompt))
    await collect(stream.parts)
    assert loopback.requests[0].body["input"] == [
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "Weather?"},
                {"type": "input_image", "image_url": "data:image/png;base64,iVBORw=="},
                {"type": "input_file", "file_url": "https://example.com/a.pdf"},
            ],
        },
        {"type": "item_reference", "id": "rs_1"},  # stored (the default): once per reasoning item
        {"type": "item_reference", "id": "msg_1"},
        {"role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city":"SF"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": '{"temp":18}'},
    ]


async def test_generated_image_becomes_a_file_and_file_citation_a_document_source(
    loopback: LoopbackServer,
) -> None:
    parts = await run(loopback, "openai_responses_image.sse")
    assert parts[2:7] == [
        {
            "type": "tool-call",
            "toolCallId": "ig_1",
            "toolName": "image_generation",
            "input": "{}",
            "providerExecuted": True,
        },
        {
            "type": "tool-result",
            "toolCallId": "ig_1",
            "toolName": "image_generation",
            "result": {"result": "iVBORw0KGgo="},
        },
        {"type": "text-start", "id": "msg_img_1", "providerMetadata": {"openai": {"itemId": "msg_img_1"}}},
        {"type": "text-delta", "id": "msg_img_1", "delta": "Here it is."},
        {
            "type": "source",
            "sourceType": "document",
            "id": "resp_img_1-src-1",
            "mediaType": "text/plain",
            "title": "notes.txt",
            "filename": "notes.txt",
            "providerMetadata": {"openai": {"type": "file_citation", "fileId": "file-abc", "index": 10}},
        },
    ]


async def test_failed_response_before_any_output_fails_the_call(loopback: LoopbackServer) -> None:
    """As the AI SDK's throwIfOpenAIStreamErrorBeforeOutput: the request fails, with the status
    its error code implies (server_error: 500, so retryable), and the stream is closed."""
    loopback.queue(Reply(fixture("openai_responses_failed.sse")))
    with pytest.raises(ModelCallError) as caught:
        await model(loopback).stream(ModelRequest(prompt=HI))
    error = caught.value
    assert (error.status_code, str(error), error.retryable) == (
        500,
        "The model failed to generate a response.",
        True,
    )
