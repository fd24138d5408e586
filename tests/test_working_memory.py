"""Memory beyond the last messages, as Mastra 1.71: working memory (Markdown and schema mode, thread
and resource scope, the ``updateWorkingMemory`` tool), read-only memory, per-call memory options,
a thread's title and metadata passed with a run, and memory as a function of the request context.

The prompts are checked against what the real Mastra sent its model in the recorded scenarios
(``tests/conformance_extra``: ``x-wm01``..``x-wm03``); their chunks are checked by
``tests/test_conformance_extra.py``."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from runstream import Agent, RequestContext, tool
from runstream.agent.run_options import RunOptions
from runstream.conformance.runner import ScenarioRunner
from runstream.memory import Memory, MemoryScope
from runstream.memory.titles import DEFAULT_INSTRUCTIONS
from runstream.memory.working import (
    DEFAULT_TEMPLATE,
    WorkingMemory,
    empty_from_schema,
    merge_working_memory,
    strip_optional_nulls,
)
from runstream.runtime import Runstream
from runstream.storage import InMemoryStorage, SqliteStorage, Storage
from runstream.testing import ScriptedModel, Text, ToolCall
from runstream.testing.turns import compile_turns

EXTRA = Path(__file__).parent / "conformance_extra"


def _tool_result(chunks: list[Any], name: str = "updateWorkingMemory") -> Any:
    return next(
        c.payload["result"] for c in chunks if c.type == "tool-result" and c.payload["toolName"] == name
    )


async def _run(agent: Agent, text: str, **memory: Any) -> list[Any]:
    out = await agent.stream(text, memory={"thread": "t1", "resource": "u1", **memory})
    return [chunk async for chunk in out.full_stream]


# -- the prompts Mastra sends -------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "x-wm01-working-memory-markdown",
        "x-wm02-working-memory-schema",
        "x-wm03-read-only-call",
        "x-wm04-title-event",
    ],
)
async def test_prompts_and_tools_match_the_recorded_mastra_calls(name: str) -> None:
    """Each model call's system messages (the instructions, then the working-memory instruction
    with the stored data), offered tools and message roles equal the real Mastra's."""
    scenario = json.loads((EXTRA / "scenarios" / f"{name}.json").read_text())
    meta = json.loads((EXTRA / "golden" / f"{name}.meta.json").read_text())
    runner = ScenarioRunner(scenario, io.StringIO())
    await runner.run()
    model = runner.runtime.agents[scenario["agent"]["id"]].model
    assert isinstance(model, ScriptedModel)
    expected = meta["modelCalls"]["main"]
    assert len(model.recorded) == len(expected)
    for got, want in zip(model.recorded, expected, strict=True):
        assert [m["content"] for m in got.prompt if m["role"] == "system"] == [
            m["content"] for m in want["prompt"] if m["role"] == "system"
        ], f"call {got.index}"
        assert got.tools == want["tools"]
        assert [m["role"] for m in got.prompt] == [m["role"] for m in want["prompt"]]
        if want.get("generate"):  # the title call (non-streamed in Mastra): the same transcript
            assert got.prompt[1]["content"][0]["text"] == want["prompt"][1]["content"][0]["text"]


# -- Markdown mode ------------------------------------------------------------------------------


async def test_resource_scoped_markdown_memory_is_shared_by_the_resources_threads() -> None:
    model = ScriptedModel.turns(
        ToolCall("updateWorkingMemory", {"memory": "# User\n- Name: Ada\n"}, id="w1"),
        Text("Hi."),
        Text("Ada."),
    )
    memory = Memory(working_memory=WorkingMemory(template="# User\n- Name:\n"))
    agent = Agent("a", model=model, memory=memory)
    async with Runstream(agents=[agent]) as runtime:
        chunks = await _run(agent, "I am Ada.")
        assert _tool_result(chunks) == {"success": True}
        resource = await runtime.storage.get_resource("u1")
        assert resource is not None and resource.working_memory == "# User\n- Name: Ada\n"
        await collect(agent.stream("Who am I?", memory={"thread": "t2", "resource": "u1"}))
        other = await collect(agent.stream("Who am I?", memory={"thread": "t3", "resource": "u2"}))
        assert other  # another resource sees none of it
    system = [m["content"] for m in model.recorded[2].prompt if m["role"] == "system"]
    assert "<working_memory_data>\n# User\n- Name: Ada\n\n</working_memory_data>" in system[-1]
    stranger = [m["content"] for m in model.recorded[3].prompt if m["role"] == "system"]
    assert "<working_memory_data>\nnull\n</working_memory_data>" in stranger[-1]


