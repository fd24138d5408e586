"""Reading configuration given as a mapping: Mastra's camelCase keys or their snake_case names.

A Mastra app's options translate name for name (``{"waitTimeoutMs": 500}`` or
``{"wait_timeout_ms": 500}``). A key that is neither is an error naming it, never dropped: a
misspelt option that is silently ignored is worse than a missing one. A key Mastra has but
runstream does not implement gets an error that says so.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Mapping
from typing import Any

from runstream.errors import InvalidInputError, InvalidTypeError

Check = Callable[[str, Any], Any]
"""Validates (and may convert) one value; raises ``ValueError``/``TypeError`` naming the key."""


class ConfigKeyError(InvalidInputError):
    """A configuration mapping has a key runstream does not know (or does not implement)."""


def camel(snake: str) -> str:
    head, *rest = snake.split("_")
    return head + "".join(part.title() for part in rest)


def read_config(
    value: Mapping[str, Any],
    fields: Mapping[str, Check | None],
    *,
    where: str,
    unsupported: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The options in ``value`` by their snake_case names (only the keys present).

    ``fields`` maps each snake_case name to an optional check; its camelCase spelling is
    accepted too. ``unsupported`` maps Mastra names runstream does not implement to a hint.
    """
    if not isinstance(value, Mapping):
        raise InvalidTypeError(f"{where} must be a mapping, not {type(value).__name__}")
    by_spelling = {camel(name): name for name in fields} | {name: name for name in fields}
    out: dict[str, Any] = {}
    for key, item in value.items():
        name = by_spelling.get(key) if isinstance(key, str) else None
        if name is None:
            raise ConfigKeyError(_unknown_key_message(key, where, fields, unsupported or {}))
        if name in out:
            raise ConfigKeyError(f"{where}: {camel(name)!r} is given twice (as {name!r} and {camel(name)!r})")
        check = fields[name]
        out[name] = check(f"{where}.{key}", item) if check is not None and item is not None else item
    return out


def _unknown_key_message(
    key: object, where: str, fields: Mapping[str, Any], unsupported: Mapping[str, str]
) -> str:
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


def non_negative_number(where: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise InvalidInputError(f"{where} must be a number >= 0, got {value!r}")
    return float(value)


def boolean(where: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise InvalidTypeError(f"{where} must be true or false, got {value!r}")
    return value


def callback(where: str, value: Any) -> Any:
    if not callable(value):
        raise InvalidTypeError(f"{where} must be a function, got {type(value).__name__}")
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
