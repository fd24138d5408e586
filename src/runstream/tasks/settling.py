"""Where a settled background task's outcome is written, before anyone hears that it settled.

A task's outcome (a result, an error, a cancel, a suspension) goes into the conversation first,
then the :class:`~runstream.tasks.bus.TaskSettled` event carrying it is published, with what came
of the write (:data:`MemoryWrite`): a reader woken by the event (an until-idle stream starting
its continuation turn) finds the outcome in memory. Where it goes is data of the request
(:class:`RunTarget`, set by the loop's dispatcher), not a callback into the agent: into the
enqueuing run's messages while that run is live (it saves them when it ends), else into the
thread's memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from runstream._messages import rewrite_prompt_result
from runstream.memory import Memory, MemoryScope
from runstream.run._run_state import RunState
from runstream.storage import TaskRecord

MemoryWrite = Literal["run", "memory", "none", "failed"]
"""What came of writing a settled outcome: into the live run's messages (``run``), into the
thread's stored messages (``memory``), nowhere (``none``: no thread, no message holding the call,
or a suspension while the run is live, which the run saves itself), or the write failed
(``failed``, logged; the event is published all the same)."""


@dataclass(frozen=True, slots=True)
class RunTarget:
    """The run that enqueued a task, and its thread's memory: where the task's outcome goes."""

    state: RunState
    memory: Memory | None
    thread_id: str | None
    resource_id: str | None

    async def write(self, record: TaskRecord, resume_schema: str | None) -> MemoryWrite:
        """``record``'s settled state into the live run (which holds the call until it ends),
        or, once the run is saved, into the message holding the call in memory
        (``resume_schema``: the tool's, for a suspension)."""
        state = self.state
        if not state.saved:
            if record.status == "suspended":
                return "none"
            rewrite_prompt_result(state.messages, record)
            await save_input_early(self.memory, self.thread_id, self.resource_id, state)
            return "run"
        if self.memory is None or self.thread_id is None:
            return "none"
        return "memory" if await self.memory.apply_task_outcome(record, resume_schema) else "none"


async def save_input_early(
    memory: Memory | None, thread_id: str | None, resource_id: str | None, state: RunState
) -> None:
    """Save a live run's new input to memory now, as Mastra does when the run pauses for a
    human or one of its background tasks settles: from then on the input is history (the run's
    ``messages.user`` is empty) and the turn's save at the end adds the response."""
    if memory is None or thread_id is None or resource_id is None:
        return
    inputs = state.new_input_messages
    state.history_count = state.input_count
    if inputs:
        await memory.save_turn(MemoryScope(thread_id, resource_id), inputs, [], state.message_id)
