"""Cluster-wide concurrency limits on Temporal: one semaphore workflow per task queue.

Temporal limits concurrency per worker (``max_concurrent_activities``) and rate per task queue
(``max_task_queue_activities_per_second``), but not concurrency across all workers. So each task
workflow asks :class:`SlotsWorkflow` (id ``runstream-slots-<task_queue>``) for a slot before an
attempt, and gives it back after: it signals ``acquire`` with its agent and the limits, waits
for the ``slot-granted`` signal, runs its attempt, and signals ``release`` (also when it is
cancelled meanwhile). The slots workflow grants in request order, skipping a request whose agent
is at its limit, while fewer than the global limit are held: at most ``global_concurrency``
attempts run at once in the whole cluster, and ``per-agent`` of one agent, however many workers
there are. It continues as new before its history grows long, carrying holders and waiters.

Like :mod:`.workflow`, this module is loaded into workflows and imports nothing of runstream.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

from temporalio import workflow
from temporalio.exceptions import FailureError, WorkflowAlreadyStartedError

SLOTS_WORKFLOW_NAME = "runstream.Slots"
ACQUIRE_SIGNAL = "acquire"
RELEASE_SIGNAL = "release"
GRANTED_SIGNAL = "slot-granted"
STATE_QUERY = "state"
HISTORY_LIMIT = 4_000
"""Continue as new past this many history events (Temporal's hard limit is 51,200)."""


@dataclass
class SlotRequest:
    holder: str
    """The workflow id of the task asking."""
    agent_id: str
    global_limit: int
    agent_limit: int


@dataclass
class SlotsState:
    holders: dict[str, str] = field(default_factory=dict)
    """Workflow id -> agent id of each slot held."""
    waiting: list[SlotRequest] = field(default_factory=list)


def slots_workflow_id(task_queue: str) -> str:
    return f"runstream-slots-{task_queue}"


@workflow.defn(name=SLOTS_WORKFLOW_NAME)
class SlotsWorkflow:
    def __init__(self) -> None:
        self._state = SlotsState()
        self._changed = False

    @workflow.signal(name=ACQUIRE_SIGNAL)
    def acquire(self, request: SlotRequest) -> None:
        state = self._state
        if request.holder not in state.holders and all(w.holder != request.holder for w in state.waiting):
            state.waiting.append(request)
        self._changed = True

    @workflow.signal(name=RELEASE_SIGNAL)
    def release(self, holder: str) -> None:
        state = self._state
        state.holders.pop(holder, None)
        state.waiting = [w for w in state.waiting if w.holder != holder]
        self._changed = True

    @workflow.query(name=STATE_QUERY)
    def state(self) -> SlotsState:
        """Who holds a slot and who waits (for operators and tests)."""
        return self._state

    @workflow.run
    async def run(self, state: SlotsState) -> None:
        # Signals that arrived with the first workflow task were handled before ``run``.
        for holder, agent_id in state.holders.items():
            self._state.holders.setdefault(holder, agent_id)
        self._state.waiting = [*state.waiting, *self._state.waiting]
        self._changed = True
        while True:
            await workflow.wait_condition(lambda: self._changed)
            self._changed = False
            await self._grant()
            if workflow.info().get_current_history_length() > HISTORY_LIMIT and not self._changed:
                await workflow.wait_condition(workflow.all_handlers_finished)
                workflow.continue_as_new(self._state)

    async def _grant(self) -> None:
        state = self._state
        granted: list[str] = []
        for request in list(state.waiting):
            if len(state.holders) >= request.global_limit:
                continue
            held = sum(1 for agent_id in state.holders.values() if agent_id == request.agent_id)
            if held >= request.agent_limit:
                continue
            state.waiting.remove(request)
            state.holders[request.holder] = request.agent_id
            granted.append(request.holder)
        results = await asyncio.gather(
            *(workflow.get_external_workflow_handle(h).signal(GRANTED_SIGNAL) for h in granted),
            return_exceptions=True,
        )
        for holder, result in zip(granted, results, strict=True):
            if isinstance(result, Exception):  # the task's workflow is gone: its slot is free
                state.holders.pop(holder, None)
                self._changed = True


class SlotClient:
    """The task workflow's side: acquire before an attempt, release after it.

    ``acquire`` does not wait for Temporal to confirm its signal (one more workflow task before
    the attempt could start): it waits for the grant, or for the signal to fail (no slots
    workflow yet: it is started, and asked again). ``release`` is awaited: a signal sent as the
    workflow completes could be dropped with it.
    """

    def __init__(self) -> None:
        self.granted = False

    def on_granted(self) -> None:
        self.granted = True

    async def acquire(self, request: SlotRequest, slots_queue: str, *, requested: bool = False) -> None:
        """Wait for a slot; ``requested``: the enqueuing process already asked for this one
        (signal-with-start, in parallel with this workflow's start)."""
        workflow_id = slots_workflow_id(slots_queue)
        if not requested:
            sent = asyncio.ensure_future(_signal(workflow_id, ACQUIRE_SIGNAL, request))
            await workflow.wait_condition(lambda: self.granted or sent.done())
            if not self.granted and sent.exception() is not None:  # no slots workflow: start it
                with contextlib.suppress(WorkflowAlreadyStartedError):
                    await workflow.start_child_workflow(
                        SlotsWorkflow.run,
                        SlotsState(),
                        id=workflow_id,
                        parent_close_policy=workflow.ParentClosePolicy.ABANDON,
                    )
                await _signal(workflow_id, ACQUIRE_SIGNAL, request)
        await workflow.wait_condition(lambda: self.granted)
        self.granted = False

    async def release(self, slots_queue: str) -> None:
        """Give the slot back (also a request still waiting)."""
        try:
            await _signal(slots_workflow_id(slots_queue), RELEASE_SIGNAL, workflow.info().workflow_id)
        except FailureError as exc:  # no slots workflow: nothing is held there
            workflow.logger.warning("slot release not delivered: %s", exc)


async def _signal(workflow_id: str, name: str, arg: object) -> None:
    await workflow.get_external_workflow_handle(workflow_id).signal(name, arg)
