"""Control-flow entries: parallel / branch blocks, loops and sleep (Mastra semantics).

Blocks start all their steps (every ``workflow-step-start``) before any of them runs, as
Mastra's ``Promise.all`` does; results arrive in completion order. The one departure from
Mastra: a step that bails inside a branch ends the whole run with the bailed value (Mastra
marks it ``bailed`` and continues, allow-list entry ``bail-in-branch-does-not-end-workflow``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING

from runstream.abort import AbortSignal, sleep
from runstream.workflows._results import StepResult, now_ms
from runstream.workflows.flow import (
    BranchEntry,
    ConditionContext,
    LoopEntry,
    ParallelEntry,
    SleepEntry,
    StepEntry,
    check,
)

if TYPE_CHECKING:
    from runstream.workflows._execution import Runner, StepCall
    from runstream.workflows.flow import Resume


async def run_block(
    ex: Runner, entry: ParallelEntry | BranchEntry, path: list[int], prev: object
) -> StepResult:
    branch = isinstance(entry, BranchEntry)
    if ex.resume is not None and ex.resume.path:
        index = ex.resume.path.pop(0)
        child = entry.steps[index]
        await ex.run_step(child, ex.resumed_input(child.id, prev), [*path, index])
        return _resumed_result(ex, entry, path)
    chosen = await _branches_to_run(ex, entry, prev) if isinstance(entry, BranchEntry) else entry.steps
    results: list[StepResult] = [{} for _ in chosen]
    started: list[tuple[int, StepCall]] = []
    for i, step in enumerate(chosen):
        done: StepResult | None = ex.results.get(step.id)
        if branch and done is not None and done.get("status") in ("success", "failed"):
            results[i] = done.copy()  # Mastra does not run a branch step that already finished
        else:
            started.append((i, ex.begin_step(step, prev, [*path, entry.steps.index(step)])))
    finished = await asyncio.gather(*(ex.complete_step(call) for _, call in started))
    for (i, _), result in zip(started, finished, strict=True):
        results[i] = result
    return _block_result(ex, chosen, results, branch)


async def _branches_to_run(ex: Runner, entry: BranchEntry, prev: object) -> list[StepEntry]:
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


def _block_result(ex: Runner, steps: list[StepEntry], results: list[StepResult], branch: bool) -> StepResult:
    failed = next((r for r in results if r["status"] == "failed"), None)
    if failed is not None:
        return {"status": "failed", "error": failed.get("error"), "tripwire": failed.get("tripwire")}
    bailed = next((r for r in results if r["status"] == "bailed"), None) if branch else None
    if bailed is not None:
        return {"status": "bailed", "output": bailed.get("output")}
    suspended = next((r for r in results if r["status"] == "suspended"), None)
    if suspended is not None:
        out: StepResult = {"status": "suspended", "suspendPayload": suspended.get("suspendPayload")}
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


def _resumed_result(ex: Runner, entry: ParallelEntry | BranchEntry, path: list[int]) -> StepResult:
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


async def run_loop(ex: Runner, entry: LoopEntry, path: list[int], prev: object) -> StepResult:
    """``dowhile`` / ``dountil``; iterations continue the count of an earlier (suspended) run."""
    previous = ex.results.get(entry.step.id)
    previous = previous if isinstance(previous, Mapping) else {}
    iteration = max(int((previous.get("metadata") or {}).get("iterationCount", 0)) - 1, 0)
    result: StepResult = {"status": "success", "output": previous.get("payload", prev)}
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


async def run_sleep(ex: Runner, entry: SleepEntry, prev: object) -> StepResult:
    started = now_ms()
    ex.sink.event(
        "workflow-step-waiting", {"id": entry.id, "payload": prev, "startedAt": started, "status": "waiting"}
    )
    ex.results[entry.id] = {"status": "waiting", "payload": prev, "startedAt": started}
    await _abortable_sleep(entry.ms, ex.abort)
    if ex.abort.aborted:
        return {"status": "canceled"}
    ended = now_ms()
    result: StepResult = {
        "payload": prev,
        "startedAt": started,
        "endedAt": ended,
        "status": "success",
        "output": prev,
    }
    ex.results[entry.id] = result
    ex.sink.event(
        "workflow-step-result", {"id": entry.id, "endedAt": ended, "status": "success", "output": prev}
    )
    return result


async def _abortable_sleep(ms: float, signal: AbortSignal) -> None:
    await sleep(ms / 1000, signal)
