"""Workflows and their runs in the JSON shapes of Mastra's workflow routes.

Details (``GET /workflows/:id``) carry schemas as superjson strings (``{"json": <schema>}``,
which client-js's ``getSchema`` unwraps) and a ``stepGraph`` of Mastra's serialized flow entries.
Runs are read from the workflow's snapshots (namespace ``workflow-runs``); what the server adds
to a run it created — who owns it and when it was created — lives beside them in
``workflow-run-meta``, so listings survive a restart.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal, NotRequired, TypeAlias, TypedDict

from runstream._clock import iso_datetime
from runstream._json import JsonMapping, JsonObject, JsonValue
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


WorkflowSchemaKey: TypeAlias = Literal["inputSchema", "outputSchema", "stateSchema"]
SchemaKey: TypeAlias = Literal["inputSchema", "outputSchema", "stateSchema", "resumeSchema", "suspendSchema"]


class StepInfo(TypedDict):
    """A step of ``GET /workflows/:id`` (``steps`` / ``allSteps``); schemas as :func:`superjson`."""

    id: str
    description: str
    component: NotRequired[Literal["WORKFLOW"]]
    isWorkflow: NotRequired[bool]
    inputSchema: NotRequired[str]
    outputSchema: NotRequired[str]
    resumeSchema: NotRequired[str]
    suspendSchema: NotRequired[str]
    stateSchema: NotRequired[str]


class SerializedStep(TypedDict):
    id: str
    description: str
    component: NotRequired[Literal["WORKFLOW"]]
    serializedStepFlow: NotRequired[list[GraphEntry]]


class SerializedCondition(TypedDict):
    id: str
    fn: str


class GraphStep(TypedDict):
    type: Literal["step"]
    step: SerializedStep


class GraphSleep(TypedDict):
    type: Literal["sleep"]
    id: str
    duration: float | None


class GraphLoop(TypedDict):
    type: Literal["loop"]
    step: SerializedStep
    serializedCondition: SerializedCondition
    loopType: str


class ForeachOptions(TypedDict):
    concurrency: int


class GraphForeach(TypedDict):
    type: Literal["foreach"]
    step: SerializedStep
    opts: ForeachOptions


class GraphParallel(TypedDict):
    type: Literal["parallel"]
    steps: list[GraphStep]


class GraphConditional(TypedDict):
    type: Literal["conditional"]
    steps: list[GraphStep]
    serializedConditions: list[SerializedCondition]


GraphEntry: TypeAlias = GraphStep | GraphSleep | GraphLoop | GraphForeach | GraphParallel | GraphConditional
"""An entry of Mastra's ``serializedStepGraph``."""


class WorkflowInfo(TypedDict):
    """``GET /workflows/:id`` (and an item of ``GET /workflows``)."""

    name: str
    description: str
    steps: dict[str, StepInfo]
    allSteps: dict[str, StepInfo]
    stepGraph: list[GraphEntry]
    inputSchema: NotRequired[str]
    outputSchema: NotRequired[str]
    stateSchema: NotRequired[str]


def superjson(schema: Schema | None) -> str | None:
    return None if schema is None else json.dumps({"json": schema.json_schema}, separators=(",", ":"))


_STEP_SCHEMAS: tuple[tuple[SchemaKey, str], ...] = (
    ("inputSchema", "input_schema"),
    ("outputSchema", "output_schema"),
    ("resumeSchema", "resume_schema"),
    ("suspendSchema", "suspend_schema"),
    ("stateSchema", "state_schema"),
)


def _step_info(step: Step, nested: Workflow | None, *, partial: bool) -> StepInfo:
    info: StepInfo = {"id": step.id, "description": step.description}
    if nested is not None:
        info["component"], info["isWorkflow"] = "WORKFLOW", True
    if not partial:
        for key, attribute in _STEP_SCHEMAS:
            text = superjson(getattr(step, attribute))
            if text is not None:
                info[key] = text
    return info


