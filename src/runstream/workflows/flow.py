"""The composition of a workflow: one entry per builder call (``then``, ``parallel`` …)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar

from runstream.workflows.predicates import evaluate

T = TypeVar("T")

if TYPE_CHECKING:
    from runstream.storage import Storage
    from runstream.workflows.step import Step


class WorkflowSpec(Protocol):
    """What the engine, its runs, snapshots and nested runs read of a workflow. ``Workflow`` (the
    builder, which imports all of them) is one; they name this, so none of them imports it."""

    @property
    def id(self) -> str: ...
    @property
    def entries(self) -> list[Entry]: ...
    @property
    def steps(self) -> dict[str, Step]: ...
    @property
    def storage(self) -> Storage: ...
    @property
    def retry_attempts(self) -> int: ...
    @property
    def retry_delay_ms(self) -> float: ...
    @property
    def validate_inputs(self) -> bool: ...
    @property
    def validate_outputs(self) -> bool: ...

    def validate_input(self, input_data: T) -> T: ...

    def validate_state(self, state: Any) -> Any: ...


@dataclass(slots=True)
class Resume:
    """What a resume targets: the step path (outer to inner) and where it sits in the flow."""

    steps: list[str]
    payload: Any
    path: list[int]
    foreach_index: int | None = None


@dataclass(slots=True)
class ConditionContext:
    """What a branch or loop condition sees."""

    input_data: Any
    state: dict[str, Any]
    init_data: Any
    results: Mapping[str, Any]
    iteration_count: int = 0

    def get_step_result(self, step_id: str) -> Any:
        result = self.results.get(step_id)
        return (
            result.get("output")
            if isinstance(result, Mapping) and result.get("status") == "success"
            else None
        )


ConditionFn = Callable[[ConditionContext], bool | Awaitable[bool]]
Condition = Mapping[str, object] | ConditionFn
"""A predicate of Mastra's declarative DSL (see :mod:`.predicates`) or a callable."""


async def check(condition: Condition, ctx: ConditionContext) -> bool:
    if isinstance(condition, Mapping):
        roots = {"inputData": ctx.input_data, "initData": ctx.init_data, "state": ctx.state}
        return evaluate(condition, roots, ctx.get_step_result)
    result = condition(ctx)
    if isinstance(result, Awaitable):
        return bool(await result)
    return bool(result)


@dataclass(slots=True)
class StepEntry:
    step: Step
    workflow: WorkflowSpec | None = None
    """Set when the step is a nested workflow."""

    @property
    def id(self) -> str:
        return self.step.id


@dataclass(slots=True)
class ParallelEntry:
    steps: list[StepEntry]


@dataclass(slots=True)
class BranchEntry:
    steps: list[StepEntry]
    conditions: list[Condition]


@dataclass(slots=True)
class LoopEntry:
    step: StepEntry
    condition: Condition
    kind: Literal["dowhile", "dountil"]


@dataclass(slots=True)
class ForeachEntry:
    step: StepEntry
    concurrency: int = 1


@dataclass(slots=True)
class SleepEntry:
    id: str
    ms: float


Entry = StepEntry | ParallelEntry | BranchEntry | LoopEntry | ForeachEntry | SleepEntry
