"""Runstream workers on Temporal: the part of a process that runs background tools.

:class:`TaskWorker` runs, for one :class:`~runstream.tasks.temporal.TemporalTaskManager`, a
Temporal worker for the task workflows and one for each agent's attempts (queue
``<task_queue>@<agent>``, at most ``per_agent_concurrency`` at once in this process). The
``runstream worker module:attr`` command (:mod:`runstream._worker_cli`) runs the workers of the
same ``Runstream`` the API server uses.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from datetime import timedelta

from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from runstream.tasks.coordination import TaskCoordinator
from runstream.tasks.temporal.activities import Announce, TaskActivities
from runstream.tasks.temporal.settings import TemporalSettings
from runstream.tasks.temporal.slots import SlotsWorkflow
from runstream.tasks.temporal.workflow import BackgroundTaskWorkflow

logger = logging.getLogger(__name__)


class TaskWorker:
    """The Temporal workers of one manager, running in the background of this process."""

    def __init__(
        self, client: Client, settings: TemporalSettings, tasks: TaskCoordinator, announce: Announce
    ) -> None:
        self.client = client
        self.settings = settings
        self.tasks = tasks
        self.activities = TaskActivities(tasks, settings, announce)
        self._workers: list[Worker] = []
        self._runs: list[asyncio.Task[None]] = []

    def queues(self) -> list[str]:
        """The task queues this worker polls: the workflows', then each agent's attempts'."""
        return [self.settings.task_queue, *map(self.settings.activity_queue, self.tasks.agent_ids())]

    async def start(self) -> None:
        settings = self.settings
        grace = timedelta(milliseconds=settings.graceful_shutdown_ms)
        self._workers.append(
            Worker(
                self.client,
                task_queue=settings.task_queue,
                workflows=[BackgroundTaskWorkflow, SlotsWorkflow],
                # The workflows are runstream's own, deterministic, importing nothing but
                # temporalio: the sandbox would guard nothing and cost every workflow a fresh
                # module environment (the first task of a process waited hundreds of ms for it).
                workflow_runner=UnsandboxedWorkflowRunner(),
                graceful_shutdown_timeout=grace,
            )
        )
        # Heartbeats leave at most every quarter of the timeout (the SDK's default, 0.8 of it,
        # left a loaded machine too little slack: a live attempt was taken for lost).
        throttle = timedelta(milliseconds=settings.heartbeat_timeout_ms / 4)
        for agent_id in self.tasks.agent_ids():
            self._workers.append(
                Worker(
                    self.client,
                    task_queue=settings.activity_queue(agent_id),
                    activities=[self.activities.run_task, self.activities.settle_lost],
                    max_concurrent_activities=max(self.tasks.config.per_agent_concurrency, 1),
                    graceful_shutdown_timeout=grace,
                    max_heartbeat_throttle_interval=throttle,
                    default_heartbeat_throttle_interval=throttle,
                )
            )
        self._runs = [asyncio.create_task(worker.run()) for worker in self._workers]

    async def shutdown(self) -> None:
        """Stop polling, let running attempts finish (bounded), then end the workers."""
        await asyncio.gather(*(worker.shutdown() for worker in self._workers), return_exceptions=True)
        results = await asyncio.gather(*self._runs, return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException) and not isinstance(result, asyncio.CancelledError):
                logger.error("temporal worker ended with %r", result)
        self._workers.clear()
        self._runs.clear()


def exit_process(code: int) -> None:
    """Flush and end the process without interpreter finalization, which the Temporal SDK's
    native threads can crash ("PyGILState_Release ... must be current", temporalio/sdk-python
    issue 300) after everything has been shut down cleanly."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
