"""Embedders: text in, vectors out (Mastra's embedding models, ``ModelRouterEmbeddingModel``).

Model strings as Mastra's: ``"openai/text-embedding-3-small"``, ``"google/gemini-embedding-001"``,
``"openai-compatible/<model>"`` (with ``base_url``) and the gateways of
:mod:`runstream.models.registry` (``"ollama/nomic-embed-text"``, ...), on the providers' SDKs
(the ``openai`` and ``google`` extras). :func:`resolve_embedder` makes one.

Every embedder splits a long list into calls of at most ``max_batch_size`` texts (OpenAI takes
2048 inputs a call, Gemini 100), retries a failed call as the language models do
(:func:`runstream.models._common.with_retries`: 408/409/429/5xx and lost connections, backoff
with ``retry-after``), and checks that every vector has the expected ``dimension`` (the one
asked for, else the model's known one, else the first answer's), so a store never gets vectors
of two sizes. A deterministic local embedder with no weights, for tests and demos, is
:class:`runstream.testing.HashEmbedder`.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from runstream.errors import ConfigurationError, InvalidInputError
from runstream.models._common import DEFAULT_RETRY_POLICY, RetryPolicy, with_retries
from runstream.models.registry import GATEWAYS, GOOGLE_KEY_ENVS, KEYLESS, split_model_string

KNOWN_DIMENSIONS = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
    "text-embedding-004": 768,
}
MAX_TEXT_LENGTH = 100_000
"""Characters per text: a longer one is refused before it reaches a provider."""


class EmbeddingDimensionError(InvalidInputError):
    """A provider answered with vectors of another length than the embedder's dimension."""


@runtime_checkable
class Embedder(Protocol):
    """What memory and the RAG helpers call: ``await embedder.embed(["text", ...])``."""

    model_id: str
    dimension: int | None
    """The length of every vector (``None`` until the first answer when not known)."""
    max_batch_size: int

    async def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


class BatchingEmbedder:
    """The shared part: batches, retries and the dimension check around ``_call`` (one request)."""

    def __init__(
        self,
        model_id: str,
        *,
        dimension: int | None = None,
        max_batch_size: int = 100,
        max_retries: int = 2,
        retry: RetryPolicy = DEFAULT_RETRY_POLICY,
    ) -> None:
        if max_batch_size < 1:
            raise ConfigurationError("max_batch_size must be at least 1")
        self.model_id = model_id
        self.dimension = dimension
        self.max_batch_size = max_batch_size
        self.max_retries = max_retries
        self.retry = retry

    async def _call(self, texts: list[str]) -> list[list[float]]:
        raise NotImplementedError

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if isinstance(texts, str):
            raise InvalidInputError("embed() takes a list of texts")
        items = list(texts)
        for text in items:
            if not isinstance(text, str):
                raise InvalidInputError("embed() takes a list of strings")
            if len(text) > MAX_TEXT_LENGTH:
                raise InvalidInputError(f"a text to embed may have at most {MAX_TEXT_LENGTH} characters")
        vectors: list[list[float]] = []
        for start in range(0, len(items), self.max_batch_size):
            batch = items[start : start + self.max_batch_size]
            answer = await with_retries(
                lambda batch=batch: self._call(batch),  # type: ignore[misc]
                self.max_retries,
                self.retry,
                what=f"embedding call ({self.model_id})",
            )
            if len(answer) != len(batch):
                raise EmbeddingDimensionError(
                    f"{self.model_id} returned {len(answer)} vectors for {len(batch)} texts"
                )
            for vector in answer:
                if self.dimension is None:
                    self.dimension = len(vector)
                if len(vector) != self.dimension:
                    raise EmbeddingDimensionError(
                        f"{self.model_id} returned a vector of {len(vector)} dimensions, expected {self.dimension}"
                    )
            vectors.extend(answer)
        return vectors


class OpenAIEmbedder(BatchingEmbedder):
    """OpenAI's embeddings endpoint (also any OpenAI-compatible server, with ``base_url``)."""

    def __init__(
        self,
        model_id: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        dimensions: int | None = None,
        max_batch_size: int = 2048,
        max_retries: int = 2,
        retry: RetryPolicy = DEFAULT_RETRY_POLICY,
        client: Any = None,
        provider: str = "openai",
    ) -> None:
        """``dimensions`` asks the model for shorter vectors (``text-embedding-3-*``)."""
        super().__init__(
            model_id,
            dimension=dimensions or (KNOWN_DIMENSIONS.get(model_id) if provider == "openai" else None),
            max_batch_size=max_batch_size,
            max_retries=max_retries,
            retry=retry,
        )
        self._dimensions = dimensions
        if client is None:
            from openai import AsyncOpenAI

            client = AsyncOpenAI(api_key=api_key, base_url=base_url, max_retries=0)
        self.client = client

    async def _call(self, texts: list[str]) -> list[list[float]]:
        from runstream.models.openai import translate_error

        extra: dict[str, Any] = {"dimensions": self._dimensions} if self._dimensions else {}
        try:
            response = await self.client.embeddings.create(
                model=self.model_id, input=texts, encoding_format="float", **extra
            )
        except Exception as exc:
            raise translate_error(exc) from exc
        return [list(item.embedding) for item in sorted(response.data, key=lambda d: d.index)]


