"""``TemporalRuns``: every run of a runtime's agents is a Temporal workflow (see
:mod:`runstream.durable.workflow`), its steps activities on runstream workers.

Enable it with one setting, ``Runstream(..., durable_runs=TemporalRuns(redis_url))``. The API
process builds a run's first state as in-process (memory loaded, input normalised), starts its
workflow, and returns a :class:`RunOutput` that reads the run's chunks from the shared log
(:class:`RunLog`) as the workers publish them; the server streams that output as any other,
so the chunks on the wire are the in-process ones. ``approve_tool_call``, ``decline_tool_call``
and ``resume_stream`` send the workflow its ``continue_run`` update from whichever process the
human answers through, and stream the continuation the same way. ``runstream worker`` runs the
run workflows and their steps (the agents' models and tools) next to the background tasks.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import fields
from datetime import timedelta
from typing import Any

from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.service import RPCError
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from runstream._json import JsonObject
from runstream.abort import AbortController, AbortSignal
from runstream.agent import Agent, RunNotFoundError
from runstream.agent import _suspension as suspension
from runstream.agent._idle_stream import durable_flow
from runstream.agent.run_options import RunOptions
from runstream.agent.until_idle import IdleOptions
from runstream.chunks import StreamChunk, chunk_from_wire
from runstream.durable.activities import RunActivities
from runstream.durable.idle import IdleActivities, flow_segment, turn_segment
from runstream.durable.log import FlowOwner, RunLog
from runstream.durable.slots import RunSlots
from runstream.durable.workflow import (
    CONTINUE_UPDATE,
    Action,
    AgentRunWorkflow,
    Continuation,
    IdleLimits,
    IdlePlan,
    RunPlan,
    UntilIdleWorkflow,
)
from runstream.errors import ConfigurationError, RunstreamError, StateConflictError
from runstream.run._run_state import ResumeAction, RunState
from runstream.run.output import RunOutput
from runstream.storage import Storage
from runstream.tasks.coordination import TaskManager
from runstream.tasks.temporal.manager import TemporalSettings, TemporalTaskManager

logger = logging.getLogger(__name__)

_flow_turn: ContextVar[bool] = ContextVar("runstream_durable_flow_turn", default=False)
"""Set while an until-idle flow starts a turn (:meth:`TemporalRuns.flow_turn`)."""


class DurableRunError(RunstreamError):
    """Temporal cannot be reached, or refused to start a run."""


class NotStartedError(StateConflictError, RuntimeError):
    """:class:`TemporalRuns` used before it is started (the Runstream starts it); also the
    ``RuntimeError`` it was before the error tree."""


class TemporalRuns:
    """Durable agent runs on Temporal, their chunks in the Redis at ``redis_url``.

    ``temporal`` (or a connected ``client``) says where Temporal is; without them the runtime's
    :class:`TemporalTaskManager` lends its own. Runs go to the task queue ``<task_queue>.runs``.
    A worker silent for ``heartbeat_timeout_ms`` is taken for dead and its run goes on on
    another from its last step's end; a run may go ``step_timeout_ms`` at most without ending
    or stopping for a human. A run whose workflow history passes ``max_history_events`` (or
    that Temporal suggests to) goes on as a new run of its workflow (continue-as-new) when its
    next human answer arrives. ``run_worker=True`` (set by
    ``runstream worker``) runs the workflows and steps in this process too.

    ``max_concurrent_runs`` caps the durable runs that execute at once in the whole cluster
    (default: no cap): a run over the cap waits its turn on its worker, in start order,
    heartbeating, and holds no slot while it waits for a human; one that waits longer than
    ``slot_wait_ms`` ends with an ``error`` chunk. A slot comes back when its run's activity
    ends however it ends, a dead worker's within ``heartbeat_timeout_ms`` (its lease); see
    :mod:`runstream.durable.slots`. The workers enforce the cap: set it in their ``Runstream``.
    """

    def __init__(
        self,
        redis_url: str,
        *,
        temporal: TemporalSettings | None = None,
        client: Client | None = None,
        heartbeat_timeout_ms: int = 10_000,
        step_timeout_ms: int = 3_600_000,
        log_prefix: str = "runstream:durable",
        run_worker: bool = False,
        max_history_events: int = 2_000,
        max_concurrent_runs: int | None = None,
        slot_wait_ms: int = 600_000,
    ) -> None:
        if heartbeat_timeout_ms < 100 or step_timeout_ms < heartbeat_timeout_ms:
            raise ConfigurationError(
                "heartbeat_timeout_ms must be >= 100 and step_timeout_ms >= heartbeat_timeout_ms"
            )
        self.log = RunLog(redis_url, prefix=log_prefix)
        self.slots = (
            None
            if max_concurrent_runs is None
            else RunSlots(
                self.log.client,
                log_prefix,
                limit=max_concurrent_runs,
                lease_ms=heartbeat_timeout_ms,
                wait_ms=slot_wait_ms,
            )
        )
        self.temporal = temporal
        self.heartbeat_timeout_ms = heartbeat_timeout_ms
        self.step_timeout_ms = step_timeout_ms
        self.run_worker = run_worker
        self.max_history_events = max_history_events
        self.agents: Mapping[str, Agent] = {}
        self._client = client
        self._task_manager: TaskManager | None = None
        self._worker: Worker | None = None
        self._worker_run: asyncio.Task[None] | None = None
        self._aborts: set[asyncio.Task[None]] = set()

    def bind(self, agents: Mapping[str, Any], storage: Storage, task_manager: TaskManager | None) -> None:
        """The runtime's agents (looked up by id when a step runs) and its task manager."""
        self.agents = agents
        self._task_manager = task_manager

    @property
    def settings(self) -> TemporalSettings:
        manager = self._task_manager
        if self.temporal is None and isinstance(manager, TemporalTaskManager):
            return manager.temporal
        return self.temporal or TemporalSettings()

    @property
    def task_queue(self) -> str:
        return f"{self.settings.task_queue}.runs"

    @staticmethod
    def workflow_id(run_id: str) -> str:
        return f"runstream-run-{run_id}"

    async def start(self) -> None:
        """Connect (or borrow the task manager's client); with ``run_worker``, start the worker."""
        if self._client is None:
            manager = self._task_manager
            if self.temporal is None and isinstance(manager, TemporalTaskManager):
                self._client = manager.client
            else:
                settings = self.settings
                try:
                    self._client = await Client.connect(
                        settings.address,
                        namespace=settings.namespace,
                        tls=settings.tls or settings.api_key is not None,
                        api_key=settings.api_key,
                    )
                except RuntimeError as exc:
                    raise DurableRunError(f"Cannot reach Temporal at {settings.address}: {exc}") from exc
        if self.run_worker and self._worker is None:
            throttle = timedelta(milliseconds=self.heartbeat_timeout_ms / 4)
            activities = RunActivities(self.agents, self.log, self.heartbeat_timeout_ms, self.slots)
            self._worker = Worker(
                self._client,
                task_queue=self.task_queue,
                workflows=[AgentRunWorkflow, UntilIdleWorkflow],
                activities=[
                    activities.run_step,
                    activities.end_segment,
                    IdleActivities(self).follow_until_idle,
                ],
                # runstream's own workflow, deterministic, importing only temporalio (see the
                # background-task worker for why the sandbox is left out)
                workflow_runner=UnsandboxedWorkflowRunner(),
                graceful_shutdown_timeout=timedelta(milliseconds=self.settings.graceful_shutdown_ms),
                max_heartbeat_throttle_interval=throttle,
                default_heartbeat_throttle_interval=throttle,
            )
            self._worker_run = asyncio.create_task(self._worker.run())

    async def close(self) -> None:
        """Stop the worker gracefully (a step still running after the grace period is cancelled
        and runs again on another worker); close the log's connection."""
        if self._worker is not None:
            await self._worker.shutdown()
            if self._worker_run is not None:
                await asyncio.gather(self._worker_run, return_exceptions=True)
            self._worker = self._worker_run = None
        await asyncio.gather(*self._aborts, return_exceptions=True)
        await self.log.close()

    @property
    def client(self) -> Client:
        if self._client is None:
            raise NotStartedError("TemporalRuns is not started (the Runstream starts it)")
        return self._client

    # -- runs ------------------------------------------------------------------------------

    async def start_run(
        self,
        agent_id: str,
        state: RunState,
        options: RunOptions,
        controller: AbortController,
    ) -> RunOutput:
        """Start the run's workflow; its chunks stream from the log as workers publish them.
        The first turn of an until-idle stream (``durable_flow`` set) starts an until-idle flow
        instead (:mod:`runstream.durable.idle`), which the workers drive to its end.

        The run's configuration is built here first, and dropped, so that bad options fail the
        call (as in-process) rather than the run's first step on a worker."""
        agent = self.agents.get(agent_id)
        if agent is None:
            raise RunNotFoundError(f"agent {agent_id!r} is not in this Runstream")
        await agent._configure(options, state, AbortController())
        flow = durable_flow.get()
        if flow is not None and not _flow_turn.get():
            flow.started = True
            return await self._start_flow(agent_id, state, options, controller, flow.until_idle)
        if _flow_turn.get():
            return await self.flow_first_turn(agent_id, state, options)
        segment = _segment(state.run_id)
        await self.log.open(segment)
        await self.log.clear_abort(state.run_id)
        try:
            await self._start_workflow(agent_id, state, options, segment)
        except WorkflowAlreadyStartedError:
            raise StateConflictError(f"run {state.run_id!r} is already running") from None
        return self._output(state, segment, controller, options.abort_signal)

    async def _start_workflow(
        self, agent_id: str, state: RunState, options: RunOptions, segment: str
    ) -> None:
        plan = RunPlan(
            run_id=state.run_id,
            agent_id=agent_id,
            snapshot=suspension.snapshot(agent_id, state, options),
            segment=segment,
            activity_queue=self.task_queue,
            heartbeat_timeout_ms=self.heartbeat_timeout_ms,
            step_timeout_ms=self.step_timeout_ms,
            max_history_events=self.max_history_events,
        )
        try:
            await self.client.start_workflow(
                AgentRunWorkflow.run, plan, id=self.workflow_id(state.run_id), task_queue=self.task_queue
            )
        except RPCError as exc:
            raise DurableRunError(f"could not start run {state.run_id!r} on Temporal: {exc}") from exc

    # -- until-idle flows (runstream.durable.idle) -------------------------------------------------

    async def _start_flow(
        self,
        agent_id: str,
        state: RunState,
        options: RunOptions,
        controller: AbortController,
        until_idle: Any,
        answer: Continuation | None = None,
    ) -> RunOutput:
        """Start the until-idle flow whose first turn is ``state`` (with ``answer``: the run's
        continuation, streaming to the answer's segment); its stream is read from the flow's
        segment, here and by any API process a client reconnects to. The segment of an earlier
        flow of the same run, ended, is replaced."""
        scope = options.memory
        segment = flow_segment(state.run_id)
        owner: FlowOwner = {
            "agentId": agent_id,
            "resourceId": scope.resource_id if scope is not None else None,
        }
        await self.log.discard_ended(segment)
        await self.log.open(segment, owner)
        await self.log.clear_abort(state.run_id)
        plan = IdlePlan(
            run_id=state.run_id,
            agent_id=agent_id,
            snapshot=suspension.snapshot(agent_id, state, options),
            until_idle=_idle_limits(until_idle),
            segment=segment,
            activity_queue=self.task_queue,
            heartbeat_timeout_ms=self.heartbeat_timeout_ms,
            first_segment=None if answer is None else answer.segment,
            answer=answer,
        )
        try:
            await self.client.start_workflow(
                UntilIdleWorkflow.run, plan, id=f"runstream-idle-{state.run_id}", task_queue=self.task_queue
            )
        except WorkflowAlreadyStartedError:
            raise StateConflictError(f"run {state.run_id!r} is already running") from None
        except RPCError as exc:
            raise DurableRunError(f"could not start run {state.run_id!r} on Temporal: {exc}") from exc
        # its aggregates describe the first turn (as in-process): that turn's final state
        first = turn_segment(state.run_id) if answer is None else answer.segment
        return self._output(state, segment, controller, options.abort_signal, state_from=first)

    @staticmethod
    @contextlib.contextmanager
    def flow_turn() -> Iterator[None]:
        """Within: a run started is a turn of an until-idle flow (its log segment fixed by its
        id, and a run already started with that id is followed, not refused)."""
        token = _flow_turn.set(True)
        try:
            yield
        finally:
            _flow_turn.reset(token)

    async def flow_first_turn(self, agent_id: str, state: RunState, options: RunOptions) -> RunOutput:
        """Start (or, after a lost attempt, follow) a turn of an until-idle flow."""
        segment = turn_segment(state.run_id)
        await self.log.open(segment)
        with contextlib.suppress(WorkflowAlreadyStartedError):
            await self._start_workflow(agent_id, state, options, segment)
        return self._output(state, segment, AbortController(), None)

    def attach(self, run_id: str, after: int, segment: str | None = None) -> RunOutput:
        """Follow a flow's turn already started (in ``segment``, by default the turn's own),
        after its first ``after`` chunks."""
        state = RunState(run_id, run_id, [], 0)
        return self._output(state, segment or turn_segment(run_id), AbortController(), None, after=after)

    async def flow_owner(self, run_id: str) -> tuple[str, str | None] | None:
        """``(agent id, resource id)`` of the until-idle flow ``run_id`` (``None``: no such flow)."""
        owner = await self.log.owner(flow_segment(run_id))
        return None if owner is None else (owner["agentId"], owner["resourceId"])

    def read_flow(self, run_id: str, after: int) -> AsyncIterator[tuple[int, str]]:
        """``(seq, wire JSON)`` of the flow's stream after ``after``, live, until it ends."""
        return self.log.read(flow_segment(run_id), after)

    async def continue_run(
        self, agent_id: str, state: RunState, action: ResumeAction, options: RunOptions
    ) -> RunOutput:
        """Hand a human's answer to the waiting run; its continuation streams as a new segment.
        The first turn of an until-idle stream (``durable_flow`` set) is the first turn of an
        until-idle flow that follows that segment, as :meth:`start_run`'s (if a flow of the run
        still runs, the stream merges here instead). The flow starts first, with the answer,
        and hands it to the run too (:attr:`IdlePlan.answer`): a process lost right after
        starting it leaves the continuation with its flow."""
        segment = _segment(state.run_id)
        await self.log.open(segment)
        await self.log.clear_abort(state.run_id)
        answer = Continuation(segment, Action(action.kind, action.tool_call_id, action.data, action.reason))
        flow = durable_flow.get()
        if flow is not None and not _flow_turn.get():
            try:
                out = await self._start_flow(
                    agent_id, state, options, AbortController(), flow.until_idle, answer=answer
                )
            except StateConflictError:
                pass  # an earlier flow of the run still runs: the stream merges here
            else:
                flow.started = True
                try:
                    await self.hand_answer(state.run_id, answer)
                except (StateConflictError, RunNotFoundError):
                    await self._drop_flow(state.run_id)
                    raise
                state.status = "running"
                return out
        await self.hand_answer(state.run_id, answer)
        state.status = "running"
        return self._output(state, segment, AbortController(), options.abort_signal)

    async def hand_answer(self, run_id: str, answer: Continuation) -> None:
        """Send the waiting run its answer (the ``continue_run`` update, idempotent by the
        answer's segment). Raises :class:`StateConflictError` if the run does not wait for it,
        :class:`RunNotFoundError` if Temporal has no such run."""
        handle = self.client.get_workflow_handle(self.workflow_id(run_id))
        try:
            await handle.execute_update(CONTINUE_UPDATE, answer, id=answer.segment, result_type=str)
        except WorkflowUpdateFailedError as exc:
            cause = exc.cause
            message = cause.message if isinstance(cause, ApplicationError) else str(cause or exc)
            raise StateConflictError(f"run {run_id!r}: {message}") from None
        except RPCError as exc:
            raise RunNotFoundError(f"no durable run {run_id!r} waiting on Temporal: {exc}") from None

    async def _drop_flow(self, run_id: str) -> None:
        """The answer was refused: end the flow started for it, and its stream's log."""
        with contextlib.suppress(RPCError):
            await self.client.get_workflow_handle(f"runstream-idle-{run_id}").terminate("answer refused")
        await self.log.end(flow_segment(run_id), {})

    def _output(
        self,
        state: RunState,
        segment: str,
        controller: AbortController,
        abort_signal: AbortSignal | None,
        *,
        after: int = 0,
        state_from: str | None = None,
    ) -> RunOutput:
        """The run as the API process sees it: the segment's chunks (after the first ``after``),
        then the final state of the run that ended ``state_from`` (by default ``segment``)."""
        log = self.log
        run_id = state.run_id

        async def source() -> AsyncIterator[StreamChunk]:
            async for _, data in log.read(segment, after):
                yield chunk_from_wire(json.loads(data))
            ended = await log.final_state(state_from or segment)
            if ended is not None:
                _refresh(state, ended)

        def abort(reason: object) -> None:
            task = asyncio.create_task(log.request_abort(run_id, str(reason or "aborted")))
            self._aborts.add(task)
            task.add_done_callback(self._aborts.discard)

        controller.signal.add_listener(abort)
        if abort_signal is not None:
            abort_signal.add_listener(controller.abort)
        return RunOutput(source(), state, controller)


def _segment(run_id: str) -> str:
    return f"{run_id}:{uuid.uuid4().hex[:12]}"


def _idle_limits(until_idle: object) -> IdleLimits | None:
    """The flow's until-idle options (``until_idle``: ``True`` or a mapping of them, already
    checked by the agent), by their Mastra names."""
    if not isinstance(until_idle, Mapping):
        return None
    idle = IdleOptions.coerce(dict(until_idle), progress_interval_ms=0)
    return {
        "maxIdleMs": idle.max_idle_ms,
        "resumeWindowMs": idle.resume_window_ms,
        "maxContinuations": idle.max_continuations,
    }


def _refresh(state: RunState, data: JsonObject) -> None:
    """Give the API process's state object the run's final state (for the output's aggregates)."""
    restored = RunState.from_json(data)
    for item in fields(RunState):
        if item.name not in ("span", "error"):
            setattr(state, item.name, getattr(restored, item.name))
    state.saved = True
