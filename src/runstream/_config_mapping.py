"""Reading configuration given as a mapping: Mastra's camelCase keys or their snake_case names.

A Mastra app's options translate name for name (``{"waitTimeoutMs": 500}`` or
``{"wait_timeout_ms": 500}``). A key that is neither is an error naming it, never dropped: a
misspelt option that is silently ignored is worse than a missing one. A key Mastra has but
runstream does not implement gets an error that says so.

A configuration dataclass is read by pydantic (:func:`read_dataclass`): its fields' types say
what each value may be (the annotated types below: :data:`Count`, :data:`Flag` ...), pydantic
takes both spellings (``CONFIG``: camelCase aliases, names too, no other key) and checks them,
and :func:`_config_error` words its first error as runstream always has (the option as the
caller spelt it, a did-you-mean, Mastra's names). A mapping whose keys are kept as given (only
those present: ``stream()``'s options, memory options) is a ``TypedDict`` read the same way
(:func:`read_typed_dict`); a field whose check is runstream's own function says so with
:func:`checked`.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from collections.abc import Callable, Mapping
from types import UnionType
from typing import Annotated, Any, TypeVar, Union, cast, get_args, get_origin, get_type_hints

from pydantic import (
    ConfigDict,
    Field,
    PlainValidator,
    StrictBool,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    with_config,
)
from pydantic_core import ErrorDetails
from typing_extensions import TypedDict, is_typeddict

from runstream.errors import InvalidInputError, InvalidTypeError, RunstreamError

Check = Callable[[str, Any], Any]
"""Validates (and may convert) one value; raises ``ValueError``/``TypeError`` naming the key."""


class ConfigKeyError(InvalidInputError):
    """A configuration mapping has a key runstream does not know (or does not implement)."""


def camel(snake: str) -> str:
    head, *rest = snake.split("_")
    return head + "".join(part.title() for part in rest)


CONFIG = ConfigDict(
    alias_generator=camel, populate_by_name=True, extra="forbid", arbitrary_types_allowed=True
)
"""A configuration dataclass's ``__pydantic_config__``: camelCase or snake_case keys, no other."""

Count = Annotated[int, Field(ge=0, strict=True)]
"""A whole number >= 0 (not a bool, not a float)."""
PositiveCount = Annotated[int, Field(ge=1, strict=True)]
Amount = Annotated[float, Field(ge=0, allow_inf_nan=False, strict=True)]
"""A finite number >= 0 (an int is one too)."""
Flag = StrictBool
"""``True`` or ``False``, nothing that merely converts to one."""

_C = TypeVar("_C")


def read_dataclass(
    cls: type[_C], value: object, *, where: str, unsupported: Mapping[str, str] | None = None
) -> _C:
    """A ``cls`` (a dataclass with ``__pydantic_config__ = CONFIG``) from a mapping of its options;
    an error names the first wrong option as the caller spelt it, under ``where``."""
    made: _C = _read(cls, value, where, unsupported)
    return made


def read_typed_dict(
    cls: type[_C], value: object, *, where: str, unsupported: Mapping[str, str] | None = None
) -> _C:
    """The options in ``value`` by their snake_case names, only those given, each read by its
    field's type: ``cls`` is a ``typing_extensions.TypedDict`` (``total=False``) decorated with
    ``@with_config(CONFIG)``. Errors as :func:`read_dataclass`'s."""
    made: _C = _read(cls, value, where, unsupported)
    return made


def _read(cls: type[Any], value: object, where: str, unsupported: Mapping[str, str] | None) -> Any:
    if not isinstance(value, dict) and not isinstance(value, Mapping):  # (the ABC check is slow)
        raise InvalidTypeError(f"{where} must be a mapping, not {type(value).__name__}")
    model = _model(cls)
    adapter = model.by_keys.get(tuple(value))
    if adapter is None:
        adapter = _adapter_for(model, value, where)
    try:  # (a context costs a run's options a third of their reading: given only when used)
        if model.checked:
            return adapter.validate_python(value, context=_Reading(where, value))
        return adapter.validate_python(value)
    except ValidationError as exc:
        errors = sorted(exc.errors(), key=lambda error: error["type"] != "extra_forbidden")
        raise _config_error(cls, value, errors, where, unsupported or {}) from None


