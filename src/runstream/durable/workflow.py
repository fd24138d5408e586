"""The Temporal workflow of one durable agent run, and the data it exchanges.

Like :mod:`runstream.tasks.temporal.workflow`, this module imports nothing of runstream: the
workflow only orders activities by name and holds the run as data.

A run's life as a workflow:

* The workflow holds the run's state as JSON (a :func:`runstream.agent._suspension.snapshot`: the
  versioned :meth:`RunState.to_json` plus the restorable options) and runs it in a ``run_step``
  activity until it ends or stops for a human: the activity restores the state, runs the loop's
  steps one after another, publishes their chunks to the run's log, stores the state at each
  step's end with them, and returns the state. A worker lost mid-run (its heartbeats stop)
  costs a retry on another worker, from the state stored at the last step's end; the chunks
  the lost attempt already published keep their sequence numbers, so the log holds each chunk
  once. (A ``run_step`` of an earlier version returns after each step, outcome ``step``.)
* A run that stops for a human (an approval, a suspended tool) ends its log *segment* and waits
  for the ``continue_run`` update, sent by whichever API process the human answers through,
  maybe hours later. The update names the segment the continuation streams to; its validator
  refuses a call the run does not wait for.
* ``end_segment`` closes a segment's log with the run's state, so the readers of a segment (the
  API process streaming it) get the final aggregates.
* Past ``max_history_events`` (or when Temporal suggests it) the workflow continues as new when
  a human's answer arrives, carrying the state and the answer: its history stays short.
* :class:`UntilIdleWorkflow` is an until-idle stream's flow (:mod:`runstream.durable.idle`).

A run's state travels as ``snapshot: dict[str, Any]`` on purpose: Temporal's data converter
rebuilds each field by its type hint, and ``Any`` hands the decoded JSON over as it is, where a
precise type (a ``TypedDict`` of the saved run) would be walked and rebuilt value by value at
every step of every run. Its shape is :func:`runstream.agent._suspension.snapshot`'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any, TypedDict

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, is_cancelled_exception

WORKFLOW_NAME = "runstream.AgentRun"
RUN_STEP = "runstream.run_step"
END_SEGMENT = "runstream.end_segment"
CONTINUE_UPDATE = "continue_run"
MAX_STEP_ATTEMPTS = 10
"""Attempts of one step (a lost worker costs one); also the stride of the log's fences."""


@dataclass
class RunPlan:
    """What the workflow starts with (fixed when the run starts)."""

    run_id: str
    agent_id: str
    snapshot: dict[str, Any]
    segment: str
    activity_queue: str
    heartbeat_timeout_ms: int
    step_timeout_ms: int
    max_history_events: int = 2_000
    """Past this many history events, the run goes on as a new run of its workflow (Temporal's
    continue-as-new) when the next human answer arrives, so its history stays far under the
    limits."""
    seq: int = 0
    """Where a continued-as-new run goes on: its segment's last chunk, its steps so far, and the
    next step's action (``None``: the run's start)."""
    steps: int = 0
    action: Action | None = None
    answered: list[str] = field(default_factory=list)
    """The segments of the last answers taken (see :meth:`AgentRunWorkflow.continue_run`)."""


@dataclass
class Action:
    """How a step goes on: ``start`` (a new run), ``continue`` (after a finished step), or a
    human's answer: ``approve``, ``decline``, ``resume``."""

    kind: str
    tool_call_id: str | None = None
    data: Any = None
    reason: str | None = None


@dataclass
class StepInput:
    run_id: str
    agent_id: str
    snapshot: dict[str, Any]
    segment: str
    seq: int
    """The segment's chunks published before this step."""
    fence: int
    """Orders the writers of the run's log: a lower fence can no longer write."""
    action: Action


@dataclass
class StepOutput:
    snapshot: dict[str, Any]
    seq: int
    outcome: str
    """``step`` (more steps follow), ``suspended`` (waits for a human) or ``finished``."""


