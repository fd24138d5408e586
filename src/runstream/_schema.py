"""Step and workflow schemas: a JSON schema or a pydantic model, validated with Mastra's messages.

Mastra validates with zod (``z.fromJSONSchema``), and its error messages reach the stream
(``Step input validation failed: \\n- a: Invalid input: expected string, received number``). To
produce the same text, JSON schemas are checked by a small interpreter that follows zod's order
(declared properties first, then unrecognised keys) and wording, and that accepts what zod
accepts: keys not declared pass through unless ``additionalProperties`` is false, and keywords
zod ignores (``minItems``, ``maxItems`` …) are ignored. Combinators (``anyOf``, ``oneOf``,
``allOf``) and mixed enums are checked with ``jsonschema`` and reported as ``Invalid input``.
A pydantic model is validated by pydantic; the step then receives the model instance.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jsonschema
from pydantic import BaseModel, ValidationError

from runstream._json import JsonObject
from runstream.errors import InvalidTypeError, RunstreamError

UNDEFINED: Any = object()
"""A required property that is absent (zod's ``undefined``)."""

Issue = tuple[str, str]
"""``(dotted path, message)``."""


@dataclass(frozen=True, slots=True)
class Schema:
    """A schema given as a JSON schema dict or a pydantic model class."""

    json_schema: JsonObject
    model: type[BaseModel] | None = None

    @classmethod
    def coerce(cls, value: Schema | type[BaseModel] | Mapping[str, Any] | None) -> Schema | None:
        if value is None or isinstance(value, Schema):
            return value
        if isinstance(value, type) and issubclass(value, BaseModel):
            return cls(value.model_json_schema(), value)
        if isinstance(value, Mapping):
            schema = dict(value)
            jsonschema.validators.validator_for(schema).check_schema(schema)
            return cls(schema)
        raise InvalidTypeError(
            f"a schema must be a pydantic model or a JSON schema, not {type(value).__name__}"
        )

    def issues(self, value: Any) -> list[Issue]:
        if self.model is not None:
            if isinstance(value, self.model):
                return []
            try:
                self.model.model_validate(value)
            except ValidationError as exc:
                return [(".".join(str(p) for p in err["loc"]), err["msg"]) for err in exc.errors()]
            return []
        return _issues(self.json_schema, value, ())

    def validate(self, value: Any, prefix: str) -> Any:
        """Raise :class:`SchemaValidationError` (message ``prefix`` + issues) or return ``value``."""
        problems = self.issues(value)
        if problems:
            raise SchemaValidationError(prefix + " \n" + "\n".join(f"- {p}: {m}" for p, m in problems))
        return value

    def for_step(self, value: Any) -> Any:
        """The value a step's code sees: the model instance for a pydantic schema."""
        if self.model is not None and not isinstance(value, self.model):
            return self.model.model_validate(value)
        return value


class SchemaValidationError(RunstreamError, ValueError):
    """A value does not match a workflow, step, state, suspend or resume schema."""

    name = "Error"


def to_plain(value: Any) -> Any:
    """A pydantic model instance as JSON data (anything else unchanged)."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True)
    return value


def _received(value: Any) -> str:
    if value is UNDEFINED:
        return "undefined"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _type_ok(expected: str, value: Any) -> bool:
    kind = _received(value)
    if expected == "integer":
        return kind == "number" and float(value).is_integer()
    return kind == expected


def _type_issue(expected: str, value: Any) -> str:
    received = _received(value)
    if expected == "integer":
        expected = "int" if received == "number" else "number"
    return f"Invalid input: expected {expected}, received {received}"


def _issues(schema: Mapping[str, Any], value: Any, path: tuple[str, ...]) -> list[Issue]:
    where = ".".join(path)
    if any(k in schema for k in ("anyOf", "oneOf", "allOf", "not")):
        valid = value is not UNDEFINED and jsonschema.validators.validator_for(schema)(schema).is_valid(value)
        return [] if valid else [(where, "Invalid input")]
    if "const" in schema:
        ok = value is not UNDEFINED and value == schema["const"]
        return [] if ok else [(where, f"Invalid input: expected {json.dumps(schema['const'])}")]
    if "enum" in schema:
        return _enum_issues(schema["enum"], value, where)
    expected = schema.get("type")
    if expected is None:
        return (
            [(where, "Invalid input: expected nonoptional, received undefined")] if value is UNDEFINED else []
        )
    if isinstance(expected, list):
        return [] if any(_type_ok(t, value) for t in expected) else [(where, "Invalid input")]
    if not _type_ok(expected, value):
        return [(where, _type_issue(expected, value))]
    if expected == "object":
        return _object_issues(schema, value, path)
    if expected == "array" and isinstance(schema.get("items"), Mapping):
        out: list[Issue] = []
        for i, item in enumerate(value):
            out.extend(_issues(schema["items"], item, (*path, str(i))))
        return out
    if expected == "string":
        return [(where, m) for m in _string_issues(schema, value)]
    if expected in ("number", "integer"):
        return [(where, m) for m in _number_issues(schema, value)]
    return []


def _enum_issues(options: list[Any], value: Any, where: str) -> list[Issue]:
    if value is not UNDEFINED and value in options:
        return []
    if all(isinstance(o, str) for o in options):
        return [(where, "Invalid option: expected one of " + "|".join(json.dumps(o) for o in options))]
    return [(where, "Invalid input")]


def _object_issues(schema: Mapping[str, Any], value: Mapping[str, Any], path: tuple[str, ...]) -> list[Issue]:
    properties: Mapping[str, Any] = schema.get("properties", {})
    required = set(schema.get("required", []))
    out: list[Issue] = []
    for key, sub in properties.items():
        if key in value:
            out.extend(_issues(sub, value[key], (*path, key)))
        elif key in required:
            out.extend(_issues(sub, UNDEFINED, (*path, key)))
    for key in sorted(required - set(properties)):  # required without a declared schema
        if key not in value:
            out.append((".".join((*path, key)), "Invalid input: expected nonoptional, received undefined"))
    extra = [k for k in value if k not in properties]
    additional = schema.get("additionalProperties", True)
    if additional is False and extra:
        keys = ", ".join(json.dumps(k) for k in extra)
        out.append((".".join(path), f"Unrecognized key{'s' if len(extra) > 1 else ''}: {keys}"))
    elif isinstance(additional, Mapping):
        for key in extra:
            out.extend(_issues(additional, value[key], (*path, key)))
    return out


def _string_issues(schema: Mapping[str, Any], value: str) -> list[str]:
    out = []
    if "minLength" in schema and len(value) < schema["minLength"]:
        out.append(f"Too small: expected string to have >={schema['minLength']} characters")
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        out.append(f"Too big: expected string to have <={schema['maxLength']} characters")
    if "pattern" in schema and not re.search(schema["pattern"], value):
        out.append(f"Invalid string: must match pattern /{schema['pattern']}/")
    return out


def _number_issues(schema: Mapping[str, Any], value: float) -> list[str]:
    out = []
    if "minimum" in schema and not value >= schema["minimum"]:
        out.append(f"Too small: expected number to be >={schema['minimum']}")
    if "exclusiveMinimum" in schema and not value > schema["exclusiveMinimum"]:
        out.append(f"Too small: expected number to be >{schema['exclusiveMinimum']}")
    if "maximum" in schema and not value <= schema["maximum"]:
        out.append(f"Too big: expected number to be <={schema['maximum']}")
    if "exclusiveMaximum" in schema and not value < schema["exclusiveMaximum"]:
        out.append(f"Too big: expected number to be <{schema['exclusiveMaximum']}")
    return out
