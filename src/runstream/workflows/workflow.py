"""``Workflow``: a builder for the composition of steps, and the factory of its runs.

::

    wf = (
        Workflow("order", input_schema=Order, output_schema=Receipt)
        .then(load)
        .parallel([price, stock])
        .branch([({"op": "gt", "left": {"path": "inputData.price.total"}, "right": {"literal": 100}}, review)])
        .commit()
    )
    run = await wf.create_run()
    out = await run.stream(input_data={"id": "A-17"})
    async for chunk in out.full_stream: ...

A step can be a :class:`Step`, another ``Workflow`` (nested: its steps stream as
``<workflow id>.<step id>``) or an :class:`~runstream.Agent` (input ``{"prompt"}``, output
``{"text"}`` or the structured object; see :func:`.agent_step`).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from runstream._schema import Schema
from runstream.errors import ConfigurationError
from runstream.storage import InMemoryStorage, Storage
from runstream.workflows.agent_step import agent_step
from runstream.workflows.errors import WorkflowError, WorkflowRunNotFoundError
from runstream.workflows.flow import (
    BranchEntry,
    Condition,
    Entry,
    ForeachEntry,
    LoopEntry,
    ParallelEntry,
    SleepEntry,
    StepEntry,
)
from runstream.workflows.mapping import MappingConfig, mapping_step
from runstream.workflows.run import WorkflowRun
from runstream.workflows.snapshots import NAMESPACE
from runstream.workflows.step import SchemaLike, Step, StepContext

if TYPE_CHECKING:
    from runstream.agent import Agent
    from runstream.tools import Tool

T = TypeVar("T")


class Workflow:
    """A workflow definition. Build it with the chaining methods, then :meth:`commit`.

    ``storage`` keeps run snapshots (an :class:`~runstream.storage.InMemoryStorage` when
    omitted; a :class:`~runstream.storage.SqliteStorage` lets another process resume a
    suspended run). ``retry_config={"attempts": n, "delay": ms}`` retries every step that does
    not set ``retries``. ``validate_outputs=False`` skips checking step outputs against their
    ``output_schema`` (Mastra 1.71 does not check them).
    """

    def __init__(
        self,
        id: str,
        *,
        input_schema: SchemaLike = None,
        output_schema: SchemaLike = None,
        state_schema: SchemaLike = None,
        description: str = "",
        retry_config: Mapping[str, Any] | None = None,
        storage: Storage | None = None,
        validate_inputs: bool = True,
        validate_outputs: bool = True,
    ) -> None:
        if not id:
            raise ConfigurationError("a workflow needs an id")
        self.id = id
        self.description = description
        self.input_schema = Schema.coerce(input_schema)
        self.output_schema = Schema.coerce(output_schema)
        self.state_schema = Schema.coerce(state_schema)
        self.retry_attempts = int((retry_config or {}).get("attempts", 0))
        self.retry_delay_ms = float((retry_config or {}).get("delay", 0))
        self.validate_inputs = validate_inputs
        self.validate_outputs = validate_outputs
        self.entries: list[Entry] = []
        self.steps: dict[str, Step] = {}
        """Every step of the flow by id (nested workflows appear as one step)."""
        self.nested: dict[str, Workflow] = {}
        """The nested workflows by step id."""
        self.committed = False
        self._storage = storage
        self._maps = 0

    @property
    def storage(self) -> Storage:
        if self._storage is None:
            self._storage = InMemoryStorage()
        return self._storage

    def use_storage(self, storage: Storage) -> None:
        """Keep run snapshots in ``storage`` unless the workflow has its own (``Runstream`` calls
        this, so its workflows' runs live next to its memory and tasks)."""
        if self._storage is None:
            self._storage = storage

    def __repr__(self) -> str:
        return f"Workflow({self.id!r})"

    # -- building ------------------------------------------------------------------------------
    def then(self, step: Step | Workflow | Agent) -> Workflow:
        """Run ``step`` on the previous step's output."""
        self.entries.append(self._entry(step))
        return self

    def parallel(self, steps: Sequence[Step | Workflow | Agent]) -> Workflow:
        """Start all ``steps`` together; the next step gets ``{<id>: output, ...}``."""
        self.entries.append(ParallelEntry([self._entry(s) for s in steps]))
        return self

    def branch(self, branches: Sequence[tuple[Condition, Step | Workflow | Agent]]) -> Workflow:
        """Run every step whose condition holds (concurrently); the next step gets
        ``{<id>: output}`` of those that ran. A condition is a predicate dict or a callable."""
        self.entries.append(
            BranchEntry([self._entry(s) for _, s in branches], [condition for condition, _ in branches])
        )
        return self

    def dowhile(self, step: Step | Workflow | Agent, condition: Condition) -> Workflow:
        """Run ``step`` repeatedly while ``condition`` (on its output as ``inputData``) holds."""
        return self._loop(step, condition, "dowhile")

    def dountil(self, step: Step | Workflow | Agent, condition: Condition) -> Workflow:
        """Run ``step`` repeatedly until ``condition`` holds."""
        return self._loop(step, condition, "dountil")

    def foreach(self, step: Step | Workflow | Agent, *, concurrency: int = 1) -> Workflow:
        """Run ``step`` for each item of the previous output (an array); output in input order."""
        self.entries.append(ForeachEntry(self._entry(step), concurrency))
        return self

    def map(self, config: MappingConfig, *, id: str | None = None) -> Workflow:
        """A mapping step building ``{key: value}`` from sources (see :mod:`.mapping`)."""
        ordinal = self._maps
        while f"mapping_{self.id}_{ordinal}" in self.steps:
            ordinal += 1
        self._maps += 1
        return self.then(mapping_step(id or f"mapping_{self.id}_{ordinal}", config))

    def sleep(self, ms: float, *, id: str | None = None) -> Workflow:
        """Wait ``ms`` (a ``workflow-step-waiting`` chunk); the input passes through."""
        self.entries.append(SleepEntry(id or f"sleep_{uuid.uuid4()}", ms))
        return self

    def commit(self) -> Workflow:
        """Finish the definition."""
        if not self.entries:
            raise WorkflowError(f"workflow {self.id!r} has no steps")
        self.committed = True
        return self

    def _loop(
        self, step: Step | Workflow | Agent, condition: Condition, kind: Literal["dowhile", "dountil"]
    ) -> Workflow:
        self.entries.append(LoopEntry(self._entry(step), condition, kind))
        return self

    def _entry(self, step: Step | Workflow | Agent) -> StepEntry:
        if isinstance(step, Workflow):
            entry = StepEntry(step.as_step(), workflow=step)
            self.nested[step.id] = step
        elif isinstance(step, Step):
            entry = StepEntry(step)
        else:
            entry = StepEntry(agent_step(step))
        self.steps[entry.id] = entry.step
        return entry

    def as_step(self) -> Step:
        """This workflow as a step of another one (the engine runs it as a nested execution)."""

        async def nested(ctx: StepContext) -> Any:
            raise WorkflowError(f"nested workflow {self.id!r} can only run inside a workflow")

        return Step(
            self.id,
            nested,
            description=self.description,
            input_schema=self.input_schema,
            output_schema=self.output_schema,
            state_schema=self.state_schema,
        )

    # -- runs ------------------------------------------------------------------------------------
    def validate_input(self, input_data: T) -> T:
        if self.input_schema is not None and self.validate_inputs:
            self.input_schema.validate(input_data, "Invalid input data:")
        return input_data

    def validate_state(self, state: Any) -> Any:
        if self.state_schema is not None and self.validate_inputs:
            self.state_schema.validate(state, "Invalid initial data:")
        return state

    async def create_run(self, run_id: str | None = None) -> WorkflowRun:
        """A new run (not started: call ``stream()`` on it)."""
        if not self.committed:
            raise WorkflowError(f"workflow {self.id!r} is not committed: call .commit() first")
        return WorkflowRun(self, run_id or str(uuid.uuid4()))

    async def get_run(self, run_id: str) -> WorkflowRun:
        """A stored run of this workflow (e.g. a suspended one, to resume it from a new process)."""
        snapshot = await self.storage.load_snapshot(NAMESPACE, run_id)
        if snapshot is None or snapshot.get("workflowId") != self.id:
            raise WorkflowRunNotFoundError(f"no stored run {run_id!r} of workflow {self.id!r}")
        run = WorkflowRun(self, run_id)
        run.status = str(snapshot.get("status"))
        return run

    def as_tool(self, name: str | None = None, *, step_output: bool = False) -> Tool:
        """This workflow as an agent tool ``workflow-<name>`` (see :func:`.tool.workflow_tool`)."""
        from runstream.workflows.tool import workflow_tool

        return workflow_tool(self, name or self.id, step_output=step_output)
