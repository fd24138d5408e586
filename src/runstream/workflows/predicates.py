"""Mastra's declarative predicate DSL for branch and loop conditions.

``{"op": "gt", "left": {"path": "inputData.amount"}, "right": {"literal": 1000}}``; paths start
with ``inputData``, ``initData``, ``state`` or ``stepResults.<id>`` (a step's successful output).
A path that does not resolve makes comparisons, ``in`` and ``exists`` false and ``notIn`` /
``notExists`` true. Equality is JavaScript's ``===``: objects and arrays are never equal, and
``true`` is not ``1``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

_MISSING: Any = object()

StepResultGetter = Callable[[str], Any]


def evaluate(
    predicate: Mapping[str, Any], roots: Mapping[str, Any], get_step_result: StepResultGetter
) -> bool:
    """Evaluate ``predicate`` against ``roots`` (``inputData``, ``initData``, ``state``)."""
    op = predicate["op"]
    if op in ("and", "or"):
        results = (evaluate(p, roots, get_step_result) for p in predicate["args"])
        return all(results) if op == "and" else any(results)
    if op == "not":
        return not evaluate(predicate["arg"], roots, get_step_result)
    if op in ("exists", "notExists"):
        found = _resolve(predicate["path"], roots, get_step_result) is not _MISSING
        return found if op == "exists" else not found
    if op in ("truthy", "falsy"):
        value = _operand(predicate["value"], roots, get_step_result)
        truthy = value is not _MISSING and _js_truthy(value)
        return truthy if op == "truthy" else not truthy
    if op in ("in", "notIn"):
        value = _operand(predicate["value"], roots, get_step_result)
        if value is _MISSING:
            return bool(op == "notIn")
        member = any(_strict_equal(candidate, value) for candidate in predicate["set"])
        return member if op == "in" else not member
    left = _operand(predicate["left"], roots, get_step_result)
    right = _operand(predicate["right"], roots, get_step_result)
    if left is _MISSING or right is _MISSING:
        return False
    return _compare(op, left, right)


def _operand(ref: Mapping[str, Any], roots: Mapping[str, Any], get_step_result: StepResultGetter) -> Any:
    if "literal" in ref:
        return ref["literal"]
    return _resolve(ref["path"], roots, get_step_result)


def _resolve(raw: str, roots: Mapping[str, Any], get_step_result: StepResultGetter) -> Any:
    path = raw.strip()
    if path.startswith("${") and path.endswith("}"):
        path = path[2:-1].strip()
    if not path:
        return _MISSING
    scope, _, rest = path.partition(".")
    if scope == "stepResults":
        step_id, _, sub = rest.partition(".")
        result = get_step_result(step_id) if step_id else None
        return _MISSING if result is None else _walk(result, sub)
    if scope not in roots:
        return _MISSING
    return _walk(roots[scope], rest)


def _walk(root: Any, path: str) -> Any:
    if not path:
        return root
    value = root
    for part in path.split("."):
        if isinstance(value, Mapping) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return _MISSING
    return value


def _js_truthy(value: Any) -> bool:
    if isinstance(value, Mapping | list):
        return True
    return bool(value)


def _strict_equal(a: Any, b: Any) -> bool:
    if isinstance(a, Mapping | list) or isinstance(b, Mapping | list):
        return a is b
    numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (a, b))
    return bool(a == b) and (numbers or type(a) is type(b))


def _compare(op: str, left: Any, right: Any) -> bool:
    if op == "eq":
        return _strict_equal(left, right)
    if op == "ne":
        return not _strict_equal(left, right)
    numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (left, right))
    strings = isinstance(left, str) and isinstance(right, str)
    if not (numbers or strings):
        return False
    if op == "lt":
        return bool(left < right)
    if op == "lte":
        return bool(left <= right)
    if op == "gt":
        return bool(left > right)
    return bool(left >= right)
