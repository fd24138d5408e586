"""Until-idle streams as durable flows: the waiting for a run's background tasks and the
continuation turns run on the workers, not in the API process that answered the request.

With ``durable_runs`` set, ``stream(..., until_idle=...)`` in the API process builds the first
turn's state (memory loaded, options checked), opens the stream's log segment
(``<run id>:idle``, owned by the thread's resource) and starts the flow's workflow
(:class:`~runstream.durable.workflow.UntilIdleWorkflow`, ``runstream-idle-<run id>``); every API
process serves the stream from that segment, so a client reconnecting anywhere
(``Last-Event-ID``) gets the rest of it, to its end. An until-idle continuation (an approval,
a decline, a resume with ``until_idle``) is a flow too: the API process hands the run its
answer, and the flow's first turn follows that continuation's segment (``IdlePlan.first_segment``).

The workflow runs :meth:`IdleActivities.follow_until_idle` on a worker: the until-idle merge
itself (:class:`runstream.agent.until_idle.IdleDriver`, as in-process), whose turns are durable
runs with ids and log segments fixed by the flow (the first turn's id, then
``<run id>-c<n>``), so a later attempt finds them again. Each item's chunks go to the segment
with the driver's state after it (:meth:`IdleDriver.snapshot`), in one atomic write; a worker
lost mid-flow costs an attempt, and the next one (another worker) restores the driver, reads
the turn in flight after its last chunk taken in, reads the thread's task events from the
thread's replay stream after the last one taken in (:class:`~runstream.tasks.redis_bus.ThreadEvents`,
with a Redis event bus) and re-reads the thread's unsettled tasks from storage, so no chunk or
event is lost or written twice and no outcome is missed. A flow whose
attempts run out ends its stream with an ``error`` and a ``finish`` chunk.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

from temporalio import activity
from temporalio.exceptions import ApplicationError

from runstream._json import JsonObject
from runstream.abort import AbortController
from runstream.agent import RunNotFoundError
from runstream.agent import _suspension as suspension
from runstream.agent.until_idle import EVENTS_AFTER, IdleDriver, IdleOptions, read_snapshot
from runstream.chunks import dumps
from runstream.durable.activities import _Publisher, watched_step
from runstream.durable.log import RunLog
from runstream.durable.workflow import FOLLOW_IDLE, Continuation, IdlePlan
from runstream.errors import StateConflictError
from runstream.models.base import PromptMessage
from runstream.run.output import RunOutput
from runstream.tasks.bus import TaskEventFilter, TaskSubscription
from runstream.tasks.coordination import SETTLED_STATUSES, TaskManager
from runstream.tasks.lifecycle import lifecycle_chunk
from runstream.tasks.redis_bus import RedisEventBus, ThreadEvents
from runstream.tasks.temporal.settlements import is_announced

if TYPE_CHECKING:
    from runstream.agent import Agent
    from runstream.agent.run_options import RunOptions
    from runstream.memory import MemoryScope
    from runstream.run._run_state import RunState


class FlowRuns(Protocol):
    """What a flow needs of the durable runs (:class:`runstream.durable.TemporalRuns`)."""

    agents: Mapping[str, Agent]
    log: RunLog
    heartbeat_timeout_ms: int

    def flow_turn(self) -> AbstractContextManager[None]: ...

    async def flow_first_turn(self, agent_id: str, state: RunState, options: RunOptions) -> RunOutput: ...

    def attach(self, run_id: str, after: int, segment: str | None = None) -> RunOutput: ...

    async def hand_answer(self, run_id: str, answer: Continuation) -> None: ...


RECONCILE_INTERVAL_S = 1.0
"""How often the flow re-reads its unsettled tasks from storage (an event lost on the way)."""


def flow_segment(run_id: str) -> str:
    return f"{run_id}:idle"


def turn_segment(run_id: str) -> str:
    """The log segment of a turn the flow starts (fixed, so a later attempt finds it)."""
    return f"{run_id}:turn"


def continuation_id(run_id: str, turn: int) -> str:
    return f"{run_id}-c{turn}"


class IdleActivities:
    """The flow's activity, for the runs of ``runs``' agents."""

    def __init__(self, runs: FlowRuns) -> None:
        self.runs = runs

    @property
    def log(self) -> RunLog:
        return self.runs.log

    @activity.defn(name=FOLLOW_IDLE)
    async def follow_until_idle(self, plan: IdlePlan) -> None:
        runs = self.runs
        async with watched_step(
            runs.agents, plan.agent_id, self.log, plan.run_id, runs.heartbeat_timeout_ms
        ) as (agent, controller):
            await self._follow(agent, plan, controller)

    async def _follow(self, agent: Agent, plan: IdlePlan, controller: AbortController) -> None:
        services = agent.services
        manager = services.task_manager if services is not None else None
        if manager is None:
            raise ApplicationError("until-idle needs a task manager", non_retryable=True)
        state, options = suspension.restore(plan.snapshot)
        scope = options.memory
        assert scope is not None
        runs = self.runs
        checkpoint = await self.log.checkpoint(plan.segment)
        replay = _replay(manager, agent.id, scope, checkpoint)
        if replay is not None:
            await replay.start()
            subscription = TaskSubscription(replay)
        else:
            subscription = manager.subscribe(
                agent_id=agent.id,
                thread_id=scope.thread_id,
                resource_id=scope.resource_id,
                include_existing=False,
            )
        turns: list[RunOutput] = []
        controller.signal.add_listener(lambda reason: turns[-1].abort(reason) if turns else None)

        async def continuation(context: list[PromptMessage]) -> RunOutput:
            run_id = continuation_id(plan.run_id, driver.continuations)
            turn_options = replace(options, context=(*options.context, *context))
            with runs.flow_turn():
                out = await agent._start_run([], turn_options, run_id)
            turns.append(out)
            return out

        idle = IdleOptions.coerce(plan.until_idle, manager.config.progress_interval_ms)
        driver = IdleDriver(continuation, subscription, options=idle, controller=controller, running=set())
        try:
            if checkpoint is None:
                if plan.first_segment is not None:  # a continuation
                    if plan.answer is not None:  # the run takes it once, from here or the API
                        await _hand_answer(runs, plan.run_id, plan.answer)
                    turns.append(runs.attach(plan.run_id, 0, plan.first_segment))
                else:
                    state.saved = False
                    turns.append(await runs.flow_first_turn(agent.id, state, options))
                driver.start(turns[-1])
            else:
                snapshot = read_snapshot(checkpoint)
                driver.restore(snapshot)
                run_id, taken = snapshot["turnRunId"], snapshot["turnChunks"]
                if snapshot["turnActive"] and run_id is not None:
                    segment = plan.first_segment if run_id == plan.run_id else None
                    turns.append(runs.attach(run_id, taken, segment))
                    driver.resume_turn(turns[-1], taken)
            await self._publish(driver, plan, manager.storage.get_task, replay)
        finally:
            await driver.close()

    async def _publish(
        self,
        driver: IdleDriver,
        plan: IdlePlan,
        get_task: Callable[[str], Awaitable[Any]],
        replay: ThreadEvents | None,
    ) -> None:
        """Write each item's chunks with the driver's state after it (and where the thread's
        events are taken up again), until the stream ends."""
        fence = activity.info().attempt
        seq = await self.log.last_seq(plan.segment)
        publisher = _Publisher(self.log, plan.segment, seq, fence)
        reconcile = asyncio.create_task(_reconcile(driver, get_task))
        try:
            async for outputs in driver.steps():
                if outputs:
                    data = [dumps(chunk.to_wire()) for chunk in outputs]
                    checkpoint = driver.snapshot()
                    if replay is not None:
                        checkpoint[EVENTS_AFTER] = replay.position(driver.events_taken)
                    await publisher.put_all(data, dumps(checkpoint))
            await publisher.close()
        except BaseException:
            await publisher.cancel()
            raise
        finally:
            reconcile.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reconcile
        await self.log.end(plan.segment, {})


async def _hand_answer(runs: FlowRuns, run_id: str, answer: Continuation) -> None:
    """Hand the run the answer the flow continues (the API process that started the flow may
    have died before it did); a run that refuses it ends the flow's stream with an error."""
    try:
        await runs.hand_answer(run_id, answer)
    except (StateConflictError, RunNotFoundError) as exc:
        raise ApplicationError(str(exc), type="AnswerRefused", non_retryable=True) from None