@dataclass
class SegmentEnd:
    run_id: str
    segment: str
    seq: int
    """The segment's last chunk (``-1``: whichever it holds)."""
    snapshot: dict[str, Any]
    error: str | None = None
    """The step failed for good: the segment ends with an ``error`` and a ``finish`` chunk."""


@dataclass
class Continuation:
    """A human's answer (the ``continue_run`` update): its action and the log segment to use."""

    segment: str
    action: Action


@dataclass
class _Waiting:
    approvals: list[str] = field(default_factory=list)
    suspended: list[str] = field(default_factory=list)


ANSWERS_KEPT = 8
"""How many answered segments a run remembers (and carries through continue-as-new)."""


@workflow.defn(name=WORKFLOW_NAME)
class AgentRunWorkflow:
    def __init__(self) -> None:
        self._waiting: _Waiting | None = None
        self._answers: list[Continuation] = []
        self._answered: list[str] = []

    @workflow.update(name=CONTINUE_UPDATE)
    def continue_run(self, answer: Continuation) -> str:
        """Take a human's answer. The same answer sent twice (its segment names it: an
        until-idle flow hands the answer too, in case the API process that started it died
        before it did) is taken once, even after the run continued as new."""
        if answer.segment not in self._answered:
            self._answers.append(answer)
            self._answered = [*self._answered, answer.segment][-ANSWERS_KEPT:]
            self._waiting = None
        return answer.segment

    @continue_run.validator
    def _check_answer(self, answer: Continuation) -> None:
        if answer.segment in self._answered:
            return
        waiting = self._waiting
        if waiting is None:
            raise ApplicationError("the run is not waiting for a human", type="RunNotWaiting")
        action = answer.action
        calls = waiting.suspended if action.kind == "resume" else waiting.approvals
        if action.kind not in ("approve", "decline", "resume"):
            raise ApplicationError(f"unknown action {action.kind!r}", type="RunNotWaiting")
        if not calls or (action.tool_call_id is not None and action.tool_call_id not in calls):
            what = "suspended" if action.kind == "resume" else "waiting for approval"
            raise ApplicationError(
                f"tool call {action.tool_call_id!r} of the run is not {what}", type="CallNotWaiting"
            )

    @workflow.run
    async def run(self, plan: RunPlan) -> str:
        snapshot, segment, seq, step = plan.snapshot, plan.segment, plan.seq, plan.steps
        action = plan.action or Action("start")
        self._answered = list(plan.answered)
        while True:
            step += 1
            try:
                out = await self._step(
                    plan,
                    StepInput(
                        plan.run_id, plan.agent_id, snapshot, segment, seq, step * MAX_STEP_ATTEMPTS, action
                    ),
                )
            except ActivityError as error:
                if is_cancelled_exception(error):
                    raise
                cause = error.cause if error.cause is not None else error
                await self._end(plan, SegmentEnd(plan.run_id, segment, seq, snapshot, str(cause)))
                return "failed"
            snapshot, seq = out.snapshot, out.seq
            action = Action("continue")
            if out.outcome == "step":  # (a worker of an earlier version stops after each step)
                continue
            await self._end(plan, SegmentEnd(plan.run_id, segment, seq, snapshot))
            if out.outcome != "suspended":
                return str(snapshot.get("status", "success"))
            pending = snapshot.get("pending") or {}
            self._waiting = _Waiting(
                list(pending.get("awaitingApproval") or []), list(pending.get("suspended") or {})
            )
            await workflow.wait_condition(lambda: bool(self._answers))
            answer = self._answers.pop(0)
            segment, seq, action = answer.segment, 0, answer.action
            info = workflow.info()
            if (
                info.is_continue_as_new_suggested()
                or info.get_current_history_length() > plan.max_history_events
            ):
                more = replace(
                    plan,
                    snapshot=snapshot,
                    segment=segment,
                    seq=seq,
                    steps=step,
                    action=action,
                    answered=self._answered,
                )
                workflow.continue_as_new(more)

    async def _step(self, plan: RunPlan, step: StepInput) -> StepOutput:
        out: StepOutput = await workflow.execute_activity(
            RUN_STEP,
            step,
            result_type=StepOutput,
            task_queue=plan.activity_queue,
            start_to_close_timeout=timedelta(milliseconds=plan.step_timeout_ms),
            heartbeat_timeout=timedelta(milliseconds=plan.heartbeat_timeout_ms),
            retry_policy=RetryPolicy(
                initial_interval=timedelta(milliseconds=200),
                maximum_interval=timedelta(seconds=10),
                maximum_attempts=MAX_STEP_ATTEMPTS,
                non_retryable_error_types=["UnsupportedRunStateError", "UnknownAgent"],
            ),
        )
        return out

    async def _end(self, plan: RunPlan, end: SegmentEnd) -> None:
        """A local activity (it only writes Redis): no task-queue round trip before the run's
        readers learn that it ended."""
        await workflow.execute_local_activity(
            END_SEGMENT,
            end,
            start_to_close_timeout=timedelta(minutes=1),
            retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=10)),
        )


