"""The layering of ``src/runstream`` as docs/architecture.md states it, checked on the source (AST):
which way imports run, no import cycles (type-only imports count), and the size limits."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"
PACKAGE = SRC / "runstream"

MAX_FUNCTION_LINES = 100
MAX_MODULE_LINES = 800

LAYERS: tuple[tuple[str, ...], ...] = (
    # the core: errors, chunks, abort, ids, config reading, schemas, the values every layer shares
    (
        "runstream.errors",
        "runstream._payloads",
        "runstream._json",
        "runstream._clock",
        "runstream._uninterrupted",
        "runstream._ids",
        "runstream._tracing",
        "runstream._telemetry",
        "runstream._config_mapping",
        "runstream._schema",
        "runstream.abort",
        "runstream.request_context",
        "runstream.stop_conditions",
        "runstream.delegation",
        "runstream.api_routes",
        "runstream.chunks",
        "runstream.processors",
    ),
    # providers and persistence, and what speaks to them: tools, structured output, message formats
    (
        "runstream.models",
        "runstream.storage",
        "runstream.vector",
        "runstream.observability",
        "runstream.testing",
        "runstream.tools",
        "runstream.structured",
        "runstream._messages",
    ),
    ("runstream.memory",),
    # one run: its data, the loop, its output (``runstream.output`` is its public path); checks on runs
    (
        "runstream.run",
        "runstream.output",
        "runstream.scoring",
        "runstream.background_scoring",
        "runstream.goals",
        "runstream.console",
    ),
    ("runstream.tasks",),
    ("runstream.agent", "runstream.trust", "runstream.agui"),
    ("runstream.workflows", "runstream.durable"),
    ("runstream.runtime", "runstream._worker_cli", "runstream.conformance", "runstream.demo"),
    ("runstream.server", "runstream.mcp", "runstream.cli", "runstream.__main__"),
)
"""The packages (and root modules) from the bottom up: each imports only its own layer and those
below it (core → models, storage → memory → run → tasks → agent → workflows, durable → runtime →
server). A new package or root module joins a layer here, or ``test_every_module_has_a_layer`` fails."""

FORBIDDEN: dict[str, tuple[str, ...]] = {
    # within a layer: module (or package prefix) -> what it must never import (module or package prefixes)
    "runstream.errors": ("runstream",),
    "runstream._payloads": ("runstream",),
    "runstream._json": ("runstream",),
    "runstream._clock": ("runstream",),
    "runstream.models": ("runstream.chunks",),
    # the run's data sits below its algorithm; the output drives a run without knowing the loop
    "runstream.run._run_state": (
        "runstream.run._loop",
        "runstream.run._model_step",
        "runstream.run._tool_step",
    ),
    "runstream.run._run_snapshot": (
        "runstream.run._loop",
        "runstream.run._model_step",
        "runstream.run._tool_step",
    ),
    "runstream.run.output": ("runstream.run._loop", "runstream.run._model_step", "runstream.run._tool_step"),
    "runstream.run._model_step": ("runstream.run._loop",),
    "runstream.run._tool_step": ("runstream.run._loop",),
    "runstream.run._step_results": ("runstream.run._loop",),
}
ALLOWED: dict[str, tuple[str, ...]] = {
    # exceptions to FORBIDDEN: the chunk payloads' JSON fields use the JSON types (a leaf)
    "runstream._payloads": ("runstream._json",),
}
SERVER_USERS = ("runstream.server", "runstream.cli", "runstream.__main__", "runstream.mcp.cli")
"""The server's own package and the commands that start a server."""


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def imported(name: str) -> set[str]:
    """The runstream modules ``name`` imports anywhere (type-only and function-local included)."""
    known = modules()
    found: set[str] = set()
    for node in ast.walk(ast.parse(known[name].read_text())):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # ``from package import module`` imports the module; ``from module import name`` the module.
            targets = [f"{node.module}.{alias.name}" for alias in node.names]
        for target in targets:
            while target not in known and "." in target:
                target = target.rsplit(".", 1)[0]
            # The root package is everyone's parent (importing any module runs it first).
            if target in known and target not in (name, "runstream"):
                found.add(target)
    return found