def _all_steps(workflow: Workflow, *, partial: bool, prefix: str = "") -> dict[str, StepInfo]:
    """Every step, nested workflows' steps included as ``<nested id>.<step id>``."""
    out: dict[str, StepInfo] = {}
    for step_id, step in workflow.steps.items():
        key = f"{prefix}{step_id}"
        nested = workflow.nested.get(step_id)
        out[key] = _step_info(step, nested, partial=partial)
        if nested is not None:
            out.update(_all_steps(nested, partial=partial, prefix=f"{key}."))
    return out


def _graph_step(entry: StepEntry) -> GraphStep:
    step: SerializedStep = {"id": entry.id, "description": entry.step.description}
    if entry.workflow is not None:
        step["component"], step["serializedStepFlow"] = "WORKFLOW", step_graph(entry.workflow)
    return {"type": "step", "step": step}


def _condition(index: int) -> SerializedCondition:
    return {"id": f"condition-{index}", "fn": ""}


def _graph_entry(entry: Entry) -> GraphEntry:
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


def step_graph(workflow: WorkflowSpec) -> list[GraphEntry]:
    """Mastra's ``serializedStepGraph``: one entry per builder call (conditions are not code here,
    so their ``fn`` is empty)."""
    return [_graph_entry(entry) for entry in workflow.entries]


