"""The errors runstream raises about a caller's input or setup are classes of its one tree
(``runstream.errors``), each also the builtin it was before: one test per module group. Every
exception class of the source is found by AST and must be in the tree (or listed, with why, in
``NOT_ERRORS``), and no ``raise ValueError(``/``raise TypeError(`` is left outside a short list."""

from __future__ import annotations

import ast
import asyncio
import builtins
import importlib
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from runstream import Agent, Memory, MemoryScope, Runstream, StructuredOutput, Tool, tool
from runstream._config_mapping import ConfigKeyError
from runstream.abort import AbortController
from runstream.agent.run_options import InvalidOptionError
from runstream.agent.until_idle import IdleOptions
from runstream.chunks import DataChunk
from runstream.errors import (
    ConfigurationError,
    ConfigurationTypeError,
    InvalidInputError,
    InvalidTypeError,
    NotFoundError,
    RunstreamError,
    StateConflictError,
)
from runstream.memory import MissingStorageError, WorkingMemory, memory_options
from runstream.models.fallback import FallbackModel
from runstream.models.registry import resolve_model
from runstream.runtime import AgentNotFoundError
from runstream.tasks import (
    AdoptionError,
    AgentBackgroundConfig,
    BackgroundTaskAdoption,
    BackgroundTaskOperation,
)
from runstream.tasks.config import TaskStateError
from runstream.testing import ScriptedModel
from runstream.workflows import Workflow
from runstream.workflows.mapping import validate_template


def raised(error: type[Exception], message: str, call: Callable[[], Any]) -> Exception:
    """What ``call`` raised: exactly ``error``, with ``message`` in its text."""
    with pytest.raises(error, match=re.escape(message)) as info:
        call()
    assert type(info.value) is error, type(info.value)
    return info.value


PACKAGE = Path(__file__).resolve().parent.parent / "src" / "runstream"

NOT_ERRORS = {
    # Signals that end a piece of user code early; runstream catches each where it is raised.
    "runstream.tools.ToolSuspended": "ToolContext.suspend() ends the tool; the tool step catches it",
    "runstream.workflows.step.StepSuspended": "StepContext.suspend(); a BaseException so step code "
    "cannot swallow it",
    "runstream.workflows.step.StepBailed": "StepContext.bail(); a BaseException for the same reason",
    # Stand-ins for errors that are not runstream's own: in the tree, the server would show them
    # to callers as runstream's words instead of hiding them as a tool's or a vendor's own error.
    "runstream.testing._playback.ScriptedError": "plays a provider's or a tool's own error in scripted runs",
    "runstream.conformance.behavior.ExecutionAborted": "plays the Error a scenario's tool throws on abort",
}
"""Exception classes of ``src/runstream`` outside the tree, each with its reason (warning
categories are not errors and are left out without a line here)."""

BARE_RAISES_ALLOWED = {
    ("runstream.chunks", "_default"): "the JSON encoders' default hook: json and orjson expect a "
    "TypeError for a value they cannot encode",
}
"""``(module, function)`` pairs that may ``raise ValueError(...)``/``raise TypeError(...)``: a
protocol asks for the builtin itself."""


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _sources() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        yield _module_name(path), ast.parse(path.read_text(), str(path))


def _exception_classes() -> dict[str, type[BaseException]]:
    """Every exception class defined in the source, by qualified name: found by AST, then
    imported (only modules that define a class are imported: ``__main__`` modules run)."""
    found: dict[str, type[BaseException]] = {}
    for module, tree in _sources():
        classes = [node.name for node in tree.body if isinstance(node, ast.ClassDef) and node.bases]
        if not classes:
            continue
        namespace = vars(importlib.import_module(module))
        for name in classes:
            value = namespace[name]
            if issubclass(value, BaseException) and not issubclass(value, Warning):
                found[f"{module}.{name}"] = value
    return found


def test_every_exception_class_in_the_source_is_a_runstream_error() -> None:
    found = _exception_classes()
    assert len(found) > 50  # the enumeration sees the whole package, not a few modules
    outside = {name for name, error in found.items() if not issubclass(error, RunstreamError)}
    assert outside == set(NOT_ERRORS), "join runstream.errors' tree, or say in NOT_ERRORS why not"
    assert not any(issubclass(found[name], RunstreamError) for name in NOT_ERRORS)


