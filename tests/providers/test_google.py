"""Google Gemini: the vendor kit's Gemini streams through the real google-genai SDK to exact parts,
and the request bodies sent back (thought signatures, function call ids) checked field by field."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from typing import Any

import pytest

from runstream.abort import AbortController
from runstream.errors import ConfigurationError
from runstream.models.base import ModelCallError, ModelRequest, ModelSettings, StreamPart
from runstream.models.google import GoogleModel, split_base_url
from runstream.models.registry import resolve_model

from .loopback import LoopbackServer, Reply, collect, error_of, json_reply

pytest.importorskip("google.genai")

KIT = Path(__file__).parents[1] / "vendor_kit" / "fixtures" / "google"
HI = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
PATH = "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
TOOL = {
    "type": "function",
    "name": "weather",
    "description": "weather tool",
    "inputSchema": {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "days": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        },
        "required": ["city"],
        "additionalProperties": False,
    },
}


def events(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (KIT / f"{name}.chunks.txt").read_text().splitlines() if line]


def sse(name: str) -> bytes:
    """A kit fixture framed as the Generative Language API streams it (``alt=sse``)."""
    return b"".join(b"data: %s\n\n" % json.dumps(event).encode() for event in events(name))


def signature(name: str, index: int, part: int) -> str:
    value: str = events(name)[index]["candidates"][0]["content"]["parts"][part]["thoughtSignature"]
    return value


def model(server: LoopbackServer, **kw: Any) -> GoogleModel:
    kw.setdefault("max_retries", 0)
    return GoogleModel("gemini-2.5-flash", api_key="g-key", base_url=server.url("/v1beta"), **kw)


async def run(server: LoopbackServer, name: str, **request: Any) -> list[StreamPart]:
    server.replies.clear()  # (the loopback repeats its last reply: this call gets this fixture)
    server.queue(Reply(sse(name)))
    stream = await model(server).stream(ModelRequest(prompt=request.pop("prompt", HI), **request))
    return await collect(stream.parts)


def usage(prompt: int, text: int, reasoning: int = 0, cached: int = 0) -> dict[str, Any]:
    return {
        "inputTokens": {"total": prompt, "noCache": prompt - cached, "cacheRead": cached},
        "outputTokens": {"total": text + reasoning, "text": text, "reasoning": reasoning},
    }


def metadata(part: StreamPart, **google: Any) -> dict[str, Any]:
    base = {
        "promptFeedback": None,
        "groundingMetadata": None,
        "urlContextMetadata": None,
        "safetyRatings": None,
        "finishMessage": None,
        "serviceTier": None,
    }
    assert part["providerMetadata"] == {"google": {**base, "usageMetadata": part_usage(part), **google}}
    return dict(part["providerMetadata"]["google"])


def part_usage(part: StreamPart) -> Any:
    return part["usage"]["raw"]


async def test_text_parts_usage_and_request(loopback: LoopbackServer) -> None:
    prompt = [{"role": "system", "content": "Be brief."}, *HI]
    parts = await run(loopback, "text", prompt=prompt, tools=[TOOL], tool_choice={"type": "auto"})
    assert parts[:-1] == [
        {"type": "stream-start", "warnings": []},
        {"type": "response-metadata", "id": "rAg1aPq7JYmBz7IPzLWSwQ8"},
        {"type": "text-start", "id": "0"},
        {"type": "text-delta", "id": "0", "delta": "Hello"},
        {"type": "text-delta", "id": "0", "delta": "! How can I help"},
        {"type": "text-delta", "id": "0", "delta": " you today?"},
        {"type": "text-end", "id": "0"},
    ]
    finish = parts[-1]
    assert finish["finishReason"] == {"unified": "stop", "raw": "STOP"}
    assert {k: v for k, v in finish["usage"].items() if k != "raw"} == usage(12, 9)
    assert finish["usage"]["raw"] == {
        "promptTokenCount": 12,
        "candidatesTokenCount": 9,
        "totalTokenCount": 21,
        "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 12}],
    }
    metadata(finish)
    sent = loopback.requests[0]
    assert (sent.method, sent.path, sent.headers["x-goog-api-key"]) == ("POST", PATH, "g-key")
    assert sent.body == {  # what @ai-sdk/google sends
        "generationConfig": {},
        "contents": [{"role": "user", "parts": [{"text": "hi"}]}],
        "systemInstruction": {"parts": [{"text": "Be brief."}]},
        "tools": [
            {
                "functionDeclarations": [
                    {
                        "name": "weather",
                        "description": "weather tool",
                        "parameters": {
                            "required": ["city"],
                            "type": "object",
                            "properties": {
                                "city": {"type": "string"},
                                "days": {"nullable": True, "type": "integer"},
                            },
                        },
                    }
                ]
            }
        ],
        "toolConfig": {"functionCallingConfig": {"mode": "AUTO"}},
    }


async def test_thoughts_become_reasoning_and_the_signature_rides_on_its_part(
    loopback: LoopbackServer,
) -> None:
    parts = await run(loopback, "thinking-text")
    meta = {"google": {"thoughtSignature": signature("thinking-text", 2, 0)}}
    assert parts[2:-1] == [
        {"type": "reasoning-start", "id": "0"},
        {"type": "reasoning-delta", "id": "0", "delta": "**Greeting the user**\n\nThe user said hello. "},
        {"type": "reasoning-delta", "id": "0", "delta": "I should greet them back warmly."},
        {"type": "reasoning-end", "id": "0"},
        {"type": "text-start", "id": "1", "providerMetadata": meta},
        {"type": "text-delta", "id": "1", "delta": "Hi there!", "providerMetadata": meta},
        {"type": "text-delta", "id": "1", "delta": " What can I do for you?"},
        {"type": "text-end", "id": "1"},
    ]
    finish = parts[-1]
    assert {k: v for k, v in finish["usage"].items() if k != "raw"} == usage(12, 10, reasoning=41)


async def test_trailing_empty_part_carries_the_signature(loopback: LoopbackServer) -> None:
    parts = await run(loopback, "text-trailing-signature")
    meta = {"google": {"thoughtSignature": signature("text-trailing-signature", 2, 0)}}
    assert parts[-3:-1] == [
        {"type": "text-delta", "id": "0", "delta": "", "providerMetadata": meta},
        {"type": "text-end", "id": "0"},
    ]


async def test_function_call_and_its_signature_go_back_in_the_next_request(loopback: LoopbackServer) -> None:
    parts = await run(loopback, "tool-call.1", tools=[TOOL], tool_choice={"type": "auto"})
    signed = {"google": {"thoughtSignature": signature("tool-call.1", 1, 0)}}
    assert "+" in signed["google"]["thoughtSignature"] and "/" in signed["google"]["thoughtSignature"]
    call_id = parts[4]["id"]
    assert len(call_id) == 16 and call_id.isalnum()  # Gemini sends no id: made here, as the AI SDK does
    assert [p["type"] for p in parts] == [
        "stream-start",
        "response-metadata",
        "reasoning-start",
        "reasoning-delta",
        "tool-input-start",
        "tool-input-delta",
        "tool-input-end",
        "tool-call",
        "reasoning-end",  # blocks still open close when the stream ends (as the AI SDK does)
        "finish",
    ]
    assert parts[4:8] == [
        {"type": "tool-input-start", "id": call_id, "toolName": "weather", "providerMetadata": signed},
        {"type": "tool-input-delta", "id": call_id, "delta": '{"city":"Paris"}', "providerMetadata": signed},
        {"type": "tool-input-end", "id": call_id, "providerMetadata": signed},
        {
            "type": "tool-call",
            "toolCallId": call_id,
            "toolName": "weather",
            "input": '{"city":"Paris"}',
            "providerMetadata": signed,
        },
    ]
    assert parts[-1]["finishReason"] == {"unified": "tool-calls", "raw": "STOP"}

    # the next call: the loop's prompt parts carry the parts' metadata back as providerOptions
    thought = parts[3]["delta"]
    follow_up = [
        *HI,
        {
            "role": "assistant",
            "content": [
                {"type": "reasoning", "text": thought, "providerOptions": {}},
                {
                    "type": "tool-call",
                    "toolCallId": call_id,
                    "toolName": "weather",
                    "input": {"city": "Paris"},
                    "providerOptions": signed,
                },
            ],
        },
        {
            "role": "tool",
            "content": [
                {
                    "type": "tool-result",
                    "toolCallId": call_id,
                    "toolName": "weather",
                    "output": {"type": "json", "value": {"ok": True}},
                }
            ],
        },
    ]
    parts = await run(loopback, "tool-call.2", prompt=follow_up, tools=[TOOL], tool_choice={"type": "auto"})
    assert parts[-1]["finishReason"] == {"unified": "stop", "raw": "STOP"}
    assert loopback.requests[1].body["contents"] == [
        {"role": "user", "parts": [{"text": "hi"}]},
        {
            "role": "model",
            "parts": [
                {"text": thought, "thought": True},
                {
                    "functionCall": {"id": call_id, "name": "weather", "args": {"city": "Paris"}},
                    "thoughtSignature": signed["google"]["thoughtSignature"],  # byte for byte
                },
            ],
        },
        {
            "role": "user",
            "parts": [
                {
                    "functionResponse": {
                        "id": call_id,
                        "name": "weather",
                        "response": {"name": "weather", "content": {"ok": True}},
                    }
                }
            ],
        },
    ]


async def test_parallel_calls_only_the_first_signed(loopback: LoopbackServer) -> None:
    parts = await run(loopback, "parallel-calls.1")
    calls = [p for p in parts if p["type"] == "tool-call"]
    assert [(c["toolName"], c["input"]) for c in calls] == [
        ("calculator", '{"expression":"2+2"}'),
        ("get_weather", '{"city":"Berlin"}'),
    ]
    assert calls[0]["providerMetadata"] == {
        "google": {"thoughtSignature": signature("parallel-calls.1", 0, 0)}
    }
    assert "providerMetadata" not in calls[1]
    assert calls[0]["toolCallId"] != calls[1]["toolCallId"]


def test_gemini_3_replays_an_unsigned_call_with_the_documented_sentinel() -> None:
    from runstream.models._google_body import google_contents

    call = {"type": "tool-call", "toolCallId": "c1", "toolName": "weather", "input": {}}
    warnings: list[dict[str, Any]] = []
    _, contents = google_contents(
        [*HI, {"role": "assistant", "content": [call]}], gemini3=True, warnings=warnings
    )
    assert contents[1]["parts"][0]["thoughtSignature"] == "skip_thought_signature_validator"
    assert warnings and warnings[0]["type"] == "other"
    _, contents = google_contents([*HI, {"role": "assistant", "content": [call]}], gemini3=False)
    assert "thoughtSignature" not in contents[1]["parts"][0]


async def test_grounding_chunks_become_url_sources_once_each(loopback: LoopbackServer) -> None:
    parts = await run(loopback, "grounding")
    sources = [p for p in parts if p["type"] == "source"]
    assert [(s["url"], s["title"], s["sourceType"]) for s in sources] == [
        ("https://vertexaisearch.cloud.google.com/grounding-api-redirect/AbF9wXE1", "uefa.com", "url"),
        ("https://vertexaisearch.cloud.google.com/grounding-api-redirect/AbF9wXE2", "wikipedia.org", "url"),
    ]
    grounding = events("grounding")[1]["candidates"][0]["groundingMetadata"]
    metadata(parts[-1], groundingMetadata=grounding)


@pytest.mark.parametrize(
    ("name", "reason", "raw"),
    [("max-tokens", "length", "MAX_TOKENS"), ("safety-candidate", "content-filter", "SAFETY")],
)
async def test_finish_reasons(loopback: LoopbackServer, name: str, reason: str, raw: str) -> None:
    parts = await run(loopback, name)
    assert parts[-1]["finishReason"] == {"unified": reason, "raw": raw}
    if name == "safety-candidate":
        ratings = events(name)[0]["candidates"][0]["safetyRatings"]
        metadata(parts[-1], safetyRatings=ratings)
        assert [p["type"] for p in parts] == ["stream-start", "response-metadata", "finish"]


async def test_blocked_prompt_and_cut_stream_finish_other_without_error(loopback: LoopbackServer) -> None:
    parts = await run(loopback, "safety-prompt")
    assert parts[-1] == {
        "type": "finish",
        "finishReason": {"unified": "other"},
        "usage": {**usage(14, 0), "raw": events("safety-prompt")[0]["usageMetadata"]},
        "providerMetadata": None,
    }
    parts = await run(loopback, "cut-stream")
    assert [p["type"] for p in parts][-2:] == ["text-end", "finish"]
    assert parts[-1]["finishReason"] == {"unified": "other"}


async def test_cached_and_thought_tokens(loopback: LoopbackServer) -> None:
    parts = await run(loopback, "cached-usage")
    assert {k: v for k, v in parts[-1]["usage"].items() if k != "raw"} == usage(
        2100, 4, reasoning=20, cached=2048
    )
    assert "cacheTokensDetails" not in parts[-1]["usage"]["raw"]  # as the AI SDK's schema keeps it


async def test_code_execution_is_a_provider_executed_call(loopback: LoopbackServer) -> None:
    parts = await run(loopback, "code-execution")
    call, result = (p for p in parts if p["type"] in ("tool-call", "tool-result"))
    assert call == {
        "type": "tool-call",
        "toolCallId": call["toolCallId"],
        "toolName": "code_execution",
        "input": '{"language":"PYTHON","code":"print(sum(range(10)))\\n"}',
        "providerExecuted": True,
    }
    assert result == {
        "type": "tool-result",
        "toolCallId": call["toolCallId"],
        "toolName": "code_execution",
        "result": {"outcome": "OUTCOME_OK", "output": "45\n"},
    }
    text = [p["delta"] for p in parts if p["type"] == "text-delta"]
    assert text == ["Let me compute that.", "The sum is 45."]


async def test_settings_thinking_config_and_json_response(loopback: LoopbackServer) -> None:
    settings = ModelSettings(
        temperature=0.2,
        max_output_tokens=256,
        top_k=3,
        stop_sequences=["END"],
        seed=7,
        headers={"x-team": "a"},
        provider_options={"google": {"thinkingConfig": {"thinkingBudget": 1024, "includeThoughts": True}}},
    )
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    fmt = {"type": "json", "schema": schema}
    await run(
        loopback, "text", settings=settings, response_format=fmt, tools=[TOOL], tool_choice={"type": "none"}
    )
    sent = loopback.requests[0]
    assert sent.headers["x-team"] == "a"
    assert sent.body["generationConfig"] == {
        "maxOutputTokens": 256,
        "temperature": 0.2,
        "topK": 3,
        "stopSequences": ["END"],
        "seed": 7,
        "responseMimeType": "application/json",
        "responseSchema": {"required": ["n"], "type": "object", "properties": {"n": {"type": "integer"}}},
        "thinkingConfig": {"thinkingBudget": 1024, "includeThoughts": True},
    }
    assert sent.body["toolConfig"] == {"functionCallingConfig": {"mode": "NONE"}}


async def test_raw_chunks_are_the_chunks_gemini_sent(loopback: LoopbackServer) -> None:
    parts = await run(loopback, "thinking-text", include_raw_chunks=True)
    assert [p["rawValue"] for p in parts if p["type"] == "raw"] == events("thinking-text")


@pytest.mark.parametrize(
    ("status", "message", "retryable"),
    [
        (429, "Resource has been exhausted (e.g. check quota).", True),
        (500, "An internal error has occurred.", True),
        (400, "API key not valid. Please pass a valid API key.", False),
    ],
)
async def test_google_error_json_raises_with_status_and_message(
    loopback: LoopbackServer, status: int, message: str, retryable: bool
) -> None:
    body = {"error": {"code": status, "message": message, "status": "SOME_STATUS"}}
    loopback.queue(json_reply(status, body))
    with pytest.raises(ModelCallError) as caught:
        await model(loopback).stream(ModelRequest(prompt=HI))
    error = caught.value
    assert (error.status_code, str(error), error.retryable) == (status, message, retryable)
    assert error.body == body
    assert len(loopback.requests) == 1


async def test_retryable_errors_are_retried(loopback: LoopbackServer) -> None:
    body = {"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}}
    loopback.queue(json_reply(503, body), Reply(sse("text")))
    stream = await model(loopback, max_retries=1).stream(ModelRequest(prompt=HI))
    parts = await collect(stream.parts)
    assert parts[-1]["finishReason"] == {"unified": "stop", "raw": "STOP"}
    assert len(loopback.requests) == 2


async def test_call_arguments_are_written_as_json_stringify_writes_them(loopback: LoopbackServer) -> None:
    parts = await run(loopback, "call-args-values.1")
    (call,) = (p for p in parts if p["type"] == "tool-call")
    golden = Path(__file__).parents[1] / "vendor_kit" / "golden" / "google-call-args-values.jsonl"
    chunks = [json.loads(line) for line in golden.read_text().splitlines()]
    (mastra,) = (c["payload"]["argsTextDelta"] for c in chunks if c["type"] == "tool-call-delta")
    assert call["input"] == mastra  # '{"expression":"2\u00d73.5","precision":2,...}' as Mastra streamed it
    assert '"precision":2,' in mastra and "Z\u00fcrich" in mastra


async def test_an_error_object_inside_the_stream_ends_it_with_an_error_part(loopback: LoopbackServer) -> None:
    # Mastra's provider parses {"error": ...} as an empty chunk, finishes "other" and its loop asks
    # again (five times in all): runstream reports the vendor's error instead.
    error = {"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}}
    body = sse("text").split(b"\n\n")[0] + b"\n\ndata: " + json.dumps(error).encode() + b"\n\n"
    loopback.queue(Reply(body))
    parts = await collect((await model(loopback).stream(ModelRequest(prompt=HI))).parts)
    assert [p["type"] for p in parts] == [
        "stream-start",
        "response-metadata",
        "text-start",
        "text-delta",
        "error",
    ]
    assert error_of(parts[-1]) == (503, "The model is overloaded.", True)


async def test_dropped_connection_ends_with_an_error_part(loopback: LoopbackServer) -> None:
    loopback.queue(Reply(sse("text"), complete=False))
    parts = await collect((await model(loopback).stream(ModelRequest(prompt=HI))).parts)
    status, message, retryable = error_of(parts[-1])
    assert (status, retryable) == (None, True)
    assert message.startswith("Connection error: ")


async def test_abort_while_waiting_for_the_next_chunk_closes_the_stream(loopback: LoopbackServer) -> None:
    loopback.queue(Reply(sse("text"), stall_after=1))
    controller = AbortController()
    request = ModelRequest(prompt=HI, abort_signal=controller.signal)
    stream = await model(loopback).stream(request)
    seen: list[str] = []
    first_delta = asyncio.Event()

    async def consume() -> None:
        async for part in stream.parts:
            seen.append(part["type"])
            if part["type"] == "text-delta":
                first_delta.set()

    consumer = asyncio.create_task(consume())
    await first_delta.wait()
    await loopback.stalled.wait()
    controller.abort()
    await asyncio.wait_for(consumer, 5)
    assert seen == ["stream-start", "response-metadata", "text-start", "text-delta"]
    await asyncio.wait_for(loopback.disconnected.wait(), 5)


def test_model_strings_keys_and_base_url(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("GOOGLE_GENERATIVE_AI_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("GOOGLE_GEMINI_BASE_URL", raising=False)
    with pytest.raises(
        ConfigurationError, match="GOOGLE_GENERATIVE_AI_API_KEY / GEMINI_API_KEY / GOOGLE_API_KEY"
    ):
        resolve_model("google/gemini-2.5-flash")
    monkeypatch.setenv("GEMINI_API_KEY", "from-gemini")
    monkeypatch.setenv("GOOGLE_BASE_URL", "http://127.0.0.1:9/v1beta")
    model = resolve_model("google/gemini-2.5-flash")
    assert isinstance(model, GoogleModel)
    assert (model.provider, model.model_id) == ("google", "gemini-2.5-flash")
    options = model.client._api_client._http_options
    assert (options.base_url, options.api_version) == ("http://127.0.0.1:9", "v1beta")
    assert model.client._api_client.api_key == "from-gemini"
    monkeypatch.setenv("GOOGLE_GENERATIVE_AI_API_KEY", "from-mastra")
    model = resolve_model("google/gemini-2.5-flash", base_url="http://h:1")
    assert model.client._api_client.api_key == "from-mastra"
    assert model.client._api_client._http_options.base_url == "http://h:1"


def test_split_base_url() -> None:
    assert split_base_url("https://generativelanguage.googleapis.com/v1beta") == (
        "https://generativelanguage.googleapis.com",
        "v1beta",
    )
    assert split_base_url("http://127.0.0.1:8080/") == ("http://127.0.0.1:8080", "v1beta")
    assert split_base_url("http://proxy/google/v1") == ("http://proxy/google", "v1")


def test_signature_bytes_round_trip_exactly() -> None:
    value = signature("tool-call.1", 1, 0)
    assert base64.b64encode(base64.b64decode(value)).decode() == value


GOLDEN = Path(__file__).parents[1] / "vendor_kit" / "golden"
PASS_THROUGH = {"type": "object", "properties": {}, "additionalProperties": False, "required": []}
KIT_TOOLS = ("calculator", "weather", "get_weather", "lookupVerificationCode", "updateIssueList", "parallel")


def recorded_calls() -> list[tuple[str, int]]:
    calls = []
    for path in sorted(GOLDEN.glob("google-*.requests.json")):
        for number, sent in enumerate(json.loads(path.read_text())):
            if isinstance(sent["body"], dict):
                calls.append((path.name.removesuffix(".requests.json"), number))
    return calls


@pytest.mark.parametrize(("case", "number"), recorded_calls())
def test_every_recorded_request_is_rebuilt_from_mastras_prompt(case: str, number: int) -> None:
    """Each body Mastra sent, rebuilt from the prompt Mastra had then (the reference agent's system
    message and tools, and the messages of the step before, with their providerOptions)."""
    from runstream.models._google_body import google_body

    sent = json.loads((GOLDEN / f"{case}.requests.json").read_text())[number]["body"]
    chunks = [json.loads(line) for line in (GOLDEN / f"{case}.jsonl").read_text().splitlines()]
    steps = [c for c in chunks if c["type"] == "step-finish"]
    messages = (
        steps[number - 1]["payload"]["messages"]["all"]
        if number
        else [{"role": "user", "content": [{"type": "text", "text": "Hello"}]}]
    )
    prompt = [{"role": "system", "content": "You are a helpful assistant."}, *messages]
    tools = [
        {"type": "function", "name": name, "description": f"{name} tool", "inputSchema": PASS_THROUGH}
        for name in KIT_TOOLS
    ]
    request = ModelRequest(prompt=prompt, tools=tools, tool_choice={"type": "auto"})
    body, warnings = google_body(request, "gemini-2.5-flash")
    assert (body, warnings) == (sent, [])


def test_the_sdk_is_imported_only_when_a_model_is_built_and_its_absence_is_named() -> None:
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['google.genai'] = None\n"
        "import runstream.models.google\n"
        "from runstream.models.registry import resolve_model\n"
        "try:\n"
        "    resolve_model('google/gemini-2.5-flash', api_key='k')\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.startswith(
        "'google/gemini-2.5-flash' needs the 'google' SDK: pip install 'runstream[google]'"
    )