def workflow_info(workflow: Workflow, *, partial: bool = False) -> WorkflowInfo:
    """``partial``: without schemas (``GET /workflows?partial=true``)."""
    info: WorkflowInfo = {
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
        schemas: tuple[tuple[WorkflowSchemaKey, Schema | None], ...] = (
            ("inputSchema", workflow.input_schema),
            ("outputSchema", workflow.output_schema),
            ("stateSchema", workflow.state_schema),
        )
        for key, schema in schemas:
            text = superjson(schema)
            if text is not None:
                info[key] = text
    return info


# -- runs ------------------------------------------------------------------------------------------
def iso(ms: float) -> str:
    return iso_datetime(datetime.fromtimestamp(ms / 1000, UTC))


def now_ms() -> float:
    return datetime.now(UTC).timestamp() * 1000


class RunMetaJson(TypedDict):
    workflowId: str
    resourceId: str | None
    createdAt: float


class MastraSnapshot(TypedDict):
    """Mastra's ``WorkflowRunState``: a run's snapshot as the run listings show it."""

    runId: str
    status: str
    value: JsonValue
    context: JsonObject
    activePaths: JsonValue
    stepExecutionPath: JsonValue
    activeStepsPath: JsonObject
    suspendedPaths: JsonValue
    waitingPaths: JsonObject
    serializedStepGraph: list[GraphEntry]
    timestamp: float
    result: NotRequired[JsonValue]
    error: NotRequired[JsonValue]


class RunListing(TypedDict):
    """An item of ``GET /workflows/:id/runs``."""

    workflowName: str
    runId: str
    snapshot: MastraSnapshot
    createdAt: str
    updatedAt: str
    resourceId: NotRequired[str]


class RunDetails(TypedDict):
    """``GET /workflows/:id/runs/:runId``: the keys after ``status`` only as ``fields`` asks."""

    runId: str
    workflowName: str
    createdAt: str
    updatedAt: str
    status: str
    resourceId: NotRequired[str]
    payload: NotRequired[JsonValue]
    steps: NotRequired[JsonObject]
    activeStepsPath: NotRequired[JsonObject]
    serializedStepGraph: NotRequired[list[GraphEntry]]
    result: NotRequired[JsonValue]
    error: NotRequired[JsonValue]


def _object(value: JsonValue | None) -> JsonObject:
    """``value`` if it is a JSON object, else an empty one (a snapshot's optional sections)."""
    return value if isinstance(value, dict) else {}


@dataclass(frozen=True, slots=True)
class RunMeta:
    """What the server knows of a run beyond its snapshot."""

    workflow_id: str
    resource_id: str | None
    created_at: float

    def to_json(self) -> RunMetaJson:
        return {"workflowId": self.workflow_id, "resourceId": self.resource_id, "createdAt": self.created_at}

    @classmethod
    def from_json(cls, data: JsonMapping) -> RunMeta:
        """A record :meth:`to_json` wrote (so ``createdAt`` is a number)."""
        resource, created = data.get("resourceId"), data["createdAt"]
        return cls(
            str(data["workflowId"]),
            resource if isinstance(resource, str) else None,
            float(created) if isinstance(created, int | float) else 0.0,
        )


@dataclass(frozen=True, slots=True)
class RunRecord:
    """A run as stored: its snapshot (``None`` until it starts) and the server's metadata."""

    workflow: Workflow
    run_id: str
    snapshot: JsonObject | None
    meta: RunMeta | None

    @property
    def status(self) -> str:
        return str(self.snapshot.get("status")) if self.snapshot is not None else "pending"

    @property
    def resource_id(self) -> str | None:
        return self.meta.resource_id if self.meta is not None else None

    @property
    def updated_at(self) -> float:
        if self.snapshot is not None and isinstance(stamp := self.snapshot.get("updatedAt"), int | float):
            return float(stamp)
        return self.created_at

    @property
    def created_at(self) -> float:
        """When the server created the run; for a run started elsewhere, its first step's start."""
        if self.meta is not None:
            return self.meta.created_at
        context = _object((self.snapshot or {}).get("context"))
        starts = [
            float(started)
            for result in context.values()
            if isinstance(result, dict) and isinstance(started := result.get("startedAt"), int | float)
        ]
        return min(starts) if starts else self.updated_at

    def mastra_snapshot(self) -> MastraSnapshot:
        """The snapshot in Mastra's ``WorkflowRunState`` field names."""
        snapshot = self.snapshot or {}
        out: MastraSnapshot = {
            "runId": self.run_id,
            "status": self.status,
            "value": snapshot.get("state") or {},
            "context": _object(snapshot.get("context")),
            "activePaths": snapshot.get("activePaths") or [],
            "stepExecutionPath": snapshot.get("stepExecutionPath") or [],
            "activeStepsPath": {},
            "suspendedPaths": snapshot.get("suspendedPaths") or {},
            "waitingPaths": {},
            "serializedStepGraph": step_graph(self.workflow),
            "timestamp": self.updated_at,
        }
        if "result" in snapshot:
            out["result"] = snapshot["result"]
        if "error" in snapshot:
            out["error"] = snapshot["error"]
        return out

    def listing(self) -> RunListing:
        """An item of ``GET /workflows/:id/runs``."""
        out: RunListing = {
            "workflowName": self.workflow.id,
            "runId": self.run_id,
            "snapshot": self.mastra_snapshot(),
            "createdAt": iso(self.created_at),
            "updatedAt": iso(self.updated_at),
        }
        if self.resource_id is not None:
            out["resourceId"] = self.resource_id
        return out

    def details(self, fields: frozenset[str] | None = None) -> RunDetails:
        """``GET /workflows/:id/runs/:runId``: metadata and status always, the rest by ``fields``."""
        snapshot = self.snapshot or {}
        context = _object(snapshot.get("context"))
        out: RunDetails = {
            "runId": self.run_id,
            "workflowName": self.workflow.id,
            "createdAt": iso(self.created_at),
            "updatedAt": iso(self.updated_at),
            "status": self.status,
        }
        if self.resource_id is not None:
            out["resourceId"] = self.resource_id
        every = RUN_FIELDS if fields is None else fields
        if "payload" in every:
            out["payload"] = context.get("input")
        if "steps" in every:
            out["steps"] = {k: v for k, v in context.items() if k != "input"}
        if "activeStepsPath" in every:
            out["activeStepsPath"] = {}
        if "serializedStepGraph" in every:
            out["serializedStepGraph"] = step_graph(self.workflow)
        if "result" in every and "result" in snapshot:
            out["result"] = snapshot["result"]
        if "error" in every and "error" in snapshot:
            out["error"] = snapshot["error"]
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
            resource = data.get("resourceId") if namespace == META_NAMESPACE else None
            owner = owner or (resource if isinstance(resource, str) else None)
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
