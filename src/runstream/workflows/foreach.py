"""``.foreach()``: the step once per item of an array, ``concurrency`` items at a time.

As in Mastra: one ``workflow-step-start`` for the whole foreach (no ``stepCallId``), a
``workflow-step-progress`` per finished item in completion order, one result with the outputs
in input order. A suspended or failed item stops the items not started yet. A suspension keeps
every item's result in ``__workflow_meta.foreachOutput`` so the resume runs only the items that
did not finish (the suspended one with the resume data).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from runstream.workflows._results import StepResult, now_ms, omit_completion
from runstream.workflows.errors import WorkflowError
from runstream.workflows.flow import ForeachEntry

if TYPE_CHECKING:
    from runstream.workflows._execution import Runner
    from runstream.workflows.flow import Resume


@dataclass(slots=True)
class _Items:
    """The bookkeeping of one foreach execution."""

    total: int
    results: list[Any]
    """Per item: its last step result (kept in the snapshot for a resume)."""
    outputs: list[Any]
    completed: int = 0
    suspended: dict[int, StepResult] = field(default_factory=dict)
    error: StepResult | None = None
    exit: StepResult | None = None


async def run_foreach(ex: Runner, entry: ForeachEntry, path: list[int], items: object) -> StepResult:
    if not isinstance(items, list):
        raise WorkflowError(
            f"foreach step {entry.step.id!r} needs an array as input, got {type(items).__name__}"
        )
    step_id = entry.step.id
    previous = ex.results.get(step_id)
    previous = previous if isinstance(previous, Mapping) else {}
    info = omit_completion(previous)
    if ex.resume is not None and ex.resume.steps[:1] == [step_id]:
        info.update({"resumePayload": ex.resume.payload, "resumedAt": now_ms()})
    else:
        info.update({"payload": items, "startedAt": now_ms()})
    ex.sink.event("workflow-step-start", {"id": step_id, **info, "status": "running"})

    state, queue = _plan(ex, previous, len(items))

    async def worker() -> None:
        while queue:
            k, resume = queue.popleft()
            if ex.abort.aborted:
                queue.clear()
                return
            result = await ex.run_step(entry.step, items[k], path, foreach_index=k, resume=resume)
            if result["status"] != "success":
                queue.clear()
            _record(ex, step_id, state, k, result)

    await asyncio.gather(*(worker() for _ in range(min(max(entry.concurrency, 1), len(queue)))))
    return _finish(ex, step_id, path, info, state)


def _plan(
    ex: Runner, previous: Mapping[str, Any], total: int
) -> tuple[_Items, deque[tuple[int, Resume | None]]]:
    """Which items to run (and which one gets the resume data), skipping finished ones."""
    meta = (previous.get("suspendPayload") or {}).get("__workflow_meta") or {}
    earlier = list(meta.get("foreachOutput") or [])
    earlier += [None] * (total - len(earlier))
    first_suspended = meta.get("foreachIndex", 0) if previous.get("status") == "suspended" else 0
    target = ex.resume.foreach_index if ex.resume is not None else None
    state = _Items(total=total, results=earlier, outputs=[None] * total)
    queue: deque[tuple[int, Resume | None]] = deque()
    for k, before in enumerate(earlier):
        status = before.get("status") if isinstance(before, Mapping) else None
        if status == "success":
            state.outputs[k] = before.get("output")
        elif status == "suspended" and target not in (None, k):
            state.suspended[k] = _suspension(before)
        else:
            gets_resume = k == target if target is not None else status == "suspended" or k == first_suspended
            queue.append((k, ex.resume if gets_resume else None))
    return state, queue


def _record(ex: Runner, step_id: str, state: _Items, k: int, result: StepResult) -> None:
    status = result["status"]
    if status == "success":
        state.completed += 1
        state.outputs[k] = result.get("output")
        _progress(ex, step_id, state, k, "success", result.get("output"))
    elif status == "suspended":
        state.suspended.setdefault(k, _suspension(result))
        _progress(ex, step_id, state, k, "suspended")
    else:
        state.completed += 1
        _progress(ex, step_id, state, k, "failed")
        if status == "failed":
            state.error = state.error or result
        else:
            state.exit = state.exit or result
    state.results[k] = result if status == "suspended" else {**result, "suspendPayload": {}}


def _finish(ex: Runner, step_id: str, path: list[int], info: StepResult, state: _Items) -> StepResult:
    if ex.abort.aborted:
        return {**info, "status": "canceled", "output": state.outputs, "endedAt": now_ms()}
    if state.error is not None:
        ending = {
            "status": "failed",
            "error": state.error.get("error"),
            "endedAt": state.error.get("endedAt"),
        }
        ex.sink.event("workflow-step-result", {"id": step_id, **ending})
        return {**state.error, "suspendPayload": {"__workflow_meta": {"foreachOutput": state.results}}}
    if state.exit is not None:
        ex.sink.event("workflow-step-result", {"id": step_id, **state.exit})
        return state.exit
    if state.suspended:
        index = min(state.suspended)
        ex.sink.event("workflow-step-suspended", {"id": step_id, **state.suspended[index]})
        ex.suspended_paths[step_id] = list(path)
        payload = dict(state.suspended[index].get("suspendPayload") or {})
        payload["__workflow_meta"] = {
            **(payload.get("__workflow_meta") or {}),
            "foreachIndex": index,
            "foreachOutput": state.results,
        }
        return {**info, "suspendedAt": now_ms(), "status": "suspended", "suspendPayload": payload}
    ended = now_ms()
    ex.sink.event(
        "workflow-step-result",
        {"id": step_id, "status": "success", "output": state.outputs, "endedAt": ended},
    )
    return {**info, "status": "success", "output": state.outputs, "endedAt": ended}


def _suspension(result: Mapping[str, Any]) -> StepResult:
    return {
        "status": "suspended",
        "suspendPayload": result.get("suspendPayload"),
        "suspendedAt": result.get("suspendedAt"),
    }


def _progress(ex: Runner, step_id: str, state: _Items, index: int, status: str, output: Any = None) -> None:
    payload: dict[str, object] = {
        "id": step_id,
        "completedCount": state.completed,
        "totalCount": state.total,
        "currentIndex": index,
        "iterationStatus": status,
    }
    if status == "success" and output is not None:
        payload["iterationOutput"] = output
    ex.sink.event("workflow-step-progress", payload)
