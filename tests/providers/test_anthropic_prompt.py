"""Anthropic request building from AI SDK prompts, checked against what Mastra 1.71 sent.

The follow-up requests in tests/vendor_kit/golden/anthropic-*.requests.json are real Mastra's
(``@ai-sdk/anthropic`` 3.0.103). Each test here rebuilds the prompt Mastra's loop hands the
provider for that step and checks the provider turns it into the very messages Mastra sent; the
rest pins the AI SDK's conversion rules (server tool blocks, cache control, trimming, ordering).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from runstream.models._anthropic_prompt import CacheControl, anthropic_messages
from runstream.models.anthropic import AnthropicModel
from runstream.models.base import ModelRequest, ModelSettings

GOLDEN = Path(__file__).parent.parent / "vendor_kit" / "golden"
SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
HELLO = {"role": "user", "content": [{"type": "text", "text": "Hello"}]}


def sent(case: str, index: int = -1) -> dict[str, Any]:
    """The body of one request Mastra sent in a recorded case."""
    log = json.loads((GOLDEN / f"{case}.requests.json").read_text())
    body: dict[str, Any] = log[index]["body"]
    return body


def step_content(case: str, step: int = 0) -> list[dict[str, Any]]:
    """The content of a step as Mastra's step-finish chunk reports it (with its providerOptions)."""
    for line in (GOLDEN / f"{case}.jsonl").read_text().splitlines():
        chunk = json.loads(line)
        if chunk["type"] == "step-finish":
            steps = chunk["payload"]["output"]["steps"]
            if len(steps) > step:
                content: list[dict[str, Any]] = steps[step]["content"]
                return content
    raise AssertionError(f"no step {step} in {case}")


def tool_results(*calls: tuple[str, str]) -> dict[str, Any]:
    return {
        "role": "tool",
        "content": [
            {
                "type": "tool-result",
                "toolCallId": call_id,
                "toolName": name,
                "output": {"type": "json", "value": {"ok": True, "tool": name}},
            }
            for call_id, name in calls
        ],
    }


@pytest.mark.parametrize(
    ("case", "calls"),
    [
        ("anthropic-thinking-tool", [("toolu_01WeatherParis", "get_weather")]),
        ("anthropic-redacted-only", [("toolu_01Lookup", "lookupVerificationCode")]),
        ("anthropic-parallel-tools", [("toolu_01Calc", "calculator"), ("toolu_02Weather", "weather")]),
        ("anthropic-cache-tool", [("toolu_06Weather", "weather")]),
    ],
)
def test_a_tool_steps_follow_up_is_what_mastra_sent(case: str, calls: list[tuple[str, str]]) -> None:
    """Thinking with its signature, redacted thinking with its data, text, tool_use, results."""
    prompt = [SYSTEM, HELLO, {"role": "assistant", "content": step_content(case)}, tool_results(*calls)]
    system, messages = anthropic_messages(prompt)
    body = sent(case)
    assert system == body["system"]
    assert messages == body["messages"]


def test_thinking_blocks_go_back_before_text_and_tools() -> None:
    body = sent("anthropic-thinking-tool")
    assert [block["type"] for block in body["messages"][1]["content"]] == [
        "thinking",
        "redacted_thinking",
        "text",
        "tool_use",
    ]
    assert body["messages"][1]["content"][0]["signature"].startswith("EqQBCkgIBhABGAIiQLr5")


def step_messages(case: str, step: int) -> list[dict[str, Any]]:
    """The response messages Mastra's step-finish lists after ``step`` (what its next prompt holds)."""
    finishes = [
        json.loads(line)
        for line in (GOLDEN / f"{case}.jsonl").read_text().splitlines()
        if '"step-finish"' in line
    ]
    messages: list[dict[str, Any]] = finishes[step]["payload"]["messages"]["nonUser"]
    return messages


