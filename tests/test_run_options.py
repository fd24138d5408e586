"""A run's options are one frozen value (``RunOptions``): read once from ``stream()``'s keywords,
saved with a suspended run and read back whole, an unknown option an error naming it."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, get_type_hints

import pytest
from pydantic import PlainValidator, SkipValidation

from runstream import Agent, tool
from runstream._config_mapping import ConfigKeyError, camel
from runstream.abort import AbortController
from runstream.agent.run_options import (
    OPTIONS_VERSION,
    InvalidOptionError,
    RunOptions,
    RunOptionsJson,
    StreamOptions,
    client_tool,
)
from runstream.memory import Memory, MemoryScope
from runstream.models.base import ModelSettings
from runstream.run._run_snapshot import UnsupportedRunStateError
from runstream.runtime import Runstream
from runstream.scoring import Scorer
from runstream.stop_conditions import step_count_is
from runstream.storage import SqliteStorage
from runstream.testing import RecordedCall, ScriptedModel

USAGE = {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2}
ANSWER = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
ASK_USER = client_tool("ask_user", description="Ask the user", input_schema={"type": "object"})


@tool(require_approval=True)
async def delete_file(path: str) -> dict[str, str]:
    """Delete a file."""
    return {"deleted": path}


@tool
async def echo(text: str) -> dict[str, str]:
    """Echo a text."""
    return {"echo": text}


EVERY_OPTION: StreamOptions = {
    "max_steps": 4,
    "tool_choice": "auto",
    "include_raw_chunks": True,
    "structured_output": {"schema": ANSWER, "errorStrategy": "fallback", "fallbackValue": {"answer": "?"}},
    "max_processor_retries": 2,
    "model_settings": ModelSettings(
        temperature=0.25, stop_sequences=["END"], provider_options={"x": {"y": 1}}
    ),
    "memory": {"thread": "t1", "resource": "u1"},
    "disable_background_tasks": True,
    "context": [{"role": "user", "content": "Some context."}],
    "request_context": {"tenant": "acme"},
    "instructions": "Per-call instructions.",
    "system": ["An extra system message."],
    "active_tools": ["delete_file", "ask_user"],
    "require_tool_approval": True,
    "tool_call_concurrency": {"limit": 2, "strategy": "called"},
    "client_tools": [ASK_USER],
}
"""Every option that is data (the others are code, which a restored run takes from its agent)."""


def test_stream_options_and_run_options_name_the_same_options() -> None:
    fields = {field.name for field in dataclasses.fields(RunOptions)}
    assert fields - set(StreamOptions.__annotations__) == {
        "tool_call_strategy"
    }  # set by tool_call_concurrency
    assert set(StreamOptions.__annotations__) <= fields


def test_run_options_are_frozen() -> None:
    options = RunOptions.of({"max_steps": 3})
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.max_steps = 4  # type: ignore[misc]
    assert dataclasses.replace(options, max_steps=4).max_steps == 4 and options.max_steps == 3


def test_of_builds_the_value_the_dataclass_builds() -> None:
    """``of`` fills the instance directly (a frozen dataclass's ``__init__`` is slow): the value is
    the one the constructor gives, and each run gets its own request context."""
    assert RunOptions.of({}) == RunOptions()
    for given in (EVERY_OPTION, {"max_steps": 2, "on_finish": print}):
        options = RunOptions.of(given)
        assert options == RunOptions(
            **{f.name: getattr(options, f.name) for f in dataclasses.fields(options)}
        )
    first, second = RunOptions.of({}), RunOptions.of({})
    assert first.request_context is not second.request_context
    first.request_context.set("tenant", "acme")
    assert "tenant" not in RunOptions.of({}).request_context


def test_every_option_survives_json() -> None:
    options = RunOptions.of(EVERY_OPTION)
    saved = json.loads(json.dumps(options.to_json()))
    assert saved["optionsVersion"] == OPTIONS_VERSION
    restored = RunOptions.from_json(saved)
    assert restored.to_json() == options.to_json()
    for name in (
        "max_steps",
        "tool_choice",
        "include_raw_chunks",
        "max_processor_retries",
        "model_settings",
        "memory",
        "disable_background_tasks",
        "context",
        "request_context",
        "instructions",
        "system",
        "active_tools",
        "require_tool_approval",
        "tool_call_concurrency",
        "tool_call_strategy",
    ):
        assert getattr(restored, name) == getattr(options, name), name
    assert restored.memory == MemoryScope("t1", "u1")
    assert restored.structured_output is not None and options.structured_output is not None
    assert restored.structured_output.schema == options.structured_output.schema
    assert (restored.structured_output.error_strategy, restored.structured_output.fallback_value) == (
        "fallback",
        {"answer": "?"},
    )
    assert list(restored.client_tools) == ["ask_user"]
    assert restored.client_tools["ask_user"].description == "Ask the user"


def test_a_version_1_options_snapshot_still_loads() -> None:
    """Written before the options had a version: the structured output was the bare schema."""
    old = {
        "maxSteps": 3,
        "toolChoice": {"type": "required"},
        "includeRawChunks": False,
        "structuredOutput": ANSWER,
        "maxProcessorRetries": None,
        "memory": {"thread": "t", "resource": "r"},
        "disableBackgroundTasks": False,
        "context": [],
        "requestContext": {},
        "instructions": None,
        "system": [],
        "activeTools": None,
        "requireToolApproval": False,
        "toolCallConcurrency": {"limit": None, "strategy": "available"},
        "clientTools": {},
    }
    options = RunOptions.from_json(old)
    assert options.max_steps == 3 and options.tool_choice == {"type": "required"}
    assert options.structured_output is not None
    assert options.structured_output.schema["properties"] == ANSWER["properties"]
    assert RunOptions.from_json({}) == RunOptions()  # the oldest snapshots kept no options


def test_an_unknown_option_errors() -> None:
    with pytest.raises(
        ConfigKeyError, match=r"stream\(\): unknown option 'max_step'; did you mean 'max_steps'"
    ):
        RunOptions.of({"max_step": 3})
    with pytest.raises(UnsupportedRunStateError, match="unknown option 'maxStep'"):
        RunOptions.from_json({**RunOptions().to_json(), "maxStep": 3})
    with pytest.raises(UnsupportedRunStateError, match="version 3"):
        RunOptions.from_json({"optionsVersion": 3})


async def test_an_unknown_stream_option_errors_before_the_run() -> None:
    model = ScriptedModel.text("never")
    agent = Agent("a", model=model)
    with pytest.raises(ConfigKeyError, match="unknown option 'maxStep'"):
        await agent.stream("hi", maxStep=2)  # type: ignore[call-arg]
    with pytest.raises(ConfigKeyError, match="unknown option 'on_chunks'"):
        await agent.generate("hi", on_chunks=print)  # type: ignore[call-arg]
    assert model.call_count == 0


def _calls() -> list[Any]:
    stop = [
        {"type": "tool-call", "toolCallId": "c1", "toolName": "delete_file", "input": '{"path":"/tmp/x"}'},
        {"type": "finish", "finishReason": "tool-calls", "usage": USAGE},
    ]
    answer = [
        {"type": "text-start", "id": "a"},
        {"type": "text-delta", "id": "a", "delta": '{"answer":"deleted"}'},
        {"type": "text-end", "id": "a"},
        {"type": "finish", "finishReason": "stop", "usage": USAGE},
    ]
    return [stop, answer]


def _build(db: Path, calls: list[Any]) -> tuple[Runstream, Agent, ScriptedModel]:
    model = ScriptedModel(calls=calls)
    agent = Agent(
        "ops", instructions="Agent instructions.", model=model, tools=[delete_file, echo], memory=Memory()
    )
    return Runstream(agents=[agent], storage=SqliteStorage(db)), agent, model


async def _continued_call(db: Path, *, restart: bool) -> tuple[RecordedCall, dict[str, Any]]:
    """Stop for an approval with every option set; approve in this process or in a new one."""
    runtime, agent, model = _build(db, _calls())
    async with runtime:
        out = await agent.stream("Delete /tmp/x", **EVERY_OPTION)
        assert [c async for c in out.full_stream][-1].type == "tool-call-approval"
        run_id = out.run_id
        if not restart:
            out = await agent.approve_tool_call(run_id=run_id)
            await out.consume()
            return model.recorded[-1], {"object": out.state.object, "status": out.state.status}
    runtime, agent, model = _build(db, _calls()[1:])
    async with runtime:
        out = await agent.approve_tool_call(run_id=run_id)
        await out.consume()
        return model.recorded[-1], {"object": out.state.object, "status": out.state.status}


async def test_a_restored_run_keeps_every_option(tmp_path: Path) -> None:
    """After a restart, the continued run asks the model exactly what the live one does: the
    call's instructions, system messages, context, tool choice, active and client tools,
    structured output and raw chunks all came back from the snapshot."""
    live, live_end = await _continued_call(tmp_path / "live.db", restart=False)
    restored, restored_end = await _continued_call(tmp_path / "restart.db", restart=True)
    assert live.tools == ["delete_file", "ask_user"]
    assert live.tool_choice == {"type": "auto"} and live.include_raw_chunks is True
    assert live.response_format is not None and live.response_format["schema"]["required"] == ["answer"]
    systems = [m["content"] for m in live.prompt if m["role"] == "system"]
    assert systems[:2] == ["Per-call instructions.", "An extra system message."]
    assert any("Some context." in json.dumps(m) for m in live.prompt)
    assert {**dataclasses.asdict(restored), "index": None} == {**dataclasses.asdict(live), "index": None}
    assert restored_end == live_end == {"object": {"answer": "deleted"}, "status": "success"}


def _done(data: object) -> tuple[float, str]:
    return 1.0, "done"


def _prepare(step: dict[str, Any]) -> None:
    return None


SIGNAL = AbortController().signal
MODEL = ScriptedModel.text("never")
PROCESSOR = object()
SAMPLES: StreamOptions = {
    "max_steps": 4,
    "tool_choice": "required",
    "include_raw_chunks": True,
    "structured_output": {"schema": ANSWER},
    "output_processors": [PROCESSOR],
    "input_processors": [PROCESSOR],
    "max_processor_retries": 2,
    "model_settings": ModelSettings(temperature=0.5),
    "abort_signal": SIGNAL,
    "context": [{"role": "user", "content": "Some context."}],
    "memory": {"thread": "t", "resource": "r"},
    "disable_background_tasks": True,
    "is_task_complete": {"scorers": [Scorer("done", _done)], "strategy": "any"},
    "client_tools": [ASK_USER],
    "request_context": {"tenant": "acme"},
    "on_chunk": print,
    "on_step_finish": print,
    "on_finish": print,
    "on_error": print,
    "on_abort": print,
    "instructions": "Per-call instructions.",
    "system": "An extra system message.",
    "model": MODEL,
    "active_tools": ["ask_user"],
    "require_tool_approval": True,
    "tool_call_concurrency": {"limit": 2, "strategy": "called"},
    "stop_when": step_count_is(2),
    "prepare_step": _prepare,
    "delegation": {"hookErrorStrategy": "throw"},
    "scorers": {"quality": {"scorer": "judge", "sampling": 0.5}},
    "return_scorer_data": True,
}
"""A value for each option that is not its default."""


def test_every_option_is_read_in_both_spellings_into_its_field() -> None:
    """Each option of ``StreamOptions``, as Python's name or Mastra's camelCase, sets the
    ``RunOptions`` field of its name (and nothing else of the defaults)."""
    assert set(SAMPLES) == set(StreamOptions.__annotations__)
    default = RunOptions()
    for name, value in SAMPLES.items():
        snake = RunOptions.of({name: value})
        assert RunOptions.of({camel(name): value}) == snake, name
        assert getattr(snake, name) != getattr(default, name), name
        changed = {
            f.name
            for f in dataclasses.fields(RunOptions)
            if getattr(snake, f.name) != getattr(default, f.name)
        }
        assert changed == {name} | ({"tool_call_strategy"} if name == "tool_call_concurrency" else set())
        assert RunOptions.of({name: None}) == default  # None: left unset


def test_every_option_has_a_reader() -> None:
    """An option added to ``StreamOptions`` (and so to ``RunOptions``, see above) without saying
    how it is read would be checked against its annotation alone: each names its reader."""
    for name, hint in get_type_hints(StreamOptions, include_extras=True).items():
        readers = [
            m for m in getattr(hint, "__metadata__", ()) if isinstance(m, PlainValidator | SkipValidation)
        ]
        assert len(readers) == 1, name


def test_an_option_given_in_both_spellings_is_an_error() -> None:
    with pytest.raises(
        ConfigKeyError, match=r"stream\(\): 'maxSteps' is given twice \(as 'max_steps' and 'maxSteps'\)"
    ):
        RunOptions.of({"max_steps": 3, "maxSteps": 4})


async def test_a_call_option_replaces_its_default_in_either_spelling() -> None:
    for defaults in ({"maxSteps": 5, "toolChoice": "none"}, {"max_steps": 5, "tool_choice": "none"}):
        model = ScriptedModel(calls=[[{"type": "finish", "finishReason": "stop", "usage": USAGE}]] * 2)
        agent = Agent("a", model=model, tools=[echo], default_options=defaults)
        await (await agent.stream("x", toolChoice="required")).consume()  # type: ignore[call-arg]
        await (await agent.stream("x")).consume()
        assert [call.tool_choice for call in model.recorded] == [{"type": "required"}, {"type": "none"}]


def test_bad_values_are_errors_in_the_options_words() -> None:
    with pytest.raises(InvalidOptionError, match=r"^tool_call_concurrency.limit must be at least 1, got 0$"):
        RunOptions.of({"toolCallConcurrency": {"limit": 0}})
    with pytest.raises(
        ConfigKeyError, match=r"^tool_call_concurrency: unknown option 'limt'; did you mean 'limit'"
    ):
        RunOptions.of({"tool_call_concurrency": {"limt": 2}})
    with pytest.raises(InvalidOptionError, match=r"^on_finish must be a function, got int$"):
        RunOptions.of({"onFinish": 3})
    with pytest.raises(InvalidOptionError, match="system must be a string or a list of strings"):
        RunOptions.of({"system": [3]})
    with pytest.raises(ConfigKeyError, match=r"did you mean until_idle=\.\.\.\?"):
        RunOptions.of({"max_steps": 2, "untilIdle": True})


def test_the_saved_options_are_stream_options_by_their_mastra_names() -> None:
    """``from_json`` reads a snapshot as ``stream()``'s options are read: each key but the
    version names an option (one left out of the JSON fails ``test_every_option_survives_json``)."""
    keys = set(RunOptions.of(EVERY_OPTION).to_json()) - {"optionsVersion"}
    assert keys <= {camel(name) for name in StreamOptions.__annotations__}
    assert keys == set(RunOptionsJson.__annotations__) - {"optionsVersion"}


def test_default_options_are_read_when_the_agent_is_made() -> None:
    """An agent's ``default_options`` go through the same model as ``stream()``'s: a bad value
    fails where the agent is made, not at its first call."""
    with pytest.raises(InvalidOptionError, match=r"^on_finish must be a function, got int$"):
        Agent("a", model=ScriptedModel.text("x"), default_options={"onFinish": 3})
    with pytest.raises(
        ConfigKeyError, match=r"default_options: unknown option 'runID'; did you mean 'runId'"
    ):
        Agent("a", model=ScriptedModel.text("x"), default_options={"runID": "r"})
