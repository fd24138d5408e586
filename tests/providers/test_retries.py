"""Retries as Mastra 1.71 makes them (``_common``): ``max_retries`` per model and per call, backoff from
1 s by a factor of 2, ``retry-after-ms`` / ``retry-after`` honoured up to 30 s, 4xx other than 408/409/429
never retried, each retry an event on the model call's span and a warning on the ``runstream`` logger,
abort during a backoff ends the call at once. The SDKs' own retries are off. Waits are recorded by an
injected sleep, never slept."""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import UTC, datetime
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from runstream import Agent
from runstream.abort import AbortController, AbortError
from runstream.chunks import dumps
from runstream.models._common import RetryPolicy, retry_after
from runstream.models.anthropic import AnthropicModel
from runstream.models.base import LanguageModel, ModelCallError, ModelRequest, ModelSettings
from runstream.models.openai import OpenAIChatModel, OpenAIResponsesModel
from tests.otel_testkit import named, spans

from .loopback import LoopbackServer, Reply, collect, fixture, json_reply

__all__ = ["spans"]

KINDS = ["responses", "chat", "anthropic", "google"]
TEXT = {
    "responses": "openai_responses_text.sse",
    "chat": "openai_chat_text.sse",
    "anthropic": "anthropic_text.sse",
}
GOOGLE_KIT = Path(__file__).parents[1] / "vendor_kit" / "fixtures" / "google" / "text.chunks.txt"


def text_reply(kind: str) -> Reply:
    if kind == "google":  # a kit fixture, framed as the Generative Language API streams it
        lines = [line for line in GOOGLE_KIT.read_text().splitlines() if line.strip()]
        return Reply(b"".join(b"data: %s\r\n\r\n" % line.encode() for line in lines))
    return Reply(fixture(TEXT[kind]))


class Waits:
    """The injected sleep: records each backoff; ``hold`` makes it wait until cancelled."""

    def __init__(self, hold: bool = False) -> None:
        self.delays: list[float] = []
        self.hold = hold
        self.waiting = asyncio.Event()

    async def sleep(self, seconds: float) -> None:
        self.delays.append(seconds)
        if self.hold:
            self.waiting.set()
            await asyncio.Event().wait()


def error_body(kind: str, message: str, kind_name: str = "rate_limit_error") -> dict[str, Any]:
    if kind == "google":
        return {"error": {"code": 429, "message": message, "status": "RESOURCE_EXHAUSTED"}}
    if kind == "anthropic":
        return {"type": "error", "error": {"type": kind_name, "message": message}}
    return {"error": {"message": message, "type": "requests", "param": None, "code": None}}


def make(kind: str, server: LoopbackServer, waits: Waits, **kw: Any) -> LanguageModel:
    policy = RetryPolicy(sleep=waits.sleep)
    if kind == "google":
        pytest.importorskip("google.genai")
        from runstream.models.google import GoogleModel

        return GoogleModel(
            "gemini-2.5-flash", api_key="g", base_url=server.url("/v1beta"), retry=policy, **kw
        )
    if kind == "anthropic":
        return AnthropicModel("claude-test-model", api_key="k", base_url=server.url(), retry=policy, **kw)
    cls = OpenAIResponsesModel if kind == "responses" else OpenAIChatModel
    return cls("gpt-4.1", api_key="k", base_url=server.url("/v1"), retry=policy, **kw)


def request(signal: Any = None, **settings: Any) -> ModelRequest:
    prompt = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    return ModelRequest(prompt=prompt, abort_signal=signal, settings=ModelSettings(**settings))


@pytest.mark.parametrize("kind", KINDS)
async def test_429_with_retry_after_then_success(kind: str, loopback: LoopbackServer) -> None:
    waits = Waits()
    loopback.queue(json_reply(429, error_body(kind, "Slow down"), **{"retry-after": "3"}), text_reply(kind))
    parts = await collect((await make(kind, loopback, waits).stream(request())).parts)
    reason = parts[-1]["finishReason"]  # Anthropic's is v3: {"unified", "raw"}
    assert (
        parts[-1]["type"] == "finish"
        and (reason.get("unified") if isinstance(reason, dict) else reason) == "stop"
    )
    assert len(loopback.requests) == 2
    assert waits.delays == [3.0]  # the vendor's wait, longer than the 1 s backoff
    assert loopback.requests[0].body == loopback.requests[1].body


@pytest.mark.parametrize("kind", KINDS)
async def test_500_twice_then_success_backs_off_exponentially(kind: str, loopback: LoopbackServer) -> None:
    waits = Waits()
    failure = json_reply(500, error_body(kind, "Internal error", "api_error"))
    loopback.queue(failure, failure, text_reply(kind))
    parts = await collect((await make(kind, loopback, waits).stream(request())).parts)
    assert parts[-1]["type"] == "finish"
    assert len(loopback.requests) == 3
    assert waits.delays == [1.0, 2.0]


