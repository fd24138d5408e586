"""The Temporal workflow of one background task, and the data it exchanges.

This module is loaded into Temporal's workflow sandbox, so it imports nothing of runstream but
its sibling :mod:`.slots` (which imports only temporalio):
the workflow only orders activities by name; the tool runs in the ``run_task`` activity
(:mod:`runstream.tasks.temporal.activities`), which reads and writes the task record.

A task's life as a workflow:

* ``run_task`` runs the tool once per Temporal attempt. Temporal retries it on a tool error
  (``maxRetries`` is the retry policy), on a worker lost mid-attempt (its heartbeats stop) and on
  a worker shutting down. It returns the status it stored: ``completed``, ``failed``,
  ``timed_out``, ``cancelled`` or ``suspended``.
* ``suspended``: the workflow waits for the ``resume`` signal (sent by whichever API process
  resumes the task, maybe hours later) and runs ``run_task`` again with the resume data.
* An attempt that ends without an answer on its last try (heartbeat lost, worker gone) is
  settled by ``settle_lost``, which fails the task, as a dead process's task fails in-process.
* Cancelling the workflow cancels the running attempt; the activity's cancellation fires the
  tool's abort signal.
* With cluster-wide limits (``global_limit`` > 0), each attempt holds a slot of the task
  queue's :class:`~.slots.SlotsWorkflow` while it runs (see :mod:`.slots`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, is_cancelled_exception
from temporalio.exceptions import TimeoutError as ActivityTimeoutError

from runstream.tasks.temporal.slots import GRANTED_SIGNAL, SlotClient, SlotRequest

WORKFLOW_NAME = "runstream.BackgroundTask"
RUN_TASK = "runstream.run_task"
SETTLE_LOST = "runstream.settle_lost"
RESUME_SIGNAL = "resume"
UNBOUNDED = timedelta(days=3650)
"""The attempt timeout of a task without ``timeoutMs`` (Temporal wants one)."""
TIMEOUT_MARGIN = timedelta(seconds=30)
"""The activity enforces ``timeoutMs`` itself (and stores ``timed_out``); Temporal's own
start-to-close timeout, this much later, only catches an attempt that could not."""


@dataclass
class TaskPlan:
    """What the workflow needs to schedule a task's attempts (fixed at enqueue)."""

    task_id: str
    activity_queue: str
    timeout_ms: int
    max_retries: int
    retry_delay_ms: int
    backoff_multiplier: float
    max_retry_delay_ms: int
    heartbeat_timeout_ms: int
    agent_id: str = ""
    global_limit: int = 0
    """Attempts at once in the whole cluster (0: no cluster-wide limit)."""
    agent_limit: int = 0
    """Attempts of this task's agent at once in the whole cluster."""
    slots_queue: str = ""
    """The task queue whose slots workflow counts the attempts."""
    slot_requested: bool = False
    """The enqueuing process asked for the first attempt's slot itself."""


@dataclass
class AttemptInput:
    """One ``run_task`` call. ``retry_base`` is the task's ``retry_count`` when it began (0, or
    the count at a resume): Temporal numbers attempts from 1 again for every call."""

    task_id: str
    retry_base: int = 0
    suspend_payload: Any = None


@dataclass
class ResumeSignal:
    retry_base: int
    suspend_payload: Any = None


@dataclass
class LostAttempt:
    task_id: str
    message: str
    worker_lost: bool
    """The attempt timed out at Temporal (heartbeats stopped) rather than failing."""


@workflow.defn(name=WORKFLOW_NAME)
class BackgroundTaskWorkflow:
    def __init__(self) -> None:
        self._resumes: list[ResumeSignal] = []
        self._slots = SlotClient()
        self._first = True

    @workflow.signal(name=GRANTED_SIGNAL)
    def slot_granted(self) -> None:
        self._slots.on_granted()

    @workflow.signal(name=RESUME_SIGNAL)
    def resume(self, signal: ResumeSignal) -> None:
        self._resumes.append(signal)

    @workflow.run
    async def run(self, plan: TaskPlan) -> str:
        attempt = AttemptInput(plan.task_id)
        while True:
            status = await self._attempt(plan, attempt)
            if status != "suspended":
                return status
            await workflow.wait_condition(lambda: bool(self._resumes))
            signal = self._resumes.pop(0)
            attempt = AttemptInput(plan.task_id, signal.retry_base, signal.suspend_payload)

    async def _attempt(self, plan: TaskPlan, attempt: AttemptInput) -> str:
        """One ``run_task`` call, holding a cluster-wide slot while it runs (with limits)."""
        if plan.global_limit <= 0:
            return await self._run_task(plan, attempt)
        requested, self._first = plan.slot_requested and self._first, False
        request = SlotRequest(
            workflow.info().workflow_id, plan.agent_id, plan.global_limit, max(plan.agent_limit, 1)
        )
        try:
            await self._slots.acquire(request, plan.slots_queue, requested=requested)
            return await self._run_task(plan, attempt)
        finally:
            if workflow.in_workflow():  # not when the worker drops the workflow from its cache
                await self._slots.release(plan.slots_queue)

    async def _run_task(self, plan: TaskPlan, attempt: AttemptInput) -> str:
        timeout = (
            timedelta(milliseconds=plan.timeout_ms) + TIMEOUT_MARGIN if plan.timeout_ms > 0 else UNBOUNDED
        )
        initial = max(plan.retry_delay_ms, 1)
        retry = RetryPolicy(
            initial_interval=timedelta(milliseconds=initial),
            backoff_coefficient=max(plan.backoff_multiplier, 1.0),
            maximum_interval=timedelta(milliseconds=max(plan.max_retry_delay_ms, initial)),
            maximum_attempts=max(plan.max_retries - attempt.retry_base, 0) + 1,
            non_retryable_error_types=["NonRetryableTaskError"],
        )
        try:
            return str(
                await workflow.execute_activity(
                    RUN_TASK,
                    attempt,
                    task_queue=plan.activity_queue,
                    start_to_close_timeout=timeout,
                    heartbeat_timeout=timedelta(milliseconds=plan.heartbeat_timeout_ms),
                    retry_policy=retry,
                )
            )
        except ActivityError as error:
            if is_cancelled_exception(error):
                raise
            cause = error.cause
            message = str(cause) if cause is not None else str(error)
            return str(
                await workflow.execute_activity(
                    SETTLE_LOST,
                    LostAttempt(plan.task_id, message, isinstance(cause, ActivityTimeoutError)),
                    task_queue=plan.activity_queue,
                    start_to_close_timeout=timedelta(minutes=1),
                    retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=10)),
                )
            )