FOLLOW_UPS = sorted(
    path.name.removesuffix(".requests.json")
    for path in GOLDEN.glob("anthropic-*.requests.json")
    if len(json.loads(path.read_text())) > 1
)


@pytest.mark.parametrize("case", FOLLOW_UPS)
def test_every_recorded_follow_up_from_mastras_own_messages(case: str) -> None:
    """Mastra's step messages (its ``messages.nonUser``) as the prompt give exactly the messages it
    sent next. For server tools that is a plain call and tool result (Mastra's message list drops
    ``providerExecuted``), the step's later text and client calls in a second assistant message."""
    log = json.loads((GOLDEN / f"{case}.requests.json").read_text())
    for index in range(1, len(log)):
        system, messages = anthropic_messages([SYSTEM, HELLO, *step_messages(case, index - 1)])
        assert system == log[index]["body"]["system"]
        assert messages == log[index]["body"]["messages"]


def test_provider_executed_calls_and_results_go_back_as_server_blocks() -> None:
    """The AI SDK's own prompt form: call and result in the assistant message."""
    results = [
        {
            "url": "https://a.example",
            "title": "A",
            "pageAge": None,
            "encryptedContent": "Eq0=",
            "type": "web_search_result",
        }
    ]
    fetched = {
        "type": "web_fetch_result",
        "url": "https://b.example",
        "retrievedAt": "2026-12-01T10:00:00Z",
        "content": {
            "type": "document",
            "title": "B",
            "citations": None,
            "source": {"type": "text", "mediaType": "text/plain", "data": "bee"},
        },
    }
    code = {"type": "code_execution_result", "stdout": "42\n", "stderr": "", "return_code": 0, "content": []}
    assistant = {
        "role": "assistant",
        "content": [
            {
                "type": "tool-call",
                "toolCallId": "s1",
                "toolName": "web_search",
                "input": {"query": "a"},
                "providerExecuted": True,
            },
            {
                "type": "tool-result",
                "toolCallId": "s1",
                "toolName": "web_search",
                "output": {"type": "json", "value": results},
            },
            {
                "type": "tool-call",
                "toolCallId": "s2",
                "toolName": "web_fetch",
                "input": {"url": "https://b.example"},
                "providerExecuted": True,
            },
            {
                "type": "tool-result",
                "toolCallId": "s2",
                "toolName": "web_fetch",
                "output": {"type": "json", "value": fetched},
            },
            {
                "type": "tool-call",
                "toolCallId": "s3",
                "toolName": "code_execution",
                "input": {"type": "programmatic-tool-call", "code": "print(42)"},
                "providerExecuted": True,
            },
            {
                "type": "tool-result",
                "toolCallId": "s3",
                "toolName": "code_execution",
                "output": {"type": "json", "value": code},
            },
            {
                "type": "tool-result",
                "toolCallId": "s4",
                "toolName": "web_search",
                "output": {"type": "error-json", "value": {"errorCode": "max_uses_exceeded"}},
            },
            {"type": "text", "text": "Done.  "},
        ],
    }
    _, messages = anthropic_messages([HELLO, assistant])
    assert messages[1]["content"] == [
        {"type": "server_tool_use", "id": "s1", "name": "web_search", "input": {"query": "a"}},
        {
            "type": "web_search_tool_result",
            "tool_use_id": "s1",
            "content": [
                {
                    "url": "https://a.example",
                    "title": "A",
                    "page_age": None,
                    "encrypted_content": "Eq0=",
                    "type": "web_search_result",
                }
            ],
        },
        {"type": "server_tool_use", "id": "s2", "name": "web_fetch", "input": {"url": "https://b.example"}},
        {
            "type": "web_fetch_tool_result",
            "tool_use_id": "s2",
            "content": {
                "type": "web_fetch_result",
                "url": "https://b.example",
                "retrieved_at": "2026-12-01T10:00:00Z",
                "content": {
                    "type": "document",
                    "title": "B",
                    "citations": None,
                    "source": {"type": "text", "media_type": "text/plain", "data": "bee"},
                },
            },
        },
        {"type": "server_tool_use", "id": "s3", "name": "code_execution", "input": {"code": "print(42)"}},
        {"type": "code_execution_tool_result", "tool_use_id": "s3", "content": code},
        {
            "type": "web_search_tool_result",
            "tool_use_id": "s4",
            "content": {"type": "web_search_tool_result_error", "error_code": "max_uses_exceeded"},
        },
        {"type": "text", "text": "Done."},  # the last assistant text of the prompt is trimmed
    ]


