"""Workflows and their runs in the JSON shapes of Mastra's workflow routes.

Details (``GET /workflows/:id``) carry schemas as superjson strings (``{"json": <schema>}``,
which client-js's ``getSchema`` unwraps) and a ``stepGraph`` of Mastra's serialized flow entries.
Runs are read from the workflow's snapshots (namespace ``workflow-runs``); what the server adds
to a run it created — who owns it and when it was created — lives beside them in
``workflow-run-meta``, so listings survive a restart.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from runstream._clock import iso_datetime
from runstream._schema import Schema
from runstream.storage import Storage
from runstream.workflows import Step, Workflow
from runstream.workflows.flow import (
    BranchEntry,
    Entry,
    ForeachEntry,
    LoopEntry,
    ParallelEntry,
    SleepEntry,
    StepEntry,
    WorkflowSpec,
)
from runstream.workflows.snapshots import NAMESPACE

META_NAMESPACE = "workflow-run-meta"
RUN_FIELDS = frozenset({"result", "error", "payload", "steps", "activeStepsPath", "serializedStepGraph"})


def superjson(schema: Schema | None) -> str | None:
    return None if schema is None else json.dumps({"json": schema.json_schema}, separators=(",", ":"))


_STEP_SCHEMAS = (
    ("inputSchema", "input_schema"),
    ("outputSchema", "output_schema"),
    ("resumeSchema", "resume_schema"),
    ("suspendSchema", "suspend_schema"),
    ("stateSchema", "state_schema"),
)


def _step_info(step: Step, nested: Workflow | None, *, partial: bool) -> dict[str, Any]:
    info: dict[str, Any] = {"id": step.id, "description": step.description}
    if nested is not None:
        info.update(component="WORKFLOW", isWorkflow=True)
    if not partial:
        for key, attribute in _STEP_SCHEMAS:
            text = superjson(getattr(step, attribute))
            if text is not None:
                info[key] = text
    return info


def _all_steps(workflow: Workflow, *, partial: bool, prefix: str = "") -> dict[str, Any]:
    """Every step, nested workflows' steps included as ``<nested id>.<step id>``."""
    out: dict[str, Any] = {}
    for step_id, step in workflow.steps.items():
        key = f"{prefix}{step_id}"
        nested = workflow.nested.get(step_id)
        out[key] = _step_info(step, nested, partial=partial)
        if nested is not None:
            out.update(_all_steps(nested, partial=partial, prefix=f"{key}."))
    return out


def _graph_step(entry: StepEntry) -> dict[str, Any]:
    step: dict[str, Any] = {"id": entry.id, "description": entry.step.description}
    if entry.workflow is not None:
        step.update(component="WORKFLOW", serializedStepFlow=step_graph(entry.workflow))
    return {"type": "step", "step": step}


def _condition(index: int) -> dict[str, str]:
    return {"id": f"condition-{index}", "fn": ""}


def _graph_entry(entry: Entry) -> dict[str, Any]:
    if isinstance(entry, StepEntry):
        return _graph_step(entry)
    if isinstance(entry, SleepEntry):
        return {"type": "sleep", "id": entry.id, "duration": entry.ms}
    if isinstance(entry, LoopEntry):
        return {
            "type": "loop",
            "step": _graph_step(entry.step)["step"],
            "serializedCondition": _condition(0),
            "loopType": entry.kind,
        }
    if isinstance(entry, ForeachEntry):
        return {
            "type": "foreach",
            "step": _graph_step(entry.step)["step"],
            "opts": {"concurrency": entry.concurrency},
        }
    steps = [_graph_step(s) for s in entry.steps]
    if isinstance(entry, ParallelEntry):
        return {"type": "parallel", "steps": steps}
    assert isinstance(entry, BranchEntry)
    conditions = [_condition(i) for i in range(len(entry.conditions))]
    return {"type": "conditional", "steps": steps, "serializedConditions": conditions}


def step_graph(workflow: WorkflowSpec) -> list[dict[str, Any]]:
    """Mastra's ``serializedStepGraph``: one entry per builder call (conditions are not code here,
    so their ``fn`` is empty)."""
    return [_graph_entry(entry) for entry in workflow.entries]


def workflow_info(workflow: Workflow, *, partial: bool = False) -> dict[str, Any]:
    """``partial``: without schemas (``GET /workflows?partial=true``)."""
    info: dict[str, Any] = {
        "name": workflow.id,
        "description": workflow.description,
        "steps": {
            step_id: _step_info(step, workflow.nested.get(step_id), partial=partial)
            for step_id, step in workflow.steps.items()
        },
        "allSteps": _all_steps(workflow, partial=partial),
        "stepGraph": step_graph(workflow),
    }
    if not partial:
        for key, schema in (
            ("inputSchema", workflow.input_schema),
            ("outputSchema", workflow.output_schema),
            ("stateSchema", workflow.state_schema),
        ):
            text = superjson(schema)
            if text is not None:
                info[key] = text
    return info


# -- runs ------------------------------------------------------------------------------------------
def iso(ms: float) -> str:
    return iso_datetime(datetime.fromtimestamp(ms / 1000, UTC))


def now_ms() -> float:
    return datetime.now(UTC).timestamp() * 1000


@dataclass(frozen=True, slots=True)
class RunMeta:
    """What the server knows of a run beyond its snapshot."""

    workflow_id: str
    resource_id: str | None
    created_at: float

    def to_json(self) -> dict[str, Any]:
        return {"workflowId": self.workflow_id, "resourceId": self.resource_id, "createdAt": self.created_at}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunMeta:
        return cls(str(data["workflowId"]), data.get("resourceId"), float(data["createdAt"]))


