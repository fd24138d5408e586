"""Run snapshots in storage (namespace ``workflow-runs``) and the checks before a resume.

A run's snapshot is saved after every entry: status, step results (``context``), state and
the flow positions of suspended steps. A nested workflow's execution is stored under
``<parent key>/<step id>``. Resuming reads the snapshot, so the process that resumes need not be
the one that started the run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict, cast

from runstream.chunks import to_jsonable
from runstream.storage import Storage
from runstream.workflows.errors import RunNotSuspendedError, WorkflowError
from runstream.workflows.flow import Resume, WorkflowSpec

if TYPE_CHECKING:
    from runstream.workflows.step import Step

NAMESPACE = "workflow-runs"


class WorkflowSnapshot(TypedDict):
    """A run's saved state (Mastra's ``WorkflowRunState``), after every entry of a run.

    ``context`` holds the step results by step id (:class:`~._results.StepResult`) and the run's
    input under ``"input"``; ``state`` is the workflow state (the steps' own values)."""

    workflowId: str
    runId: str
    status: str
    context: dict[str, Any]
    state: dict[str, Any]
    suspendedPaths: dict[str, list[int]]
    activePaths: list[int]
    stepExecutionPath: list[str]
    updatedAt: int
    result: NotRequired[Any]
    error: NotRequired[Any]


StepPath = str | Sequence["str | Step"]
"""A step to resume: ``"id"``, ``"outer.inner"``, or a list of ids / steps (outer to inner)."""


@dataclass(frozen=True, slots=True)
class RunStore:
    storage: Storage
    key: str

    async def save(self, snapshot: WorkflowSnapshot) -> None:
        await self.storage.save_snapshot(NAMESPACE, self.key, to_jsonable(snapshot))

    async def load(self) -> WorkflowSnapshot | None:
        """The snapshot :meth:`save` stored (JSON of a :class:`WorkflowSnapshot`)."""
        return cast("WorkflowSnapshot | None", await self.storage.load_snapshot(NAMESPACE, self.key))

    def child(self, step_id: str) -> RunStore:
        return RunStore(self.storage, f"{self.key}/{step_id}")


def prepare_resume(
    snapshot: Mapping[str, Any] | None,
    workflow: WorkflowSpec,
    step: StepPath | None,
    data: Any,
    run_id: str,
    foreach_index: int | None = None,
) -> Resume:
    """Check that the run can be resumed at ``step`` with ``data`` (Mastra's messages)."""
    if snapshot is None:
        raise WorkflowError(f"No snapshot found for this workflow run: {workflow.id} {run_id}")
    if snapshot.get("status") != "suspended":
        raise RunNotSuspendedError("This workflow run was not suspended")
    paths: Mapping[str, list[int]] = snapshot.get("suspendedPaths") or {}
    steps = _step_ids(step) if step is not None else _only_suspended(snapshot, paths)
    if steps[0] not in paths:
        raise WorkflowError(
            f'This workflow step "{steps[0]}" was not suspended. Available suspended steps: [{", ".join(paths)}]'
        )
    target = workflow.steps.get(steps[0])
    if target is not None and target.resume_schema is not None and workflow.validate_inputs:
        target.resume_schema.validate(data, "Invalid resume data:")
    return Resume(steps=steps, payload=data, path=list(paths[steps[0]]), foreach_index=foreach_index)


def _step_ids(step: StepPath) -> list[str]:
    if isinstance(step, str):
        return step.split(".")
    return [s if isinstance(s, str) else s.id for s in step]


def _only_suspended(snapshot: Mapping[str, Any], paths: Mapping[str, list[int]]) -> list[str]:
    found: list[list[str]] = []
    context = snapshot.get("context") or {}
    for step_id in paths:
        result = context.get(step_id)
        if isinstance(result, Mapping) and result.get("status") == "suspended":
            meta = (result.get("suspendPayload") or {}).get("__workflow_meta") or {}
            nested = meta.get("path")
            found.append([step_id, *nested] if isinstance(nested, list) else [step_id])
    if not found:
        raise WorkflowError("No suspended steps found in this workflow run")
    if len(found) > 1:
        listed = ", ".join(f"[{', '.join(p)}]" for p in found)
        raise WorkflowError(
            f"Multiple suspended steps found: {listed}. "
            'Please specify which step to resume using the "step" parameter.'
        )
    return found[0]