def test_tool_use_moves_after_text_within_each_thinking_stretch() -> None:
    signed = {"type": "reasoning", "text": "t", "providerOptions": {"anthropic": {"signature": "s"}}}
    call = {"type": "tool-call", "toolCallId": "c1", "toolName": "f", "input": {}}
    content = [signed, call, {"type": "text", "text": "a"}, signed, {"type": "text", "text": "b"}]
    _, messages = anthropic_messages([HELLO, {"role": "assistant", "content": content}, HELLO])
    assert [b["type"] for b in messages[1]["content"]] == ["thinking", "text", "tool_use", "thinking", "text"]


def test_unsigned_reasoning_is_not_sent_and_warns() -> None:
    warnings: list[dict[str, Any]] = []
    assistant = {
        "role": "assistant",
        "content": [{"type": "reasoning", "text": "x"}, {"type": "text", "text": "y"}],
    }
    _, messages = anthropic_messages([HELLO, assistant, HELLO], warnings=warnings)
    assert messages[1]["content"] == [{"type": "text", "text": "y"}]
    assert warnings == [{"type": "other", "message": "unsupported reasoning metadata"}]


def test_tool_result_outputs() -> None:
    def result(output: dict[str, Any]) -> dict[str, Any]:
        return {"type": "tool-result", "toolCallId": "c", "toolName": "f", "output": output}

    outputs = [
        {"type": "text", "value": "plain"},
        {"type": "error-text", "value": "boom"},
        {"type": "json", "value": {"é": [1, 2]}},
        {"type": "error-json", "value": {"code": 1}},
        {"type": "execution-denied"},
        {
            "type": "content",
            "value": [{"type": "text", "text": "t"}, {"type": "image-url", "url": "https://i"}],
        },
    ]
    _, messages = anthropic_messages([HELLO, {"role": "tool", "content": [result(o) for o in outputs]}])
    assert messages == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Hello"},
                {"type": "tool_result", "tool_use_id": "c", "content": "plain"},
                {"type": "tool_result", "tool_use_id": "c", "content": "boom", "is_error": True},
                {"type": "tool_result", "tool_use_id": "c", "content": '{"é":[1,2]}'},
                {"type": "tool_result", "tool_use_id": "c", "content": '{"code":1}', "is_error": True},
                {"type": "tool_result", "tool_use_id": "c", "content": "Tool call execution denied."},
                {
                    "type": "tool_result",
                    "tool_use_id": "c",
                    "content": [
                        {"type": "text", "text": "t"},
                        {"type": "image", "source": {"type": "url", "url": "https://i"}},
                    ],
                },
            ],
        }
    ]


