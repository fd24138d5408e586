"""The activities of a durable agent run: the run until it ends or stops for a human, and the
end of a log segment.

``run_step`` restores the run from the workflow's JSON, builds the loop configuration from the
agent (as a run restored from a snapshot does, :meth:`Agent._configure`), opens the run's agent
span (each attempt and each segment a trace, as an in-process run and its resumption), and drives
:func:`runstream.run._loop.run_output` as in-process, step after step, with no round trip through
Temporal between them: the loop's ``on_step_end`` hook (called after a step's tool calls, where
an in-process durable run saves its snapshot) stores the state in the log with the chunks
before it, and a later attempt (after a lost worker) goes on from there. When the run ends or
stops for a human, the activity does what :meth:`Agent._output`'s close does in-process: saves
the turn into memory and starts its scorers (on this worker's scoring runner), or saves the
suspended run's snapshot (for listings and approvals from any process), and the state goes
back to the workflow.

Every chunk goes to the run's log at the sequence number after the previous one, in batches
(:meth:`RunLog.append_at`), so an attempt that runs a step again after a lost worker adds only
what the lost attempt had not published. A side task heartbeats to Temporal and watches the
run's abort flag (set by the API process whose client went away, or that aborted the run)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import TYPE_CHECKING

from temporalio import activity
from temporalio.exceptions import ApplicationError

from runstream import _tracing as tracing
from runstream._clock import iso_now
from runstream.abort import AbortController
from runstream.agent import _suspension as suspension
from runstream.agent.run_options import RunOptions
from runstream.chunks import dumps
from runstream.durable.log import RunLog
from runstream.durable.slots import RunSlots, RunSlotsBusyError
from runstream.durable.workflow import END_SEGMENT, RUN_STEP, Action, SegmentEnd, StepInput, StepOutput
from runstream.run._loop import run_output
from runstream.run._run_state import LoopConfig, ResumeAction, RunState
from runstream.storage import TaskFilter

if TYPE_CHECKING:
    from runstream.agent import Agent

SETTLED_TASK_STATUSES = frozenset({"completed", "failed", "cancelled", "timed_out"})


class RunActivities:
    """The activities of the runs of ``agents`` (by id), publishing to ``log``."""

    def __init__(
        self,
        agents: Mapping[str, Agent],
        log: RunLog,
        heartbeat_timeout_ms: int,
        slots: RunSlots | None = None,
    ) -> None:
        self.agents = agents
        self.log = log
        self.heartbeat_timeout_ms = heartbeat_timeout_ms
        self.slots = slots

    @activity.defn(name=RUN_STEP)
    async def run_step(self, step: StepInput) -> StepOutput:
        """The run until it ends or stops for a human; with ``slots``, while it holds one
        (waiting its turn first, heartbeating)."""
        watched = watched_step(self.agents, step.agent_id, self.log, step.run_id, self.heartbeat_timeout_ms)
        async with watched as (agent, controller):
            if self.slots is None:
                return await self._run(agent, step, controller)
            info = activity.info()
            token = f"{info.workflow_run_id}/{info.activity_id}/{info.attempt}"
            try:
                async with self.slots.held(step.run_id, token, controller.signal):
                    return await self._run(agent, step, controller)
            except RunSlotsBusyError as exc:  # ends the run with an error chunk, not retried
                raise ApplicationError(str(exc), type="RunSlotsBusy", non_retryable=True) from None

    @activity.defn(name=END_SEGMENT)
    async def end_segment(self, end: SegmentEnd) -> None:
        log = self.log
        seq = end.seq if end.seq >= 0 else await log.last_seq(end.segment)
        if end.error is not None:  # as the server ends a run that failed mid-stream
            envelope = {"runId": end.run_id, "from": "AGENT"}
            failure = [
                {"type": "error", **envelope, "payload": {"error": {"message": end.error}}},
                {
                    "type": "finish",
                    **envelope,
                    "payload": {
                        "stepResult": {"reason": "error", "isContinued": False},
                        "output": {"usage": {"inputTokens": 0, "outputTokens": 0, "totalTokens": 0}},
                    },
                },
            ]
            await log.append_at(end.segment, seq + 1, [dumps(chunk) for chunk in failure], 2**62)
        await log.end(end.segment, end.snapshot)

    async def _run(self, agent: Agent, step: StepInput, controller: AbortController) -> StepOutput:
        log = self.log
        attempt = activity.info().attempt
        snapshot, seq, action = step.snapshot, step.seq, step.action
        checkpoint = await log.checkpoint(step.segment) if attempt > 1 else None
        if checkpoint is not None and checkpoint.get("fence") == step.fence:  # a lost attempt's last step
            saved, at = checkpoint.get("snapshot"), checkpoint.get("seq")
            if isinstance(saved, dict) and isinstance(at, int):  # (as step_ended wrote them)
                snapshot, seq, action = saved, at, Action("continue")
        state, options = suspension.restore(snapshot)
        state.saved = False
        state.status = "running"
        resume = (
            None
            if action.kind == "start"
            else ResumeAction(action.kind, action.tool_call_id, action.data, action.reason)  # type: ignore[arg-type]
        )
        if attempt > 1:
            await _cancel_orphans(agent, state)
        try:
            cfg = await agent._configure(options, state, controller)
        except (ValueError, TypeError, LookupError) as exc:  # the same in every attempt
            raise ApplicationError(f"{type(exc).__name__}: {exc}", non_retryable=True) from exc
        publisher = _Publisher(log, step.segment, seq, step.fence + attempt)

        async def step_ended(state: RunState) -> None:  # the state from which a later attempt goes on
            data = {
                "fence": step.fence,
                "seq": publisher.seq,
                "snapshot": suspension.snapshot(agent.id, state, options),
            }
            publisher.mark(dumps(data))

        cfg.on_step_end = step_ended
        memory = cfg.memory if cfg.thread_id is not None else None
        titles = None
        if memory is not None and options.memory is not None:  # generateTitle's emitEvent
            titles = memory.title_observer(
                options.memory, cfg.model, options.request_context, lambda: state.messages
            )
        # The attempt's agent span, as an in-process run's (Agent._output): its model and tool
        # calls under it, one trace, and the run's scores linked to it (the store maps the run)
        agent._start_span(cfg, state)
        out = run_output(cfg, state, resume, controller, observers=[titles] if titles else [])
        try:
            async for chunk in out.full_stream:
                _raise_if_cancelled()
                await publisher.put(dumps(chunk.to_wire()))
        except BaseException:
            await publisher.cancel()
            raise
        finally:
            tracing.end_agent_span(state.span, state)
        _raise_if_cancelled()
        seq = await publisher.close()
        if _status(state) == "suspended":
            await self._suspended(agent, cfg, state, options)
            outcome = "suspended"
        else:
            await self._finished(agent, cfg, state, options)
            outcome = "finished"
        state.saved = True
        return StepOutput(suspension.snapshot(agent.id, state, options), seq, outcome)

    async def _suspended(self, agent: Agent, cfg: LoopConfig, state: RunState, options: RunOptions) -> None:
        """As in-process: the input is saved now, the run's snapshot is listed as suspended."""
        await agent._save_input_early(cfg, state)
        storage = agent._run_storage()
        if storage is not None:
            data = suspension.snapshot(agent.id, state, options)
            data["suspendedAt"] = iso_now()
            await storage.save_snapshot(suspension.NAMESPACE, state.run_id, data)

    async def _finished(self, agent: Agent, cfg: LoopConfig, state: RunState, options: RunOptions) -> None:
        """Save the turn (and start its thread's title, as in-process), start its scorers (on
        this worker's scoring runner, into its span store), then the outcomes of its
        background tasks that settled while other workers ran its earlier steps (their hooks
        had no turn in memory to write into)."""
        storage = agent._run_storage()
        if storage is not None:
            await storage.delete_snapshot(suspension.NAMESPACE, state.run_id)
        await agent._save_turn(cfg, state, options)
        if agent.scorers or options.scorers:  # scored here, as in-process when its output closes
            agent.scoring.finish(agent, cfg, state, options)
        memory = cfg.memory
        if memory is None or not state.saved or storage is None:
            return
        for task_id in state.background_task_ids:
            record = await storage.get_task(task_id)
            if record is not None and record.status in SETTLED_TASK_STATUSES:
                await memory.apply_task_outcome(record)


