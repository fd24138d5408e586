"""Control-flow entries: parallel / branch blocks, loops, foreach and sleep (Mastra semantics).

Blocks start all their steps (every ``workflow-step-start``) before any of them runs, as
Mastra's ``Promise.all`` does; results arrive in completion order. The one departure from
Mastra: a step that bails inside a branch ends the whole run with the bailed value (Mastra
marks it ``bailed`` and continues, allow-list entry ``bail-in-branch-does-not-end-workflow``).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from runstream.abort import AbortSignal
from runstream.workflows._results import now_ms, omit_completion
from runstream.workflows.errors import WorkflowError
from runstream.workflows.flow import (
    BranchEntry,
    ConditionContext,
    ForeachEntry,
    LoopEntry,
    ParallelEntry,
    SleepEntry,
    StepEntry,
    check,
)

if TYPE_CHECKING:
    from runstream.workflows.engine import Execution, Resume, StepCall


async def run_block(
    ex: Execution, entry: ParallelEntry | BranchEntry, path: list[int], prev: Any
) -> dict[str, Any]:
    branch = isinstance(entry, BranchEntry)
    if ex.resume is not None and ex.resume.path:
        index = ex.resume.path.pop(0)
        child = entry.steps[index]
        await ex.run_step(child, ex.resumed_input(child.id, prev), [*path, index])
        return _resumed_result(ex, entry, path)
    chosen = await _branches_to_run(ex, entry, prev) if isinstance(entry, BranchEntry) else entry.steps
    results: list[dict[str, Any]] = [{} for _ in chosen]
    started: list[tuple[int, StepCall]] = []
    for i, step in enumerate(chosen):
        done = ex.results.get(step.id)
        if branch and isinstance(done, Mapping) and done.get("status") in ("success", "failed"):
            results[i] = dict(done)  # Mastra does not run a branch step that already finished
        else:
            started.append((i, ex.begin_step(step, prev, [*path, entry.steps.index(step)])))
    finished = await asyncio.gather(*(ex.complete_step(call) for _, call in started))
    for (i, _), result in zip(started, finished, strict=True):
        results[i] = result
    return _block_result(ex, chosen, results, branch)


async def _branches_to_run(ex: Execution, entry: BranchEntry, prev: Any) -> list[StepEntry]:
    ctx = ConditionContext(prev, ex.state, ex.results.get("input"), ex.results)
    chosen = []
    for step, condition in zip(entry.steps, entry.conditions, strict=True):
        try:
            holds = await check(condition, ctx)
        except Exception:  # Mastra treats a condition that throws as false
            holds = False
        if holds:
            chosen.append(step)
    return chosen


def _block_result(
    ex: Execution, steps: list[StepEntry], results: list[dict[str, Any]], branch: bool
) -> dict[str, Any]:
    failed = next((r for r in results if r["status"] == "failed"), None)
    if failed is not None:
        return {"status": "failed", "error": failed.get("error"), "tripwire": failed.get("tripwire")}
    bailed = next((r for r in results if r["status"] == "bailed"), None) if branch else None
    if bailed is not None:
        return {"status": "bailed", "output": bailed.get("output")}
    suspended = next((r for r in results if r["status"] == "suspended"), None)
    if suspended is not None:
        out = {"status": "suspended", "suspendPayload": suspended.get("suspendPayload")}
        if branch:
            out["suspendedAt"] = suspended.get("suspendedAt")
        return out
    if ex.abort.aborted:
        return {"status": "canceled"}
    output = {
        s.id: r["output"]
        for s, r in zip(steps, results, strict=True)
        if r["status"] == "success" and "output" in r
    }
    return {"status": "success", "output": output}


def _resumed_result(ex: Execution, entry: ParallelEntry | BranchEntry, path: list[int]) -> dict[str, Any]:
    """After resuming one step of a block: done if every (executed) step succeeded."""
    branch = isinstance(entry, BranchEntry)
    relevant = [s for s in entry.steps if not branch or s.id in ex.results]
    status = {s.id: (ex.results.get(s.id) or {}).get("status") for s in entry.steps}
    if all(status[s.id] == "success" for s in relevant):
        return {
            "status": "success",
            "output": {
                s.id: ex.results[s.id].get("output") for s in entry.steps if status[s.id] == "success"
            },
        }
    failed = next((s for s in relevant if status[s.id] == "failed"), None)
    if failed is not None:
        result = ex.results[failed.id]
        return {"status": "failed", "error": result.get("error"), "tripwire": result.get("tripwire")}
    bailed = next((s for s in relevant if status[s.id] == "bailed"), None) if branch else None
    if bailed is not None:
        return {"status": "bailed", "output": ex.results[bailed.id].get("output")}
    waiting = next((s for s in entry.steps if status[s.id] == "suspended"), None)
    payload = ex.results[waiting.id].get("suspendPayload") if waiting is not None else {}
    for index, step in enumerate(entry.steps):
        if status[step.id] == "suspended":
            ex.suspended_paths[step.id] = [*path, index]
    return {"status": "suspended", "payload": payload, "suspendPayload": payload}


async def run_loop(ex: Execution, entry: LoopEntry, path: list[int], prev: Any) -> dict[str, Any]:
    """``dowhile`` / ``dountil``; iterations continue the count of an earlier (suspended) run."""
    previous = ex.results.get(entry.step.id)
    previous = previous if isinstance(previous, Mapping) else {}
    iteration = max(int((previous.get("metadata") or {}).get("iterationCount", 0)) - 1, 0)
    result: dict[str, Any] = {"status": "success", "output": previous.get("payload", prev)}
    resume: Resume | None = ex.resume
    while True:
        if ex.abort.aborted:
            return {"status": "canceled"}
        result = await ex.run_step(
            entry.step, result.get("output"), path, iteration=iteration + 1, resume=resume
        )
        if resume is not None and result["status"] != "suspended":
            resume = None
        if result["status"] != "success" or ex.abort.aborted:
            return result if result["status"] != "success" else {"status": "canceled"}
        ctx = ConditionContext(
            result.get("output"), ex.state, ex.results.get("input"), ex.results, iteration + 1
        )
        holds = await check(entry.condition, ctx)
        iteration += 1
        if ex.abort.aborted:
            return {"status": "canceled"}
        if holds != (entry.kind == "dowhile"):
            return result


async def run_sleep(ex: Execution, entry: SleepEntry, prev: Any) -> dict[str, Any]:
    started = now_ms()
    ex.sink.event(
        "workflow-step-waiting", {"id": entry.id, "payload": prev, "startedAt": started, "status": "waiting"}
    )
    ex.results[entry.id] = {"status": "waiting", "payload": prev, "startedAt": started}
    await _abortable_sleep(entry.ms, ex.abort)
    if ex.abort.aborted:
        return {"status": "canceled"}
    ended = now_ms()
    result = {"payload": prev, "startedAt": started, "endedAt": ended, "status": "success", "output": prev}
    ex.results[entry.id] = result
    ex.sink.event(
        "workflow-step-result", {"id": entry.id, "endedAt": ended, "status": "success", "output": prev}
    )
    return result


async def _abortable_sleep(ms: float, signal: AbortSignal) -> None:
    if signal.aborted:
        return
    try:
        await asyncio.wait_for(signal.wait(), ms / 1000)
    except TimeoutError:
        return


async def run_foreach(ex: Execution, entry: ForeachEntry, path: list[int], items: Any) -> dict[str, Any]:
    """Run the step once per item, ``concurrency`` at a time; progress events in completion
    order, the output in input order. A suspended or failed item stops items not yet started."""
    if not isinstance(items, list):
        raise WorkflowError(
            f"foreach step {entry.step.id!r} needs an array as input, got {type(items).__name__}"
        )
    step_id = entry.step.id
    resume = ex.resume if ex.resume is not None and ex.resume.steps[:1] == [step_id] else None
    previous = ex.results.get(step_id) if isinstance(ex.results.get(step_id), Mapping) else {}
    info = omit_completion(previous)
    if resume is not None:
        info.update(resumePayload=resume.payload, resumedAt=now_ms())
    else:
        info.update(payload=items, startedAt=now_ms())
    ex.sink.event("workflow-step-start", {"id": step_id, **info, "status": "running"})

    meta = (previous.get("suspendPayload") or {}).get("__workflow_meta") or {} if previous else {}
    item_results: list[Any] = list(meta.get("foreachOutput") or [])
    item_results += [None] * (len(items) - len(item_results))
    first_suspended = meta.get("foreachIndex", 0) if previous and previous.get("status") == "suspended" else 0
    outputs: list[Any] = [None] * len(items)
    suspended: dict[int, dict[str, Any]] = {}
    state = _ForeachState(len(items))
    queue: deque[tuple[int, Resume | None]] = deque()
    for k in range(len(items)):
        before = item_results[k] if isinstance(item_results[k], Mapping) else None
        target = ex.resume.foreach_index if ex.resume is not None else None
        if before and (
            before.get("status") == "success"
            or (before.get("status") == "suspended" and target not in (None, k))
        ):
            if before.get("status") == "success":
                outputs[k] = before.get("output")
            else:
                suspended[k] = _suspension(before)
            continue
        if target is not None:
            queue.append((k, ex.resume if target == k else None))
        else:
            is_target = (before and before.get("status") == "suspended") or first_suspended == k
            queue.append((k, ex.resume if is_target else None))

    async def worker() -> None:
        while queue:
            k, item_resume = queue.popleft()
            if ex.abort.aborted:
                queue.clear()
                return
            result = await ex.run_step(entry.step, items[k], path, foreach_index=k, resume=item_resume)
            status = result["status"]
            if status == "success":
                state.completed += 1
                outputs[k] = result.get("output")
                _progress(ex, step_id, state, k, "success", result.get("output"))
            else:
                if status == "suspended":
                    suspended.setdefault(k, _suspension(result))
                    _progress(ex, step_id, state, k, "suspended")
                else:
                    state.completed += 1
                    _progress(ex, step_id, state, k, "failed")
                    if status == "failed":
                        state.error = state.error or result
                    else:
                        state.exit = state.exit or result
                queue.clear()
            item_results[k] = result if status == "suspended" else {**result, "suspendPayload": {}}

    await asyncio.gather(*(worker() for _ in range(min(max(entry.concurrency, 1), len(queue)))))

    if ex.abort.aborted:
        return {**info, "status": "canceled", "output": outputs, "endedAt": now_ms()}
    if state.error is not None:
        ending = {
            "status": "failed",
            "error": state.error.get("error"),
            "endedAt": state.error.get("endedAt"),
        }
        ex.sink.event("workflow-step-result", {"id": step_id, **ending})
        return {**state.error, "suspendPayload": {"__workflow_meta": {"foreachOutput": item_results}}}
    if state.exit is not None:
        ex.sink.event("workflow-step-result", {"id": step_id, **state.exit})
        return state.exit
    if suspended:
        index = min(suspended)
        ex.sink.event("workflow-step-suspended", {"id": step_id, **suspended[index]})
        ex.suspended_paths[step_id] = list(path)
        payload = dict(suspended[index].get("suspendPayload") or {})
        payload["__workflow_meta"] = {
            **(payload.get("__workflow_meta") or {}),
            "foreachIndex": index,
            "foreachOutput": item_results,
        }
        return {**info, "suspendedAt": now_ms(), "status": "suspended", "suspendPayload": payload}
    ended = now_ms()
    ex.sink.event(
        "workflow-step-result", {"id": step_id, "status": "success", "output": outputs, "endedAt": ended}
    )
    return {**info, "status": "success", "output": outputs, "endedAt": ended}


class _ForeachState:
    def __init__(self, total: int) -> None:
        self.total = total
        self.completed = 0
        self.error: dict[str, Any] | None = None
        self.exit: dict[str, Any] | None = None


def _suspension(result: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "status": "suspended",
        "suspendPayload": result.get("suspendPayload"),
        "suspendedAt": result.get("suspendedAt"),
    }


def _progress(
    ex: Execution, step_id: str, state: _ForeachState, index: int, status: str, output: Any = None
) -> None:
    payload: dict[str, Any] = {
        "id": step_id,
        "completedCount": state.completed,
        "totalCount": state.total,
        "currentIndex": index,
        "iterationStatus": status,
    }
    if status == "success" and output is not None:
        payload["iterationOutput"] = output
    ex.sink.event("workflow-step-progress", payload)
