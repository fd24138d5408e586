"""``.map()``: a step that builds its output from declarative sources (Mastra's mapping config).

Each key of the config is one source:

* ``{"value": v}`` — a constant;
* ``{"template": "Order ${inputData.id}: ${stepResults.price.total}"}`` — placeholders over
  ``inputData``, ``initData``, ``state`` and ``stepResults.<id>``; objects are JSON-encoded,
  ``null`` / missing values render empty;
* ``{"initData": True, "path": "a.b"}`` — from the workflow input;
* ``{"step": "id" | step | [ids...], "path": "a.b"}`` — from a step's successful output (with a
  list, the first step that has one); ``path`` ``"."`` is the whole value;
* ``{"fn": callable(ctx)}`` — computed.

A whole mapping may also be one callable ``fn(ctx)``. Paths follow JavaScript property access:
a missing key gives ``undefined`` (the key is left out of the output), and stepping into a
non-object raises ``Invalid path <path> in <source>``.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from runstream.errors import ConfigurationError
from runstream.workflows.errors import WorkflowError
from runstream.workflows.step import Step, StepContext

_UNDEFINED: Any = object()
_PLACEHOLDER = re.compile(r"\$\{([^}]*)\}")
_NAMESPACES = ("inputData", "initData", "state", "stepResults")

MappingConfig = Mapping[str, Mapping[str, Any]] | Callable[[StepContext], Any]


def mapping_step(step_id: str, config: MappingConfig) -> Step:
    """The step a ``.map(config)`` entry runs (input and output unvalidated)."""
    if not callable(config):
        for source in config.values():
            if isinstance(source.get("template"), str):
                validate_template(source["template"])

    async def execute(ctx: StepContext) -> Any:
        if callable(config):
            result = config(ctx)
            return await result if inspect.isawaitable(result) else result
        out: dict[str, object] = {}
        for key, source in config.items():
            value = await _resolve_source(source, ctx)
            if value is not _UNDEFINED:
                out[key] = value
        return out

    return Step(step_id, execute)


async def _resolve_source(source: Mapping[str, Any], ctx: StepContext) -> Any:
    if "value" in source:
        return source["value"]
    if "fn" in source:
        result = source["fn"](ctx)
        return await result if inspect.isawaitable(result) else result
    if isinstance(source.get("template"), str):
        return resolve_template(source["template"], ctx)
    path = source.get("path", ".")
    if source.get("initData"):
        return traverse(ctx.get_init_data(), path, "initData")
    step = source["step"]
    if isinstance(step, Sequence) and not isinstance(step, str):
        ids = [_step_id(s) for s in step]
        chosen = next((i for i in ids if ctx.get_step_result(i) is not None), None)
        root = ctx.get_step_result(chosen) if chosen is not None else None
        return traverse(root, path, "step " + "|".join(ids))
    return traverse(ctx.get_step_result(_step_id(step)), path, f"step {_step_id(step)}")


def _step_id(step: str | Step) -> str:
    return step if isinstance(step, str) else step.id


def traverse(root: Any, path: str, label: str) -> Any:
    """Walk a dotted path like JavaScript property access (see the module docstring)."""
    if path in ("", "."):
        return root
    value = root
    for part in path.split("."):
        if isinstance(value, Mapping):
            value = value.get(part, _UNDEFINED)
        elif isinstance(value, list):
            value = value[int(part)] if part.isdigit() and int(part) < len(value) else _UNDEFINED
        else:
            raise WorkflowError(f"Invalid path {path} in {label}")
    return value


def validate_template(template: str) -> None:
    """Reject malformed placeholders when the workflow is built, not when it runs."""
    for index, match in enumerate(_PLACEHOLDER.finditer(template), 1):
        expr = match.group(1)
        where = f"Template placeholder #{index} (${{{expr}}}) in '{template}'"
        if not expr or expr != expr.strip():
            raise ConfigurationError(f"{where} has empty or whitespace-padded contents.")
        scope, _, rest = expr.partition(".")
        if scope not in _NAMESPACES:
            raise ConfigurationError(
                f'{where} references unknown namespace "{scope}". Use one of: {", ".join(_NAMESPACES)}.'
            )
        if scope == "stepResults" and not rest.partition(".")[0]:
            raise ConfigurationError(f"{where} must be of the form ${{stepResults.<stepId>}}.")


def resolve_template(template: str, ctx: StepContext) -> str:
    counter = iter(range(1, 1 << 30))

    def replace(match: re.Match[str]) -> str:
        expr = match.group(1)
        label = f"Template placeholder #{next(counter)} (${{{expr}}}) in '{template}'"
        scope, _, rest = expr.partition(".")
        if scope == "stepResults":
            step_id, _, sub = rest.partition(".")
            result = ctx.get_step_result(step_id)
            if result is None:
                raise WorkflowError(
                    f'{label} references stepResults.{step_id} but step "{step_id}" has no successful output '
                    "(not run yet, not registered, failed, or produced no output)."
                )
            return _stringify(traverse(result, sub, label))
        roots = {"inputData": ctx.input_data, "initData": ctx.get_init_data(), "state": ctx.state}
        return _stringify(traverse(roots[scope], rest, label))

    return _PLACEHOLDER.sub(replace, template)


def _stringify(value: Any) -> str:
    """JavaScript's ``String(v)`` for primitives, ``JSON.stringify`` for objects."""
    if value is None or value is _UNDEFINED:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping | list):
        return json.dumps(js_numbers(value), separators=(",", ":"), ensure_ascii=False)
    return str(js_numbers(value))


def js_numbers(value: Any) -> Any:
    """Integral floats as ints, as JavaScript prints them (``3.0`` → ``3``)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        return {k: js_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [js_numbers(v) for v in value]
    return value
