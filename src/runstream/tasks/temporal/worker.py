"""Runstream workers on Temporal: the process that runs background tools.

:class:`TaskWorker` runs, for one :class:`TemporalTaskManager`, a Temporal worker for the task
workflows and one for each agent's attempts (queue ``<task_queue>@<agent>``, at most
``per_agent_concurrency`` at once). ``runstream worker module:attr`` (:func:`worker_command`)
runs the workers of the same ``Runstream`` the API server uses, until SIGINT or SIGTERM, then
shuts down gracefully: it stops taking tasks, lets running attempts finish for
``graceful_shutdown_ms``, and cancels the rest (Temporal retries them on another worker).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import os
import signal
import sys
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from runstream.tasks.temporal.activities import TaskActivities
from runstream.tasks.temporal.workflow import BackgroundTaskWorkflow

if TYPE_CHECKING:
    from runstream.runtime import Runstream
    from runstream.tasks.temporal.manager import TemporalTaskManager

logger = logging.getLogger(__name__)


class TaskWorker:
    """The Temporal workers of one manager, running in the background of this process."""

    def __init__(self, manager: TemporalTaskManager) -> None:
        self.manager = manager
        self.activities = TaskActivities(manager)
        self._workers: list[Worker] = []
        self._runs: list[asyncio.Task[None]] = []

    def agent_ids(self) -> list[str]:
        """The agents with tools registered in the manager (``Runstream`` registers them)."""
        return sorted({agent_id for agent_id, _ in self.manager._registry})

    async def start(self) -> None:
        manager = self.manager
        settings = manager.temporal
        grace = timedelta(milliseconds=settings.graceful_shutdown_ms)
        self._workers.append(
            Worker(
                manager.client,
                task_queue=settings.task_queue,
                workflows=[BackgroundTaskWorkflow],
                # The only workflow is runstream's own, deterministic, importing nothing but
                # temporalio: the sandbox would guard nothing and cost every workflow a fresh
                # module environment (the first task of a process waited hundreds of ms for it).
                workflow_runner=UnsandboxedWorkflowRunner(),
                graceful_shutdown_timeout=grace,
            )
        )
        # Heartbeats leave at most every quarter of the timeout (the SDK's default, 0.8 of it,
        # left a loaded machine too little slack: a live attempt was taken for lost).
        throttle = timedelta(milliseconds=settings.heartbeat_timeout_ms / 4)
        for agent_id in self.agent_ids():
            self._workers.append(
                Worker(
                    manager.client,
                    task_queue=settings.activity_queue(agent_id),
                    activities=[self.activities.run_task, self.activities.settle_lost],
                    max_concurrent_activities=max(manager.config.per_agent_concurrency, 1),
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


def load_runtime(target: str) -> Runstream:
    """The ``Runstream`` named by ``module:attr`` (or returned by a function of that name)."""
    from runstream.runtime import Runstream

    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise SystemExit(f"runstream worker: expected 'module:attr', got {target!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    if callable(obj) and not isinstance(obj, Runstream):
        obj = obj()
    if not isinstance(obj, Runstream):
        raise SystemExit(f"runstream worker: {target} is not a Runstream")
    return obj


async def run_worker(runtime: Runstream, stop: asyncio.Event) -> None:
    """Run ``runtime``'s Temporal workers until ``stop`` is set, then shut down gracefully."""
    from runstream.tasks.temporal.manager import TemporalTaskManager

    manager = runtime.task_manager
    if not isinstance(manager, TemporalTaskManager):
        raise SystemExit("runstream worker: the Runstream needs task_manager=TemporalTaskManager(...)")
    if manager.config.mode == "producer":
        raise SystemExit('runstream worker: the background_tasks mode is "producer", which runs no tool')
    manager.run_worker = True
    await runtime.start()
    queues = ", ".join(
        [manager.temporal.task_queue, *map(manager.temporal.activity_queue, manager._worker.agent_ids())]
    )
    print(f"runstream worker ready (pid {os.getpid()}): {queues} on {manager.temporal.address}", flush=True)
    try:
        await stop.wait()
    finally:
        await runtime.close()


def worker_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="runstream worker", description="Run the background tools of a Runstream on Temporal."
    )
    parser.add_argument("target", help="module:attr naming a Runstream (or a function returning one)")
    parser.add_argument(
        "--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"]
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s")
    runtime = load_runtime(args.target)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        await run_worker(runtime, stop)

    asyncio.run(main())
    exit_process(0)
    return 0  # not reached


def exit_process(code: int) -> None:
    """Flush and end the process without interpreter finalization, which the Temporal SDK's
    native threads can crash ("PyGILState_Release ... must be current", temporalio/sdk-python
    issue 300) after everything has been shut down cleanly."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