@pytest.mark.parametrize("kind", KINDS)
async def test_retries_exhausted_raise_the_last_error(kind: str, loopback: LoopbackServer) -> None:
    waits = Waits()
    loopback.queue(
        json_reply(503, error_body(kind, "Busy", "api_error")),
        json_reply(503, error_body(kind, "Still busy", "api_error")),
    )
    with pytest.raises(ModelCallError) as caught:
        await make(kind, loopback, waits, max_retries=1).stream(request())
    assert (caught.value.status_code, str(caught.value), caught.value.retryable) == (503, "Still busy", True)
    assert len(loopback.requests) == 2 and waits.delays == [1.0]


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
async def test_a_4xx_that_cannot_succeed_is_never_retried(status: int, loopback: LoopbackServer) -> None:
    waits = Waits()
    loopback.queue(json_reply(status, error_body("chat", "No.")), Reply(fixture(TEXT["chat"])))
    with pytest.raises(ModelCallError) as caught:
        await make("chat", loopback, waits, max_retries=5).stream(request())
    assert (caught.value.status_code, caught.value.retryable) == (status, False)
    assert len(loopback.requests) == 1 and waits.delays == []


@pytest.mark.parametrize("kind", KINDS)
async def test_401_is_not_retried_by_any_provider(kind: str, loopback: LoopbackServer) -> None:
    waits = Waits()
    loopback.queue(json_reply(401, error_body(kind, "Invalid API key", "authentication_error")))
    with pytest.raises(ModelCallError) as caught:
        await make(kind, loopback, waits).stream(request())
    assert caught.value.status_code == 401 and len(loopback.requests) == 1 and waits.delays == []


@pytest.mark.parametrize("status", [408, 409, 429, 502, 529])
async def test_retryable_statuses(status: int, loopback: LoopbackServer) -> None:
    waits = Waits()
    loopback.queue(json_reply(status, error_body("chat", "Again")), Reply(fixture(TEXT["chat"])))
    await make("chat", loopback, waits).stream(request())
    assert len(loopback.requests) == 2 and waits.delays == [1.0]


async def test_a_connection_error_is_retried(loopback: LoopbackServer) -> None:
    waits = Waits()
    loopback.queue(Reply(stall_after=0), Reply(fixture(TEXT["chat"])))
    parts = await collect((await make("chat", loopback, waits, timeout=0.2).stream(request())).parts)
    assert parts[-1]["type"] == "finish" and len(loopback.requests) == 2 and waits.delays == [1.0]


async def test_max_retries_per_call_wins_over_the_model(loopback: LoopbackServer) -> None:
    waits = Waits()
    loopback.queue(json_reply(500, error_body("chat", "Down")))
    model = make("chat", loopback, waits, max_retries=5)
    with pytest.raises(ModelCallError):
        await model.stream(request(max_retries=3))
    assert len(loopback.requests) == 4 and waits.delays == [1.0, 2.0, 4.0]
    with pytest.raises(ModelCallError):
        await model.stream(request(max_retries=0))
    assert len(loopback.requests) == 5


async def test_the_sdk_of_a_given_client_does_not_retry_too(loopback: LoopbackServer) -> None:
    from openai import AsyncOpenAI

    waits = Waits()
    loopback.queue(json_reply(500, error_body("chat", "Down")))
    client = AsyncOpenAI(api_key="k", base_url=loopback.url("/v1"), max_retries=4)
    model = OpenAIChatModel("gpt-4.1", client=client, max_retries=0, retry=RetryPolicy(sleep=waits.sleep))
    with pytest.raises(ModelCallError):
        await model.stream(request())
    assert len(loopback.requests) == 1


def test_retry_after_headers_as_mastra_reads_them() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC).timestamp()
    assert retry_after({"Retry-After-Ms": "1500", "retry-after": "9"}) == 1.5  # the precise one first
    assert retry_after({"retry-after": "2"}) == 2.0
    date = format_datetime(datetime(2026, 1, 1, 0, 0, 5, tzinfo=UTC), usegmt=True)
    assert retry_after({"retry-after": date}, now=now) == 5.0
    assert retry_after({"retry-after": "1.5"}) is None  # neither whole seconds nor a date
    assert retry_after({"retry-after-ms": "soon"}) is None
    assert retry_after(None) is None
    policy = RetryPolicy()
    later = ModelCallError("x", retry_after=120.0)
    assert [
        policy.delay(1, later),
        policy.delay(3, None),
        policy.delay(2, ModelCallError("y", retry_after=0)),
    ] == [
        30.0,  # capped at 30 s
        4.0,
        2.0,  # never less than the backoff
    ]


