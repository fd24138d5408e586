"""The type budget of ``src/runstream`` (issue 28), counted on the source (AST) and pinned so it
can only go down: ``dict[str, Any]`` written as a type (annotations, aliases, ``cast``), uses of an
alias that is exactly ``dict[str, Any]`` included, and the share of public functions with ``Any``
in their signature (directly or through a package alias that holds ``Any``). ``Any`` is meant to
remain only where a user's own JSON flows: tool arguments, structured output, request context.

The goal is under 150 and under 10%, ``Any`` left only where a user's own JSON flows (tool
arguments, structured output, request context values). The ceilings below are the figures reached
so far: lower them with every change that removes some, never raise them. An alias of ``Any``
counts as ``Any``.

Run as a script to print the figures: ``python tests/test_type_budget.py [--files] [--functions]``.
"""

from __future__ import annotations

import ast
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "runstream"

MAX_DICT_STR_ANY = 69
MAX_PUBLIC_ANY_SHARE = 0.076


def is_any(node: ast.expr, any_names: frozenset[str] = frozenset({"Any"})) -> bool:
    return (isinstance(node, ast.Name) and node.id in any_names) or (
        isinstance(node, ast.Attribute) and node.attr == "Any"
    )


def is_dict_str_any(node: ast.AST, any_names: frozenset[str] = frozenset({"Any"})) -> bool:
    if not isinstance(node, ast.Subscript) or not isinstance(node.slice, ast.Tuple):
        return False
    base, elts = node.value, node.slice.elts
    named_dict = (isinstance(base, ast.Name) and base.id in ("dict", "Dict")) or (
        isinstance(base, ast.Attribute) and base.attr == "Dict"
    )
    return (
        named_dict
        and len(elts) == 2
        and isinstance(elts[0], ast.Name)
        and elts[0].id == "str"
        and is_any(elts[1], any_names)
    )


def type_expressions(tree: ast.Module) -> list[ast.expr]:
    """Every expression the source uses as a type: annotations, alias values, ``cast`` targets,
    TypeVar bounds; quoted annotations are parsed."""
    found: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            every = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
            found += [a.annotation for a in every if a is not None and a.annotation is not None]
            if node.returns is not None:
                found.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            found.append(node.annotation)
            if node.value is not None and _names(node.annotation) & {"TypeAlias"}:
                found.append(node.value)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args:
            if node.func.id == "cast":
                found.append(node.args[0])
            elif node.func.id == "TypeVar":
                found += [k.value for k in node.keywords if k.arg == "bound"]
    for module_level in tree.body:
        if alias := _alias_value(module_level):
            found.append(alias[1])
    return [_unquote(expr) for expr in found]


def _unquote(expr: ast.expr) -> ast.expr:
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        try:
            return ast.parse(expr.value, mode="eval").body
        except SyntaxError:
            return expr
    return expr


def _alias_value(statement: ast.stmt) -> tuple[str, ast.expr] | None:
    """``Name = <type>`` at module level (a subscript, a ``|`` union or ``Any``)."""
    if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
        target, value = statement.targets[0], statement.value
        is_type = isinstance(value, (ast.Subscript, ast.BinOp)) or is_any(value)
        if isinstance(target, ast.Name) and is_type:
            return target.id, value
    if (
        isinstance(statement, ast.AnnAssign)
        and statement.value is not None
        and isinstance(statement.target, ast.Name)
        and "TypeAlias" in _names(statement.annotation)
    ):
        return statement.target.id, statement.value
    return None


def _names(expr: ast.AST) -> set[str]:
    return {
        n.id if isinstance(n, ast.Name) else n.attr
        for n in ast.walk(expr)
        if isinstance(n, (ast.Name, ast.Attribute))
    }


@dataclass
class Budget:
    dict_str_any: Counter[str] = field(default_factory=Counter)
    public_functions: int = 0
    public_with_any: list[str] = field(default_factory=list)

    @property
    def dict_str_any_total(self) -> int:
        return sum(self.dict_str_any.values())

    @property
    def public_any_share(self) -> float:
        return len(self.public_with_any) / max(self.public_functions, 1)


