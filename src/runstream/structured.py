"""Structured output: a JSON schema or pydantic model the final answer must match.

While the model streams JSON text the loop emits ``object`` chunks with the partial object
(parsed by pydantic-core's partial JSON mode); at the end of the final step the whole text is
parsed and validated, and ``object-result`` carries the result.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import jsonschema
from pydantic import BaseModel, SkipValidation, ValidationError, with_config
from pydantic_core import from_json
from typing_extensions import TypedDict

from runstream._config_mapping import CONFIG, checked, mapping, one_of, read_typed_dict
from runstream._json import JsonObject
from runstream._schema import Schema
from runstream.errors import InvalidInputError, InvalidTypeError, RunstreamError
from runstream.models.base import ResponseFormat
from runstream.models.prompt import ProviderOptions
from runstream.models.registry import as_model

logger = logging.getLogger(__name__)


class StructuredOutputError(RunstreamError, ValueError):
    """The model's final answer is not valid JSON or does not match the schema."""

    name = "StructuredOutputError"


NO_OBJECT: Any = object()
"""What :meth:`StructuredOutput.recover` returns when the run goes on without an object."""

ErrorStrategy = Literal["strict", "warn", "fallback"]
JsonPromptInjection = bool | Literal["system", "inline", "auto"]
NATIVE_FORMAT_PROVIDERS = ("openai", "anthropic", "google")


@dataclass(slots=True)
class StructuredOutput:
    """``structured_output=`` on a run: a pydantic model class or a JSON schema.

    ``error_strategy`` (Mastra's ``errorStrategy``) decides what an answer that does not parse
    or match does: ``strict`` fails the run with an ``error`` chunk, ``warn`` logs it and ends
    the run without an object, ``fallback`` makes ``fallback_value`` the object.
    """

    schema: JsonObject
    model: type[BaseModel] | None = None
    """The pydantic model the object is validated into (when the schema came from one)."""
    error_strategy: ErrorStrategy = "strict"
    fallback_value: Any = None
    structuring_model: Any = None
    """Mastra's ``structuredOutput.model``: a second model turns the agent's answer into the
    object (the agent's model answers in prose; see ``runstream.run._structuring``)."""
    instructions: str | None = None
    """With ``structuring_model``: the structuring model's system prompt (default: one made from
    the schema). Without it, under ``json_prompt_injection``: used instead of the schema dump."""
    json_prompt_injection: JsonPromptInjection = False
    """``True``/``"system"``: the schema goes into the system prompt instead of the model's
    response format; ``"inline"``: into the latest user message; ``"auto"``: the native format
    for providers that have one (openai, anthropic, google), ``"inline"`` otherwise."""
    provider_options: ProviderOptions | None = None
    """Provider options of the structuring model's call (e.g. ``{"openai": {"reasoningEffort":
    "low"}}``), with ``structuring_model``."""

    @classmethod
    def coerce(cls, value: Any) -> StructuredOutput | None:
        """Accept a pydantic model class, a JSON schema, or ``{"schema": ...}``."""
        if value is None or isinstance(value, StructuredOutput):
            return value
        if isinstance(value, type) and issubclass(value, BaseModel):
            return cls(schema=value.model_json_schema(), model=value)
        if isinstance(value, Mapping):
            inner: Any = value
            options: dict[str, Any] = {}
            if "schema" in value and not _is_json_schema_keyword_use(value):
                options = dict(
                    read_typed_dict(
                        _Options, value, where="structured_output", unsupported=_UNSUPPORTED_OPTIONS
                    )
                )
                inner = options.pop("schema")
                if "model" in options:  # Mastra's name for the structuring model
                    options["structuring_model"] = options.pop("model")
                if options.get("error_strategy") == "fallback" and "fallback_value" not in options:
                    raise InvalidInputError(
                        "structured_output: errorStrategy 'fallback' needs a fallbackValue"
                    )
            if isinstance(inner, type) and issubclass(inner, BaseModel):
                return cls(schema=inner.model_json_schema(), model=inner, **options)
            schema = dict(inner)
            jsonschema.validators.validator_for(schema).check_schema(schema)
            if "$schema" not in schema:
                schema = {"$schema": "http://json-schema.org/draft-07/schema#", **schema}
            return cls(schema=schema, **options)
        raise InvalidTypeError(
            f"structured_output must be a pydantic model or a JSON schema, not {type(value).__name__}"
        )

    def response_format(self, provider: str = "") -> ResponseFormat | None:
        """The model's native JSON response format, unless the schema goes into the prompt (or
        a separate structuring model makes the object)."""
        if self.structuring_model is not None or self.injection(provider):
            return None
        return {"type": "json", "schema": self.schema}

    def injection(self, provider: str) -> Literal["system", "inline"] | None:
        mode = self.json_prompt_injection
        if mode == "auto":
            return None if provider.split(".")[0] in NATIVE_FORMAT_PROVIDERS else "inline"
        if mode is True:
            return "system"
        return mode or None

    def prompt(self, messages: list[Any], provider: str = "") -> list[Any]:
        """The model's prompt with the schema (or ``instructions``) added where Mastra adds it:
        to the leading system message, or to the latest user message (``"inline"``)."""
        schema = json.dumps(self.schema, separators=(",", ":"))
        if self.structuring_model is not None:
            return _into_system(
                messages,
                "Your response will be processed by another agent to extract structured data. Please "
                "ensure your response contains comprehensive information for all the following fields "
                f"that will be extracted:\n\n{schema}\n\n\nYou don't need to format your response as JSON "
                "unless the user asks you to. Just ensure your natural language response includes "
                "relevant information for each field in the schema above.",
            )
        mode = self.injection(provider)
        compact = self.instructions if self.instructions and self.instructions.strip() else None
        if mode == "system":
            return _into_system(
                messages,
                compact
                or f"JSON schema:\n{schema}\nYou MUST answer with a JSON object that matches the JSON schema above.",
            )
        if mode == "inline":
            instruction = compact or (
                f"Return your response as JSON matching this schema:\n\n{schema}\n\n"
                "Return only valid JSON. Do not include markdown or explanatory text."
            )
            return _into_latest_user(messages, instruction)
        return messages

    def parse_final(self, text: str) -> Any:
        """Parse and validate the complete answer; raises :class:`StructuredOutputError`."""
        try:
            value = json.loads(strip_fences(text))
        except ValueError as exc:
            raise StructuredOutputError(f"Structured output is not valid JSON: {exc}") from None
        if self.model is not None:
            try:
                return self.model.model_validate(value)
            except ValidationError as exc:
                raise StructuredOutputError(f"Structured output validation failed: {exc}") from None
        issues = Schema(self.schema).issues(value)
        if issues:  # worded as Mastra's (zod's) issues
            problems = "\n".join(f"- {path or 'root'}: {message}" for path, message in issues)
            raise StructuredOutputError(f"Structured output validation failed: {problems}")
        return value

    def recover(self, error: ValueError) -> Any:
        """The object of an answer that failed (``warn``/``fallback``): the fallback value, or
        :data:`NO_OBJECT` after a warning."""
        if self.error_strategy == "fallback":
            return self.fallback_value
        logger.warning("structured output ignored (errorStrategy warn): %s", error)
        return NO_OBJECT


