"""A list of models tried in order, each with retries (Mastra's ``model: [{model, maxRetries,
enabled}, ...]``).

A model call that fails before its answer begins (the request raises, or the stream's first
parts up to ``stream-start``/``response-metadata`` are followed by an ``error`` part or a raised
error) is retried ``max_retries`` times, then the next enabled model takes the call. Once a model
has streamed a text, reasoning or tool part, the call is that model's: a later failure reaches
the run as an ``error`` chunk, as with a single model. An abort is never retried.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from runstream._config_mapping import boolean, non_negative_int, read_config
from runstream.abort import AbortError
from runstream.errors import ConfigurationError, ConfigurationTypeError
from runstream.models.base import LanguageModel, ModelRequest, ModelStream, StreamPart

logger = logging.getLogger(__name__)

_PREAMBLE = frozenset({"stream-start", "response-metadata"})
"""Parts a model sends before its answer: a failure after them still falls back."""


class FallbackExhaustedError(Exception):
    """Every model of a fallback list failed (the last failure is the cause)."""


@dataclass(frozen=True, slots=True)
class ModelChoice:
    """One entry of a fallback list."""

    model: LanguageModel
    max_retries: int = 0
    enabled: bool = True


class FallbackModel:
    """A :class:`~runstream.models.base.LanguageModel` over a list of models (see module doc)."""

    def __init__(
        self, choices: Sequence[ModelChoice | Mapping[str, Any] | LanguageModel], *, max_retries: int = 0
    ) -> None:
        entries = [_choice(entry, max_retries, index) for index, entry in enumerate(choices)]
        self.choices = [entry for entry in entries if entry.enabled]
        if not self.choices:
            raise ConfigurationError("a model list needs at least one enabled model")
        versions = {choice.model.specification_version for choice in self.choices}
        if len(versions) > 1:
            raise ConfigurationError(
                f"the models of a list must speak one AI SDK version, got {sorted(versions)}"
            )

    @property
    def provider(self) -> str:
        return self.choices[0].model.provider

    @property
    def model_id(self) -> str:
        return self.choices[0].model.model_id

    @property
    def specification_version(self) -> str:
        return self.choices[0].model.specification_version

    async def stream(self, request: ModelRequest) -> ModelStream:
        last: BaseException | None = None
        for choice in self.choices:
            for attempt in range(choice.max_retries + 1):
                if request.abort_signal is not None and request.abort_signal.aborted:
                    raise AbortError(request.abort_signal.reason)
                try:
                    return await _started(choice.model, request)
                except AbortError:
                    raise
                except Exception as exc:
                    last = exc
                    logger.warning(
                        "model %s/%s failed (attempt %d): %s",
                        choice.model.provider,
                        choice.model.model_id,
                        attempt + 1,
                        exc,
                    )
        raise FallbackExhaustedError(f"all {len(self.choices)} models failed; last error: {last}") from last


async def _started(model: LanguageModel, request: ModelRequest) -> ModelStream:
    """The model's stream once its answer has begun; raises if it fails before that."""
    stream = await model.stream(request)
    parts = stream.parts
    held: list[StreamPart] = []
    async for part in parts:
        kind = part.get("type")
        if kind == "error":
            await _close(parts)
            error = part.get("error")
            raise error if isinstance(error, Exception) else RuntimeError(str(error))
        held.append(part)
        if kind not in _PREAMBLE:
            break
    return ModelStream(parts=_replay(held, parts), request=stream.request, response=stream.response)


async def _replay(held: list[StreamPart], rest: AsyncIterator[StreamPart]) -> AsyncIterator[StreamPart]:
    for part in held:
        yield part
    async for part in rest:
        yield part


async def _close(parts: AsyncIterator[StreamPart]) -> None:
    close = getattr(parts, "aclose", None)
    if close is not None:
        await close()


def _choice(
    entry: ModelChoice | Mapping[str, Any] | LanguageModel, max_retries: int, index: int
) -> ModelChoice:
    if isinstance(entry, ModelChoice):
        return entry
    if isinstance(entry, LanguageModel):
        return ModelChoice(entry, max_retries)
    where = f"model[{index}]"
    options = read_config(
        entry,
        {"model": None, "max_retries": non_negative_int, "enabled": boolean, "id": None},
        where=where,
    )
    model = options.get("model")
    if not isinstance(model, LanguageModel):
        raise ConfigurationTypeError(f"{where}.model must be a model, got {type(model).__name__}")
    return ModelChoice(model, options.get("max_retries", max_retries), options.get("enabled", True))