async def collect(out_awaitable: Any) -> list[Any]:
    out = await out_awaitable
    return [chunk async for chunk in out.full_stream]


async def test_thread_scope_stores_in_the_threads_metadata_and_the_call_is_not_saved() -> None:
    storage = InMemoryStorage()
    model = ScriptedModel.turns(
        ToolCall("updateWorkingMemory", {"memory": "- Name: Ada"}, id="w1"), Text("Hi.")
    )
    memory = Memory(storage=storage, working_memory={"enabled": True, "scope": "thread"})
    await collect(
        Agent("a", model=model, memory=memory).stream("I am Ada.", memory={"thread": "t1", "resource": "u1"})
    )
    thread = await storage.get_thread("t1")
    assert thread is not None and thread.metadata["workingMemory"] == "- Name: Ada"
    assert await storage.get_resource("u1") is None
    stored = (await storage.list_messages("t1")).items
    assert [m.role for m in stored] == ["user", "assistant"]
    assert [p["type"] for p in stored[1].content["parts"]] == ["step-start", "text"]  # as Mastra stores it


async def test_writing_the_bare_template_over_real_data_is_refused() -> None:
    storage = InMemoryStorage()
    await storage.update_resource("u1", working_memory="# User\n- Name: Ada")
    model = ScriptedModel.turns(
        ToolCall("updateWorkingMemory", {"memory": "# User\n- Name:\n"}, id="w1"), Text("Oops.")
    )
    memory = Memory(storage=storage, working_memory={"enabled": True, "template": "# User\n- Name:"})
    chunks = await _run(Agent("a", model=model, memory=memory), "Forget me.")
    assert _tool_result(chunks) == {
        "success": False,
        "message": "Attempted to replace existing working memory with empty template. "
        "Update skipped to prevent data loss.",
    }
    resource = await storage.get_resource("u1")
    assert resource is not None and resource.working_memory == "# User\n- Name: Ada"


def test_the_default_template_and_the_tool_schema_are_mastras() -> None:
    config = WorkingMemory()
    assert config.template_content() == DEFAULT_TEMPLATE.strip()
    tool = Memory(working_memory=config).tools()["updateWorkingMemory"]
    assert tool.input_schema["required"] == ["memory"]
    assert tool.input_schema["properties"]["memory"]["type"] == "string"
    assert tool.description.startswith("Update the working memory with new information. Any data not")


# -- schema mode --------------------------------------------------------------------------------


def test_merge_semantics_are_mastras() -> None:
    existing = {"name": "Ada", "city": "Paris", "pets": ["cat"], "prefs": {"tone": "dry", "lang": "fr"}}
    update = {"city": None, "pets": ["dog"], "prefs": {"lang": "en", "extra": None}, "age": 36}
    merged = merge_working_memory(existing, update)
    assert merged == {"name": "Ada", "pets": ["dog"], "prefs": {"tone": "dry", "lang": "en"}, "age": 36}
    assert existing["city"] == "Paris"  # nothing is changed in place
    assert merge_working_memory(None, {}) == {} and merge_working_memory({"a": 1}, {}) == {"a": 1}


def test_optional_nulls_are_dropped_before_validation() -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
        "required": ["a"],
    }
    assert strip_optional_nulls({"a": None, "b": None}, schema) == {"a": None}


class Profile(BaseModel):
    name: str | None = None
    pets: list[str] = []


