"""A run target for the task manager tests (in-process and on Temporal)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from runstream.run._run_state import RunState
from runstream.storage import TaskRecord
from runstream.tasks.settling import MemoryWrite, RunTarget


@dataclass(frozen=True, slots=True)
class RecordingTarget(RunTarget):
    """A run target that records each write (``fails``: the write raises instead), yielding to
    the event loop meanwhile so that a subscriber woken too early would show in ``log``."""

    log: list[str] = field(default_factory=list)
    fails: bool = False

    @classmethod
    def new(cls, *, fails: bool = False) -> RecordingTarget:
        state = RunState(run_id="run-1", message_id="message-1", messages=[], input_count=0)
        return cls(state, None, "thread-1", "user-1", fails=fails)

    async def write(self, record: TaskRecord, resume_schema: str | None) -> MemoryWrite:
        self.log.append(f"write-start:{record.status}")
        for _ in range(5):
            await asyncio.sleep(0)
        if self.fails:
            raise RuntimeError("memory is down")
        self.log.append("write-end")
        return "run"
