"""The OpenAI Responses provider on its own, against what real Mastra 1.71 sent and streamed.

Prompts become ``input`` items exactly as ``@ai-sdk/openai`` builds them (checked against the request
bodies Mastra sent, recorded in tests/vendor_kit/golden), and the kit's vendor streams become the parts
the AI SDK emits, with no agent loop in between.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from runstream.models._openai_responses import responses_input
from runstream.models.base import ModelCallError, ModelRequest, ModelSettings
from runstream.models.openai import OpenAIResponsesModel

from .loopback import LoopbackServer, Reply, collect

KIT = Path(__file__).resolve().parent.parent / "vendor_kit"
HELLO = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": [{"type": "text", "text": "Hello"}]},
]
TOOL_OUTPUT = {"type": "json", "value": {"ok": True, "tool": "lookupVerificationCode"}}


def sse(fixture: str) -> bytes:
    """A kit fixture (one event JSON per line) framed as the Responses API frames it."""
    lines = (KIT / "fixtures" / "openai" / f"{fixture}.chunks.txt").read_text().splitlines()
    return b"".join(f"event: {json.loads(line)['type']}\ndata: {line}\n\n".encode() for line in lines if line)


def sent_by_mastra(case: str, index: int) -> list[dict[str, Any]]:
    requests = json.loads((KIT / "golden" / f"{case}.requests.json").read_text())
    items: list[dict[str, Any]] = requests[index]["body"]["input"]
    return items


async def parts_of(
    server: LoopbackServer, fixture: str, model_id: str = "gpt-5", **options: Any
) -> list[dict[str, Any]]:
    server.replies[:] = [Reply(sse(fixture))]  # this fixture only (the last reply otherwise repeats)
    model = OpenAIResponsesModel(model_id, api_key="sk-test", base_url=server.url("/v1"))
    settings = ModelSettings(provider_options={"openai": options} if options else {})
    stream = await model.stream(ModelRequest(prompt=HELLO, settings=settings))
    return [p for p in await collect(stream.parts) if p["type"] not in ("stream-start", "response-metadata")]


def reasoning_step(encrypted: str = "gAAAAABenc-rmt-1") -> list[dict[str, Any]]:
    """The prompt of responses-reasoning-multi-tool's second request, as the loop builds it: the two
    summary parts of one reasoning item, each with the block's merged providerMetadata."""
    meta = {"openai": {"itemId": "rs_rmt_1", "reasoningEncryptedContent": encrypted}}
    return [
        *HELLO,
        {
            "role": "assistant",
            "content": [
                {"type": "reasoning", "text": "First, the user said hello.", "providerOptions": meta},
                {"type": "reasoning", "text": "Second, I will look something up.", "providerOptions": meta},
                {
                    "type": "tool-call",
                    "toolCallId": "call_rmt_1",
                    "toolName": "lookupVerificationCode",
                    "input": {},
                    "providerOptions": {"openai": {"itemId": "fc_rmt_1"}},
                },
            ],
        },
        {
            "role": "tool",
            "content": [
                {
                    "type": "tool-result",
                    "toolCallId": "call_rmt_1",
                    "toolName": "lookupVerificationCode",
                    "output": TOOL_OUTPUT,
                }
            ],
        },
    ]


# ------------------------------------------------------------------------------------- prompt -> input


def test_stored_reasoning_goes_back_as_one_item_reference() -> None:
    assert responses_input(reasoning_step(), "developer") == sent_by_mastra(
        "responses-reasoning-multi-tool", 1
    )


def test_unstored_reasoning_goes_back_in_full_with_its_encrypted_content() -> None:
    items = responses_input(reasoning_step(), "developer", store=False)
    assert items == sent_by_mastra("responses-reasoning-tool-nostore", 1)
    assert items[2] == {
        "type": "reasoning",
        "id": "rs_rmt_1",
        "encrypted_content": "gAAAAABenc-rmt-1",
        "summary": [
            {"type": "summary_text", "text": "First, the user said hello."},
            {"type": "summary_text", "text": "Second, I will look something up."},
        ],
    }


def test_empty_encrypted_reasoning_is_kept() -> None:
    meta = {"openai": {"itemId": "rs_empty_1", "reasoningEncryptedContent": "gAAAAABenc-empty-1"}}
    prompt = [
        *HELLO,
        {"role": "assistant", "content": [{"type": "reasoning", "text": "", "providerOptions": meta}]},
    ]
    assert responses_input(prompt, "developer")[2:] == [{"type": "item_reference", "id": "rs_empty_1"}]
    assert responses_input(prompt, "developer", store=False)[2:] == [
        {"type": "reasoning", "id": "rs_empty_1", "encrypted_content": "gAAAAABenc-empty-1", "summary": []}
    ]