async def test_a_pydantic_schema_merges_updates_into_the_stored_json() -> None:
    storage = InMemoryStorage()
    model = ScriptedModel.turns(
        ToolCall("updateWorkingMemory", {"memory": {"name": "Ada", "pets": ["cat"]}}, id="w1"),
        ToolCall("updateWorkingMemory", {"memory": {"pets": ["dog"], "name": None}}, id="w2"),
        Text("Done."),
    )
    memory = Memory(storage=storage, working_memory=WorkingMemory(schema=Profile))
    chunks = await _run(Agent("a", model=model, memory=memory), "I am Ada, I have a dog now.")
    assert [c.payload["result"] for c in chunks if c.type == "tool-result"] == [{"success": True}] * 2
    resource = await storage.get_resource("u1")
    # As in Mastra, a null in an optional field is dropped before the merge: the name stays.
    assert resource is not None and json.loads(resource.working_memory or "") == {
        "name": "Ada",
        "pets": ["dog"],
    }
    system = [m["content"] for m in model.recorded[0].prompt if m["role"] == "system"][-1]
    assert 'the object format below represents the template:\n{"name":null,"pets":[]}' in system


async def test_a_schema_mode_update_the_schema_rejects_is_an_error_result() -> None:
    model = ScriptedModel.turns(
        ToolCall("updateWorkingMemory", {"memory": {"pets": "dog"}}, id="w1"), Text("Sorry.")
    )
    memory = Memory(storage=InMemoryStorage(), working_memory=WorkingMemory(schema=Profile))
    chunks = await _run(Agent("a", model=model, memory=memory), "I have a dog.")
    result = _tool_result(chunks)
    assert result["error"] is True
    assert "Tool input validation failed for updateWorkingMemory" in result["message"]
    assert "memory.pets: Invalid input: expected array, received string" in result["message"]


def test_empty_document_follows_generate_empty_from_schema() -> None:
    schema = {
        "type": "object",
        "properties": {
            "s": {"type": "string"},
            "n": {"type": "integer"},
            "d": {"type": "string", "default": "x"},
            "o": {"type": "object", "properties": {"b": {"type": "boolean"}}},
            "any": {},
        },
    }
    assert empty_from_schema(schema) == {"s": "", "n": 0, "d": "x", "o": {"b": False}, "any": None}


def test_bad_working_memory_configuration_is_an_error_naming_it() -> None:
    with pytest.raises(ValueError, match="not a valid JSON Schema"):
        WorkingMemory(schema={"type": "nope"})
    with pytest.raises(ValueError, match="template or a schema, not both"):
        WorkingMemory(template="x", schema={"type": "object"})
    with pytest.raises(ValueError, match=r"workingMemory: Mastra's 'version' is not supported"):
        Memory.coerce({"workingMemory": {"enabled": True, "version": "vnext"}})
    with pytest.raises(ValueError, match=r"workingMemory.scope must be one of"):
        Memory.coerce({"workingMemory": {"enabled": True, "scope": "user"}})
    assert Memory.coerce({"workingMemory": {"template": "x"}}).working_memory is None  # type: ignore[union-attr]


# -- storage backends ---------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
async def test_working_memory_survives_a_restart_of_the_storage(backend: str, tmp_path: Path) -> None:
    def open_storage() -> Storage:
        return InMemoryStorage() if backend == "memory" else SqliteStorage(tmp_path / "db.sqlite")

    storage = open_storage()
    memory = Memory(storage=storage, working_memory=WorkingMemory(scope="resource"))
    await memory.set_working_memory("t1", "u1", "# Ada")
    thread_memory = memory.with_options({"working_memory": {"scope": "thread"}})
    await thread_memory.ensure_thread(MemoryScope("t1", "u1"))
    await thread_memory.set_working_memory("t1", "u1", "# thread note")
    if backend == "sqlite":
        await storage.close()
        storage = open_storage()
    reopened = Memory(storage=storage, working_memory=WorkingMemory())
    assert await reopened.get_working_memory("t1", "u1") == "# Ada"
    assert await reopened.with_options({"working_memory": {"scope": "thread"}}).get_working_memory(
        "t1", "u1"
    ) == ("# thread note")
    await storage.close()