@contextlib.asynccontextmanager
async def watched_step(
    agents: Mapping[str, Agent], agent_id: str, log: RunLog, run_id: str, heartbeat_timeout_ms: int
) -> AsyncIterator[tuple[Agent, AbortController]]:
    """What an activity of a durable run (a step, an until-idle flow) runs in: its agent
    (``UnknownAgent`` if this worker has none of that id) and the abort controller that
    :func:`watch_step` drives while the body runs (a heartbeat every quarter of
    ``heartbeat_timeout_ms``, the run's abort flag); a cancelled activity ends interrupted."""
    agent = agents.get(agent_id)
    if agent is None:
        raise ApplicationError(f"no agent {agent_id!r} in this worker", type="UnknownAgent")
    controller = AbortController()
    done = asyncio.Event()
    watch = asyncio.create_task(
        watch_step(
            activity.heartbeat,
            lambda: log.abort_requested(run_id),
            controller,
            heartbeat_timeout_ms / 4000,
            done,
        )
    )
    try:
        yield agent, controller
    except asyncio.CancelledError:
        raise _interrupted() from None
    finally:
        done.set()
        watch.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watch


async def watch_step(
    beat: Callable[[], None],
    abort_requested: Callable[[], Awaitable[str | None]],
    controller: AbortController,
    interval_s: float,
    done: asyncio.Event,
) -> None:
    """A step's side task: ``beat()`` (heartbeat to Temporal) every ``interval_s`` and abort the
    run when its abort flag is set, until ``done``. A background loop never swallows its own
    cancellation, but the Redis client under ``abort_requested`` may (a ``CancelledError``
    caught mid-command, the command answering normally): so the loop also checks ``done``
    after every wait, and a step that ended never heartbeats on until its timeout."""
    while not done.is_set():
        beat()
        reason = await abort_requested()
        if done.is_set():
            return
        if reason is not None and not controller.signal.aborted:
            controller.abort(reason)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), interval_s)


