"""Model strings as Mastra users write them: ``"openai/gpt-4.1"``, ``"anthropic/claude-sonnet-4-5"``.

``openai/…`` uses the Responses API (as the AI SDK's ``openai(model)`` does; pass ``api="chat"``
for Chat Completions). ``openai-compatible/…`` needs a ``base_url``; the gateway shortcuts below
bring their own base URL and key variable. Everything else in ``**kw`` goes to the model class:
``api_key``, ``base_url``, ``timeout``, ``max_retries``, ``headers``, ``client``.
"""

from __future__ import annotations

import os
from typing import Any, NamedTuple

from runstream.models.base import LanguageModel


class Gateway(NamedTuple):
    """An OpenAI-compatible service: default base URL and API key variable (None: no key)."""

    base_url: str
    key_env: str | None


GATEWAYS: dict[str, Gateway] = {
    "ollama": Gateway("http://localhost:11434/v1", None),
    "lmstudio": Gateway("http://localhost:1234/v1", None),
    "openrouter": Gateway("https://openrouter.ai/api/v1", "OPENROUTER_API_KEY"),
    "groq": Gateway("https://api.groq.com/openai/v1", "GROQ_API_KEY"),
    "deepseek": Gateway("https://api.deepseek.com/v1", "DEEPSEEK_API_KEY"),
    "xai": Gateway("https://api.x.ai/v1", "XAI_API_KEY"),
    "together": Gateway("https://api.together.xyz/v1", "TOGETHER_API_KEY"),
    "fireworks": Gateway("https://api.fireworks.ai/inference/v1", "FIREWORKS_API_KEY"),
}

KEYLESS = "EMPTY"
"""The placeholder key for servers that take none (the SDK insists on one; vLLM's docs use it)."""


def resolve_model(spec: str | LanguageModel, **kw: Any) -> LanguageModel:
    """A model for ``"<provider>/<model id>"``; a :class:`LanguageModel` is returned as is.

    Raises ``ValueError`` for an unknown provider, a malformed string or a missing API key (the
    message names the environment variable to set).
    """
    if not isinstance(spec, str):
        return spec
    provider, _, model_id = spec.partition("/")
    if not provider or not model_id:
        raise ValueError(f"model string {spec!r} is not '<provider>/<model>', e.g. 'openai/gpt-4.1'")
    if provider == "openai":
        from runstream.models.openai import OpenAIChatModel, OpenAIResponsesModel

        api = kw.pop("api", "responses")
        if api not in ("responses", "chat"):
            raise ValueError(f"api must be 'responses' or 'chat', not {api!r}")
        cls = OpenAIResponsesModel if api == "responses" else OpenAIChatModel
        return cls(model_id, **_with_key(kw, "OPENAI_API_KEY", spec))
    if provider == "anthropic":
        from runstream.models.anthropic import AnthropicModel

        return AnthropicModel(model_id, **_with_key(kw, "ANTHROPIC_API_KEY", spec))
    if provider == "openai-compatible":
        if not kw.get("base_url") and "client" not in kw:
            raise ValueError(f"{spec!r} needs base_url=..., the server's OpenAI-compatible endpoint")
        return _compatible(provider, model_id, kw, "OPENAI_COMPATIBLE_API_KEY", required=False, spec=spec)
    gateway = GATEWAYS.get(provider)
    if gateway is None:
        known = ", ".join(["openai", "anthropic", "openai-compatible", *GATEWAYS])
        raise ValueError(f"unknown model provider {provider!r} in {spec!r}; known providers: {known}")
    kw.setdefault("base_url", gateway.base_url)
    key_env = gateway.key_env or f"{provider.upper()}_API_KEY"
    return _compatible(provider, model_id, kw, key_env, required=gateway.key_env is not None, spec=spec)


def _compatible(
    provider: str, model_id: str, kw: dict[str, Any], key_env: str, *, required: bool, spec: str
) -> LanguageModel:
    from runstream.models.openai import OpenAIChatModel

    if required:
        kw = _with_key(kw, key_env, spec)
    elif "client" not in kw:
        kw.setdefault("api_key", os.environ.get(key_env) or KEYLESS)
    return OpenAIChatModel(model_id, provider=provider, **kw)


def _with_key(kw: dict[str, Any], key_env: str, spec: str) -> dict[str, Any]:
    if "client" in kw or kw.get("api_key"):
        return kw
    key = os.environ.get(key_env)
    if not key:
        raise ValueError(f"{key_env} is not set: export it or pass api_key=... to resolve_model({spec!r})")
    return {**kw, "api_key": key}
