"""Mastra's metadata filter language, parsed and checked into a small tree every backend compiles.

Mastra's vector stores share one MongoDB/Sift-style filter syntax (``@mastra/core``'s
``BaseFilterTranslator``; LibSQL's and PgVector's translators). What runstream accepts:

* a field is a dotted path into the metadata (``"user.name"``), or nested objects without
  operators (``{"user": {"name": "Ada"}}`` is the same condition);
* ``{"field": value}`` is ``$eq``; ``{"field": [a, b]}`` is ``$in`` (as Mastra's translators);
  several fields (or operators on one field) are ANDed;
* comparison: ``$eq``, ``$ne`` (also true where the field is missing), ``$gt``, ``$gte``,
  ``$lt``, ``$lte`` (numbers with numbers, strings with strings; other types never match);
  ``$eq`` with a scalar also matches an array field that holds it, as Sift does, and ``null``
  matches a missing field;
* arrays: ``$in``, ``$nin``, ``$all``, ``$size``, ``$elemMatch`` (conditions on the elements
  themselves, ``{"$gt": 3}``, or on their fields, ``{"price": {"$gt": 3}}``);
* ``$exists`` (a ``null`` value exists);
* logic: ``$and``, ``$or``, ``$nor`` (lists of filters, at the top level or inside another
  logical operator) and ``$not`` (a filter at the top level, operators at a field).

Mastra's errors are kept (``Invalid top-level operator``, ``Unsupported operator``,
``$not operator cannot be empty``, ...). Size limits (depth, number of conditions, list length)
bound what a caller over HTTP can make a database do.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from runstream.errors import InvalidInputError

MAX_DEPTH = 12
MAX_CONDITIONS = 200
MAX_LIST = 1000
MAX_PATH_SEGMENTS = 16
MAX_SEGMENT_LENGTH = 200

ComparisonOp = Literal["eq", "ne", "gt", "gte", "lt", "lte", "in", "nin", "all", "size", "exists"]
Path = tuple[str, ...]
Scalar = str | int | float | bool | None


class InvalidFilterError(InvalidInputError):
    """A metadata filter that Mastra's language does not allow (a 400 on the server)."""


@dataclass(frozen=True, slots=True)
class Condition:
    """``path op value``; the empty path is the value itself (inside ``$elemMatch``)."""

    path: Path
    op: ComparisonOp
    value: Any


@dataclass(frozen=True, slots=True)
class ElemMatch:
    """The array at ``path`` has an element matching ``where`` (paths relative to the element)."""

    path: Path
    where: Node


@dataclass(frozen=True, slots=True)
class All:
    """Every child holds (no child: always true)."""

    children: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Any_:
    """Some child holds (no child: never true)."""

    children: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Not:
    child: Node


Node = Condition | ElemMatch | All | Any_ | Not

_LOGICAL = ("$and", "$or", "$nor", "$not")
_COMPARISON: dict[str, ComparisonOp] = {
    "$eq": "eq",
    "$ne": "ne",
    "$gt": "gt",
    "$gte": "gte",
    "$lt": "lt",
    "$lte": "lte",
    "$in": "in",
    "$nin": "nin",
    "$all": "all",
    "$size": "size",
    "$exists": "exists",
}
_KNOWN = set(_COMPARISON) | set(_LOGICAL) | {"$elemMatch"}