def _replay(
    manager: TaskManager, agent_id: str, scope: MemoryScope, checkpoint: JsonObject | None
) -> ThreadEvents | None:
    """The thread's events from its replay stream (with a Redis event bus), after where the
    checkpoint's attempt took them up to: the events published while no attempt listened
    (``running``, ``output`` too) are taken in, each once."""
    bus = getattr(manager, "bus", None)
    if not isinstance(bus, RedisEventBus):
        return None
    wanted = TaskEventFilter(agent_id=agent_id, thread_id=scope.thread_id, resource_id=scope.resource_id)
    after = None if checkpoint is None else checkpoint.get(EVENTS_AFTER)
    return bus.thread_events(wanted, after if isinstance(after, str) else None)


async def _reconcile(driver: IdleDriver, get_task: Callable[[str], Awaitable[Any]]) -> None:
    """Every :data:`RECONCILE_INTERVAL_S`, hand the driver the settled state of each task it
    waits for that storage holds, announced (its outcome in memory): an event lost on the way
    (pub/sub dropped it, or it came while no attempt listened) still ends the wait. The driver
    drops the duplicate when the event itself arrives too."""
    while True:
        for task_id in sorted(driver.ledger.running):
            record = await get_task(task_id)
            if record is not None and record.status in SETTLED_STATUSES and is_announced(record):
                driver.inject(lifecycle_chunk(record))
        await asyncio.sleep(RECONCILE_INTERVAL_S)
