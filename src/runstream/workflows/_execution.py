"""What the engine's parts (``control``, ``foreach``, ``nested``) see of a run's execution: a
step that has started (:class:`StepCall`) and the :class:`Runner` they call back into. The engine's
``Execution`` is the one runner; they name this protocol, so they do not import the engine that
dispatches to them."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

from runstream.abort import AbortSignal
from runstream.workflows._results import StepResult
from runstream.workflows.events import Sink
from runstream.workflows.flow import Resume, StepEntry, WorkflowSpec
from runstream.workflows.output import WorkflowResult
from runstream.workflows.snapshots import RunStore


class RunResume(Enum):
    """``run_step``'s ``resume`` left out: the step takes the run's own resume."""

    RUN = "run"


@dataclass(slots=True)
class StepCall:
    """A step that has started (its start event is out) and is about to run."""

    entry: StepEntry
    call_id: str
    input_data: Any
    validation_error: Exception | None
    resume_data: Any
    suspend_data: Any
    was_suspended: bool
    info: StepResult
    path: list[int]
    foreach_index: int | None
    resume: Resume | None

    @property
    def skip_emits(self) -> bool:
        """Foreach items stream only progress events, no start or result of their own."""
        return self.foreach_index is not None


class Runner(Protocol):
    """One run's execution of a workflow's entries (``engine.Execution``)."""

    run_id: str
    sink: Sink
    abort: AbortSignal
    store: RunStore
    results: dict[str, Any]
    state: dict[str, Any]
    resume: Resume | None
    suspended_paths: dict[str, list[int]]

    async def start(self, input_data: object, state: dict[str, Any]) -> WorkflowResult: ...

    async def run_from(self, start: int) -> WorkflowResult: ...

    def resumed_input(self, step_id: str, prev: object) -> object: ...

    async def run_step(
        self,
        entry: StepEntry,
        prev: object,
        path: list[int],
        *,
        iteration: int | None = None,
        foreach_index: int | None = None,
        resume: Resume | RunResume | None = ...,
    ) -> StepResult: ...

    def begin_step(
        self,
        entry: StepEntry,
        prev: object,
        path: list[int],
        *,
        iteration: int | None = None,
        foreach_index: int | None = None,
        resume: Resume | RunResume | None = ...,
    ) -> StepCall: ...

    async def complete_step(self, call: StepCall) -> StepResult: ...

    def nested(
        self, workflow: WorkflowSpec, run_id: str, sink: Sink, abort: AbortSignal, store: RunStore
    ) -> Runner:
        """A fresh execution of ``workflow`` inside this one (a nested workflow step)."""
        ...