class _Publisher:
    """Writes a step's chunks to its log segment in order, in batches: the chunks the loop made
    while one batch was being written go in the next (one Redis call each). The loop waits only
    when ``MAX_PENDING`` chunks are not written yet."""

    MAX_PENDING = 512

    def __init__(self, log: RunLog, segment: str, seq: int, fence: int) -> None:
        self.log = log
        self.segment = segment
        self.fence = fence
        self.seq = seq
        """The last sequence number given out."""
        self._written = seq
        self._pending: list[str] = []
        self._checkpoint: str | None = None
        self._closing = False
        self._wake = asyncio.Event()
        self._progress = asyncio.Event()
        self._writer = asyncio.create_task(self._write())

    async def put(self, data: str) -> None:
        if self._writer.done():
            self._writer.result()  # the writer's error (e.g. fenced off) stops the step
        self.seq += 1
        self._pending.append(data)
        self._wake.set()
        await self._backpressure()

    async def _backpressure(self) -> None:
        while len(self._pending) >= self.MAX_PENDING and not self._writer.done():
            self._progress.clear()
            await self._progress.wait()

    def mark(self, checkpoint: str) -> None:
        """Store ``checkpoint`` with the chunks put so far (written with them, or alone)."""
        self._checkpoint = checkpoint
        self._wake.set()

    async def put_all(self, data: list[str], checkpoint: str) -> None:
        """Chunks that go to the log together with ``checkpoint`` (in one write, or with more
        chunks after them: a checkpoint never lands without the chunks before it)."""
        if self._writer.done():
            self._writer.result()
        self.seq += len(data)
        self._pending += data
        self._checkpoint = checkpoint
        self._wake.set()
        await self._backpressure()

    async def close(self) -> int:
        """Write what is left; the segment's last sequence number."""
        self._closing = True
        self._wake.set()
        await self._writer
        return self.seq

    async def cancel(self) -> None:
        self._writer.cancel()
        with contextlib.suppress(BaseException):
            await self._writer

    async def _write(self) -> None:
        try:
            while self._pending or self._checkpoint is not None or not self._closing:
                if not self._pending and self._checkpoint is None:
                    await self._wake.wait()
                    self._wake.clear()
                    continue
                batch, self._pending = self._pending, []
                checkpoint, self._checkpoint = self._checkpoint, None
                await self.log.append_at(self.segment, self._written + 1, batch, self.fence, checkpoint)
                self._written += len(batch)
                self._progress.set()
        finally:
            self._progress.set()


async def _cancel_orphans(agent: Agent, state: RunState) -> None:
    """A step run again after a lost attempt: cancel the background tasks that attempt started
    (the run's state, as it was before the step, does not know them); the step starts its own."""
    services = agent.services
    if services is None or services.task_manager is None:
        return
    known = set(state.background_task_ids)
    active = await services.storage.list_tasks(
        TaskFilter(run_id=state.run_id, status=("pending", "running", "suspended"))
    )
    for record in active.items:
        if record.id not in known:
            await services.task_manager.cancel(record.id)


def _raise_if_cancelled() -> None:
    """Temporal cancelled the attempt: a tool that was running may have turned the cancellation
    into an ordinary tool error and let the loop go on, so nothing the loop makes from then on
    is published, and the attempt ends (see :func:`_interrupted`)."""
    if activity.is_cancelled():
        raise _interrupted()


def _interrupted() -> BaseException:
    """How a cancelled attempt ends: cancelled if the workflow asked for it, else (its worker
    shuts down, or lost touch with Temporal) failed, so that Temporal runs the step again on
    another worker, as its retry policy says."""
    details = activity.cancellation_details()
    if details is not None and details.cancel_requested:
        return asyncio.CancelledError("the run was cancelled")
    reason = "its worker shuts down" if activity.is_worker_shutdown() else "it lost touch with Temporal"
    return ApplicationError(f"the step was interrupted: {reason}", type="StepInterrupted")


def _status(state: RunState) -> str:
    """The status the loop left (mypy narrowed it to the one set before the loop ran)."""
    return state.status
