"""Memory: threads, history in the prompt, saving turns, background result rewrites."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from runstream import Agent
from runstream._messages import (
    ContinuedMessage,
    db_to_prompt,
    merge_parts,
    responses_to_parts,
    rewrite_prompt_result,
)
from runstream.memory import Memory, MemoryScope
from runstream.storage import (
    InMemoryStorage,
    SqliteStorage,
    StoredMessage,
    TaskRecord,
    ThreadResourceMismatchError,
)
from runstream.testing import ScriptedModel

SCOPE = MemoryScope("thread-1", "user-1")


def _task_link() -> dict[str, Any]:
    return {"mastra": {"backgroundTask": {"taskId": "task-123", "status": "running"}}}


def _tool_turn() -> list[dict[str, Any]]:
    return [
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Checking."},
                {
                    "type": "tool-call",
                    "toolCallId": "call-1",
                    "toolName": "research",
                    "input": {"topic": "sol"},
                    # A live run links the call to its task as it does the result.
                    "providerOptions": _task_link(),
                },
            ],
        },
        {
            "role": "tool",
            "content": [
                {
                    "type": "tool-result",
                    "toolCallId": "call-1",
                    "toolName": "research",
                    "output": {"type": "text", "value": "Background task started. Task ID: task-123."},
                    "input": {"topic": "sol"},
                    "providerOptions": _task_link(),
                }
            ],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "Started it."}]},
    ]


def _task(status: str = "completed", **fields: Any) -> TaskRecord:
    return TaskRecord(
        id="task-123",
        status=status,  # type: ignore[arg-type]
        tool_name="research",
        tool_call_id="call-1",
        args={"topic": "sol"},
        agent_id="a",
        run_id="run-1",
        thread_id=SCOPE.thread_id,
        resource_id=SCOPE.resource_id,
        completed_at=datetime.now(UTC),
        **fields,
    )


def test_responses_round_trip_through_the_stored_format() -> None:
    responses = _tool_turn()
    stored = StoredMessage(
        id="m1",
        thread_id="t",
        resource_id="r",
        role="assistant",
        content={"format": 2, "parts": responses_to_parts(responses)},
    )
    assert db_to_prompt(stored) == responses


def test_failed_tool_results_round_trip_as_error_text() -> None:
    responses = _tool_turn()[:2]
    responses[1]["content"][0]["output"] = {"type": "error-text", "value": "boom"}
    parts = responses_to_parts(responses)
    invocation = next(p for p in parts if p["type"] == "tool-invocation")["toolInvocation"]
    assert invocation["state"] == "output-error" and invocation["errorText"] == "boom"
    stored = StoredMessage(id="m", thread_id="t", resource_id="r", role="assistant", content={"parts": parts})
    assert db_to_prompt(stored) == responses


@pytest.fixture(params=["memory", "sqlite"])
async def memory(request: pytest.FixtureRequest, tmp_path: Any) -> Any:
    storage = InMemoryStorage() if request.param == "memory" else SqliteStorage(tmp_path / "m.db")
    await storage.init()
    yield Memory(storage=storage, last_messages=10)
    await storage.close()


async def test_a_thread_belongs_to_one_resource(memory: Memory) -> None:
    await memory.ensure_thread(SCOPE)
    with pytest.raises(ThreadResourceMismatchError, match="user-1"):
        await memory.ensure_thread(MemoryScope("thread-1", "intruder"))


async def test_saved_turns_load_back_as_the_prompt(memory: Memory) -> None:
    await memory.ensure_thread(SCOPE)
    user = {"role": "user", "content": [{"type": "text", "text": "Research sol"}]}
    await memory.save_turn(SCOPE, [user], _tool_turn(), "resp-1")
    assert await memory.load_prompt(SCOPE) == [user, *_tool_turn()]


async def test_messages_get_distinct_increasing_millisecond_stamps(memory: Memory) -> None:
    """Clients order a thread by createdAt at millisecond precision: no two messages share one."""
    await memory.ensure_thread(SCOPE)
    user = {"role": "user", "content": [{"type": "text", "text": "hi"}]}
    await memory.save_message(SCOPE, "accepted-1", user)
    for i in range(3):
        await memory.save_turn(SCOPE, [user], _tool_turn(), f"resp-{i}")
    assert memory.storage is not None
    stored = (await memory.storage.list_messages(SCOPE.thread_id)).items
    assert stored[0].id == "accepted-1" and len(stored) == 7
    stamps = [m.created_at for m in stored]
    assert all(later - earlier >= timedelta(milliseconds=1) for earlier, later in itertools.pairwise(stamps))
    assert all(stamp.microsecond % 1000 == 0 for stamp in stamps)


async def test_last_messages_limits_the_history(memory: Memory) -> None:
    await memory.ensure_thread(SCOPE)
    for i in range(12):
        user = {"role": "user", "content": [{"type": "text", "text": f"m{i}"}]}
        await memory.save_turn(SCOPE, [user], [], f"r{i}")
    prompt = await memory.load_prompt(SCOPE)
    assert [m["content"][0]["text"] for m in prompt] == [f"m{i}" for i in range(2, 12)]


@pytest.mark.parametrize(
    ("status", "error", "state", "value"),
    [
        ("completed", None, "result", {"summary": "fast"}),
        (
            "failed",
            {"message": "exploded", "name": "ToolError"},
            "output-error",
            "Background task failed: exploded",
        ),
        # A tool's own exception (no public name): its text stays out of memory.
        (
            "failed",
            {"message": "/srv/key.pem: denied"},
            "output-error",
            "Background task failed: Tool research failed",
        ),
        ("cancelled", None, "output-error", "Background task cancelled by the user: no result."),
    ],
)
async def test_task_results_replace_the_placeholder(
    memory: Memory, status: str, error: Any, state: str, value: Any
) -> None:
    await memory.ensure_thread(SCOPE)
    await memory.save_turn(SCOPE, [], _tool_turn(), "resp-1")
    task = _task(status, result={"summary": "fast"} if status == "completed" else None, error=error)
    assert await memory.apply_task_outcome(task)
    stored = (await memory.storage.list_messages(SCOPE.thread_id)).items  # type: ignore[union-attr]
    part = next(p for p in stored[0].content["parts"] if p["type"] == "tool-invocation")
    assert part["toolInvocation"]["state"] == state
    assert part["toolInvocation"]["result" if state == "result" else "errorText"] == value
    assert part["providerMetadata"]["mastra"]["backgroundTask"] == {"taskId": "task-123", "status": status}
    # Text of the same message survives the rewrite (Mastra loses it, see deviations.json).
    assert [p["text"] for p in stored[0].content["parts"] if p["type"] == "text"] == [
        "Checking.",
        "Started it.",
    ]


async def test_a_reused_tool_call_id_of_another_task_is_left_alone(memory: Memory) -> None:
    await memory.ensure_thread(SCOPE)
    await memory.save_turn(SCOPE, [], _tool_turn(), "resp-1")
    other = _task(result={"x": 1})
    other.id = "task-other"
    assert not await memory.apply_task_outcome(other)


def test_rewrite_of_a_live_run_matches_tool_call_and_task() -> None:
    messages = _tool_turn()
    assert rewrite_prompt_result(messages, _task(result={"ok": True}))
    assert messages[1]["content"][0]["output"] == {"type": "json", "value": {"ok": True}}


async def test_agent_runs_see_the_thread_history(memory: Memory) -> None:
    model = ScriptedModel.text("Hi Ada.", "Your name is Ada.")
    agent = Agent("mem", instructions="Be brief.", model=model, memory=memory)
    first = await agent.stream("My name is Ada.", memory={"thread": "t", "resource": "u"})
    assert await first.text == "Hi Ada."
    second = await agent.stream("What is my name?", memory={"thread": "t", "resource": "u"})
    assert await second.text == "Your name is Ada."
    prompt = model.recorded[1].prompt
    texts = [p.get("text") for m in prompt if m["role"] != "system" for p in m["content"]]
    assert texts == ["My name is Ada.", "Hi Ada.", "What is my name?"]


async def test_memory_option_without_agent_memory_is_a_clear_error() -> None:
    agent = Agent("no-mem", model=ScriptedModel.text("x"))
    with pytest.raises(ValueError, match="has no memory"):
        await agent.stream("hi", memory={"thread": "t", "resource": "u"})


def test_memory_scope_needs_thread_and_resource() -> None:
    with pytest.raises(ValueError, match="resource"):
        MemoryScope.coerce({"thread": "t"})
    assert MemoryScope.coerce({"thread": {"id": "t"}, "resource": "u"}) == MemoryScope("t", "u")


async def test_a_run_without_input_continues_the_last_assistant_message(memory: Memory) -> None:
    model = ScriptedModel.text("Hello.", "More.")
    agent = Agent("mem", model=model, memory=memory)
    scope = {"thread": "t", "resource": "u"}
    first = await agent.stream("Hi", memory=scope)
    await first.text
    second = await agent.stream(None, memory=scope)
    finish = [c async for c in second.full_stream][-1].payload
    both = {
        "role": "assistant",
        "content": [{"type": "text", "text": "Hello."}, {"type": "text", "text": "More."}],
    }
    assert finish["messages"]["user"] == []
    assert finish["messages"]["nonUser"] == [both]
    assert finish["response"]["messages"] == [both]
    ui = finish["response"]["uiMessages"][0]
    assert ui["id"] == first.message_id and [p["text"] for p in ui["parts"]] == ["Hello.", "More."]
    stored = (await memory.storage.list_messages("t")).items  # type: ignore[union-attr]
    assert [m.role for m in stored] == ["user", "assistant"]
    assert stored[1].id == first.message_id


def test_a_continuation_appends_its_tool_calls_to_the_stored_message() -> None:
    stored = ContinuedMessage(
        id="m1", parts=[{"type": "text", "text": "Hello."}], metadata={}, prompt_count=1
    )
    calling = [{"role": "assistant", "content": [{"type": "tool-call", "toolCallId": "c", "toolName": "t"}]}]
    merged = stored.merged_parts(calling)
    assert [p["type"] for p in merged] == ["text", "tool-invocation"]
    assert stored.parts == [{"type": "text", "text": "Hello."}]  # the snapshot itself is left alone


def test_appended_text_after_a_tool_invocation_opens_a_new_step() -> None:
    call = {
        "type": "tool-invocation",
        "toolInvocation": {"state": "call", "toolCallId": "c", "toolName": "t", "args": {}},
    }
    result = {
        "type": "tool-invocation",
        "toolInvocation": {**call["toolInvocation"], "state": "result", "result": 1},
    }
    merged = merge_parts([call], [result, {"type": "text", "text": "Done."}])
    assert [p["type"] for p in merged] == ["tool-invocation", "step-start", "text"]
    assert merged[0]["toolInvocation"]["state"] == "result"


async def test_a_task_result_rewrite_records_when_the_task_ended(memory: Memory) -> None:
    await memory.ensure_thread(SCOPE)
    metadata = {
        "backgroundTasks": {"call-1": {"taskId": "task-123", "startedAt": "2026-01-01T00:00:00+00:00"}}
    }
    await memory.save_turn(SCOPE, [], _tool_turn(), "resp-1", metadata=metadata)
    assert await memory.apply_task_outcome(_task(result={"summary": "fast"}))
    stored = (await memory.storage.list_messages(SCOPE.thread_id)).items  # type: ignore[union-attr]
    assert "completedAt" in stored[0].content["metadata"]["backgroundTasks"]["call-1"]
    part = next(p for p in stored[0].content["parts"] if p["type"] == "tool-invocation")
    assert part["providerMetadata"]["mastra"]["modelOutput"] is None


def test_a_foreground_tool_result_is_stored_with_its_time() -> None:
    responses = _tool_turn()[:2]
    del responses[0]["content"][1]["providerOptions"]
    del responses[1]["content"][0]["providerOptions"]
    invocation = next(p for p in responses_to_parts(responses) if p["type"] == "tool-invocation")
    assert isinstance(invocation["providerMetadata"]["mastra"]["createdAt"], int)
