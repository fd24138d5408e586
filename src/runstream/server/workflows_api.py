"""Mastra's workflow routes, as ``@mastra/client-js``'s ``Workflow`` and ``Run`` resources call them.

Discovery (``GET /workflows``, ``/workflows/:id``, ``/workflows/run-counts``), runs
(``create-run``; ``stream`` / ``start`` / ``start-async``; ``resume-stream`` / ``resume`` /
``resume-async`` / ``resume-no-wait``; ``observe``; ``runs/:runId/cancel``; list, get and delete
runs). Workflow streams are not SSE: each chunk is its JSON followed by an ASCII record
separator (``\\x1e``), in a ``text/plain`` response — what client-js parses.

Every execution (a start or a resume) runs detached from the request that launched it: the
server pumps its chunks into the replay log under ``workflow:<workflowId>:<runId>``, and
``stream`` / ``resume-stream`` / ``observe`` only read that log. A dropped connection therefore
stops nothing, and ``observe`` (``?offset=``) re-attaches to the run's latest execution. Mistakes
(unknown workflow or run, invalid input or resume data, a run in the wrong state) are 4xx
answers before anything runs.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from runstream._json import JsonObject, JsonValue
from runstream._schema import SchemaValidationError
from runstream.chunks import error_to_wire, to_jsonable
from runstream.server.auth import Principal, principal_of
from runstream.server.context import ServerContext, json_body, json_response, query_date, query_int
from runstream.server.errors import ApiError
from runstream.server.limits import MAX_OFFSET, MAX_PER_PAGE
from runstream.server.resumable import LiveSlot, ReplayGapError, RunInfo
from runstream.server.run_ids import run_key
from runstream.server.sse import SSE_HEADERS, SSEResponse
from runstream.server.streaming import reserve
from runstream.server.wire import chunk_json
from runstream.server.workflow_info import (
    RUN_FIELDS,
    RunMeta,
    RunRecord,
    delete_record,
    list_records,
    load_record,
    now_ms,
    save_meta,
    used_elsewhere,
    workflow_info,
)
from runstream.workflows import (
    RunNotSuspendedError,
    Workflow,
    WorkflowError,
    WorkflowResult,
    WorkflowRun,
    WorkflowRunOutput,
)
from runstream.workflows.snapshots import NAMESPACE, prepare_resume

logger = logging.getLogger("runstream.server")

RECORD_SEPARATOR = b"\x1e"
RECORD_HEADERS = {**SSE_HEADERS, "content-type": "text/plain; charset=utf-8"}
MAX_LIVE_RUNS = 1_000
RUN_STATUSES = frozenset(
    {"running", "waiting", "suspended", "success", "failed", "canceled", "pending", "tripwire"}
)


def _path_run(request: Request) -> str:
    """The run the path's ``:runId`` names, as the caller's (:func:`run_key`)."""
    return run_key(principal_of(request), request.path_params["run_id"])


def log_key(workflow_id: str, run_id: str) -> str:
    return f"workflow:{workflow_id}:{run_id}"


def result_json(result: WorkflowResult) -> JsonObject:
    """Mastra's ``WorkflowResult`` (what ``start-async`` / ``resume-async`` answer)."""
    out: dict[str, object] = {"status": result.status, "steps": result.steps, "input": result.input}
    if result.state:
        out["state"] = result.state
    if result.status == "success":
        out["result"] = result.result
    elif result.status == "suspended":
        out.update(suspendPayload=result.suspend_payload, suspended=result.suspended)
    elif result.status == "tripwire":
        out["tripwire"] = result.tripwire
    if result.error is not None:
        out["error"] = result.error
    wire: JsonObject = to_jsonable(out)
    return wire


async def _records(out: WorkflowRunOutput) -> AsyncIterator[str]:
    async for chunk in out.full_stream:
        text = chunk_json(chunk)
        if text is not None:
            yield text


# -- request bodies ----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class StartRequest:
    input_data: JsonValue
    initial_state: JsonValue
    resource_id: str | None