# -- read-only and per-call options --------------------------------------------------------------


async def test_read_only_memory_reads_history_and_writes_nothing() -> None:
    storage = InMemoryStorage()
    writer = Agent("w", model=ScriptedModel.turns(Text("Hi Ada.")), memory=Memory(storage=storage))
    await collect(writer.stream("I am Ada.", memory={"thread": "t1", "resource": "u1"}))
    model = ScriptedModel.turns(Text("You are Ada."))
    reader = Agent(
        "r", model=model, memory=Memory(storage=storage, read_only=True, working_memory=WorkingMemory())
    )
    await collect(reader.stream("Who am I?", memory={"thread": "t1", "resource": "u1"}))
    await collect(reader.stream("New?", memory={"thread": "t-new", "resource": "u1"}))
    assert [m["role"] for m in model.recorded[0].prompt] == ["system", "user", "assistant", "user"]
    assert "(READ-ONLY)" in model.recorded[0].prompt[0]["content"] and model.recorded[0].tools == []
    assert len((await storage.list_messages("t1")).items) == 2
    assert (await storage.list_messages("t-new")).total == 0  # the thread is created, as in Mastra


async def test_per_call_options_apply_over_the_agents_memory() -> None:
    storage = InMemoryStorage()
    model = ScriptedModel.turns(Text("One."), Text("Two."), Text("Three."))
    agent = Agent("a", model=model, memory=Memory(storage=storage))
    await collect(agent.stream("first", memory={"thread": "t1", "resource": "u1"}))
    options = {"lastMessages": 1, "workingMemory": {"enabled": True, "scope": "thread"}}
    await collect(agent.stream("second", memory={"thread": "t1", "resource": "u1", "options": options}))
    # one message of history, the assistant's: Mastra's placeholder user "." opens it (x-sr01)
    assert [m["role"] for m in model.recorded[1].prompt] == ["system", "user", "assistant", "user"]
    assert model.recorded[1].prompt[1]["content"] == [{"type": "text", "text": "."}]
    assert model.recorded[1].tools == ["updateWorkingMemory"]
    await collect(agent.stream("third", memory={"thread": "t1", "resource": "u1"}))
    assert model.recorded[2].tools == [] and len(model.recorded[2].prompt) == 5  # the agent's own again
    with pytest.raises(
        ValueError, match=r"memory.options: unknown option 'readonly'; did you mean 'read_only'"
    ):
        await agent.stream("x", memory={"thread": "t1", "resource": "u1", "options": {"readonly": True}})


async def test_a_threads_title_and_metadata_come_with_the_run() -> None:
    storage = InMemoryStorage()
    agent = Agent(
        "a", model=ScriptedModel.turns(Text("Hi."), Text("Hi again.")), memory=Memory(storage=storage)
    )
    thread = {"id": "t1", "title": "Trip to Paris", "metadata": {"topic": "travel"}}
    await collect(agent.stream("Hello", memory={"thread": thread, "resource": "u1"}))
    stored = await storage.get_thread("t1")
    assert stored is not None and (stored.title, stored.metadata) == ("Trip to Paris", {"topic": "travel"})
    again = {"id": "t1", "title": "ignored for an existing thread", "metadata": {"lang": "fr"}}
    await collect(agent.stream("Hello again", memory={"thread": again, "resource": "u1"}))
    stored = await storage.get_thread("t1")
    assert stored is not None and (stored.title, stored.metadata) == (
        "Trip to Paris",
        {"topic": "travel", "lang": "fr"},
    )


def test_a_restored_run_keeps_its_thread_and_json_options() -> None:
    scope = MemoryScope.coerce(
        {
            "thread": {"id": "t1", "title": "T", "metadata": {"k": 1}},
            "resource": "u1",
            "options": {
                "readOnly": True,
                "lastMessages": 3,
                "workingMemory": {"enabled": True, "scope": "thread"},
            },
        }
    )
    restored = RunOptions.from_json(json.loads(json.dumps(RunOptions(memory=scope).to_json())))
    assert restored.memory == scope


