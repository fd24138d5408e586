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
from typing import Any, Literal

import jsonschema
from pydantic import BaseModel, ValidationError
from pydantic_core import from_json

from runstream._config_mapping import Check, one_of, read_config
from runstream._schema import Schema
from runstream.errors import RunstreamError

logger = logging.getLogger(__name__)


class StructuredOutputError(RunstreamError, ValueError):
    """The model's final answer is not valid JSON or does not match the schema."""

    name = "StructuredOutputError"


NO_OBJECT: Any = object()
"""What :meth:`StructuredOutput.recover` returns when the run goes on without an object."""

ErrorStrategy = Literal["strict", "warn", "fallback"]


@dataclass(slots=True)
class StructuredOutput:
    """``structured_output=`` on a run: a pydantic model class or a JSON schema.

    ``error_strategy`` (Mastra's ``errorStrategy``) decides what an answer that does not parse
    or match does: ``strict`` fails the run with an ``error`` chunk, ``warn`` logs it and ends
    the run without an object, ``fallback`` makes ``fallback_value`` the object.
    """

    schema: dict[str, Any]
    model: type[BaseModel] | None = None
    error_strategy: ErrorStrategy = "strict"
    fallback_value: Any = None

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
                options = read_config(
                    value, _OPTIONS, where="structured_output", unsupported=_UNSUPPORTED_OPTIONS
                )
                inner = options.pop("schema")
                if options.get("error_strategy") == "fallback" and "fallback_value" not in options:
                    raise ValueError("structured_output: errorStrategy 'fallback' needs a fallbackValue")
            if isinstance(inner, type) and issubclass(inner, BaseModel):
                return cls(schema=inner.model_json_schema(), model=inner, **options)
            schema = dict(inner)
            jsonschema.validators.validator_for(schema).check_schema(schema)
            if "$schema" not in schema:
                schema = {"$schema": "http://json-schema.org/draft-07/schema#", **schema}
            return cls(schema=schema, **options)
        raise TypeError(
            f"structured_output must be a pydantic model or a JSON schema, not {type(value).__name__}"
        )

    def response_format(self) -> dict[str, Any]:
        return {"type": "json", "schema": self.schema}

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


_OPTIONS: dict[str, Check | None] = {
    "schema": None,
    "error_strategy": one_of("strict", "warn", "fallback"),
    "fallback_value": None,
}
_UNSUPPORTED_OPTIONS = {
    name: "not implemented: schema, errorStrategy and fallbackValue are"
    for name in ("model", "instructions", "useAgent", "jsonPromptInjection", "logger", "providerOptions")
}


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