@dataclass(frozen=True, slots=True)
class ResumeRequest:
    resume_data: JsonValue
    step: str | list[str] | None
    foreach_index: int | None


def _no_per_step(body: JsonObject) -> None:
    if body.get("perStep"):
        raise ApiError(400, "Invalid request body: 'perStep' is not supported")


def parse_start(body: JsonObject) -> StartRequest:
    _no_per_step(body)
    resource = body.get("resourceId")
    if resource is not None and (not isinstance(resource, str) or not resource):
        raise ApiError(400, "Invalid request body: 'resourceId' must be a non-empty string")
    return StartRequest(body.get("inputData"), body.get("initialState"), resource)


def _step(value: JsonValue) -> str | list[str] | None:
    if value is None:
        return None
    if isinstance(value, str) and value:
        return value
    if isinstance(value, list) and value:
        names = [name for name in value if isinstance(name, str) and name]
        if len(names) == len(value):
            return names
    raise ApiError(400, "Invalid request body: 'step' must be a step id or an array of step ids")


def parse_resume(body: JsonObject) -> ResumeRequest:
    _no_per_step(body)
    step = _step(body.get("step"))
    index = body.get("forEachIndex")
    if index is not None and (not isinstance(index, int) or isinstance(index, bool) or index < 0):
        raise ApiError(400, "Invalid request body: 'forEachIndex' must be an integer >= 0")
    return ResumeRequest(body.get("resumeData"), step, index)