def test_text_goes_back_by_its_item_id_when_stored() -> None:
    text = {"type": "text", "text": "Let me check the weather."}
    meta = {"openai": {"itemId": "msg_phase_1", "phase": "commentary"}}
    prompt = [*HELLO, {"role": "assistant", "content": [{**text, "providerOptions": meta}]}]
    assert responses_input(prompt, "developer")[2:] == sent_by_mastra("responses-phase-tool", 1)[2:3]
    assert responses_input(prompt, "developer", store=False)[2:] == [
        {
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Let me check the weather."}],
            "id": "msg_phase_1",
            "phase": "commentary",
        }
    ]


def test_provider_executed_tools_go_back_as_references_of_their_items() -> None:
    search = {
        "type": "tool-call",
        "toolCallId": "ws_1",
        "toolName": "web_search",
        "input": {},
        "providerExecuted": True,
    }
    result = {
        "type": "tool-result",
        "toolCallId": "ws_1",
        "toolName": "web_search",
        "output": {"type": "json", "value": {"action": {"type": "search"}}},
        "providerExecuted": True,
    }
    stored_call = {**search, "toolCallId": "ci_1", "providerOptions": {"openai": {"itemId": "ci_1"}}}
    denied = {**result, "toolCallId": "ws_2", "output": {"type": "execution-denied"}}
    prompt = [*HELLO, {"role": "assistant", "content": [search, result, stored_call, denied]}]
    # the call without an item id is not sent; the result goes back by its item (the call id)
    assert responses_input(prompt, "developer")[2:] == [
        {"type": "item_reference", "id": "ws_1"},
        {"type": "item_reference", "id": "ci_1"},
    ]
    assert responses_input(prompt, "developer", store=False)[2:] == []


def test_tool_calls_and_results_are_sent_as_compact_json() -> None:
    call = {
        "type": "tool-call",
        "toolCallId": "c1",
        "toolName": "weather",
        "input": {"city": "Zürich", "n": [1, 2]},
    }
    outputs = [
        {"type": "json", "value": {"ok": True}},
        {"type": "text", "value": "plain"},
        {"type": "error-text", "value": "boom"},
        {"type": "execution-denied", "reason": "no"},
    ]
    prompt = [
        {"role": "assistant", "content": [call]},
        {
            "role": "tool",
            "content": [
                {"type": "tool-result", "toolCallId": "c1", "toolName": "weather", "output": output}
                for output in outputs
            ],
        },
    ]
    items = responses_input(prompt, "system")
    assert items[0]["arguments"] == '{"city":"Zürich","n":[1,2]}'
    assert [item["output"] for item in items[1:]] == ['{"ok":true}', "plain", "boom", "no"]


def test_reasoning_of_another_vendor_is_not_sent_and_azure_reads_its_own_key() -> None:
    foreign = {"type": "reasoning", "text": "thinking", "providerOptions": {"anthropic": {"signature": "s"}}}
    unstored = {
        "type": "reasoning",
        "text": "t",
        "providerOptions": {"azure": {"reasoningEncryptedContent": "e"}},
    }
    prompt = [{"role": "assistant", "content": [foreign, unstored]}]
    assert responses_input(prompt, "system") == []
    assert responses_input(prompt, "system", vendor="azure") == [
        {"type": "reasoning", "encrypted_content": "e", "summary": [{"type": "summary_text", "text": "t"}]}
    ]


def test_user_images_keep_their_detail_and_files_their_names() -> None:
    image = {
        "type": "file",
        "mediaType": "image/*",
        "data": b"\xff",
        "providerOptions": {"openai": {"imageDetail": "low"}},
    }
    pdf = {"type": "file", "mediaType": "application/pdf", "data": b"%PDF"}
    [item] = responses_input([{"role": "user", "content": [image, pdf]}], "system")
    assert item["content"] == [
        {"type": "input_image", "image_url": "data:image/jpeg;base64,/w==", "detail": "low"},
        {"type": "input_file", "filename": "part-1.pdf", "file_data": "data:application/pdf;base64,JVBERg=="},
    ]


