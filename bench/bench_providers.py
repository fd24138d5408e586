"""Per-token cost of the providers' event mapping, against iterating the raw SDK stream.

For each provider a 2,000-delta text transcript is served from the loopback test server; each
round iterates it once through the bare SDK stream and once through the provider's parts, in
alternation, timing the iteration only (not the request). Prints the medians in µs per token
and their difference, which is what the provider adds on top of the SDK's own parsing.

Run: ``.venv/bin/python bench/bench_providers.py [rounds]``
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runstream.models.anthropic import AnthropicModel
from runstream.models.base import LanguageModel, ModelRequest
from runstream.models.openai import OpenAIChatModel, OpenAIResponsesModel
from tests.providers.loopback import LoopbackServer, Reply

DELTAS = 2000
PROMPT = [{"role": "user", "content": [{"type": "text", "text": "Tell me a long story."}]}]


def sse(events: list[dict[str, Any]], named: bool) -> bytes:
    lines = []
    for event in events:
        head = f"event: {event['type']}\n" if named else ""
        lines.append(f"{head}data: {json.dumps(event, separators=(',', ':'))}\n\n")
    return "".join(lines).encode()


def responses_transcript() -> bytes:
    response = {
        "id": "resp_1",
        "object": "response",
        "created_at": 1741290958,
        "model": "gpt-4.1",
        "output": [],
    }
    item = {"id": "msg_1", "type": "message", "role": "assistant", "status": "in_progress", "content": []}
    delta = {"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0, "content_index": 0}
    usage = {"input_tokens": 10, "output_tokens": DELTAS, "total_tokens": 10 + DELTAS}
    return sse(
        [
            {"type": "response.created", "response": response},
            {"type": "response.output_item.added", "output_index": 0, "item": item},
            *({**delta, "delta": f" word{i}", "sequence_number": i} for i in range(DELTAS)),
            {"type": "response.output_item.done", "output_index": 0, "item": {**item, "status": "completed"}},
            {"type": "response.completed", "response": {**response, "status": "completed", "usage": usage}},
        ],
        named=True,
    )


def chat_transcript() -> bytes:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return {
            "id": "c1",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "gpt-4o",
            "choices": [choice],
        }

    usage = {"prompt_tokens": 10, "completion_tokens": DELTAS, "total_tokens": 10 + DELTAS}
    events = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"content": f" word{i}"}) for i in range(DELTAS)]
    events += [chunk({}, "stop"), {**chunk({}), "choices": [], "usage": usage}]
    return sse(events, named=False) + b"data: [DONE]\n\n"


def anthropic_transcript() -> bytes:
    message: dict[str, Any] = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": "claude",
    }
    message["usage"] = {"input_tokens": 10, "output_tokens": 1}
    delta = {"type": "content_block_delta", "index": 0}
    return sse(
        [
            {"type": "message_start", "message": message},
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
            *({**delta, "delta": {"type": "text_delta", "text": f" word{i}"}} for i in range(DELTAS)),
            {"type": "content_block_stop", "index": 0},
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn"},
                "usage": {"output_tokens": DELTAS},
            },
            {"type": "message_stop"},
        ],
        named=True,
    )


async def timed(open_iterator: Callable[[], Awaitable[AsyncIterator[Any]]]) -> float:
    iterator = await open_iterator()
    started = time.perf_counter()
    async for _ in iterator:
        pass
    return time.perf_counter() - started


async def bench(
    name: str, model: LanguageModel, raw_stream: Callable[[], Awaitable[Any]], rounds: int
) -> None:
    async def parts() -> AsyncIterator[Any]:
        return (await model.stream(ModelRequest(prompt=PROMPT))).parts

    await timed(raw_stream)  # warm up both paths
    await timed(parts)
    raw_times, provider_times = [], []
    for _ in range(rounds):
        raw_times.append(await timed(raw_stream))
        provider_times.append(await timed(parts))
    raw_us = statistics.median(raw_times) / DELTAS * 1e6
    provider_us = statistics.median(provider_times) / DELTAS * 1e6
    print(f"{name:<18} {raw_us:>12.2f} {provider_us:>16.2f} {provider_us - raw_us:>16.2f}")


def case(kind: str, server: LoopbackServer) -> tuple[LanguageModel, Callable[[], Awaitable[Any]]]:
    """The provider model for ``kind`` and a function opening the same stream with its bare SDK client."""
    messages: Any = [{"role": "user", "content": "hi"}]
    if kind == "anthropic":
        anthropic = AnthropicModel("claude-bench", api_key="k", base_url=server.url(), max_retries=0)
        return anthropic, lambda: anthropic.client.messages.create(
            model="claude-bench", max_tokens=10, messages=messages, stream=True
        )
    if kind == "responses":
        responses = OpenAIResponsesModel("gpt-bench", api_key="k", base_url=server.url("/v1"), max_retries=0)
        return responses, lambda: responses.client.responses.create(
            model="gpt-bench", input="hi", stream=True
        )
    chat = OpenAIChatModel("gpt-bench", api_key="k", base_url=server.url("/v1"), max_retries=0)
    return chat, lambda: chat.client.chat.completions.create(
        model="gpt-bench", messages=messages, stream=True
    )


async def main(rounds: int) -> None:
    print(f"{DELTAS} text deltas per transcript, median of {rounds} rounds, iteration only\n")
    print(f"{'provider':<18} {'raw SDK µs/tok':>12} {'provider µs/tok':>16} {'overhead µs/tok':>16}")
    cases = [
        ("openai-responses", responses_transcript(), "responses"),
        ("openai-chat", chat_transcript(), "chat"),
        ("anthropic", anthropic_transcript(), "anthropic"),
    ]
    for name, body, kind in cases:
        server = LoopbackServer()
        await server.start()
        server.queue(Reply(body, framing="length"))
        try:
            model, raw = case(kind, server)
            await bench(name, model, raw, rounds)
        finally:
            await server.stop()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 15))