# -- dynamic memory -----------------------------------------------------------------------------


async def test_memory_may_be_a_function_of_the_request_context() -> None:
    storage = InMemoryStorage()
    seen: list[str] = []

    def memory_for(rc: RequestContext) -> Memory:
        seen.append(rc["tier"])
        return Memory(storage=storage, working_memory=WorkingMemory() if rc["tier"] == "pro" else None)

    model = ScriptedModel.turns(Text("a"), Text("b"))
    agent = Agent("a", model=model, memory=memory_for)
    for tier in ("free", "pro"):
        out = await agent.stream(
            "hi", memory={"thread": f"t-{tier}", "resource": "u1"}, request_context={"tier": tier}
        )
        [c async for c in out.full_stream]
    assert seen == ["free", "pro"]
    assert [call.tools for call in model.recorded] == [[], ["updateWorkingMemory"]]
    assert len((await storage.list_messages("t-pro")).items) == 2


async def test_concurrent_schema_updates_of_one_resource_all_land() -> None:
    memory = Memory(storage=InMemoryStorage(), working_memory=WorkingMemory(schema={"type": "object"}))
    tool = memory.tools()["updateWorkingMemory"]
    from runstream.abort import AbortController
    from runstream.tools import ToolContext, ToolWriter

    def ctx(i: int) -> ToolContext:
        return ToolContext(
            f"c{i}", tool.name, "run", "a", ToolWriter(lambda c: None, "run", f"c{i}", tool.name),
            AbortController().signal, thread_id="t1", resource_id="u1",
        )  # fmt: skip

    await asyncio.gather(*(tool.execute({"memory": {f"k{i}": i}}, ctx(i)) for i in range(6)))
    assert json.loads(await memory.get_working_memory("t1", "u1") or "") == {f"k{i}": i for i in range(6)}


# -- thread titles ------------------------------------------------------------------------------


@tool
def lookup(q: str) -> str:
    """Look something up."""
    return "found"


async def test_the_first_exchange_titles_the_thread_as_mastra_asks_for_it() -> None:
    """The title call's prompt is what Mastra 1.71 sends (checked against it with a model whose
    non-streaming call was recorded): its instructions, then a User:/Assistant: transcript."""
    storage = InMemoryStorage()
    model = ScriptedModel.turns(
        Text("Sure, Paris in May is lovely."),
        Text("<think>hmm</think> Paris trip in May"),
        Text("Book early."),
    )
    memory = Memory(storage=storage, generate_title=True)
    agent = Agent("a", model=model, memory=memory)
    await collect(agent.stream("Plan a trip to Paris in May.", memory={"thread": "t1", "resource": "u1"}))
    await memory.wait_for_titles()
    thread = await storage.get_thread("t1")
    assert thread is not None and thread.title == "Paris trip in May"
    assert model.recorded[1].prompt == [
        {"role": "system", "content": DEFAULT_INSTRUCTIONS},
        {
            "role": "user",
            "content": [
                {
                    "type": "text",
                    "text": "User: Plan a trip to Paris in May.\nAssistant: Sure, Paris in May is lovely.",
                }
            ],
        },
    ]
    await collect(agent.stream("Any tips?", memory={"thread": "t1", "resource": "u1"}))
    await memory.wait_for_titles()
    assert model.call_count == 3  # a titled thread is not asked again


async def test_closing_the_runtime_lets_a_title_in_the_making_land(tmp_path: Path) -> None:
    slow_title = ScriptedModel(
        calls=[{"delayMs": 100, "parts": compile_turns([Text("Late title")])[0]["parts"]}]
    )
    agent = Agent(
        "a", model=ScriptedModel.turns(Text("Hi.")), memory=Memory(generate_title={"model": slow_title})
    )
    async with Runstream(agents=[agent], storage=SqliteStorage(tmp_path / "db.sqlite")):
        await collect(agent.stream("Hello", memory={"thread": "t1", "resource": "u1"}))
    reopened = SqliteStorage(tmp_path / "db.sqlite")
    thread = await reopened.get_thread("t1")
    await reopened.close()
    assert thread is not None and thread.title == "Late title"