@dataclass(frozen=True, slots=True)
class RunRecord:
    """A run as stored: its snapshot (``None`` until it starts) and the server's metadata."""

    workflow: Workflow
    run_id: str
    snapshot: dict[str, Any] | None
    meta: RunMeta | None

    @property
    def status(self) -> str:
        return str(self.snapshot.get("status")) if self.snapshot is not None else "pending"

    @property
    def resource_id(self) -> str | None:
        return self.meta.resource_id if self.meta is not None else None

    @property
    def updated_at(self) -> float:
        if self.snapshot is not None and isinstance(self.snapshot.get("updatedAt"), int | float):
            return float(self.snapshot["updatedAt"])
        return self.created_at

    @property
    def created_at(self) -> float:
        """When the server created the run; for a run started elsewhere, its first step's start."""
        if self.meta is not None:
            return self.meta.created_at
        context = (self.snapshot or {}).get("context") or {}
        starts = [
            float(result["startedAt"])
            for result in context.values()
            if isinstance(result, Mapping) and isinstance(result.get("startedAt"), int | float)
        ]
        return min(starts) if starts else self.updated_at

    def mastra_snapshot(self) -> dict[str, Any]:
        """The snapshot in Mastra's ``WorkflowRunState`` field names."""
        snapshot = self.snapshot or {}
        out: dict[str, Any] = {
            "runId": self.run_id,
            "status": self.status,
            "value": snapshot.get("state") or {},
            "context": snapshot.get("context") or {},
            "activePaths": snapshot.get("activePaths") or [],
            "stepExecutionPath": snapshot.get("stepExecutionPath") or [],
            "activeStepsPath": {},
            "suspendedPaths": snapshot.get("suspendedPaths") or {},
            "waitingPaths": {},
            "serializedStepGraph": step_graph(self.workflow),
            "timestamp": self.updated_at,
        }
        for key in ("result", "error"):
            if key in snapshot:
                out[key] = snapshot[key]
        return out

    def listing(self) -> dict[str, Any]:
        """An item of ``GET /workflows/:id/runs``."""
        out: dict[str, Any] = {
            "workflowName": self.workflow.id,
            "runId": self.run_id,
            "snapshot": self.mastra_snapshot(),
            "createdAt": iso(self.created_at),
            "updatedAt": iso(self.updated_at),
        }
        if self.resource_id is not None:
            out["resourceId"] = self.resource_id
        return out

    def details(self, fields: frozenset[str] | None = None) -> dict[str, Any]:
        """``GET /workflows/:id/runs/:runId``: metadata and status always, the rest by ``fields``."""
        snapshot = self.snapshot or {}
        context = snapshot.get("context") or {}
        out: dict[str, Any] = {
            "runId": self.run_id,
            "workflowName": self.workflow.id,
            "createdAt": iso(self.created_at),
            "updatedAt": iso(self.updated_at),
            "status": self.status,
        }
        if self.resource_id is not None:
            out["resourceId"] = self.resource_id
        extra: dict[str, Any] = {
            "payload": context.get("input"),
            "steps": {k: v for k, v in context.items() if k != "input"},
            "activeStepsPath": {},
            "serializedStepGraph": step_graph(self.workflow),
        }
        for key in ("result", "error"):
            if key in snapshot:
                extra[key] = snapshot[key]
        out.update({k: v for k, v in extra.items() if fields is None or k in fields})
        return out


async def save_meta(storage: Storage, run_id: str, meta: RunMeta) -> None:
    await storage.save_snapshot(META_NAMESPACE, run_id, meta.to_json())


async def load_record(workflow: Workflow, run_id: str) -> RunRecord | None:
    """The stored run of ``workflow`` with this id (started or only created), else ``None``."""
    storage = workflow.storage
    snapshot = await storage.load_snapshot(NAMESPACE, run_id)
    if snapshot is not None and snapshot.get("workflowId") != workflow.id:
        snapshot = None
    raw_meta = await storage.load_snapshot(META_NAMESPACE, run_id)
    meta = RunMeta.from_json(raw_meta) if raw_meta is not None else None
    if meta is not None and meta.workflow_id != workflow.id:
        meta = None
    if snapshot is None and meta is None:
        return None
    return RunRecord(workflow, run_id, snapshot, meta)


async def used_elsewhere(workflow: Workflow, run_id: str) -> tuple[bool, str | None]:
    """Whether another workflow sharing the storage has a run with this id (ids are global),
    and the resource that owns it (``None``: unknown or unconfined)."""
    used, owner = False, None
    for namespace in (NAMESPACE, META_NAMESPACE):
        data = await workflow.storage.load_snapshot(namespace, run_id)
        if data is not None and data.get("workflowId") != workflow.id:
            used = True
            owner = owner or (data.get("resourceId") if namespace == META_NAMESPACE else None)
    return used, owner


async def list_records(workflow: Workflow) -> list[RunRecord]:
    """Every stored run of ``workflow``, newest first (nested executions are not runs)."""
    storage = workflow.storage
    ids = {
        run_id
        for namespace in (NAMESPACE, META_NAMESPACE)
        for run_id in await storage.list_snapshots(namespace)
        if "/" not in run_id
    }
    records = [record for run_id in ids if (record := await load_record(workflow, run_id)) is not None]
    return sorted(records, key=lambda r: (r.created_at, r.run_id), reverse=True)


async def delete_record(workflow: Workflow, run_id: str) -> None:
    storage = workflow.storage
    await storage.delete_snapshot(META_NAMESPACE, run_id)
    await storage.delete_snapshot(NAMESPACE, run_id)
    nested = f"{run_id}/"
    for key in await storage.list_snapshots(NAMESPACE):
        if key.startswith(nested):
            await storage.delete_snapshot(NAMESPACE, key)