def within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def unit(name: str) -> str:
    """The package (``runstream.tasks``) or root module (``runstream.chunks``) a module belongs to."""
    return ".".join(name.split(".")[:2])


def layer_of(name: str) -> int:
    return next(index for index, layer in enumerate(LAYERS) if unit(name) in layer)


def test_every_module_has_a_layer() -> None:
    placed = [name for layer in LAYERS for name in layer]
    assert len(placed) == len(set(placed)), "a package sits in one layer"
    unplaced = sorted({unit(name) for name in modules() if name != "runstream"} - set(placed))
    assert unplaced == [], "give each a place in LAYERS (and docs/architecture.md)"


def test_packages_import_only_their_layer_and_below() -> None:
    wrong = [
        f"{name} imports {target}"
        for name in modules()
        if name != "runstream"
        for target in sorted(imported(name))
        if layer_of(target) > layer_of(name)
    ]
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_imports_run_the_documented_way(layer: str) -> None:
    wrong = [
        f"{name} imports {target}"
        for name in modules()
        if within(name, layer)
        for target in sorted(imported(name))
        if any(within(target, banned) for banned in FORBIDDEN[layer])
        and not within(target, layer)
        and target not in ALLOWED.get(layer, ())
    ]
    assert not wrong, "\n".join(wrong)


def test_the_core_never_imports_the_server() -> None:
    wrong = [
        f"{name} imports {target}"
        for name in modules()
        if not any(within(name, user) for user in SERVER_USERS)
        for target in imported(name)
        if within(target, "runstream.server")
    ]
    assert not wrong, "\n".join(wrong)


def strongly_connected(graph: dict[str, set[str]]) -> Iterator[set[str]]:
    """Tarjan's algorithm: the graph's cycles (components of more than one node)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()

    def visit(node: str) -> Iterator[set[str]]:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                yield from visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                yield component

    for node in sorted(graph):
        if node not in index:
            yield from visit(node)


def test_no_import_cycles() -> None:
    graph = {name: imported(name) for name in modules()}
    cycles = list(strongly_connected(graph))
    assert not cycles, "\n".join(" <-> ".join(sorted(c)) for c in cycles)


def test_no_import_cycles_between_packages() -> None:
    """Counting a package (``runstream.tasks``, ``runstream.workflows`` ...) as one node."""

    graph: dict[str, set[str]] = {}
    for name in modules():
        graph.setdefault(unit(name), set()).update(unit(t) for t in imported(name) if unit(t) != unit(name))
    cycles = list(strongly_connected(graph))
    assert not cycles, "\n".join(" <-> ".join(sorted(c)) for c in cycles)


def test_functions_and_modules_stay_short() -> None:
    too_long = []
    for name, path in modules().items():
        source = path.read_text()
        if source.count("\n") > MAX_MODULE_LINES:
            too_long.append(f"module {name}: {source.count(chr(10))} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    too_long.append(f"{name}.{node.name}: {length} lines")
    assert not too_long, "\n".join(too_long)


def test_the_map_names_every_module() -> None:
    """docs/architecture.md names every module of ``src/runstream`` in backticks: by its path
    (``server/sse.py``), its file name in its package's line (``base.py``), or a package by
    ``name/`` for its ``__init__.py``. A new module without a line fails here."""

    doc = (SRC.parent / "docs" / "architecture.md").read_text()
    named = set(re.findall(r"`([^`]+)`", doc))
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        if path.name == "__init__.py":
            names = {f"{relative.parent.as_posix()}/" if relative.parent.parts else "runstream"}
        else:
            names = {relative.as_posix(), path.name}
        if not names & named:
            missing.append(relative.as_posix())
    assert missing == [], "give each a line in docs/architecture.md"
