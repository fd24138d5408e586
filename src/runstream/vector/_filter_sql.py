"""A parsed metadata filter (:mod:`runstream.vector.filter`) as SQL: SQLite's JSON functions
over a ``metadata`` text column, PostgreSQL's ``jsonb`` operators; and as a Python predicate
(:func:`matches`), the meaning both SQL forms are tested against.

Every expression is two-valued (never SQL ``NULL``), so ``NOT`` of it is its complement: a
missing field is typed ``'missing'`` rather than ``NULL``. Paths and values are bound as
parameters, never spliced into the SQL.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from typing import Any

from runstream.storage._query import SqlParams
from runstream.vector.filter import All, Any_, Condition, ElemMatch, Node, Not, Path

_CMP = {"gt": ">", "gte": ">=", "lt": "<", "lte": "<="}


class SqliteParams(SqlParams):
    """SQLite's numbered placeholders (``?1``, ``?2``): a reference, placed in the SQL several
    times, binds its path once."""

    def __init__(self) -> None:
        super().__init__("qmark")

    def add(self, value: Any) -> str:
        self.values.append(value)
        return f"?{len(self.values)}"


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


class _Compiler:
    """The shared walk; the dialects say how a JSON value at a reference is tested."""

    def __init__(self, params: SqlParams) -> None:
        self.params = params
        self._aliases = itertools.count()

    def compile(self, node: Node, ref: str) -> str:
        match node:
            case All(children):
                return "(" + " AND ".join(self.compile(c, ref) for c in children) + ")" if children else "1=1"
            case Any_(children):
                return "(" + " OR ".join(self.compile(c, ref) for c in children) + ")" if children else "1=0"
            case Not(child):
                return f"NOT {self.compile(child, ref)}"
            case ElemMatch(path, where):
                return self.elem_match(self.field(ref, path), where)
            case Condition(path, op, value):
                if op in ("in", "nin", "all") and not value:  # no reference: no unused parameter
                    return "1=1" if op == "nin" else "1=0"
                return self.condition(self.field(ref, path), op, value)
        raise AssertionError(node)

    def condition(self, ref: str, op: str, value: Any) -> str:
        if op == "eq":
            return self.eq(ref, value)
        if op == "ne":
            return f"NOT {self.eq(ref, value)}"
        if op in ("in", "nin"):
            either = "(" + " OR ".join(self.eq(ref, v) for v in value) + ")" if value else "1=0"
            return either if op == "in" else f"NOT {either}"
        if op in _CMP:
            return self.compare(ref, _CMP[op], value)
        if op == "all":
            return self.contains_all(ref, value) if value else "1=0"
        if op == "size":
            return self.size(ref, value)
        return self.exists(ref) if value else f"NOT {self.exists(ref)}"

    def eq(self, ref: str, value: Any) -> str:
        if isinstance(value, dict | list):
            return self.json_equal(ref, value)
        if value is None:
            return self.is_null(ref)
        return f"({self.scalar_equal(ref, value)} OR {self.contains_all(ref, [value])})"

    def alias(self) -> str:
        return f"e{next(self._aliases)}"

    # the dialect's part
    def field(self, ref: str, path: Path) -> str:
        raise NotImplementedError

    def elem_match(self, ref: str, where: Node) -> str:
        raise NotImplementedError

    def json_equal(self, ref: str, value: Any) -> str:
        raise NotImplementedError

    def is_null(self, ref: str) -> str:
        raise NotImplementedError

    def scalar_equal(self, ref: str, value: Any) -> str:
        raise NotImplementedError

    def contains_all(self, ref: str, values: list[Any]) -> str:
        raise NotImplementedError

    def compare(self, ref: str, symbol: str, value: Any) -> str:
        raise NotImplementedError

    def size(self, ref: str, value: int) -> str:
        raise NotImplementedError

    def exists(self, ref: str) -> str:
        raise NotImplementedError


class SqliteFilter(_Compiler):
    """References are JSON path expressions into ``{column}`` (text holding a JSON object)."""

    def __init__(self, params: SqlParams, column: str) -> None:
        super().__init__(params)
        self.column = column

    def where(self, node: Node) -> str:
        return self.compile(node, self.params.add("$"))

    def _type(self, ref: str) -> str:
        return f"COALESCE(json_type({self.column}, {ref}), 'missing')"

    def _value(self, ref: str) -> str:
        return f"json_extract({self.column}, {ref})"

    def field(self, ref: str, path: Path) -> str:
        if not path:
            return ref
        return f"({ref} || {self.params.add(''.join(f'.{chr(34)}{s}{chr(34)}' for s in path))})"

    def elem_match(self, ref: str, where: Node) -> str:
        alias = self.alias()
        inner = self.compile(where, f"({ref} || '[' || {alias}.key || ']')")
        return (
            f"({self._type(ref)} = 'array' AND EXISTS "
            f"(SELECT 1 FROM json_each({self.column}, {ref}) AS {alias} WHERE {inner}))"
        )

    def json_equal(self, ref: str, value: Any) -> str:
        kind = "array" if isinstance(value, list) else "object"
        return f"({self._type(ref)} = '{kind}' AND {self._value(ref)} = json({self.params.add(_compact(value))}))"

    def is_null(self, ref: str) -> str:
        return f"({self._type(ref)} IN ('missing', 'null'))"

    @staticmethod
    def _typed(type_sql: str, value: Any) -> str:
        if isinstance(value, bool):
            return f"{type_sql} = '{'true' if value else 'false'}'"
        if isinstance(value, int | float):
            return f"{type_sql} IN ('integer', 'real')"
        return f"{type_sql} = 'text'"

    def scalar_equal(self, ref: str, value: Any) -> str:
        if isinstance(value, bool):
            return f"({self._typed(self._type(ref), value)})"
        return f"({self._typed(self._type(ref), value)} AND {self._value(ref)} = {self.params.add(value)})"

    def contains_all(self, ref: str, values: list[Any]) -> str:
        tests = []
        for value in values:
            alias = self.alias()
            if value is None:
                test = f"{alias}.type = 'null'"
            elif isinstance(value, bool):
                test = self._typed(f"{alias}.type", value)
            else:
                test = f"{self._typed(f'{alias}.type', value)} AND {alias}.value = {self.params.add(value)}"
            tests.append(f"EXISTS (SELECT 1 FROM json_each({self.column}, {ref}) AS {alias} WHERE {test})")
        return f"({self._type(ref)} = 'array' AND {' AND '.join(tests)})"

    def compare(self, ref: str, symbol: str, value: Any) -> str:
        return f"({self._typed(self._type(ref), value)} AND {self._value(ref)} {symbol} {self.params.add(value)})"

    def size(self, ref: str, value: int) -> str:
        return (
            f"({self._type(ref)} = 'array' AND "
            f"json_array_length({self.column}, {ref}) = {self.params.add(value)})"
        )

    def exists(self, ref: str) -> str:
        return f"({self._type(ref)} <> 'missing')"


class PostgresFilter(_Compiler):
    """References are ``jsonb`` expressions (the column, a path into it, an array element)."""

    def where(self, node: Node, column: str) -> str:
        return self.compile(node, column)

    @staticmethod
    def _type(ref: str) -> str:
        return f"COALESCE(jsonb_typeof({ref}), 'missing')"

    def field(self, ref: str, path: Path) -> str:
        return f"({ref} #> {self.params.add(list(path))}::text[])" if path else ref

    def elem_match(self, ref: str, where: Node) -> str:
        alias = self.alias()
        inner = self.compile(where, f"{alias}.value")
        return (
            f"(CASE WHEN {self._type(ref)} = 'array' THEN EXISTS "
            f"(SELECT 1 FROM jsonb_array_elements({ref}) AS {alias}(value) WHERE {inner}) ELSE false END)"
        )

    def json_equal(self, ref: str, value: Any) -> str:
        return f"(({ref} = {self.params.add(_compact(value))}::jsonb) IS TRUE)"

    def is_null(self, ref: str) -> str:
        return f"({self._type(ref)} IN ('missing', 'null'))"

    def scalar_equal(self, ref: str, value: Any) -> str:
        return f"(({ref} = {self.params.add(_compact(value))}::jsonb) IS TRUE)"

    def contains_all(self, ref: str, values: list[Any]) -> str:
        return (
            f"(CASE WHEN {self._type(ref)} = 'array' "
            f"THEN {ref} @> {self.params.add(_compact(values))}::jsonb ELSE false END)"
        )

    def compare(self, ref: str, symbol: str, value: Any) -> str:
        if isinstance(value, str):
            return (
                f"(CASE WHEN {self._type(ref)} = 'string' "
                f"THEN ({ref} #>> '{{}}') COLLATE \"C\" {symbol} {self.params.add(value)}::text ELSE false END)"
            )
        return (
            f"(CASE WHEN {self._type(ref)} = 'number' "
            f"THEN ({ref})::float8 {symbol} {self.params.add(float(value))}::float8 ELSE false END)"
        )

    def size(self, ref: str, value: int) -> str:
        return (
            f"(CASE WHEN {self._type(ref)} = 'array' "
            f"THEN jsonb_array_length({ref}) = {self.params.add(value)}::int ELSE false END)"
        )

    def exists(self, ref: str) -> str:
        return f"({ref} IS NOT NULL)"


# -- the meaning, in Python ------------------------------------------------------------------------

_MISSING = object()


def _get(value: Any, path: Path) -> Any:
    for segment in path:
        if not isinstance(value, dict) or segment not in value:
            return _MISSING
        value = value[segment]
    return value


def _same_scalar(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    return isinstance(a, str) and isinstance(b, str) and a == b


def _eq(found: Any, value: Any) -> bool:
    if isinstance(value, dict | list):
        return found is not _MISSING and _compact(found) == _compact(value)
    if value is None:
        return found is _MISSING or found is None
    if found is _MISSING:
        return False
    if isinstance(found, list):
        return any(_same_scalar(item, value) for item in found)
    return _same_scalar(found, value)


def _contains(found: Any, value: Any) -> bool:
    if value is None:
        return any(item is None for item in found)
    return any(_same_scalar(item, value) for item in found)


def _compare(found: Any, symbol: str, value: Any) -> bool:
    number = isinstance(value, int | float)
    if number != (isinstance(found, int | float) and not isinstance(found, bool)):
        return False
    if not number and not isinstance(found, str):
        return False
    ops: dict[str, Callable[[Any, Any], bool]] = {
        ">": lambda a, b: a > b,
        ">=": lambda a, b: a >= b,
        "<": lambda a, b: a < b,
        "<=": lambda a, b: a <= b,
    }
    return bool(ops[symbol](found, value))


def matches(node: Node | None, metadata: Any) -> bool:
    """Whether ``metadata`` passes the filter, by the rules the SQL forms implement."""
    match node:
        case None:
            return True
        case All(children):
            return all(matches(c, metadata) for c in children)
        case Any_(children):
            return any(matches(c, metadata) for c in children)
        case Not(child):
            return not matches(child, metadata)
        case ElemMatch(path, where):
            found = _get(metadata, path)
            return isinstance(found, list) and any(matches(where, item) for item in found)
        case Condition(path, op, value):
            return _condition(_get(metadata, path), op, value)
    raise AssertionError(node)


def _condition(found: Any, op: str, value: Any) -> bool:
    if op == "eq":
        return _eq(found, value)
    if op == "ne":
        return not _eq(found, value)
    if op in ("in", "nin"):
        return any(_eq(found, v) for v in value) == (op == "in")
    if op in _CMP:
        return _compare(found, _CMP[op], value)
    if op == "all":
        return bool(value) and isinstance(found, list) and all(_contains(found, v) for v in value)
    if op == "size":
        return isinstance(found, list) and len(found) == int(value)
    return (found is not _MISSING) is bool(value)