IDLE_WORKFLOW_NAME = "runstream.UntilIdle"
FOLLOW_IDLE = "runstream.follow_until_idle"
MAX_FLOW_ATTEMPTS = 20
"""Attempts of an until-idle flow's driver (a lost worker costs one); also its fences' stride."""


class IdleLimits(TypedDict, total=False):
    """An until-idle stream's options, checked by the API process (``IdleOptions``' names)."""

    maxIdleMs: float
    resumeWindowMs: float
    maxContinuations: int


@dataclass
class IdlePlan:
    """An until-idle stream as a durable flow (see :mod:`runstream.durable.idle`)."""

    run_id: str
    """The first turn's run id (the stream's id)."""
    agent_id: str
    snapshot: dict[str, Any]
    """The first turn's state and options, as the API process built them."""
    until_idle: IdleLimits | None
    segment: str
    """The log segment of the merged stream."""
    activity_queue: str
    heartbeat_timeout_ms: int
    first_segment: str | None = None
    """Set when the first turn is a run's continuation (an approval, a decline, a resume): the
    segment it streams to, which the flow follows."""
    answer: Continuation | None = None
    """That continuation's answer: the API process starts the flow, then hands the run the
    answer, and the flow hands it too (the run takes it once), so a process lost between the
    two leaves no continuation without its flow, nor a flow without its continuation."""


@workflow.defn(name=IDLE_WORKFLOW_NAME)
class UntilIdleWorkflow:
    """Runs the flow's driver (an activity that starts the turns, each a run workflow of its
    own, and follows the thread's tasks) until the stream ends. A worker lost mid-flow costs an
    attempt: the next one goes on from the checkpoint stored with the stream's last chunks. A
    flow that cannot go on ends its stream with an ``error`` and a ``finish`` chunk."""

    @workflow.run
    async def run(self, plan: IdlePlan) -> str:
        try:
            await workflow.execute_activity(
                FOLLOW_IDLE,
                plan,
                task_queue=plan.activity_queue,
                start_to_close_timeout=timedelta(days=1),
                heartbeat_timeout=timedelta(milliseconds=plan.heartbeat_timeout_ms),
                retry_policy=RetryPolicy(
                    initial_interval=timedelta(milliseconds=200),
                    maximum_interval=timedelta(seconds=10),
                    maximum_attempts=MAX_FLOW_ATTEMPTS,
                    non_retryable_error_types=["UnsupportedRunStateError", "UnknownAgent"],
                ),
            )
        except ActivityError as error:
            if is_cancelled_exception(error):
                raise
            cause = error.cause if error.cause is not None else error
            await workflow.execute_local_activity(
                END_SEGMENT,
                SegmentEnd(plan.run_id, plan.segment, -1, {}, str(cause)),
                start_to_close_timeout=timedelta(minutes=1),
                retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=10)),
            )
            return "failed"
        return "ended"