def _modules() -> list[tuple[str, ast.Module]]:
    return [
        (str(path.relative_to(PACKAGE)), ast.parse(path.read_text(), str(path)))
        for path in sorted(PACKAGE.rglob("*.py"))
    ]


def _aliases(modules: list[tuple[str, ast.Module]]) -> tuple[frozenset[str], set[str], set[str]]:
    """(``Any`` and its aliases, aliases that are exactly ``dict[str, Any]``, aliases whose value
    holds ``Any``), by name, package-wide and resolved through each other."""
    values: dict[str, list[ast.expr]] = {}
    for _, tree in modules:
        for statement in tree.body:
            if alias := _alias_value(statement):
                values.setdefault(alias[0], []).append(_unquote(alias[1]))
    any_names = frozenset({"Any", *(name for name, exprs in values.items() if any(is_any(e) for e in exprs))})
    exact = {name for name, exprs in values.items() if any(is_dict_str_any(e, any_names) for e in exprs)}
    holding: set[str] = {"Any"}
    grew = True
    while grew:
        grew = False
        for name, exprs in values.items():
            if name not in holding and any(_names(e) & holding for e in exprs):
                holding.add(name)
                grew = True
    return any_names, exact, holding


def _public_functions(path: str, tree: ast.Module) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    if any(part.startswith("_") and part != "__init__.py" for part in Path(path).parts):
        return []
    functions: list[ast.FunctionDef | ast.AsyncFunctionDef] = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            functions.append(node)
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            functions += [
                member for member in node.body if isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef))
            ]
    return [function for function in functions if not function.name.startswith("_")]


def _signature(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.expr]:
    args = function.args
    every = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
    annotations = [a.annotation for a in every if a is not None and a.annotation is not None]
    return [_unquote(expr) for expr in [*annotations, *([function.returns] if function.returns else [])]]


def measure() -> Budget:
    modules = _modules()
    any_names, exact, holding = _aliases(modules)
    budget = Budget()
    for path, tree in modules:
        for expr in type_expressions(tree):
            for node in ast.walk(expr):
                if is_dict_str_any(node, any_names) or (isinstance(node, ast.Name) and node.id in exact):
                    budget.dict_str_any[path] += 1
        for function in _public_functions(path, tree):
            budget.public_functions += 1
            if any(_names(expr) & holding for expr in _signature(function)):
                budget.public_with_any.append(f"{path}:{function.lineno} {function.name}")
    return budget


def test_dict_str_any_stays_under_budget() -> None:
    budget = measure()
    assert budget.dict_str_any_total <= MAX_DICT_STR_ANY, budget.dict_str_any.most_common(15)


def test_any_in_public_signatures_stays_under_budget() -> None:
    budget = measure()
    assert budget.public_any_share <= MAX_PUBLIC_ANY_SHARE, budget.public_with_any


def test_the_counter_sees_aliases_and_quoted_annotations() -> None:
    tree = ast.parse(
        "X = dict[str, Any]\ndef f(a: 'dict[str, Any]') -> X: ...\ny = cast(dict[str, Any], 1)\n"
    )
    assert sum(is_dict_str_any(n) for e in type_expressions(tree) for n in ast.walk(e)) == 3
    assert is_dict_str_any(ast.parse("dict[str, J]", mode="eval").body, frozenset({"Any", "J"}))


if __name__ == "__main__":
    result = measure()
    print(f"dict[str, Any]: {result.dict_str_any_total}")
    print(
        f"public functions with Any: {len(result.public_with_any)}/{result.public_functions}"
        f" = {result.public_any_share:.1%}"
    )
    if "--files" in sys.argv:
        for name, count in result.dict_str_any.most_common():
            print(f"{count:5d} {name}")
    if "--functions" in sys.argv:
        print("\n".join(result.public_with_any))