async def test_a_title_model_and_instructions_may_depend_on_the_request_context() -> None:
    storage = InMemoryStorage()
    title_model = ScriptedModel.turns(Text("  Lyon weekend  "))
    titles: list[str] = []

    async def remember(title: str) -> None:
        titles.append(title)

    config = {
        "model": lambda rc: title_model,
        "instructions": lambda rc: f"Title it in {rc['lang']}.",
        "minMessages": 2,
    }
    memory = Memory(storage=storage)
    agent = Agent("a", model=ScriptedModel.turns(Text("Sure.")), memory=memory)
    scope = {
        "thread": "t1",
        "resource": "u1",
        "options": {"generateTitle": config},
        "onTitleGenerated": remember,
    }
    await collect(agent.stream("A weekend in Lyon?", memory=scope, request_context={"lang": "French"}))
    await memory.wait_for_titles()
    thread = await storage.get_thread("t1")
    assert thread is not None and thread.title == "Lyon weekend" and titles == ["Lyon weekend"]
    assert title_model.recorded[0].prompt[0] == {"role": "system", "content": "Title it in French."}


async def test_a_failing_title_call_leaves_the_thread_untitled(caplog: pytest.LogCaptureFixture) -> None:
    storage = InMemoryStorage()
    broken = ScriptedModel(calls=[{"throwOnCall": {"message": "rate limited"}}])
    memory = Memory(storage=storage, generate_title={"model": broken})
    agent = Agent("a", model=ScriptedModel.turns(Text("Hi.")), memory=memory)
    chunks = await collect(agent.stream("Hello", memory={"thread": "t1", "resource": "u1"}))
    await memory.wait_for_titles()
    assert chunks[-1].type == "finish"
    thread = await storage.get_thread("t1")
    assert thread is not None and thread.title is None
    assert "Error generating the title of thread t1" in caplog.text


async def test_read_only_memory_and_min_messages_generate_no_title() -> None:
    storage = InMemoryStorage()
    model = ScriptedModel.turns(Text("Hi."), Text("Hi again."))
    memory = Memory(storage=storage, generate_title={"minMessages": 5})
    agent = Agent("a", model=model, memory=memory)
    await collect(agent.stream("Hello", memory={"thread": "t1", "resource": "u1"}))
    await collect(
        agent.stream("Hello", memory={"thread": "t1", "resource": "u1", "options": {"readOnly": True}})
    )
    await memory.wait_for_titles()
    assert model.call_count == 2
    with pytest.raises(ValueError, match=r"generate_title: unknown option 'emitEvents'"):
        Memory(generate_title={"emitEvents": True})


async def test_emit_event_titles_the_thread_before_finish_and_streams_the_title() -> None:
    storage = InMemoryStorage()
    model = ScriptedModel.turns(
        ToolCall("lookup", {"q": "paris"}, id="c1"), Text("Sure."), Text("Paris trip"), Text("Again.")
    )
    titles: list[str] = []
    memory = Memory(storage=storage, generate_title={"emitEvent": True})
    agent = Agent("a", model=model, memory=memory, tools=[lookup])
    scope = {"thread": "t1", "resource": "u1", "onTitleGenerated": titles.append}
    chunks = await collect(agent.stream("Plan Paris.", memory=scope))
    assert [c.type for c in chunks][-2:] == ["data-thread-title", "finish"]
    assert chunks[-2].to_wire() == {
        "type": "data-thread-title",
        "data": {"threadId": "t1", "title": "Paris trip"},
        "transient": True,
    }
    assert titles == ["Paris trip"]
    transcript = model.recorded[2].prompt[1]["content"][0]["text"]
    assert (
        transcript
        == "User: Plan Paris.\nTool Result lookup: found\nAssistant: Sure."  # a call with its result: one line
    )
    again = await collect(agent.stream("More?", memory=scope))
    assert "data-thread-title" not in [c.type for c in again] and model.call_count == 4
