"""Where a settled task's outcome is written (``RunTarget.write``): the live run that called the
tool, else its thread's memory; and what the event is told of it (``MemoryWrite``)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from runstream.memory import Memory, MemoryScope
from runstream.models.prompt import PromptMessage
from runstream.run._run_state import RunState
from runstream.storage import InMemoryStorage, TaskRecord
from runstream.tasks.settling import RunTarget

SCOPE = MemoryScope("thread-1", "user-1")
USER: PromptMessage = {"role": "user", "content": [{"type": "text", "text": "Research sol"}]}
LINK = {"mastra": {"backgroundTask": {"taskId": "task-1", "status": "running"}}}


def tool_turn() -> list[PromptMessage]:
    """The assistant's call of a background tool and its placeholder result, linked to the task."""
    return [
        {
            "role": "assistant",
            "content": [
                {
                    "type": "tool-call",
                    "toolCallId": "call-1",
                    "toolName": "research",
                    "input": {"topic": "sol"},
                    "providerOptions": LINK,
                }
            ],
        },
        {
            "role": "tool",
            "content": [
                {
                    "type": "tool-result",
                    "toolCallId": "call-1",
                    "toolName": "research",
                    "output": {"type": "text", "value": "Started background task task-1."},
                    "providerOptions": LINK,
                }
            ],
        },
    ]


def completed(**changes: Any) -> TaskRecord:
    record = TaskRecord(
        id="task-1",
        status="completed",
        tool_name="research",
        tool_call_id="call-1",
        args={"topic": "sol"},
        agent_id="agent-1",
        run_id="run-1",
        thread_id=SCOPE.thread_id,
        resource_id=SCOPE.resource_id,
        result={"found": 3},
        completed_at=datetime.now(UTC),
    )
    return replace(record, **changes)


async def new_memory() -> Memory:
    storage = InMemoryStorage()
    await storage.init()
    memory = Memory(storage=storage)
    await memory.ensure_thread(SCOPE)
    return memory


async def test_a_live_run_gets_the_result_in_its_messages_and_its_input_becomes_history() -> None:
    memory = await new_memory()
    state = RunState(run_id="run-1", message_id="response-1", messages=[USER, *tool_turn()], input_count=1)
    target = RunTarget(state, memory, SCOPE.thread_id, SCOPE.resource_id)
    assert await target.write(completed(), None) == "run"
    result = state.messages[2]["content"][0]
    assert result["type"] == "tool-result" and result["output"] == {"type": "json", "value": {"found": 3}}
    assert state.history_count == 1  # the input is saved: the turn's save at its end adds the rest
    assert await memory.load_prompt(SCOPE) == [USER]


async def test_a_live_run_keeps_a_suspension_to_itself() -> None:
    state = RunState(run_id="run-1", message_id="response-1", messages=[USER, *tool_turn()], input_count=1)
    target = RunTarget(state, await new_memory(), SCOPE.thread_id, SCOPE.resource_id)
    before = list(state.messages)
    suspended = completed(status="suspended", result=None, completed_at=None, suspended_at=datetime.now(UTC))
    assert await target.write(suspended, None) == "none"
    assert state.messages == before and state.history_count == 0


async def test_a_saved_run_has_the_result_written_into_its_thread() -> None:
    memory = await new_memory()
    await memory.save_turn(SCOPE, [USER], tool_turn(), "response-1")
    state = RunState(run_id="run-1", message_id="response-1", messages=[], input_count=0, saved=True)
    target = RunTarget(state, memory, SCOPE.thread_id, SCOPE.resource_id)
    assert await target.write(completed(), None) == "memory"
    prompt = await memory.load_prompt(SCOPE)
    assert prompt[2]["content"][0]["output"] == {"type": "json", "value": {"found": 3}}
    other = completed(id="task-2")  # no message holds its call
    assert await target.write(other, None) == "none"


async def test_a_run_without_a_thread_writes_nowhere() -> None:
    state = RunState(run_id="run-1", message_id="response-1", messages=[], input_count=0, saved=True)
    assert await RunTarget(state, None, None, None).write(completed(), None) == "none"