def parse_filter(value: Mapping[str, object] | None) -> Node | None:
    """The filter as a tree, or ``None`` for no filter (``None`` or ``{}``)."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise InvalidFilterError("a filter must be an object such as {'category': 'docs'}")
    if not value:
        return None
    parser = _Parser()
    return parser.document(value, (), depth=0)


class _Parser:
    def __init__(self) -> None:
        self.count = 0

    def _counted(self, node: Node) -> Node:
        self.count += 1
        if self.count > MAX_CONDITIONS:
            raise InvalidFilterError(f"a filter may hold at most {MAX_CONDITIONS} conditions")
        return node

    def document(self, value: Mapping[str, Any], base: Path, *, depth: int) -> Node:
        """A filter object: field conditions and logical operators, ANDed."""
        if depth > MAX_DEPTH:
            raise InvalidFilterError(f"a filter may nest at most {MAX_DEPTH} levels")
        children: list[Node] = []
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidFilterError("filter keys must be strings")
            if key.startswith("$"):
                children.append(self.logical(key, item, base, depth=depth))
            else:
                children.append(self.field(base + _path(key), item, depth=depth + 1))
        return children[0] if len(children) == 1 else All(tuple(children))

    def logical(self, key: str, item: Any, base: Path, *, depth: int) -> Node:
        if key not in _KNOWN:
            raise InvalidFilterError(f"Unsupported operator: {key}")
        if key not in _LOGICAL:
            raise InvalidFilterError(f"Invalid top-level operator: {key}")
        if key == "$not":
            if not isinstance(item, Mapping):
                raise InvalidFilterError("$not operator requires an object")
            if not item:
                raise InvalidFilterError("$not operator cannot be empty")
            return self._counted(Not(self.document(item, base, depth=depth + 1)))
        items = [item] if isinstance(item, Mapping) else item
        if not isinstance(items, Sequence) or isinstance(items, str):
            raise InvalidFilterError(f"{key} takes a list of filters")
        parts: list[Node] = []
        for sub in items:
            if not isinstance(sub, Mapping):
                raise InvalidFilterError(f"{key} takes a list of filters (objects)")
            if len(sub) == 1 and next(iter(sub)) in _COMPARISON:
                raise InvalidFilterError(
                    f"Logical operators must contain field conditions, not direct operators: {key}"
                )
            if sub:
                parts.append(self.document(sub, base, depth=depth + 1))
        if key == "$and":
            return self._counted(All(tuple(parts)))
        if key == "$or":
            return self._counted(Any_(tuple(parts)))
        return self._counted(Not(Any_(tuple(parts))))

    def field(self, path: Path, item: Any, *, depth: int) -> Node:
        if depth > MAX_DEPTH:
            raise InvalidFilterError(f"a filter may nest at most {MAX_DEPTH} levels")
        if isinstance(item, Mapping):
            keys = list(item)
            operators = [k for k in keys if isinstance(k, str) and k.startswith("$")]
            if not operators:
                if not item:
                    raise InvalidFilterError(f"the condition on {'.'.join(path)!r} is empty")
                children = [self.field(path + _path(k), v, depth=depth + 1) for k, v in item.items()]
                return children[0] if len(children) == 1 else All(tuple(children))
            if len(operators) != len(keys):
                raise InvalidFilterError(
                    f"the condition on {'.'.join(path)!r} mixes operators and fields: {keys}"
                )
            ops = [self.operator(path, k, v, depth=depth) for k, v in item.items()]
            return ops[0] if len(ops) == 1 else All(tuple(ops))
        if isinstance(item, list | tuple):
            return self.operator(path, "$in", item, depth=depth)
        return self.operator(path, "$eq", item, depth=depth)

    def operator(self, path: Path, key: str, item: Any, *, depth: int) -> Node:
        where = ".".join(path) or "the element"
        if key not in _KNOWN:
            raise InvalidFilterError(f"Unsupported operator: {key}")
        if key in ("$and", "$or", "$nor"):
            raise InvalidFilterError(f"Logical operator {key} cannot be used at field level: {where}")
        if key == "$not":
            if not isinstance(item, Mapping) or isinstance(item, list):
                raise InvalidFilterError("$not operator requires an object")
            if not item:
                raise InvalidFilterError("$not operator cannot be empty")
            return self._counted(Not(self.field(path, item, depth=depth + 1)))
        if key == "$elemMatch":
            if not isinstance(item, Mapping) or not item:
                raise InvalidFilterError("$elemMatch requires an object with conditions")
            if all(isinstance(k, str) and k.startswith("$") and k not in _LOGICAL for k in item):
                inner = self.field((), item, depth=depth + 1)
            else:
                inner = self.document(item, (), depth=depth + 1)
            return self._counted(ElemMatch(path, inner))
        op = _COMPARISON[key]
        return self._counted(Condition(path, op, _operand(op, item, where)))


def _path(key: str) -> Path:
    segments = tuple(key.split("."))
    if not key or any(not s for s in segments):
        raise InvalidFilterError(f"invalid field path {key!r}")
    if len(segments) > MAX_PATH_SEGMENTS:
        raise InvalidFilterError(f"a field path may have at most {MAX_PATH_SEGMENTS} parts")
    for segment in segments:
        if (
            len(segment) > MAX_SEGMENT_LENGTH
            or any(c in segment for c in '"\\[]')
            or not segment.isprintable()
        ):
            raise InvalidFilterError(f"invalid field path {key!r}")
    return segments


def _scalar(value: Any, where: str) -> Scalar:
    if value is None or isinstance(value, str | bool):
        return value
    if isinstance(value, int | float):
        if not math.isfinite(value):
            raise InvalidFilterError(f"{where}: numbers must be finite")
        return value
    raise InvalidFilterError(
        f"{where}: expected a string, number, boolean or null, got {type(value).__name__}"
    )


def _json(value: Any, where: str, depth: int = 0) -> Any:
    if depth > MAX_DEPTH:
        raise InvalidFilterError(f"{where}: the value nests too deeply")
    if isinstance(value, Mapping):
        return {str(k): _json(v, where, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json(v, where, depth + 1) for v in value]
    return _scalar(value, where)


def _list(value: Any, where: str) -> list[Scalar]:
    items = list(value) if isinstance(value, list | tuple) else [value]
    if len(items) > MAX_LIST:
        raise InvalidFilterError(f"{where}: a list may hold at most {MAX_LIST} values")
    return [_scalar(v, where) for v in items]


def _operand(op: ComparisonOp, value: Any, where: str) -> Any:
    if op in ("eq", "ne"):
        return _json(value, f"${op} on {where}")
    if op in ("gt", "gte", "lt", "lte"):
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise InvalidFilterError(f"${op} on {where} takes a number or a string")
        return _scalar(value, f"${op} on {where}")
    if op in ("in", "nin", "all"):
        return _list(value, f"${op} on {where}")
    if op == "size":
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidFilterError(f"$size on {where} takes a non-negative integer")
        return value
    if not isinstance(value, bool):
        raise InvalidFilterError(f"$exists on {where} takes true or false")
    return value


__all__ = [
    "All",
    "Any_",
    "Condition",
    "ElemMatch",
    "InvalidFilterError",
    "Node",
    "Not",
    "parse_filter",
]
