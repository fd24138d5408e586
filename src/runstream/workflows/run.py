"""``WorkflowRun``: one run of a workflow — stream it, resume it, cancel it, watch it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING

from runstream import _tracing as tracing
from runstream._json import JsonObject
from runstream.abort import AbortController
from runstream.chunks import WatchChunk, to_jsonable
from runstream.workflows._results import now_ms
from runstream.workflows.engine import Execution
from runstream.workflows.errors import WorkflowError
from runstream.workflows.events import ChunkSink
from runstream.workflows.output import WorkflowResult, WorkflowRunOutput
from runstream.workflows.snapshots import RunStore, StepPath, prepare_resume

if TYPE_CHECKING:
    from runstream.workflows.flow import WorkflowSpec

Executor = Callable[[Execution], Awaitable[WorkflowResult]]

_OPEN_STATUSES = ("pending", "running", "suspended")


class WorkflowRun:
    """Created by ``workflow.create_run()`` (or loaded by ``workflow.get_run(run_id)``)."""

    def __init__(self, workflow: WorkflowSpec, run_id: str) -> None:
        self.workflow = workflow
        self.run_id = run_id
        self.status = "pending"
        """``pending``, ``running``, ``suspended``, ``success``, ``failed`` or ``canceled``."""
        self.store = RunStore(workflow.storage, run_id)
        self.resource_id: str | None = None
        """The resource the run belongs to (set by the server for its caller): its spans carry it."""
        self._controller = AbortController()
        self._task: asyncio.Task[None] | None = None
        self._execution: Execution | None = None
        self._result: WorkflowResult | None = None
        self._watchers: list[asyncio.Queue[WatchChunk | None]] = []

    def __repr__(self) -> str:
        return f"WorkflowRun({self.workflow.id!r}, {self.run_id!r}, status={self.status!r})"

    # -- running ---------------------------------------------------------------------------------
    async def stream(self, *, input_data: object = None, initial_state: object = None) -> WorkflowRunOutput:
        """Start the run; its chunks stream from ``out.full_stream`` (it runs even if unread)."""
        if self.status != "pending":
            raise WorkflowError(
                f"run {self.run_id!r} has already started; use resume_stream() to continue it"
            )

        async def start(ex: Execution) -> WorkflowResult:
            data = self.workflow.validate_input(input_data)
            state = self.workflow.validate_state(initial_state if initial_state is not None else {})
            return await ex.start(data, dict(state))

        return self._launch(start, resumed=False, on_error="failed")

    async def resume_stream(
        self, *, resume_data: object = None, step: StepPath | None = None, foreach_index: int | None = None
    ) -> WorkflowRunOutput:
        """Resume a suspended step (``step``; the only suspended one when omitted) with
        ``resume_data`` (``foreach_index``: which suspended item of a foreach step). A run that
        is not suspended gives a stream that ends ``failed`` with ``This workflow run was not
        suspended`` (Mastra's behaviour); :meth:`resume` raises."""

        async def resume(ex: Execution) -> WorkflowResult:
            snapshot = await self.store.load()
            ex.resume = prepare_resume(snapshot, self.workflow, step, resume_data, self.run_id, foreach_index)
            assert snapshot is not None
            ex.results = dict(snapshot["context"])
            ex.state = dict(snapshot.get("state") or {})
            ex.step_path = list(snapshot.get("stepExecutionPath") or [])
            await self.store.save({**snapshot, "status": "running"})
            return await ex.run_from(ex.resume.path.pop(0))

        return self._launch(resume, resumed=True, on_error=self.status)

    async def start(self, *, input_data: object = None, initial_state: object = None) -> WorkflowResult:
        """Run to the end (or to a suspension) without reading the stream."""
        out = await self.stream(input_data=input_data, initial_state=initial_state)
        return await out.result

    async def resume(
        self, *, resume_data: object = None, step: StepPath | None = None, foreach_index: int | None = None
    ) -> WorkflowResult:
        """Resume and wait; raises :class:`~.errors.RunNotSuspendedError` if nothing is suspended."""
        out = await self.resume_stream(resume_data=resume_data, step=step, foreach_index=foreach_index)
        return await out.result

    async def cancel(self) -> None:
        """Abort the run: a running step sees its abort signal, then ``workflow-canceled``. A
        suspended run is marked canceled in storage (it can no longer be resumed)."""
        self._controller.abort()
        if self._task is not None and not self._task.done():
            return
        snapshot = await self.store.load()
        if snapshot is not None and snapshot.get("status") in _OPEN_STATUSES:
            await self.store.save({**snapshot, "status": "canceled"})
            self.status = "canceled"
            self._publish(final=True)

    async def wait(self) -> None:
        """Wait until the current execution (start or resume) has ended."""
        if self._task is not None:
            await asyncio.shield(self._task)

    def _launch(self, body: Executor, *, resumed: bool, on_error: str) -> WorkflowRunOutput:
        out = WorkflowRunOutput(self.run_id, self.workflow.id)
        sink = ChunkSink(self.run_id, out.push, resumed=resumed, on_change=self._publish)
        execution = Execution(self.workflow, self.run_id, sink, self._controller.signal, self.store)
        self._execution = execution
        self._result = None
        self.status = "running"
        self._task = asyncio.create_task(self._drive(out, body, execution, on_error))
        return out

    async def _drive(
        self, out: WorkflowRunOutput, body: Executor, execution: Execution, on_error: str
    ) -> None:
        execution.span = tracing.start_workflow_span(self.workflow.id, self.run_id, self.resource_id)
        try:
            result = await body(execution)
        except Exception as exc:
            tracing.end_workflow_span(execution.span, "failed", exc)
            self.status = on_error
            out.reject(exc)
        else:
            error = result.error if isinstance(result.error, BaseException | str) else None
            tracing.end_workflow_span(execution.span, result.status, error)
            self.status = result.status
            self._result = result
            out.resolve(result)
        finally:
            out.close()
            self._publish(final=True)

    # -- watching --------------------------------------------------------------------------------
    def watch(self) -> AsyncIterator[WatchChunk]:
        """``watch`` chunks with the run's whole state after every change (step started,
        finished, suspended …), until the run ends (a suspension does not end it)."""
        queue: asyncio.Queue[WatchChunk | None] = asyncio.Queue()
        self._watchers.append(queue)
        return self._watch(queue)

    async def _watch(self, queue: asyncio.Queue[WatchChunk | None]) -> AsyncIterator[WatchChunk]:
        try:
            while (chunk := await queue.get()) is not None:
                yield chunk
        finally:
            if queue in self._watchers:
                self._watchers.remove(queue)

    def _publish(self, final: bool = False) -> None:
        if not self._watchers:
            return
        chunk = WatchChunk(
            self.run_id, {"workflowState": self._state(final), "eventTimestamp": now_ms()}, "WORKFLOW"
        )
        for queue in self._watchers:
            queue.put_nowait(chunk)
            if final and self.status not in _OPEN_STATUSES:
                queue.put_nowait(None)

    def _state(self, final: bool) -> JsonObject:
        execution = self._execution
        results = execution.results if execution is not None else {}
        state: JsonObject = {
            "status": self.status,
            "steps": to_jsonable({k: v for k, v in results.items() if k != "input"}),
        }
        if "input" in results:
            state["payload"] = to_jsonable(results["input"])
        result = self._result
        if final and result is not None:
            if result.status == "success":
                state["result"] = to_jsonable(result.result)
            if result.error is not None:
                state["error"] = to_jsonable(result.error)
            if result.status == "suspended":
                state["suspendPayload"] = to_jsonable(result.suspend_payload)
        return state