def _injection(where: str, value: Any) -> JsonPromptInjection:
    if isinstance(value, bool) or value in ("system", "inline", "auto"):
        return value  # type: ignore[no-any-return]
    raise InvalidInputError(f"{where} must be true, false, 'system', 'inline' or 'auto', got {value!r}")


def _text(where: str, value: Any) -> str:
    if not isinstance(value, str):
        raise InvalidTypeError(f"{where} must be a string, got {type(value).__name__}")
    return value


def _model(where: str, value: Any) -> Any:
    try:
        return as_model(value)
    except (TypeError, ValueError) as exc:
        raise InvalidTypeError(f"{where}: {exc}") from None


@with_config(CONFIG)
class _Options(TypedDict, total=False):
    """``structured_output={"schema": ..., ...}``: Mastra's ``structuredOutput`` options."""

    schema: SkipValidation[object]
    """(Checked by :meth:`StructuredOutput.coerce`: a pydantic model class or a JSON schema.)"""
    error_strategy: Annotated[ErrorStrategy | None, checked(one_of("strict", "warn", "fallback"))]
    fallback_value: SkipValidation[object]
    model: Annotated[object, checked(_model)]
    instructions: Annotated[str | None, checked(_text)]
    json_prompt_injection: Annotated[JsonPromptInjection | None, checked(_injection)]
    provider_options: Annotated[Mapping[str, object] | None, checked(_provider_options)]


def _provider_options(where: str, value: object) -> ProviderOptions:
    """``{provider: {option: value}}``: each provider's options a mapping of their own."""
    return {
        name: dict(mapping(f"{where}.{name}", options)) for name, options in mapping(where, value).items()
    }


_UNSUPPORTED_OPTIONS = {
    name: "not implemented: schema, model, instructions, jsonPromptInjection, providerOptions, errorStrategy and fallbackValue are"
    for name in ("useAgent", "logger")
}


def _into_system(messages: list[Any], addition: str) -> list[Any]:
    """``addition`` after the leading system message's text (a new one if there is none), as the
    AI SDK's ``injectJsonInstructionIntoMessages`` joins them."""
    if messages and messages[0].get("role") == "system" and messages[0].get("content"):
        first = {**messages[0], "content": f"{messages[0]['content']}\n\n{addition}"}
        return [first, *messages[1:]]
    if messages and messages[0].get("role") == "system":
        return [{**messages[0], "content": addition}, *messages[1:]]
    return [{"role": "system", "content": addition}, *messages]


def _into_latest_user(messages: list[Any], instruction: str) -> list[Any]:
    part = {"type": "text", "text": instruction}
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.get("role") == "user":
            content = message.get("content")
            parts = (
                list(content) if isinstance(content, list) else [{"type": "text", "text": str(content or "")}]
            )
            return [*messages[:index], {**message, "content": [*parts, part]}, *messages[index + 1 :]]
    return [*messages, {"role": "user", "content": [part]}]


def _is_json_schema_keyword_use(value: Mapping[str, Any]) -> bool:
    """A JSON schema may itself have a property list naming ``schema``: ``{"type": "object",
    "properties": {...}}`` is a schema, not the options mapping, even with a ``schema`` key."""
    return "type" in value or "properties" in value or "$schema" in value


def strip_fences(text: str) -> str:
    """The text inside a markdown code fence (models often wrap JSON in one), else the text."""
    stripped = text.strip()
    if stripped.startswith("```"):
        stripped = stripped.split("\n", 1)[1] if "\n" in stripped else ""
        if stripped.rstrip().endswith("```"):
            stripped = stripped.rstrip()[:-3]
    return stripped


def partial_object(text: str) -> Any:
    """The object a streaming answer amounts to so far (``None`` if nothing parses yet), read
    inside a code fence as the final answer is."""
    try:
        return from_json(strip_fences(text), allow_partial="trailing-strings")
    except ValueError:
        return None
