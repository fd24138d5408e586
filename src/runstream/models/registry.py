"""Model strings as Mastra users write them: ``"openai/gpt-4.1"``, ``"anthropic/claude-sonnet-4-5"``,
``"google/gemini-2.5-flash"``.

``openai/…`` uses the Responses API (as the AI SDK's ``openai(model)`` does; pass ``api="chat"``
for Chat Completions). ``openai-compatible/…`` needs a ``base_url``; the gateway shortcuts below
bring their own base URL and key variable. Everything else in ``**kw`` goes to the model class:
``api_key``, ``base_url``, ``timeout``, ``max_retries``, ``headers``, ``client``.
"""

from __future__ import annotations

import os
from typing import NamedTuple, TypeVar

from typing_extensions import Unpack

from runstream.errors import ConfigurationError, ConfigurationTypeError
from runstream.models._common import ClientOptions
from runstream.models.base import LanguageModel, ModelRequest, ModelStream


class ModelOptions(ClientOptions, total=False):
    """:func:`resolve_model`'s keywords: the provider model's client options, plus ``api``
    (``openai/…``: ``"responses"`` or ``"chat"``) and ``client``, a ready SDK client of the
    provider's kind (``openai.AsyncOpenAI``, ``anthropic.AsyncAnthropic``, ``google.genai.Client``)."""

    api: str
    client: object


class Gateway(NamedTuple):
    """An OpenAI-compatible service: default base URL and API key variable (None: no key)."""

    base_url: str
    key_env: str | None


GOOGLE_KEY_ENVS = ("GOOGLE_GENERATIVE_AI_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY")
"""Where ``google/…`` finds its key: Mastra's variable first, then the ``google-genai`` SDK's."""

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

PROVIDERS = ("openai", "anthropic", "google", "openai-compatible", *GATEWAYS)
"""Every provider a model string may name."""

KEYLESS = "EMPTY"
"""The placeholder key for servers that take none (the SDK insists on one; vLLM's docs use it)."""


def resolve_model(spec: str | LanguageModel, **kw: Unpack[ModelOptions]) -> LanguageModel:
    """A model for ``"<provider>/<model id>"``; a :class:`LanguageModel` is returned as is.

    Raises ``ValueError`` for an unknown provider, a malformed string or a missing API key (the
    message names the environment variable to set).
    """
    if not isinstance(spec, str):
        return spec
    provider, model_id = split_model_string(spec)
    try:
        return _resolve(spec, provider, model_id, kw)
    except ImportError as exc:
        extra = provider if provider in ("anthropic", "google") else "openai"
        raise ImportError(
            f"{spec!r} needs the {extra!r} SDK: pip install 'runstream[{extra}]' ({exc})"
        ) from exc


def split_model_string(spec: str) -> tuple[str, str]:
    """``(provider, model id)`` of a model string; a :class:`ConfigurationError` (a ``ValueError``) if
    malformed or unknown."""
    provider, _, model_id = spec.partition("/")
    if not provider or not model_id:
        raise ConfigurationError(f"model string {spec!r} is not '<provider>/<model>', e.g. 'openai/gpt-4.1'")
    if provider not in PROVIDERS:
        raise ConfigurationError(
            f"unknown model provider {provider!r} in {spec!r}; known providers: {', '.join(PROVIDERS)}"
        )
    return provider, model_id


