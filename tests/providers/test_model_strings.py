"""``Agent(model="openai/gpt-4.1")``: model strings wherever a model is accepted, resolved once,
with clear errors; connection failures name the URL they tried."""

from __future__ import annotations

import socket

import pytest

from runstream import Agent
from runstream.goals import GoalConfig
from runstream.models.base import LanguageModel, ModelCallError
from runstream.models.openai import OpenAIResponsesModel
from runstream.models.registry import PROVIDERS, ModelString, resolve_model

from .loopback import LoopbackServer, Reply, fixture
from .test_failures import KINDS, make, request


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ["OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL"]:
        monkeypatch.delenv(name, raising=False)


async def test_an_agent_streams_with_a_model_string_resolved_once(
    loopback: LoopbackServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", loopback.url("/v1"))
    loopback.queue(Reply(fixture("openai_responses_text.sse")))
    agent = Agent("writer", model="openai/gpt-4.1")
    assert isinstance(agent.model, LanguageModel)
    assert (agent.model.provider, agent.model.model_id) == ("openai", "gpt-4.1")
    first = await agent.stream("hi")
    assert await first.text
    second = await agent.stream("again")
    assert await second.text
    assert isinstance(agent.model, ModelString)
    resolved = agent.model.resolve()
    assert isinstance(resolved, OpenAIResponsesModel) and resolved is agent.model.resolve()
    assert [r.path for r in loopback.requests] == ["/v1/responses", "/v1/responses"]
    assert loopback.requests[0].body["model"] == "gpt-4.1"


def test_an_unknown_provider_fails_where_the_agent_is_built() -> None:
    with pytest.raises(ValueError, match=r"unknown model provider 'opnai'.*known providers: openai"):
        Agent("a", model="opnai/gpt-4.1")
    with pytest.raises(ValueError, match="is not '<provider>/<model>'"):
        Agent("a", model="gpt-4.1")
    with pytest.raises(TypeError, match="model must be a model string"):
        Agent("a", model=42)  # type: ignore[arg-type]


async def test_a_missing_key_fails_the_first_run_and_names_the_variable() -> None:
    agent = Agent("a", model="anthropic/claude-sonnet-4-5")  # importing an app needs no key
    with pytest.raises(ValueError, match=r"^ANTHROPIC_API_KEY is not set"):
        await agent.stream("hi")


def test_every_documented_provider_is_accepted() -> None:
    assert set(PROVIDERS) >= {
        "openai",
        "anthropic",
        "openai-compatible",
        "ollama",
        "lmstudio",
        "openrouter",
        "groq",
        "deepseek",
        "xai",
        "together",
        "fireworks",
    }
    for provider in PROVIDERS:
        assert Agent("a", model=f"{provider}/some-model").model.provider == provider


def test_a_goal_judge_string_is_resolved_once() -> None:
    config = GoalConfig(judge="openai/gpt-4.1-mini")
    assert isinstance(config.judge, ModelString) and config.judge.model_id == "gpt-4.1-mini"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize("kind", KINDS)
async def test_a_connection_error_names_the_url(kind: str) -> None:
    server = LoopbackServer()
    server.port = free_port()  # nothing listens there
    model = make(kind, server, max_retries=0)
    with pytest.raises(ModelCallError) as caught:
        await model.stream(request())
    message = str(caught.value)
    assert message.startswith("Connection error: ")
    assert f"POST http://127.0.0.1:{server.port}/" in message


async def test_a_gateway_connection_error_names_its_default_url() -> None:
    port = free_port()
    model = resolve_model("ollama/llama3.2", base_url=f"http://127.0.0.1:{port}/v1", max_retries=0)
    with pytest.raises(ModelCallError, match=rf"POST http://127.0.0.1:{port}/v1/chat/completions"):
        await model.stream(request())