class WorkflowRoutes:
    def __init__(self, ctx: ServerContext) -> None:
        self.ctx = ctx
        self._live: OrderedDict[str, WorkflowRun] = OrderedDict()
        """Runs executed by this process, so a cancel reaches the running one."""
        self._launching = asyncio.Lock()
        """Held from a run's state check to its launch, so two requests cannot both start it."""
        self._cancelling: set[asyncio.Task[None]] = set()

    def routes(self) -> list[Route]:
        w = "/workflows/{workflow_id}"
        return [
            Route("/workflows", self.list_workflows),
            Route("/workflows/run-counts", self.run_counts),
            Route(w, self.details),
            Route(f"{w}/create-run", self.create_run, methods=["POST"]),
            Route(f"{w}/stream", self.stream, methods=["POST"]),
            Route(f"{w}/start", self.start, methods=["POST"]),
            Route(f"{w}/start-async", self.start_async, methods=["POST"]),
            Route(f"{w}/resume-stream", self.resume_stream, methods=["POST"]),
            Route(f"{w}/resume", self.resume, methods=["POST"]),
            Route(f"{w}/resume-async", self.resume_async, methods=["POST"]),
            Route(f"{w}/resume-no-wait", self.resume_no_wait, methods=["POST"]),
            Route(f"{w}/observe", self.observe, methods=["POST"]),
            Route(f"{w}/runs", self.list_runs),
            Route(f"{w}/runs/{{run_id}}", self.get_run, methods=["GET"]),
            Route(f"{w}/runs/{{run_id}}", self.delete_run, methods=["DELETE"]),
            Route(f"{w}/runs/{{run_id}}/cancel", self.cancel, methods=["POST"]),
        ]

    # -- lookups -------------------------------------------------------------------------------------
    def _workflow(self, request: Request) -> Workflow:
        workflow = self.ctx.runstream.workflows.get(request.path_params["workflow_id"])
        if workflow is None:
            raise ApiError(404, "Workflow not found")
        return workflow

    @staticmethod
    def _run_id(request: Request, action: str) -> str:
        run_id = request.query_params.get("runId")
        if not run_id:
            raise ApiError(400, f"runId required to {action}")
        return run_key(principal_of(request), run_id)

    @staticmethod
    async def _new_run_id(workflow: Workflow, run_id: str, principal: Principal) -> None:
        used, owner = await used_elsewhere(workflow, run_id)
        if used and not principal.owns(owner):  # another tenant's id: as a run one cannot see
            raise ApiError(404, "Workflow run not found")
        if used:
            raise ApiError(409, f"Run id {run_id} is taken by another workflow's run")

    async def _owned(self, workflow: Workflow, run_id: str, principal: Principal) -> RunRecord:
        record = await load_record(workflow, run_id)
        if record is None or not principal.owns(record.resource_id):
            raise ApiError(404, "Workflow run not found")
        return record

    def _remember(self, run: WorkflowRun) -> None:
        self._live[run.run_id] = run
        self._live.move_to_end(run.run_id)
        settled = [k for k, r in self._live.items() if r.status not in ("running", "pending")]
        while len(self._live) > MAX_LIVE_RUNS and settled:
            del self._live[settled.pop(0)]

    def _live_run(self, workflow: Workflow, run_id: str) -> WorkflowRun | None:
        live = self._live.get(run_id)
        return live if live is not None and live.workflow is workflow else None

    async def _run_object(self, workflow: Workflow, run_id: str) -> WorkflowRun:
        """The run as this process knows it: live, else loaded from storage, else new."""
        live = self._live_run(workflow, run_id)
        if live is not None:
            return live
        if await workflow.storage.load_snapshot(NAMESPACE, run_id) is not None:
            return await workflow.get_run(run_id)
        return await workflow.create_run(run_id)

    # -- discovery -----------------------------------------------------------------------------------
    async def list_workflows(self, request: Request) -> Response:
        partial = request.query_params.get("partial") == "true"
        workflows = self.ctx.runstream.workflows
        return json_response({wid: workflow_info(w, partial=partial) for wid, w in workflows.items()})

    async def details(self, request: Request) -> Response:
        return json_response(workflow_info(self._workflow(request)))

    async def run_counts(self, request: Request) -> Response:
        """``{workflowId: {running, suspended}}`` over the caller's runs."""
        principal = principal_of(request)
        counts: dict[str, dict[str, int]] = {}
        for workflow_id, workflow in self.ctx.runstream.workflows.items():
            statuses = [r.status for r in await list_records(workflow) if principal.owns(r.resource_id)]
            counts[workflow_id] = {
                "running": sum(s in ("running", "waiting") for s in statuses),
                "suspended": statuses.count("suspended"),
            }
        return json_response(counts)

    # -- runs ----------------------------------------------------------------------------------------
    async def create_run(self, request: Request) -> Response:
        workflow = self._workflow(request)
        principal = principal_of(request)
        body = await json_body(request)
        start = parse_start(body)
        run_id = run_key(principal, request.query_params.get("runId") or str(uuid.uuid4()))
        record = await load_record(workflow, run_id)
        if record is not None:  # Mastra hands back the existing run
            if not principal.owns(record.resource_id):
                raise ApiError(404, "Workflow run not found")
            return json_response({"runId": run_id})
        await self._new_run_id(workflow, run_id, principal)
        meta = RunMeta(workflow.id, principal.resource(start.resource_id), now_ms())
        await save_meta(workflow.storage, run_id, meta)
        return json_response({"runId": run_id})

    async def _start(self, request: Request, run_id: str) -> tuple[WorkflowRun, WorkflowRunOutput]:
        """Check, then launch a run's first execution (4xx before anything runs)."""
        workflow = self._workflow(request)
        principal = principal_of(request)
        start = parse_start(await json_body(request))
        async with self._launching:
            record = await load_record(workflow, run_id)
            if record is None:
                await self._new_run_id(workflow, run_id, principal)
            elif not principal.owns(record.resource_id):
                raise ApiError(404, "Workflow run not found")
            live = self._live_run(workflow, run_id)
            if (record is not None and record.status != "pending") or (
                live is not None and live.status != "pending"
            ):
                raise ApiError(409, f"Workflow run {run_id} has already started; resume it instead")
            try:
                workflow.validate_input(start.input_data)
                workflow.validate_state(start.initial_state if start.initial_state is not None else {})
            except SchemaValidationError as exc:
                raise ApiError(400, str(exc)) from None
            meta = record.meta if record is not None else None
            owner = meta.resource_id if meta is not None else principal.resource(start.resource_id)
            slot = reserve(self.ctx, owner)
            try:
                if meta is None:
                    meta = RunMeta(workflow.id, owner, now_ms())
                    await save_meta(workflow.storage, run_id, meta)
                run = await self._run_object(workflow, run_id)
                run.resource_id = meta.resource_id
                out = await run.stream(input_data=start.input_data, initial_state=start.initial_state)
            except BaseException:
                slot.release()
                raise
            await self._detach(run, out, meta.resource_id, slot)
        return run, out

    async def _resume(self, request: Request) -> tuple[WorkflowRun, WorkflowRunOutput]:
        workflow = self._workflow(request)
        principal = principal_of(request)
        run_id = self._run_id(request, "resume workflow")
        resume = parse_resume(await json_body(request))
        async with self._launching:
            record = await self._owned(workflow, run_id, principal)
            live = self._live_run(workflow, run_id)
            if record.snapshot is None or (live is not None and live.status == "running"):
                raise ApiError(409, f"Workflow run {run_id} is not suspended (status: {record.status})")
            try:
                prepare_resume(
                    record.snapshot, workflow, resume.step, resume.resume_data, run_id, resume.foreach_index
                )
            except RunNotSuspendedError as exc:
                raise ApiError(409, f"{exc} (status: {record.status})") from None
            except (SchemaValidationError, WorkflowError) as exc:
                raise ApiError(400, str(exc)) from None
            slot = reserve(self.ctx, record.resource_id)
            try:
                run = await self._run_object(workflow, run_id)
                run.resource_id = record.resource_id
                out = await run.resume_stream(
                    resume_data=resume.resume_data, step=resume.step, foreach_index=resume.foreach_index
                )
            except BaseException:
                slot.release()
                raise
            await self._detach(run, out, record.resource_id, slot)
        return run, out

    async def _detach(
        self, run: WorkflowRun, out: WorkflowRunOutput, owner: str | None, slot: LiveSlot
    ) -> None:
        """Pump the execution's chunks into the replay log (after the previous execution's);
        its ``slot`` under the live-run caps (:func:`~runstream.server.streaming.reserve`,
        shared with agent runs) is released when the execution ends."""
        key = log_key(run.workflow.id, run.run_id)
        self._remember(run)
        try:
            await self.ctx.registry.wait(key)
            info = RunInfo(key, run.workflow.id, owner)
            await self.ctx.registry.start(info, _records(out), lambda: self._cancel_soon(run), slot)
        except BaseException:
            slot.release()
            raise

    def _cancel_soon(self, run: WorkflowRun) -> None:
        task = asyncio.create_task(run.cancel())
        self._cancelling.add(task)
        task.add_done_callback(self._cancelling.discard)

    def _follow(self, key: str, after: int) -> SSEResponse:
        """The log's chunks after ``after``, then the live ones, as ``<json>\\x1e`` records."""

        async def frames() -> AsyncGenerator[bytes, None]:
            try:
                async for _, data in self.ctx.registry.log.read(key, after):
                    yield data.encode("utf-8", "replace") + RECORD_SEPARATOR
            except ReplayGapError as exc:
                logger.warning("%s: %s", key, exc)

        return SSEResponse(frames(), heartbeat_s=None, headers=RECORD_HEADERS)

    async def stream(self, request: Request) -> Response:
        run_id = self._run_id(request, "stream workflow")
        run, _ = await self._start(request, run_id)
        return self._follow(log_key(run.workflow.id, run_id), 0)

    async def start(self, request: Request) -> Response:
        await self._start(request, self._run_id(request, "start run"))
        return json_response({"message": "Workflow run started"})

    async def start_async(self, request: Request) -> Response:
        run_id = request.query_params.get("runId") or str(uuid.uuid4())
        _, out = await self._start(request, run_key(principal_of(request), run_id))
        return json_response(await _outcome(out))

    async def resume_stream(self, request: Request) -> Response:
        run, _ = await self._resume(request)
        return self._follow(log_key(run.workflow.id, run.run_id), 0)

    async def resume(self, request: Request) -> Response:
        await self._resume(request)
        return json_response({"message": "Workflow run resumed"})

    async def resume_async(self, request: Request) -> Response:
        _, out = await self._resume(request)
        return json_response(await _outcome(out))

    async def resume_no_wait(self, request: Request) -> Response:
        run, _ = await self._resume(request)
        return json_response({"runId": run.run_id})

    async def observe(self, request: Request) -> Response:
        """The run's latest execution from chunk index ``offset`` (0: from its start)."""
        workflow = self._workflow(request)
        run_id = self._run_id(request, "observe workflow stream")
        offset = query_int(request, "offset", 0, maximum=MAX_OFFSET) or 0
        key = log_key(workflow.id, run_id)
        info = await self.ctx.registry.log.info(key)
        if info is None or not principal_of(request).owns(info.resource_id):
            raise ApiError(404, "No stream found for this workflow run (kept for a limited time)")
        return self._follow(key, offset)

    async def cancel(self, request: Request) -> Response:
        workflow = self._workflow(request)
        run_id = _path_run(request)
        await self._owned(workflow, run_id, principal_of(request))
        run = await self._run_object(workflow, run_id)
        await run.cancel()
        return json_response({"message": "Workflow run cancelled"})

    async def list_runs(self, request: Request) -> Response:
        workflow = self._workflow(request)
        resource = principal_of(request).resource(request.query_params.get("resourceId") or None)
        status = request.query_params.get("status") or None
        if status is not None and status not in RUN_STATUSES:
            raise ApiError(400, f"Query parameter 'status' must be one of {', '.join(sorted(RUN_STATUSES))}")
        after, before = query_date(request, "fromDate"), query_date(request, "toDate")
        records = [
            r
            for r in await list_records(workflow)
            if (resource is None or r.resource_id == resource)
            and (status is None or r.status == status)
            and (after is None or r.created_at >= after.timestamp() * 1000)
            and (before is None or r.created_at <= before.timestamp() * 1000)
        ]
        per_page = query_int(request, "perPage", None, minimum=1, maximum=MAX_PER_PAGE) or query_int(
            request, "limit", None, minimum=1, maximum=MAX_PER_PAGE
        )
        page = query_int(request, "page", None)
        if page is None:
            offset = query_int(request, "offset", 0, maximum=MAX_OFFSET) or 0
            page = offset // per_page if per_page else 0
        shown = records[page * per_page : (page + 1) * per_page] if per_page else records
        return json_response({"runs": [r.listing() for r in shown], "total": len(records)})

    async def get_run(self, request: Request) -> Response:
        workflow = self._workflow(request)
        record = await self._owned(workflow, _path_run(request), principal_of(request))
        fields = request.query_params.get("fields")
        wanted = frozenset(f.strip() for f in fields.split(",")) & RUN_FIELDS if fields else None
        return json_response(record.details(wanted))

    async def delete_run(self, request: Request) -> Response:
        workflow = self._workflow(request)
        run_id = _path_run(request)
        await self._owned(workflow, run_id, principal_of(request))
        live = self._live_run(workflow, run_id)
        if live is not None and live.status == "running":
            raise ApiError(409, f"Workflow run {run_id} is running: cancel it first")
        await delete_record(workflow, run_id)
        self._live.pop(run_id, None)
        return json_response({"message": "Workflow run deleted"})


async def _outcome(out: WorkflowRunOutput) -> JsonObject:
    """The execution's result; one that ended in an exception is a ``failed`` result."""
    try:
        return result_json(await out.result)
    except Exception as exc:
        error = error_to_wire(exc)
        return {
            "status": "failed",
            "error": {"message": error["message"], "name": error["name"]},
            "steps": {},
        }