def _resolve(spec: str, provider: str, model_id: str, kw: ModelOptions) -> LanguageModel:
    client = kw.pop("client", None)
    api = kw.pop("api", "responses")
    options: ClientOptions = kw
    if provider == "openai":
        from openai import AsyncOpenAI

        from runstream.models.openai import OpenAIChatModel, OpenAIResponsesModel

        if api not in ("responses", "chat"):
            raise ConfigurationError(f"api must be 'responses' or 'chat', not {api!r}")
        cls = OpenAIResponsesModel if api == "responses" else OpenAIChatModel
        sdk = _client(client, AsyncOpenAI, spec)
        return cls(model_id, client=sdk, **_with_key(options, sdk, "OPENAI_API_KEY", spec))
    if provider == "anthropic":
        from anthropic import AsyncAnthropic

        from runstream.models.anthropic import AnthropicModel

        sdk_anthropic = _client(client, AsyncAnthropic, spec)
        return AnthropicModel(
            model_id, client=sdk_anthropic, **_with_key(options, sdk_anthropic, "ANTHROPIC_API_KEY", spec)
        )
    if provider == "google":
        from google.genai import Client

        from runstream.models.google import GoogleModel

        if not options.get("base_url"):  # Mastra's variable, then the google-genai SDK's
            options["base_url"] = os.environ.get("GOOGLE_BASE_URL") or os.environ.get(
                "GOOGLE_GEMINI_BASE_URL"
            )
        sdk_google = _client(client, Client, spec)
        return GoogleModel(
            model_id, client=sdk_google, **_with_key(options, sdk_google, GOOGLE_KEY_ENVS, spec)
        )
    if provider == "openai-compatible":
        if not options.get("base_url") and client is None:
            raise ConfigurationError(f"{spec!r} needs base_url=..., the server's OpenAI-compatible endpoint")
        return _compatible(
            provider, model_id, options, client, "OPENAI_COMPATIBLE_API_KEY", required=False, spec=spec
        )
    gateway = GATEWAYS[provider]
    options.setdefault("base_url", gateway.base_url)
    key_env = gateway.key_env or f"{provider.upper()}_API_KEY"
    return _compatible(
        provider, model_id, options, client, key_env, required=gateway.key_env is not None, spec=spec
    )


SdkClient = TypeVar("SdkClient")


def _client(client: object, kind: type[SdkClient], spec: str) -> SdkClient | None:
    """``client=`` checked to be the provider's SDK client (``None``: the model makes one)."""
    if client is None or isinstance(client, kind):
        return client
    raise ConfigurationTypeError(
        f"client= for {spec!r} must be the provider's SDK client ({kind.__name__}), not {type(client).__name__}"
    )


def _compatible(
    provider: str,
    model_id: str,
    options: ClientOptions,
    client: object,
    key_env: str,
    *,
    required: bool,
    spec: str,
) -> LanguageModel:
    from openai import AsyncOpenAI

    from runstream.models.openai import OpenAIChatModel

    sdk = _client(client, AsyncOpenAI, spec)
    if required:
        options = _with_key(options, sdk, key_env, spec)
    elif sdk is None:
        options.setdefault("api_key", os.environ.get(key_env) or KEYLESS)
    return OpenAIChatModel(model_id, provider=provider, client=sdk, **options)


def _with_key(
    options: ClientOptions, client: object, key_env: str | tuple[str, ...], spec: str
) -> ClientOptions:
    if client is not None or options.get("api_key"):
        return options
    names = (key_env,) if isinstance(key_env, str) else key_env
    key = next((os.environ[name] for name in names if os.environ.get(name)), None)
    if not key:
        raise ConfigurationError(
            f"{' / '.join(names)} is not set: export it or pass api_key=... to resolve_model({spec!r})"
        )
    return {**options, "api_key": key}


class ModelString:
    """A model given as ``"<provider>/<model>"``, resolved on its first call and kept.

    The string is checked at once (a typo in the provider fails where the agent is built), but
    the SDK client is only made when the model is first needed, so a module defining agents
    imports without API keys; a missing key then fails the first run with the message of
    :func:`resolve_model`.
    """

    specification_version = "v2"

    def __init__(self, spec: str, **kw: Unpack[ModelOptions]) -> None:
        self.provider, self.model_id = split_model_string(spec)
        self.spec = spec
        self._kw = kw
        self._model: LanguageModel | None = None

    def __repr__(self) -> str:
        return f"ModelString({self.spec!r})"

    def resolve(self) -> LanguageModel:
        if self._model is None:
            self._model = resolve_model(self.spec, **self._kw)
        return self._model

    async def stream(self, request: ModelRequest) -> ModelStream:
        return await self.resolve().stream(request)


def as_model(model: LanguageModel | str) -> LanguageModel:
    """A model object for ``model=`` arguments that also take model strings."""
    if isinstance(model, str):
        return ModelString(model)
    if not isinstance(model, LanguageModel):
        raise ConfigurationTypeError(
            f"model must be a model string such as 'openai/gpt-4.1' or a LanguageModel, not {model!r}"
        )
    return model


def ready_model(model: LanguageModel) -> LanguageModel:
    """The model a run uses: a :class:`ModelString` is resolved here (raising on a missing key)."""
    return model.resolve() if isinstance(model, ModelString) else model