@dataclasses.dataclass(frozen=True, slots=True)
class _Model:
    cls: type[Any]
    adapter: TypeAdapter[Any]
    spellings: Mapping[str, str]
    """Each option's snake_case name and camelCase alias (where they differ) -> the other."""
    names: Mapping[object, str]
    """Each option's snake_case name and camelCase alias -> its name."""
    checked: bool
    """Whether a field is read by a :func:`checked` check (it needs a :class:`_Reading`)."""
    hints: Mapping[str, Any]
    """The fields' annotations, resolved."""
    by_keys: dict[tuple[object, ...], TypeAdapter[Any]]
    """A ``TypedDict``'s validators by the keys given (see :func:`_adapter_for`)."""


_KEY_SETS = 64
"""How many sets of keys a ``TypedDict`` model keeps a validator for."""


def _adapter_for(model: _Model, value: Mapping[str, Any], where: str) -> TypeAdapter[Any]:
    """The validator for these keys, after checking no option is given twice. A ``TypedDict``'s
    validation looks up each of its fields in both spellings (``stream()``'s options: 58 lookups
    for a call that gives one), so a set of known keys gets a validator of its own: the model's
    fields of those names, the same annotations and config (the first ``_KEY_SETS`` sets)."""
    for key in value:  # pydantic would take one spelling and call the other unknown
        other = model.spellings.get(key)
        if other is not None and other in value:
            snake, alias = (key, other) if camel(key) == other else (other, key)
            raise ConfigKeyError(f"{where}: {alias!r} is given twice (as {snake!r} and {alias!r})")
    names = [model.names.get(key) for key in value]
    if not is_typeddict(model.cls) or len(model.by_keys) >= _KEY_SETS or None in names:
        return model.adapter  # (an unknown key: the whole model names it)
    typed_dict: Any = TypedDict  # (a class made here, from the model's own fields)
    fields = {name: model.hints[name] for name in names if name is not None}
    subset = typed_dict(f"{model.cls.__name__}[{', '.join(fields)}]", fields, total=False)
    adapter = model.by_keys[tuple(value)] = TypeAdapter(with_config(CONFIG)(subset))
    return adapter


@dataclasses.dataclass(frozen=True, slots=True)
class _Reading:
    """What a :func:`checked` field needs to word its error: where the mapping is, and the
    mapping (for how the caller spelt the option)."""

    where: str
    value: Mapping[str, Any]


_MODELS: dict[type[Any], _Model] = {}


def _model(cls: type[Any]) -> _Model:
    """The class's validator, built on first use (its annotations name classes defined later)."""
    model = _MODELS.get(cls)
    if model is None:
        pairs = {name: camel(name) for name in _field_names(cls) if name != camel(name)}
        hints = get_type_hints(cls, include_extras=True)
        checks = any(
            isinstance(meta, _Checked)
            for hint in hints.values()
            for meta in getattr(hint, "__metadata__", ())
        )
        spellings = pairs | {alias: name for name, alias in pairs.items()}
        names: dict[object, str] = {camel(name): name for name in hints}
        names.update((name, name) for name in hints)
        model = _MODELS[cls] = _Model(cls, TypeAdapter(cls), spellings, names, checks, hints, {})
    return model


def _field_names(cls: type[Any]) -> list[str]:
    """The options of a configuration dataclass or ``TypedDict`` (none for another type)."""
    if dataclasses.is_dataclass(cls):
        return [spec.name for spec in dataclasses.fields(cls)]
    return list(getattr(cls, "__annotations__", {})) if is_typeddict(cls) else []


class _Checked(PlainValidator):
    """A :func:`checked` field's validator."""


