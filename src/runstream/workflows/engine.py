"""The execution engine: one pass over a workflow's entries for one run (a start or a resume).

It follows Mastra's default engine step by step, because the chunk stream shows its internals:
a step's start payload carries the fields of its previous result in this run (so a resumed
step keeps its first ``startedAt`` and a later loop iteration still shows the resume payload),
a failed attempt that is retried emits nothing, ``setState`` merges into the state when the
step ends, and the run is checked for cancellation between entries (``workflow-canceled``).
Step results live in ``results`` keyed by step id (``"input"`` holds the run's input) and are
persisted as a snapshot after every entry, so a suspended run can be resumed by another process.

One deliberate difference: a step that calls ``bail()`` inside a ``.branch()`` ends the run
(Mastra only marks it ``bailed`` and goes on with the next step; see :mod:`.control`).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from opentelemetry import trace

from runstream import _tracing as tracing
from runstream._schema import SchemaValidationError, to_plain
from runstream.abort import AbortSignal
from runstream.processors import TripWire
from runstream.workflows import control, foreach
from runstream.workflows._execution import RunResume, StepCall
from runstream.workflows._results import UNDEFINED, StepResult, now_ms, omit_completion
from runstream.workflows.errors import WorkflowError
from runstream.workflows.events import Sink
from runstream.workflows.flow import Entry, ForeachEntry, LoopEntry, Resume, SleepEntry, StepEntry
from runstream.workflows.nested import run_nested
from runstream.workflows.output import WorkflowResult
from runstream.workflows.snapshots import RunStore, WorkflowSnapshot
from runstream.workflows.step import StepBailed, StepContext, StepSuspended, StepWriter

if TYPE_CHECKING:
    from opentelemetry.trace import Span

    from runstream.workflows.flow import WorkflowSpec


@dataclass(slots=True)
class _Outcome:
    status: str
    value: Any = UNDEFINED
    state: dict[str, Any] | None = None


@dataclass(slots=True)
class Execution:
    """Runs a workflow's entries for one run, reporting to ``sink`` and saving to ``store``."""

    workflow: WorkflowSpec
    run_id: str
    sink: Sink
    abort: AbortSignal
    store: RunStore
    results: dict[str, Any] = field(default_factory=dict)
    state: dict[str, Any] = field(default_factory=dict)
    resume: Resume | None = None
    suspended_paths: dict[str, list[int]] = field(default_factory=dict)
    span: Span | None = None
    """The run's span (set by the run), parent of its steps' spans."""
    active_path: list[int] = field(default_factory=list)
    """The path of the entry running (Mastra's ``activePaths``)."""
    step_path: list[str] = field(default_factory=list)
    """The single steps started, in order, a resumed one not again (``stepExecutionPath``)."""

    def nested(
        self, workflow: WorkflowSpec, run_id: str, sink: Sink, abort: AbortSignal, store: RunStore
    ) -> Execution:
        """A fresh execution of ``workflow`` inside this one (a nested workflow step)."""
        return Execution(workflow, run_id, sink, abort, store)

    # -- the run -------------------------------------------------------------------------------
    async def start(self, input_data: object, state: dict[str, Any]) -> WorkflowResult:
        self.results = {"input": input_data}
        self.state = state
        await self.store.save(self.snapshot("running"))
        return await self.run_from(0)

    async def run_from(self, start: int) -> WorkflowResult:
        entries = self.workflow.entries
        if not entries:
            raise WorkflowError("Workflow must have at least one step")
        last: StepResult = {"status": "success", "output": self.results.get("input")}
        for i in range(start, len(entries)):
            if self.abort.aborted:
                return await self._finish({"status": "canceled"})
            self.suspended_paths = {}
            self.active_path = [i]
            prev = self.entry_output(entries[i - 1]) if i > 0 else self.results.get("input")
            if prev is UNDEFINED:
                prev = None
            last = await self.run_entry(entries[i], [i], prev)
            if last["status"] != "success":
                if last["status"] == "bailed":
                    last = {**last, "status": "success"}
                return await self._finish(last)
        return await self._finish(last)

    async def run_entry(self, entry: Entry, path: list[int], prev: object) -> StepResult:
        if isinstance(entry, StepEntry):
            if self.resume is None or entry.id not in self.resume.steps:
                self.step_path.append(entry.id)
            result = await self.run_step(entry, self.resumed_input(entry.id, prev), path)
        elif isinstance(entry, SleepEntry):
            result = await control.run_sleep(self, entry, prev)
        elif isinstance(entry, LoopEntry):
            result = await control.run_loop(self, entry, path, prev)
            self.results[entry.step.id] = result
        elif isinstance(entry, ForeachEntry):
            result = await foreach.run_foreach(self, entry, path, self.resumed_input(entry.step.id, prev))
            self.results[entry.step.id] = result
        else:
            result = await control.run_block(self, entry, path, prev)
        if self.abort.aborted:
            result = {**result, "status": "canceled"}
        await self.store.save(self.snapshot("running" if result["status"] == "success" else result["status"]))
        if result["status"] == "canceled":
            self.sink.event("workflow-canceled", {})
        return result

    def resumed_input(self, step_id: str, prev: object) -> object:
        """A resumed step runs on the input it had when it suspended."""
        if self.resume is not None and step_id in self.resume.steps:
            previous = self.results.get(step_id)
            if isinstance(previous, Mapping) and "payload" in previous:
                return previous["payload"]
        return prev

    def entry_output(self, entry: Entry) -> object:
        """The input the entry after ``entry`` receives."""
        if isinstance(entry, StepEntry | LoopEntry | ForeachEntry):
            step_id = entry.id if isinstance(entry, StepEntry) else entry.step.id
            return self._output_of(step_id)
        if isinstance(entry, SleepEntry):
            return self._output_of(entry.id)
        return {s.id: self._output_of(s.id) for s in entry.steps if self._output_of(s.id) is not UNDEFINED}

    def _output_of(self, step_id: str) -> object:
        result = self.results.get(step_id)
        return result.get("output", UNDEFINED) if isinstance(result, Mapping) else UNDEFINED

    async def _finish(self, last: StepResult) -> WorkflowResult:
        result = self.result(last)
        await self.store.save(self.snapshot(result.status, result))
        return result

    def result(self, last: StepResult) -> WorkflowResult:
        out = WorkflowResult(
            status=last["status"],
            run_id=self.run_id,
            steps={k: v for k, v in self.results.items() if k != "input"},
            input=self.results.get("input"),
            state=self.state,
        )
        if out.status == "success":
            out.result = last.get("output")
        elif out.status == "failed":
            if last.get("tripwire"):
                out.status, out.tripwire = "tripwire", last["tripwire"]
            else:
                out.error = last.get("error")
        elif out.status == "suspended":
            for step_id, step_result in out.steps.items():
                if isinstance(step_result, Mapping) and step_result.get("status") == "suspended":
                    payload = dict(step_result.get("suspendPayload") or {})
                    meta = payload.pop("__workflow_meta", None) or {}
                    out.suspend_payload[step_id] = payload
                    out.suspended.append([step_id, *meta.get("path", [])])
        return out

    def snapshot(self, status: str, result: WorkflowResult | None = None) -> WorkflowSnapshot:
        snapshot: WorkflowSnapshot = {
            "workflowId": self.workflow.id,
            "runId": self.run_id,
            "status": status,
            "context": self.results,
            "state": self.state,
            "suspendedPaths": self.suspended_paths,
            "activePaths": list(self.active_path),
            "stepExecutionPath": list(self.step_path),
            "updatedAt": now_ms(),
        }
        if result is not None and result.status == "success":
            snapshot["result"] = result.result
        if result is not None and result.error is not None:
            snapshot["error"] = result.error
        return snapshot

    # -- steps ---------------------------------------------------------------------------------
    async def run_step(
        self,
        entry: StepEntry,
        prev: object,
        path: list[int],
        *,
        iteration: int | None = None,
        foreach_index: int | None = None,
        resume: Resume | RunResume | None = RunResume.RUN,
    ) -> StepResult:
        call = self.begin_step(
            entry, prev, path, iteration=iteration, foreach_index=foreach_index, resume=resume
        )
        return await self.complete_step(call)

    def begin_step(
        self,
        entry: StepEntry,
        prev: object,
        path: list[int],
        *,
        iteration: int | None = None,
        foreach_index: int | None = None,
        resume: Resume | RunResume | None = RunResume.RUN,
    ) -> StepCall:
        """Validate the input and emit ``workflow-step-start`` (skipped for foreach items)."""
        step = entry.step
        active = self.resume if resume is RunResume.RUN else resume
        validation_error: Exception | None = None
        if step.input_schema is not None and self.workflow.validate_inputs:
            try:
                step.input_schema.validate(prev, "Step input validation failed:")
            except SchemaValidationError as exc:
                validation_error = exc
        resume_data = active.payload if active is not None and active.steps[:1] == [step.id] else None
        previous = self.results.get(step.id)
        info = omit_completion(previous)
        now = now_ms()
        if resume_data is not None:
            info.update({"resumePayload": resume_data, "resumedAt": now})
        else:
            info.update({"payload": prev, "startedAt": now})
        info["status"] = "running"
        if iteration:
            info["metadata"] = {"iterationCount": iteration}
        call = StepCall(
            entry=entry,
            call_id=str(uuid.uuid4()),
            input_data=prev,
            validation_error=validation_error,
            resume_data=resume_data,
            suspend_data=_suspend_data(previous, foreach_index),
            was_suspended=isinstance(previous, Mapping) and previous.get("status") == "suspended",
            info=info,
            path=path,
            foreach_index=foreach_index,
            resume=active,
        )
        self.results[step.id] = info
        if not call.skip_emits:
            self.sink.event("workflow-step-start", {"id": step.id, "stepCallId": call.call_id, **info})
        return call

    async def complete_step(self, call: StepCall) -> StepResult:
        """Run the step (with retries) and emit its result or suspension."""
        step = call.entry.step
        retries = step.retries if step.retries is not None else self.workflow.retry_attempts
        error: Exception | None = None
        outcome = _Outcome("failed")
        span = tracing.start_step_span(self.span, self.workflow.id, step.id)
        # Current while the step runs: an agent or nested workflow inside it joins the trace.
        with trace.use_span(span, end_on_exit=False):
            for attempt in range(retries + 1):
                if attempt and self.workflow.retry_delay_ms:
                    await asyncio.sleep(self.workflow.retry_delay_ms / 1000)
                try:
                    if call.validation_error is not None:
                        raise call.validation_error
                    outcome = await self._attempt(call, attempt)
                    break
                except Exception as exc:
                    error = exc
        tracing.end_workflow_span(span, outcome.status, error)
        now = now_ms()
        if outcome.status == "failed":
            ending: StepResult = {"status": "failed", "error": error, "endedAt": now}
            if isinstance(error, TripWire):
                ending["tripwire"] = {
                    "reason": error.reason,
                    "retry": error.retry,
                    "metadata": error.metadata,
                    "processorId": error.processor_id,
                }
        elif outcome.status == "suspended":
            ending = {"status": "suspended", "suspendPayload": outcome.value, "suspendedAt": now}
            self.suspended_paths[step.id] = list(call.path)
        else:
            ending = {"status": outcome.status, "endedAt": now}
            if outcome.value is not UNDEFINED:
                ending["output"] = outcome.value
        if outcome.state is not None:
            self.state.update(outcome.state)
        result: StepResult = {**call.info, **ending}
        self.results[step.id] = result
        if not call.skip_emits:
            kind = "workflow-step-suspended" if outcome.status == "suspended" else "workflow-step-result"
            self.sink.event(kind, {"id": step.id, "stepCallId": call.call_id, **result})
        return result

    async def _attempt(self, call: StepCall, attempt: int) -> _Outcome:
        step = call.entry.step
        input_data = call.input_data
        if step.input_schema is not None:
            input_data = step.input_schema.for_step(input_data)
        resume_data = call.resume_data
        if resume_data is not None and step.resume_schema is not None:
            resume_data = step.resume_schema.for_step(resume_data)
        ctx = StepContext(
            step=step,
            run_id=self.run_id,
            workflow_id=self.workflow.id,
            input_data=input_data,
            state=self.state,
            writer=StepWriter(self.sink, step.id, self.run_id),
            abort_signal=self.abort,
            retry_count=attempt,
            resume_data=resume_data,
            suspend_data=call.suspend_data,
            results=self.results,
        )
        try:
            if call.entry.workflow is not None:
                output = await run_nested(self, call, ctx)
            else:
                output = to_plain(await step.execute(ctx))
        except StepSuspended as suspended:
            return _Outcome("suspended", suspended.payload, ctx.state_update)
        except StepBailed as bailed:
            return _Outcome("bailed", to_plain(bailed.value), ctx.state_update)
        if output is not UNDEFINED and step.output_schema is not None and self.workflow.validate_outputs:
            step.output_schema.validate(output, "Step output validation failed:")
        return _Outcome("success", output, ctx.state_update)


def _suspend_data(previous: Any, foreach_index: int | None) -> Any:
    """The payload a previously suspended step suspended with (without engine metadata)."""
    if not isinstance(previous, Mapping) or previous.get("status") != "suspended":
        return None
    data = previous.get("suspendPayload")
    if not isinstance(data, Mapping):
        return data
    if foreach_index is not None:
        items = (data.get("__workflow_meta") or {}).get("foreachOutput") or []
        item = items[foreach_index] if foreach_index < len(items) else None
        if isinstance(item, Mapping) and item.get("status") == "suspended" and item.get("suspendPayload"):
            data = item["suspendPayload"]
    return {k: v for k, v in data.items() if k != "__workflow_meta"}
