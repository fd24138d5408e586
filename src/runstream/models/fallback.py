"""A list of models tried in order, each with retries (Mastra's ``model: [{model, maxRetries,
enabled}, ...]``, and an agent's ``maxRetries``).

A model call that fails before its answer begins (the request raises, or the stream's first
parts up to ``stream-start``/``response-metadata`` are followed by an ``error`` part or a raised
error) is retried ``max_retries`` times with Mastra's backoff and retryable rule
(:func:`runstream.models._common.with_retries`: 1 s, 2 s, 4 s… or the vendor's ``retry-after``;
a vendor error that cannot pass, such as a 401, is not retried), then the next enabled model takes
the call. The models themselves are asked not to retry (one policy). Once a model has streamed a
text, reasoning or tool part, the call is that model's: a later failure reaches the run as an
``error`` chunk, as with a single model. An abort is never retried and ends a backoff at once.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Annotated, Any

from pydantic import SkipValidation, with_config
from typing_extensions import TypedDict

from runstream._config_mapping import CONFIG, boolean, checked, non_negative_int, read_typed_dict
from runstream.abort import AbortError, AbortSignal
from runstream.errors import ConfigurationError, ConfigurationTypeError, RunstreamError
from runstream.models import _common
from runstream.models.base import LanguageModel, ModelRequest, ModelStream, StreamPart

logger = logging.getLogger(__name__)

_PREAMBLE = frozenset({"stream-start", "response-metadata"})
"""Parts a model sends before its answer: a failure after them still falls back."""


class FallbackExhaustedError(RunstreamError):
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
        self,
        choices: Sequence[ModelChoice | Mapping[str, Any] | LanguageModel],
        *,
        max_retries: int = 0,
        retry: _common.RetryPolicy | None = None,
    ) -> None:
        self.retry = retry
        """The backoff (default: ``_common.DEFAULT_RETRY_POLICY``, read at each call)."""
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
        policy = self.retry or _common.DEFAULT_RETRY_POLICY
        inner = replace(request, settings=replace(request.settings, max_retries=0))
        last: BaseException | None = None
        for choice in self.choices:
            model = choice.model
            retries = choice.max_retries or (request.settings.max_retries or 0)
            try:
                return await _retried(model, inner, retries, policy, request.abort_signal)
            except AbortError:
                raise
            except Exception as exc:
                last = exc
                logger.warning("model %s/%s failed: %s", model.provider, model.model_id, exc)
        raise FallbackExhaustedError(f"all {len(self.choices)} models failed; last error: {last}") from last


async def _retried(
    model: LanguageModel,
    request: ModelRequest,
    retries: int,
    policy: _common.RetryPolicy,
    signal: AbortSignal | None,
) -> ModelStream:
    """The model's started stream, retried as ``_common.with_retries`` does; an abort ends it."""
    scope = _common.AbortScope(signal)
    what = f"{model.provider}/{model.model_id}"
    try:
        return await scope.run(
            lambda: _common.with_retries(lambda: _started(model, request), retries, policy, what=what)
        )
    finally:
        scope.close()


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


@with_config(CONFIG)
class _ChoiceOptions(TypedDict, total=False):
    """A model entry given as Mastra's mapping: ``{"model", "maxRetries", "enabled", "id"}``."""

    model: SkipValidation[object]
    """(Checked by :func:`_choice`: a model.)"""
    max_retries: Annotated[int | None, checked(non_negative_int)]
    enabled: Annotated[bool | None, checked(boolean)]
    id: SkipValidation[object]


def _choice(
    entry: ModelChoice | Mapping[str, Any] | LanguageModel, max_retries: int, index: int
) -> ModelChoice:
    if isinstance(entry, ModelChoice):
        return entry
    if isinstance(entry, LanguageModel):
        return ModelChoice(entry, max_retries)
    where = f"model[{index}]"
    options = read_typed_dict(_ChoiceOptions, entry, where=where)
    model = options.get("model")
    if not isinstance(model, LanguageModel):
        raise ConfigurationTypeError(f"{where}.model must be a model, got {type(model).__name__}")
    retries = options.get("max_retries")  # None, as absent: the default
    return ModelChoice(
        model, max_retries if retries is None else retries, options.get("enabled") is not False
    )