def checked(check: Check) -> PlainValidator:
    """A top-level field read by ``check(where, value)``, one of runstream's own checks (below),
    in its own words (``where`` names the option as the caller spelt it); ``None`` is kept, unchecked."""

    def validate(value: Any, info: ValidationInfo) -> Any:
        if value is None:
            return None
        reading = cast(_Reading, info.context)
        name = info.field_name or ""
        return check(f"{reading.where}.{name if name in reading.value else camel(name)}", value)

    return _Checked(validate)


def _config_error(
    cls: type[Any],
    value: Mapping[str, Any],
    errors: list[ErrorDetails],
    where: str,
    unsupported: Mapping[str, str],
) -> RunstreamError:
    """pydantic's first error in runstream's words: ``where.option`` (nested options too)."""
    error = errors[0]
    own = (error.get("ctx") or {}).get("error")
    if isinstance(own, RunstreamError):  # the class's own check (its __post_init__), in its words
        return own
    path, tags = _option_path(value, error["loc"], missing=error["type"] == "missing")
    if tags:  # pydantic tried each of a union's types (its loc names the type)
        tried = [e for e in errors if e["loc"][: len(path)] == error["loc"][: len(path)]]
        fitting = next(  # the type the value has: an error inside it, or of its constraints
            (e for e in tried if len(e["loc"]) > len(path) + 1 or not e["type"].endswith("_type")), None
        )
        if fitting is None:  # of none of the types
            accepted = [_KINDS.get(e["type"], str(e["loc"][len(path)])) for e in tried]
            spelt = ".".join(_spelt_path(value, path))
            return InvalidTypeError(
                f"{where}.{spelt} must be {' or '.join(accepted)}, got {type(error['input']).__name__}"
            )
        error = fitting  # of the right type, wrong otherwise: that type's error, without its name
        error["loc"] = (*path, *fitting["loc"][len(path) + 1 :])
        path = error["loc"]
    *outer, last = path
    inner: object = value
    for key in outer:  # down to the mapping (and dataclass) the error is in
        spelt = _spelt(inner, key)
        where = f"{where}.{spelt}"
        inner = inner.get(spelt) if isinstance(inner, Mapping) else None
        cls = _nested_dataclass(cls, key)
    kind, got = error["type"], error["input"]
    ctx = error.get("ctx") or {}
    if kind in ("unexpected_keyword_argument", "extra_forbidden"):
        return ConfigKeyError(_unknown_key_message(last, where, _field_names(cls), unsupported))
    if kind == "missing":
        return InvalidInputError(f"{where} needs {last!r}")
    where = f"{where}.{_spelt(inner, last)}"
    ge = ctx.get("ge")
    if kind == "greater_than_equal" and ge == 1:
        return InvalidInputError(f"{where} must be at least 1, got {got!r}")
    if kind == "less_than_equal":
        return InvalidInputError(f"{where} must be at most {ctx.get('le')}, got {got!r}")
    if kind in ("greater_than_equal", "finite_number") or (kind == "int_type" and not _is_number(got)):
        return InvalidInputError(f"{where} must be a number >= 0, got {got!r}")
    messages: dict[str, tuple[type[RunstreamError], str]] = {
        "int_type": (InvalidInputError, f"must be a whole number, got {got!r}"),
        "float_type": (InvalidInputError, f"must be a number, got {got!r}"),
        "bool_type": (InvalidTypeError, f"must be true or false, got {got!r}"),
        "callable_type": (InvalidTypeError, f"must be a function, got {type(got).__name__}"),
        "literal_error": (
            InvalidInputError,
            f"must be one of {ctx.get('expected')}, got {got!r}",
        ),
        "string_type": (InvalidTypeError, f"must be a string, got {type(got).__name__}"),
        "dict_type": (InvalidTypeError, f"must be a mapping, not {type(got).__name__}"),
        "dataclass_type": (
            InvalidTypeError,
            f"must be a {ctx.get('class_name')} or a mapping, not {type(got).__name__}",
        ),
    }
    kind_of_error, text = messages.get(
        kind, (InvalidInputError, f"is not valid ({error['msg']}), got {got!r}")
    )
    return kind_of_error(f"{where} {text}")