async def test_store_false_asks_reasoning_models_for_encrypted_reasoning(loopback: LoopbackServer) -> None:
    await parts_of(loopback, "text", store=False)
    body = loopback.requests[0].body
    assert (body["store"], body["include"]) == (False, ["reasoning.encrypted_content"])


# ------------------------------------------------------------------------------------- events -> parts


async def test_summary_parts_close_when_the_next_starts_unless_store_is_set(loopback: LoopbackServer) -> None:
    def ends(parts: list[dict[str, Any]]) -> list[tuple[str, str]]:
        return [
            (p["type"], p["id"])
            for p in parts
            if p["type"].startswith("reasoning-") and p["type"] != "reasoning-delta"
        ]

    default = await parts_of(loopback, "reasoning-multi")
    stored = await parts_of(loopback, "reasoning-multi", store=True)
    opened_and_closed = [
        ("reasoning-start", "rs_multi_1:0"),
        ("reasoning-end", "rs_multi_1:0"),
        ("reasoning-start", "rs_multi_1:1"),
        ("reasoning-end", "rs_multi_1:1"),
        ("reasoning-start", "rs_multi_1:2"),
        ("reasoning-end", "rs_multi_1:2"),
    ]
    assert ends(default) == ends(stored) == opened_and_closed
    encrypted = {"openai": {"itemId": "rs_multi_1", "reasoningEncryptedContent": "gAAAAABenc-multi-1"}}
    starts = [p["providerMetadata"] for p in default if p["type"] == "reasoning-start"]
    assert starts == [encrypted] * 3  # each part carries its item's encrypted content
    # not stored: the last part ends with the item (its encrypted content); stored: at its part.done
    assert [p["providerMetadata"] for p in default if p["type"] == "reasoning-end"][-1] == encrypted
    assert [p["providerMetadata"] for p in stored if p["type"] == "reasoning-end"][-1] == {
        "openai": {"itemId": "rs_multi_1"}
    }


async def test_parts_are_keyed_by_output_index_when_a_gateway_rotates_item_ids(
    loopback: LoopbackServer,
) -> None:
    parts = await parts_of(loopback, "rotating-ids")
    ids = [(p["type"], p["id"]) for p in parts if "id" in p]
    assert ids == [
        ("reasoning-start", "rs_rot_a:0"),
        ("reasoning-delta", "rs_rot_a:0"),
        ("reasoning-end", "rs_rot_a:0"),
        ("reasoning-start", "rs_rot_a:1"),
        ("reasoning-delta", "rs_rot_a:1"),
        ("reasoning-end", "rs_rot_a:1"),
        ("text-start", "msg_rot_a"),
        ("text-delta", "msg_rot_a"),
        ("text-delta", "msg_rot_a"),
        ("text-end", "msg_rot_a"),
    ]
    # the metadata names the item as each event did (the id the vendor will know at the end)
    assert parts[-2]["providerMetadata"] == {"openai": {"itemId": "msg_rot_c"}}


async def test_web_search_is_a_provider_executed_call_and_citations_are_sources(
    loopback: LoopbackServer,
) -> None:
    parts = await parts_of(loopback, "web-search")
    assert parts[:4] == [
        {"type": "tool-input-start", "id": "ws_1", "toolName": "web_search", "providerExecuted": True},
        {"type": "tool-input-end", "id": "ws_1"},
        {
            "type": "tool-call",
            "toolCallId": "ws_1",
            "toolName": "web_search",
            "input": "{}",
            "providerExecuted": True,
        },
        {
            "type": "tool-result",
            "toolCallId": "ws_1",
            "toolName": "web_search",
            "result": {
                "action": {"type": "search", "query": "weather paris"},
                "sources": [
                    {"type": "url", "url": "https://weather.example.com/paris"},
                    {"type": "url", "url": "https://news.example.com/paris"},
                ],
            },
        },
    ]
    sources = [p for p in parts if p["type"] == "source"]
    assert [(s["sourceType"], s["url"], s["title"]) for s in sources] == [
        ("url", "https://weather.example.com/paris", "Paris weather"),
        ("url", "https://news.example.com/paris", "Paris news"),
    ]
    assert len({s["id"] for s in sources}) == 2
    annotations = parts[-2]["providerMetadata"]["openai"]["annotations"]
    assert parts[-2]["type"] == "text-end" and [a["url"] for a in annotations] == [s["url"] for s in sources]