def test_no_exception_class_hides_inside_a_function_or_class() -> None:
    """Nested classes cannot be imported by the test above, so none may be an exception."""
    exception_names = set(name.rsplit(".", 1)[1] for name in _exception_classes())
    exception_names |= {
        name
        for name, value in vars(builtins).items()
        if isinstance(value, type) and issubclass(value, BaseException)
    }
    nested: list[str] = []
    for module, tree in _sources():
        top = {id(node) for node in tree.body}
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and id(node) not in top:
                bases = {ast.unparse(base).rsplit(".", 1)[-1] for base in node.bases}
                if bases & exception_names:
                    nested.append(f"{module}:{node.lineno} {node.name}")
    assert nested == []


def _bare_raises(module: str, tree: ast.Module) -> Iterator[tuple[tuple[str, str], int]]:
    def visit(node: ast.AST, function: str) -> Iterator[tuple[tuple[str, str], int]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                yield from visit(child, child.name)
                continue
            if isinstance(child, ast.Raise) and child.exc is not None:
                raised = child.exc.func if isinstance(child.exc, ast.Call) else child.exc
                if isinstance(raised, ast.Name) and raised.id in ("ValueError", "TypeError"):
                    yield (module, function), child.lineno
            yield from visit(child, function)

    yield from visit(tree, "<module>")


def test_no_bare_value_or_type_error_is_raised_outside_the_allow_list() -> None:
    seen: set[tuple[str, str]] = set()
    bare: list[str] = []
    for module, tree in _sources():
        for where, line in _bare_raises(module, tree):
            seen.add(where)
            if where not in BARE_RAISES_ALLOWED:
                bare.append(f"{module}:{line} in {where[1]}")
    assert bare == [], "raise a class of runstream.errors (InvalidInputError, ConfigurationError, ...)"
    assert set(BARE_RAISES_ALLOWED) <= seen, "an allowed raise is gone: drop its line"


def test_the_errors_that_joined_the_tree_answer_as_before() -> None:
    from runstream.chunks import error_to_wire
    from runstream.errors import ToolError
    from runstream.mcp import MCPToolError
    from runstream.server.errors import ApiError, status_of
    from runstream.server.wire import public_error
    from runstream.tools import ToolExecutionError

    assert status_of(ApiError(413, "too large")) == 413 and status_of(ApiError(422, "no")) == 422
    # An MCP server's text stays hidden from HTTP callers, as any tool's own exception is.
    relayed = ToolExecutionError.wrapping(MCPToolError("MCP server 'fs': EACCES /etc/shadow"))
    assert public_error(relayed, "read") == {"message": "Tool read failed", "name": "Error"}
    own = ToolExecutionError.wrapping(ToolError("no such city"))
    assert public_error(own, "lookup") is own
    assert error_to_wire(MCPToolError("x")) == {"message": "x", "name": "MCPToolError"}  # as before


def test_the_new_classes_keep_the_builtins_callers_caught() -> None:
    from runstream.agent import RunNotFoundError
    from runstream.agent.until_idle import ContinuationLimitError
    from runstream.durable.log import FencedOffError
    from runstream.mcp.client import MCPConnectionError
    from runstream.models.fallback import FallbackExhaustedError
    from runstream.structured import StructuredOutputError

    assert issubclass(FencedOffError, StateConflictError) and issubclass(FencedOffError, RuntimeError)
    assert issubclass(ContinuationLimitError, RuntimeError) and issubclass(
        MCPConnectionError, ConnectionError
    )
    assert issubclass(FallbackExhaustedError, RunstreamError)
    assert issubclass(StructuredOutputError, ValueError) and issubclass(RunNotFoundError, LookupError)
    from runstream._config_mapping import ConfigKeyError
    from runstream.server.resumable import RunAlreadyStreamingError

    assert issubclass(ConfigKeyError, InvalidInputError) and issubclass(ConfigKeyError, ValueError)
    assert issubclass(InvalidOptionError, InvalidInputError) and issubclass(InvalidOptionError, TypeError)
    assert issubclass(RunAlreadyStreamingError, StateConflictError)
    assert issubclass(TaskStateError, StateConflictError)
    assert issubclass(InvalidTypeError, InvalidInputError) and issubclass(InvalidTypeError, TypeError)
    assert issubclass(ConfigurationError, InvalidInputError) and issubclass(ConfigurationError, ValueError)
    assert issubclass(ConfigurationTypeError, ConfigurationError) and issubclass(
        ConfigurationTypeError, TypeError
    )
    assert issubclass(ConfigurationTypeError, InvalidTypeError)
    assert issubclass(MissingStorageError, ConfigurationError) and issubclass(
        MissingStorageError, RuntimeError
    )
    assert issubclass(AdoptionError, TaskStateError) and issubclass(AdoptionError, RuntimeError)
    assert issubclass(AgentNotFoundError, NotFoundError) and issubclass(AgentNotFoundError, KeyError)


async def test_agents_tools_and_run_options() -> None:
    model = ScriptedModel.text("hi")
    error = raised(
        ConfigurationTypeError,
        "model must be a model string such as 'openai/gpt-4.1'",
        lambda: Agent("a", model=42),
    )  # type: ignore[arg-type]
    assert isinstance(error, TypeError)
    raised(
        ConfigurationError,
        "max_retries needs a model or a model list",
        lambda: Agent("a", model=lambda rc: model, max_retries=2),
    )

    async def lookup(city) -> str:  # type: ignore[no-untyped-def]
        return str(city)

    raised(ConfigurationTypeError, "tool lookup: parameter 'city' has no type hint", lambda: tool(lookup))
    raised(ConfigurationError, "a tool needs a name", lambda: Tool("", lambda args, ctx: None))
    raised(InvalidTypeError, "memory must be a mapping, not int", lambda: memory_options(5, where="memory"))  # type: ignore[arg-type]
    raised(
        InvalidTypeError,
        "structured_output must be a pydantic model or a JSON schema, not int",
        lambda: StructuredOutput.coerce(5),
    )
    raised(
        InvalidInputError,
        "custom chunk type must start with 'data-', got 'progress'",
        lambda: DataChunk("progress", 1),
    )

    agent = Agent("plain", model=model)
    with pytest.raises(InvalidOptionError, match="tool_choice must be 'auto', 'none', 'required' or a tool"):
        await agent.stream("hi", tool_choice="sometimes")  # type: ignore[arg-type]
    # A check's tree error about a run option reaches the caller as the one InvalidOptionError,
    # a TypeError and a ValueError, as before the tree.
    for bad in (
        {"structured_output": 5},
        {"until_idle": {"bogus": 1}},
        {"memory": {"thread": "t1", "resource": "u1", "options": {"lastMessages": -1}}},
    ):
        with pytest.raises(InvalidOptionError) as info:
            await agent.stream("hi", **bad)  # type: ignore[arg-type]
        assert isinstance(info.value, TypeError) and isinstance(info.value, ValueError)
    with pytest.raises(ConfigurationError, match="agent 'plain' has no memory: pass Agent"):
        await agent.stream("hi", memory={"thread": "t1", "resource": "u1"})
    dynamic = Agent("dynamic", model=lambda rc: "openai/gpt-4.1")  # type: ignore[arg-type,return-value]
    with pytest.raises(
        ConfigurationTypeError, match="agent 'dynamic': the model function returned str, not a model"
    ):
        await dynamic.stream("hi")

    raised(
        ConfigurationError,
        "an agent with id 'plain' is already registered",
        lambda: Runstream(agents=[agent, agent]),
    )
    missing = raised(
        AgentNotFoundError,
        "no agent 'ghost'; known: plain",
        lambda: Runstream(agents=[agent]).get_agent("ghost"),
    )
    assert str(missing) == "no agent 'ghost'; known: plain"  # not quoted as a KeyError's key would be


async def test_memory() -> None:
    raised(InvalidInputError, "memory needs a resource id", lambda: MemoryScope.coerce({"thread": "t1"}))
    raised(
        InvalidInputError,
        "workingMemory takes a template or a schema, not both",
        lambda: WorkingMemory(template="# Notes", schema={"type": "object"}),
    )
    with pytest.raises(
        ConfigurationError, match="Working memory is not enabled for this memory instance"
    ) as info:
        await Memory().set_working_memory("t1", "u1", "notes")
    assert type(info.value) is ConfigurationError
    with pytest.raises(MissingStorageError, match="this memory has no storage: pass Memory"):
        await Memory(working_memory=WorkingMemory()).get_working_memory("t1", "u1")


def test_models(monkeypatch: pytest.MonkeyPatch) -> None:
    raised(ConfigurationError, "unknown model provider 'nope' in 'nope/x'", lambda: resolve_model("nope/x"))
    raised(
        ConfigurationError,
        "model string 'gpt-4.1' is not '<provider>/<model>'",
        lambda: resolve_model("gpt-4.1"),
    )
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    raised(
        ConfigurationError, "OPENAI_API_KEY is not set: export it", lambda: resolve_model("openai/gpt-4.1")
    )
    raised(ConfigurationError, "a model list needs at least one enabled model", lambda: FallbackModel([]))
    raised(
        ConfigurationTypeError,
        "model[0].model must be a model, got int",
        lambda: FallbackModel([{"model": 5}]),
    )  # type: ignore[list-item]


async def test_background_tasks() -> None:
    raised(ConfigKeyError, "until_idle: unknown option 'bogus'", lambda: IdleOptions.coerce({"bogus": 1}, 0))
    raised(
        InvalidInputError,
        "max_idle_ms must be a positive finite number",
        lambda: IdleOptions.coerce({"maxIdleMs": -1}, 0),
    )
    raised(
        ConfigurationTypeError,
        "background_tasks.tools must be 'all' or a mapping",
        lambda: AgentBackgroundConfig.coerce({"tools": 5}),
    )

    adoption = BackgroundTaskAdoption("task-1", "deferred", AbortController().signal)
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    done.set_result(None)
    adoption.adopt(BackgroundTaskOperation(completion=done))
    error = raised(
        AdoptionError,
        "A background tool may adopt only one operation",
        lambda: adoption.adopt(BackgroundTaskOperation(completion=done)),
    )
    assert isinstance(error, StateConflictError) and isinstance(error, RuntimeError)


def test_workflows() -> None:
    raised(ConfigurationError, "a workflow needs an id", lambda: Workflow(""))
    raised(ConfigurationError, 'references unknown namespace "nope"', lambda: validate_template("${nope.x}"))


def test_server_durable_mcp_and_testing() -> None:
    from runstream.durable.log import RunLog
    from runstream.mcp.client import coerce_server
    from runstream.server import create_app
    from runstream.server.auth import bearer_auth
    from runstream.server.cors import cors_middleware
    from runstream.server.redis_replay import RedisReplayLog

    raised(
        ConfigurationError,
        "prefix must start with '/' and not end with one, got 'api'",
        lambda: create_app(Runstream(), prefix="api"),
    )
    raised(ConfigurationError, "bearer_auth needs a non-empty token", lambda: bearer_auth(""))
    raised(
        ConfigurationError,
        "a CORS origin is a scheme://host[:port] without a trailing slash",
        lambda: cors_middleware(["http://localhost:3000/"]),
    )
    raised(
        ConfigurationError,
        "max_events, max_run_bytes, max_total_bytes, ttl_s and live_ttl_s must be at least 1",
        lambda: RedisReplayLog("redis://localhost", max_events=0),
    )
    raised(
        ConfigurationError,
        "lease_ttl_s must be at least 0.1",
        lambda: RedisReplayLog("redis://localhost", lease_ttl_s=0),
    )
    raised(
        ConfigurationError,
        "ttl_s and live_ttl_s must be at least 1",
        lambda: RunLog("redis://localhost", ttl_s=0),
    )
    raised(
        ConfigurationError, "an MCP server needs a 'command' (stdio) or a 'url'", lambda: coerce_server({})
    )
    raised(ConfigurationError, "ScriptedModel needs at least one call", lambda: ScriptedModel(calls=[]))
    assert issubclass(ConfigurationError, RunstreamError)


def test_durable_runs_used_before_they_start() -> None:
    pytest.importorskip("temporalio")  # (the durable extra; the dev extra installs it)
    from runstream.durable.runner import NotStartedError, TemporalRuns

    runs = TemporalRuns("redis://127.0.0.1:6379")
    error = raised(NotStartedError, "TemporalRuns is not started", lambda: runs.client)
    assert isinstance(error, StateConflictError) and isinstance(error, RuntimeError)