def _option_path(
    value: object, loc: tuple[int | str, ...], *, missing: bool
) -> tuple[tuple[int | str, ...], bool]:
    """The part of ``loc`` that names options (keys and indexes into ``value``; a ``missing``
    one's name last), and whether more follows (the names of a union's types)."""
    inner = value
    for depth, key in enumerate(loc):
        if isinstance(inner, Mapping) and isinstance(key, str) and _spelt(inner, key) in inner:
            inner = inner[_spelt(inner, key)]
        elif isinstance(inner, list | tuple) and isinstance(key, int) and 0 <= key < len(inner):
            inner = inner[key]
        elif missing and depth == len(loc) - 1:
            return loc, False
        else:
            return loc[:depth], True
    return loc, False


def _spelt_path(value: object, path: tuple[int | str, ...]) -> list[str]:
    spelt = []
    for key in path:
        spelt.append(_spelt(value, key))
        value = value.get(spelt[-1]) if isinstance(value, Mapping) else None
    return spelt


_KINDS = {
    "int_type": "a whole number",
    "float_type": "a number",
    "string_type": "a string",
    "bool_type": "true or false",
    "callable_type": "a function",
    "dict_type": "a mapping",
    "dataclass_type": "a mapping",
}
"""What a value of the wrong type should have been, by pydantic's error type."""


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _spelt(value: object, key: int | str) -> str:
    """How the caller spelt option ``key`` (pydantic names it by its camelCase alias)."""
    if isinstance(value, Mapping) and isinstance(key, str) and key not in value:
        snake = next((name for name in value if isinstance(name, str) and camel(name) == key), None)
        return snake or key
    return str(key)


def _nested_dataclass(cls: type[Any], key: int | str) -> type[Any]:
    """The type of option ``key`` of ``cls`` (the dataclass inside ``X | None``), else ``cls``."""
    if not dataclasses.is_dataclass(cls):
        return cls
    for spec in dataclasses.fields(cls):
        if key in (spec.name, camel(spec.name)):
            hint = get_type_hints(cls)[spec.name]
            members = get_args(hint) if get_origin(hint) in (Union, UnionType) else (hint,)
            return next((m for m in members if isinstance(m, type) and dataclasses.is_dataclass(m)), cls)
    return cls


def _unknown_key_message(key: object, where: str, fields: list[str], unsupported: Mapping[str, str]) -> str:
    if isinstance(key, str) and key in unsupported:
        return f"{where}: Mastra's {key!r} is not supported by runstream ({unsupported[key]})"
    known = sorted(camel(name) for name in fields)
    close = difflib.get_close_matches(str(key), [*known, *fields], n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"{where}: unknown option {key!r}{hint} (known: {', '.join(known)})"


# -- checks ---------------------------------------------------------------------------------------


def non_negative_int(where: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise InvalidInputError(f"{where} must be a number >= 0, got {value!r}")
    if value != int(value):
        raise InvalidInputError(f"{where} must be a whole number, got {value!r}")
    return int(value)


def positive_int(where: str, value: Any) -> int:
    number = non_negative_int(where, value)
    if number == 0:
        raise InvalidInputError(f"{where} must be at least 1, got {value!r}")
    return number


def boolean(where: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise InvalidTypeError(f"{where} must be true or false, got {value!r}")
    return value


def one_of(*choices: str) -> Check:
    def check(where: str, value: Any) -> str:
        if value not in choices:
            raise InvalidInputError(f"{where} must be one of {', '.join(map(repr, choices))}, got {value!r}")
        return str(value)

    return check


def mapping(where: str, value: Any) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise InvalidTypeError(f"{where} must be a mapping, not {type(value).__name__}")
    return value
