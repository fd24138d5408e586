"""Model strings, API keys from the environment, and the SDKs staying optional."""

from __future__ import annotations

import subprocess
import sys

import pytest

from runstream.models.anthropic import AnthropicModel
from runstream.models.base import LanguageModel
from runstream.models.openai import OpenAIChatModel, OpenAIResponsesModel
from runstream.models.registry import KEYLESS, resolve_model

KEY_VARS = [
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "OPENROUTER_API_KEY",
    "OPENAI_COMPATIBLE_API_KEY",
    "OLLAMA_API_KEY",
]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [*KEY_VARS, "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL"]:
        monkeypatch.delenv(name, raising=False)


def test_openai_string_uses_the_responses_api_and_the_env_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    model = resolve_model("openai/gpt-4.1")
    assert isinstance(model, OpenAIResponsesModel) and isinstance(model, LanguageModel)
    assert (model.provider, model.model_id, model.specification_version) == ("openai", "gpt-4.1", "v2")
    assert model.client.api_key == "sk-env"
    assert str(model.client.base_url) == "https://api.openai.com/v1/"


def test_openai_chat_api_and_client_options() -> None:
    model = resolve_model("openai/gpt-4o", api="chat", api_key="sk-kw", timeout=5.0, max_retries=4)
    assert isinstance(model, OpenAIChatModel)
    assert (model.client.api_key, model.client.timeout, model.max_retries) == ("sk-kw", 5.0, 4)
    assert model.client.max_retries == 0  # runstream retries (models._common), not the SDK


def test_a_given_sdk_client_is_used_without_a_key_and_must_be_the_providers() -> None:
    from anthropic import AsyncAnthropic
    from openai import AsyncOpenAI

    client = AsyncOpenAI(api_key="sk-given", base_url="http://127.0.0.1:9/v1")
    model = resolve_model("openai/gpt-4.1", client=client)  # no OPENAI_API_KEY needed
    assert isinstance(model, OpenAIResponsesModel) and model.client.api_key == "sk-given"
    gateway = resolve_model("openrouter/x", client=client)
    assert isinstance(gateway, OpenAIChatModel) and gateway.client.api_key == "sk-given"
    with pytest.raises(
        TypeError,
        match=r"client= for 'anthropic/claude-sonnet-4-5' must be the provider's SDK client \(AsyncAnthropic\), not AsyncOpenAI",
    ):
        resolve_model("anthropic/claude-sonnet-4-5", client=client)
    assert isinstance(
        resolve_model("anthropic/claude-sonnet-4-5", client=AsyncAnthropic(api_key="k")), AnthropicModel
    )


def test_anthropic_string(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-env")
    model = resolve_model("anthropic/claude-sonnet-4-5", headers={"x-team": "a"})
    assert isinstance(model, AnthropicModel)
    assert (model.provider, model.model_id) == ("anthropic", "claude-sonnet-4-5")
    assert model.client.api_key == "sk-ant-env"
    assert model.client.default_headers["x-team"] == "a"


@pytest.mark.parametrize(
    ("spec", "variable"),
    [
        ("openai/gpt-4.1", "OPENAI_API_KEY"),
        ("anthropic/claude-sonnet-4-5", "ANTHROPIC_API_KEY"),
        ("openrouter/anthropic/claude-sonnet-4.5", "OPENROUTER_API_KEY"),
    ],
)
def test_missing_key_names_the_variable(spec: str, variable: str) -> None:
    with pytest.raises(ValueError, match=f"^{variable} is not set: export it or pass api_key="):
        resolve_model(spec)


def test_openrouter_keeps_the_slash_in_the_model_id(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENROUTER_API_KEY", "sk-or")
    model = resolve_model("openrouter/anthropic/claude-sonnet-4.5")
    assert isinstance(model, OpenAIChatModel)
    assert (model.provider, model.model_id) == ("openrouter", "anthropic/claude-sonnet-4.5")
    assert str(model.client.base_url) == "https://openrouter.ai/api/v1/"
    assert model.client.api_key == "sk-or"


def test_ollama_needs_no_key_and_base_url_can_be_overridden() -> None:
    model = resolve_model("ollama/llama3.2")
    assert isinstance(model, OpenAIChatModel)
    assert (model.provider, model.client.api_key) == ("ollama", KEYLESS)
    assert str(model.client.base_url) == "http://localhost:11434/v1/"
    remote = resolve_model("ollama/llama3.2", base_url="http://gpu-box:11434/v1")
    assert isinstance(remote, OpenAIChatModel)
    assert str(remote.client.base_url) == "http://gpu-box:11434/v1/"


def test_openai_compatible_needs_a_base_url(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="needs base_url="):
        resolve_model("openai-compatible/qwen3")
    monkeypatch.setenv("OPENAI_COMPATIBLE_API_KEY", "sk-vllm")
    model = resolve_model("openai-compatible/qwen3", base_url="http://localhost:8000/v1")
    assert isinstance(model, OpenAIChatModel)
    assert (model.provider, model.model_id, model.client.api_key) == ("openai-compatible", "qwen3", "sk-vllm")


def test_model_objects_pass_through() -> None:
    model = OpenAIChatModel("m", api_key="k")
    assert resolve_model(model) is model


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("gpt-4.1", "is not '<provider>/<model>'"),
        ("openai/", "is not '<provider>/<model>'"),
        ("mystery/model", "unknown model provider 'mystery'"),
    ],
)
def test_malformed_or_unknown_strings(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        resolve_model(spec)


def test_importing_the_providers_does_not_import_the_sdks() -> None:
    code = (
        "import sys, runstream.models, runstream.models.registry, runstream.models.openai, "
        "runstream.models.anthropic; print('openai' in sys.modules, 'anthropic' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["False", "False"]