@pytest.mark.parametrize("kind", KINDS)
async def test_abort_during_backoff_ends_the_call_at_once(kind: str, loopback: LoopbackServer) -> None:
    waits = Waits(hold=True)
    loopback.queue(json_reply(429, error_body(kind, "Slow down"), **{"retry-after": "30"}))
    controller = AbortController()
    call = asyncio.create_task(make(kind, loopback, waits).stream(request(controller.signal)))
    await waits.waiting.wait()
    controller.abort()
    async with asyncio.timeout(2):
        with pytest.raises(AbortError):
            await call
    assert len(loopback.requests) == 1 and waits.delays == [30.0]


def _agent(loopback: LoopbackServer, waits: Waits) -> Agent:
    return Agent("a", instructions="Be brief.", model=make("chat", loopback, waits))


async def test_an_agent_retries_only_when_told_to_like_mastra(loopback: LoopbackServer) -> None:
    waits = Waits()
    failure = json_reply(500, error_body("chat", "Internal error"))
    loopback.queue(failure, Reply(fixture(TEXT["chat"])))
    out = await _agent(loopback, waits).stream("hi")
    chunks = [json.loads(dumps(chunk.to_wire())) async for chunk in out.full_stream]
    errors = [chunk for chunk in chunks if chunk["type"] == "error"]
    assert len(errors) == 1 and errors[0]["payload"]["error"]["message"] == "Internal error"
    assert chunks[-1]["payload"]["stepResult"]["reason"] == "error"
    assert len(loopback.requests) == 1 and waits.delays == []


async def test_retries_of_an_agent_run_are_span_events_and_log_warnings(
    loopback: LoopbackServer, spans: InMemorySpanExporter, caplog: pytest.LogCaptureFixture
) -> None:
    waits = Waits()
    loopback.queue(
        json_reply(429, error_body("chat", "Slow down"), **{"retry-after-ms": "1500"}),
        json_reply(503, error_body("chat", "Busy")),
        Reply(fixture(TEXT["chat"])),
    )
    with caplog.at_level(logging.WARNING, logger="runstream"):
        out = await _agent(loopback, waits).stream("hi", model_settings=ModelSettings(max_retries=2))
        assert await out.text == "Hello world!"
    assert waits.delays == [1.5, 2.0]
    [chat] = named(spans, "chat ")
    events = [(e.name, dict(e.attributes or {})) for e in chat.events]
    assert events == [
        (
            "runstream.model.retry",
            {
                "runstream.retry.attempt": 1,
                "runstream.retry.max_retries": 2,
                "runstream.retry.delay_ms": 1500,
                "error.type": "ModelCallError",
                "exception.message": "Slow down",
                "http.response.status_code": 429,
            },
        ),
        (
            "runstream.model.retry",
            {
                "runstream.retry.attempt": 2,
                "runstream.retry.max_retries": 2,
                "runstream.retry.delay_ms": 2000,
                "error.type": "ModelCallError",
                "exception.message": "Busy",
                "http.response.status_code": 503,
            },
        ),
    ]
    warnings = [r.getMessage() for r in caplog.records if r.name == "runstream"]
    assert warnings == [
        "openai/gpt-4.1 failed (attempt 1 of 3, status 429): Slow down; retrying in 1.5 s",
        "openai/gpt-4.1 failed (attempt 2 of 3, status 503): Busy; retrying in 2 s",
    ]


async def test_retries_exhausted_in_a_run_end_with_one_error_chunk(loopback: LoopbackServer) -> None:
    """Mastra's shape (kit case chat-server-error-exhausted): the last error as the run's error chunk,
    the step finished with reason ``error``; the wire name is the loop's."""
    waits = Waits()
    loopback.queue(
        json_reply(500, error_body("chat", "Internal error")),
        json_reply(503, error_body("chat", "Still down")),
    )
    out = await _agent(loopback, waits).stream("hi", model_settings=ModelSettings(max_retries=1))
    chunks = [json.loads(dumps(chunk.to_wire())) async for chunk in out.full_stream]
    assert [c["type"] for c in chunks] == ["start", "step-start", "error", "step-finish", "finish"]
    error = chunks[2]["payload"]["error"]
    assert set(error) == {"message", "name"} and error["message"] == "Still down"
    assert chunks[3]["payload"]["stepResult"]["reason"] == "error"
    assert len(loopback.requests) == 2 and waits.delays == [1.0]
