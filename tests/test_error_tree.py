"""The errors runstream raises about a caller's input or setup are classes of its one tree
(``runstream.errors``), each also the builtin it was before: one test per module group."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from typing import Any

import pytest

from runstream import Agent, Memory, MemoryScope, Runstream, StructuredOutput, Tool, tool
from runstream._config_mapping import read_config
from runstream.abort import AbortController
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
from runstream.memory import MissingStorageError, WorkingMemory
from runstream.models.fallback import FallbackModel
from runstream.models.registry import resolve_model
from runstream.run_options import InvalidOptionError
from runstream.runtime import AgentNotFoundError
from runstream.tasks import (
    AdoptionError,
    AgentBackgroundConfig,
    BackgroundTaskAdoption,
    BackgroundTaskOperation,
)
from runstream.tasks.config import TaskStateError
from runstream.tasks.until_idle import IdleOptions
from runstream.testing import ScriptedModel
from runstream.workflows import Workflow
from runstream.workflows.mapping import validate_template


def raised(error: type[Exception], message: str, call: Callable[[], Any]) -> Exception:
    """What ``call`` raised: exactly ``error``, with ``message`` in its text."""
    with pytest.raises(error, match=re.escape(message)) as info:
        call()
    assert type(info.value) is error, type(info.value)
    return info.value


def test_the_new_classes_keep_the_builtins_callers_caught() -> None:
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
    raised(InvalidTypeError, "memory must be a mapping, not int", lambda: read_config(5, {}, where="memory"))  # type: ignore[arg-type]
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
    raised(
        InvalidInputError, "unknown until_idle option(s): bogus", lambda: IdleOptions.coerce({"bogus": 1}, 0)
    )
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