def test_cache_control_on_parts_and_messages_at_most_four() -> None:
    ephemeral = {"anthropic": {"cacheControl": {"type": "ephemeral"}}}
    prompt = [
        {"role": "system", "content": "S", "providerOptions": ephemeral},
        {
            "role": "user",
            "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
            "providerOptions": ephemeral,
        },
        {"role": "assistant", "content": [{"type": "text", "text": "c", "providerOptions": ephemeral}]},
        {"role": "user", "content": [{"type": "text", "text": "d", "providerOptions": ephemeral}]},
        {"role": "user", "content": [{"type": "text", "text": "e", "providerOptions": ephemeral}]},
        {
            "role": "assistant",
            "content": [
                {
                    "type": "reasoning",
                    "text": "r",
                    "providerOptions": {
                        "anthropic": {"signature": "s", "cacheControl": {"type": "ephemeral"}}
                    },
                }
            ],
        },
    ]
    warnings: list[dict[str, Any]] = []
    system, messages = anthropic_messages(prompt, warnings=warnings, cache=CacheControl(warnings))
    cached = {"type": "ephemeral"}
    assert system == [{"type": "text", "text": "S", "cache_control": cached}]
    assert messages[0]["content"] == [
        {"type": "text", "text": "a"},
        {"type": "text", "text": "b", "cache_control": cached},  # the message's option: its last part
    ]
    assert messages[1]["content"] == [{"type": "text", "text": "c", "cache_control": cached}]
    assert messages[2]["content"] == [
        {"type": "text", "text": "d", "cache_control": cached},
        {"type": "text", "text": "e"},  # a fifth breakpoint is dropped
    ]
    assert messages[3]["content"] == [{"type": "thinking", "thinking": "r", "signature": "s"}]
    assert [w["feature"] for w in warnings] == [  # the AI SDK counts the reasoning part's option twice
        "cacheControl breakpoint limit",
        "cacheControl breakpoint limit",
        "cache_control on non-cacheable context",
    ]


def test_a_later_system_message_stays_in_the_conversation() -> None:
    betas: set[str] = set()
    system, messages = anthropic_messages(
        [SYSTEM, HELLO, {"role": "system", "content": "Later."}, HELLO], betas=betas
    )
    assert system == [{"type": "text", "text": "You are a helpful assistant."}]
    assert messages[1] == {"role": "system", "content": [{"type": "text", "text": "Later."}]}
    assert betas == {"mid-conversation-system-2026-04-07"}


def test_body_follows_getargs() -> None:
    """The first request of every recorded case: model ceiling, tools with eager input streaming."""
    model = AnthropicModel("claude-sonnet-4-5", api_key="k", base_url="http://127.0.0.1:9")
    body = sent("anthropic-text", 0)
    tools = [
        {
            "type": "function",
            "name": t["name"],
            "description": t["description"],
            "inputSchema": t["input_schema"],
        }
        for t in body["tools"]
    ]
    request = ModelRequest(prompt=[SYSTEM, HELLO], tools=tools, tool_choice={"type": "auto"})  # type: ignore[typeddict-item]
    built, warnings, betas = model._body(request)
    assert built == body
    assert warnings == []
    assert betas == ["structured-outputs-2025-11-13"]


def test_thinking_options_in_the_ai_sdks_names() -> None:
    model = AnthropicModel("claude-sonnet-4-5", api_key="k", base_url="http://127.0.0.1:9")
    options = {
        "anthropic": {
            "thinking": {"type": "enabled", "budgetTokens": 2048},
            "cacheControl": {"type": "ephemeral"},
            "disableParallelToolUse": True,
            "metadata": {"userId": "u1"},
            "service_tier": "auto",  # a vendor-native key goes into the body as it is
        }
    }
    settings = ModelSettings(max_output_tokens=63_000, temperature=0.5, provider_options=options)
    tools = [{"type": "function", "name": "f", "description": "", "inputSchema": {"type": "object"}}]
    body, warnings, _ = model._body(ModelRequest(prompt=[HELLO], tools=tools, settings=settings))  # type: ignore[list-item]
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert body["max_tokens"] == 64_000  # 63,000 + 2,048, held to the model's ceiling
    assert "temperature" not in body
    assert body["cache_control"] == {"type": "ephemeral"}
    assert body["metadata"] == {"user_id": "u1"}
    assert body["service_tier"] == "auto"
    assert "tool_choice" in body and body["tool_choice"] == {
        "type": "auto",
        "disable_parallel_tool_use": True,
    }
    assert warnings == [{"type": "unsupported-setting", "setting": "temperature"}]