async def test_file_search_results_and_file_citations(loopback: LoopbackServer) -> None:
    parts = await parts_of(loopback, "file-search")
    assert parts[1]["result"] == {
        "queries": ["deep research"],
        "results": [
            {
                "attributes": {"lang": "en"},
                "fileId": "file-abc123",
                "filename": "guide.pdf",
                "score": 0.92,
                "text": "Deep research is...",
            }
        ],
    }
    sources = [{k: v for k, v in p.items() if k != "id"} for p in parts if p["type"] == "source"]
    assert sources[0] == {
        "type": "source",
        "sourceType": "document",
        "mediaType": "text/plain",
        "title": "guide.pdf",
        "filename": "guide.pdf",
        "providerMetadata": {"openai": {"type": "file_citation", "fileId": "file-abc123", "index": 38}},
    }


async def test_code_interpreter_streams_its_code_as_json_input(loopback: LoopbackServer) -> None:
    parts = await parts_of(loopback, "code-interpreter")
    deltas = "".join(p["delta"] for p in parts if p["type"] == "tool-input-delta")
    assert json.loads(deltas) == {"containerId": "cntr_1", "code": 'print("2+2=", 2+2)'}
    call, result = (p for p in parts if p["type"] in ("tool-call", "tool-result"))
    assert json.loads(call["input"]) == {"code": 'print("2+2=", 2+2)', "containerId": "cntr_1"}
    assert call["providerExecuted"] and "providerExecuted" not in result
    assert result["result"] == {"outputs": [{"type": "logs", "logs": "2+2= 4\n"}]}


async def test_a_partial_image_is_a_preliminary_result(loopback: LoopbackServer) -> None:
    parts = await parts_of(loopback, "image-generation")
    results = [
        (p["result"]["result"], p.get("preliminary", False)) for p in parts if p["type"] == "tool-result"
    ]
    assert results == [("iVBORw0KGgpartial", True), ("iVBORw0KGgoFINAL", False)]


async def test_usage_cached_reasoning_and_service_tier(loopback: LoopbackServer) -> None:
    finish = (await parts_of(loopback, "usage-cached"))[-1]
    assert finish == {
        "type": "finish",
        "finishReason": "stop",
        "usage": {
            "inputTokens": {"total": 2048, "noCache": 128, "cacheRead": 1920},
            "outputTokens": {"total": 300, "text": 44, "reasoning": 256},
            "raw": {
                "input_tokens": 2048,
                "input_tokens_details": {"cached_tokens": 1920},
                "output_tokens": 300,
                "output_tokens_details": {"reasoning_tokens": 256},
            },
        },
        "providerMetadata": {"openai": {"responseId": "resp_usage_1", "serviceTier": "default"}},
    }
    bare = (await parts_of(loopback, "usage-bare"))[-1]["usage"]
    assert (bare["outputTokens"]["reasoning"], bare["inputTokens"]["cacheRead"]) == (0, 0)


async def test_incomplete_responses_report_the_raw_reason(loopback: LoopbackServer) -> None:
    assert (await parts_of(loopback, "incomplete-content-filter"))[-1]["finishReason"] == {
        "unified": "content-filter",
        "raw": "content_filter",
    }
    assert (await parts_of(loopback, "reasoning-tool-1"))[-1]["finishReason"] == "tool-calls"


async def test_an_error_after_output_is_an_error_part(loopback: LoopbackServer) -> None:
    error = (await parts_of(loopback, "error-event"))[-1]["error"]
    assert isinstance(error, ModelCallError)
    assert (error.name, str(error), error.retryable) == (
        "Error",
        "The server had an error while processing your request.",
        True,
    )
    failed = (await parts_of(loopback, "failed"))[-1]["error"]
    assert json.loads(str(failed)) == {
        "type": "response.failed",
        "sequence_number": 5,
        "response": {
            "error": {"code": "server_error", "message": "The model failed to generate a response."},
            "incomplete_details": None,
        },
    }


async def test_an_error_before_any_output_fails_the_call_with_its_status(loopback: LoopbackServer) -> None:
    loopback.queue(Reply(sse("error-before-output")))
    model = OpenAIResponsesModel("gpt-5", api_key="sk-test", base_url=loopback.url("/v1"), max_retries=0)
    with pytest.raises(ModelCallError) as caught:
        await model.stream(ModelRequest(prompt=HELLO))
    assert (caught.value.status_code, caught.value.retryable) == (429, True)
    assert str(caught.value).startswith("Rate limit reached for gpt-5")