class GoogleEmbedder(BatchingEmbedder):
    """Gemini's embeddings (``google-genai``)."""

    def __init__(
        self,
        model_id: str,
        *,
        api_key: str | None = None,
        dimensions: int | None = None,
        max_batch_size: int = 100,
        max_retries: int = 2,
        retry: RetryPolicy = DEFAULT_RETRY_POLICY,
        client: Any = None,
    ) -> None:
        super().__init__(
            model_id,
            dimension=dimensions or KNOWN_DIMENSIONS.get(model_id),
            max_batch_size=max_batch_size,
            max_retries=max_retries,
            retry=retry,
        )
        self._dimensions = dimensions
        if client is None:
            from google import genai
            from google.genai import types

            client = genai.Client(
                api_key=api_key,
                http_options=types.HttpOptions(retry_options=types.HttpRetryOptions(attempts=1)),
            )
        self.client = client

    async def _call(self, texts: list[str]) -> list[list[float]]:
        from google.genai import types

        from runstream.models.google import translate_error

        config = (
            types.EmbedContentConfig(output_dimensionality=self._dimensions) if self._dimensions else None
        )
        try:
            response = await self.client.aio.models.embed_content(
                model=self.model_id, contents=texts, config=config
            )
        except Exception as exc:
            raise translate_error(exc) from exc
        return [list(e.values or []) for e in response.embeddings or []]


class FunctionEmbedder(BatchingEmbedder):
    """An embedder from an async function of a batch of texts (your own model or service)."""

    def __init__(
        self,
        embed: Callable[[list[str]], Awaitable[list[list[float]]]],
        *,
        model_id: str = "custom",
        dimension: int | None = None,
        max_batch_size: int = 100,
        max_retries: int = 0,
    ) -> None:
        super().__init__(
            model_id, dimension=dimension, max_batch_size=max_batch_size, max_retries=max_retries
        )
        self._embed = embed

    async def _call(self, texts: list[str]) -> list[list[float]]:
        return await self._embed(texts)


def _key(names: tuple[str, ...], given: str | None, spec: str) -> str:
    key = given or next((os.environ[n] for n in names if os.environ.get(n)), None)
    if not key:
        raise ConfigurationError(
            f"{' / '.join(names)} is not set: export it or pass api_key=... for {spec!r}"
        )
    return key


def resolve_embedder(spec: str | Embedder, **kw: Any) -> Embedder:
    """An embedder for ``"<provider>/<model id>"`` (``kw``: ``api_key``, ``base_url``,
    ``dimensions``, ``max_batch_size``, ``max_retries``, ``client``); an :class:`Embedder` is
    returned as it is."""
    if not isinstance(spec, str):
        if not isinstance(spec, Embedder):
            raise ConfigurationError(f"an embedder must be a model string or an Embedder, got {spec!r}")
        return spec
    provider, model_id = split_model_string(spec)
    client = kw.get("client")
    if provider == "openai":
        if client is None:
            kw["api_key"] = _key(("OPENAI_API_KEY",), kw.get("api_key"), spec)
        return OpenAIEmbedder(model_id, **kw)
    if provider == "google":
        if client is None:
            kw["api_key"] = _key(GOOGLE_KEY_ENVS, kw.get("api_key"), spec)
        return GoogleEmbedder(model_id, **kw)
    if provider == "openai-compatible":
        if not kw.get("base_url") and client is None:
            raise ConfigurationError(f"{spec!r} needs base_url=..., the server's OpenAI-compatible endpoint")
        kw.setdefault("api_key", os.environ.get("OPENAI_COMPATIBLE_API_KEY") or KEYLESS)
        return OpenAIEmbedder(model_id, provider=provider, **kw)
    if provider in GATEWAYS:
        gateway = GATEWAYS[provider]
        kw.setdefault("base_url", gateway.base_url)
        if gateway.key_env is not None and client is None:
            kw["api_key"] = _key((gateway.key_env,), kw.get("api_key"), spec)
        else:
            kw.setdefault("api_key", KEYLESS)
        return OpenAIEmbedder(model_id, provider=provider, **kw)
    raise ConfigurationError(
        f"{provider!r} has no embedding models in runstream (use openai, google or a gateway)"
    )


__all__ = [
    "BatchingEmbedder",
    "Embedder",
    "EmbeddingDimensionError",
    "FunctionEmbedder",
    "GoogleEmbedder",
    "OpenAIEmbedder",
    "resolve_embedder",
]
