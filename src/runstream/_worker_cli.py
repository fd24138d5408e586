"""``runstream worker module:attr``: run the background tools of a ``Runstream`` on Temporal.

It runs the Temporal workers of the same ``Runstream`` the API server uses (its manager must be
a :class:`~runstream.tasks.temporal.TemporalTaskManager`) until SIGINT or SIGTERM, then shuts
down gracefully: it stops taking tasks, lets running attempts finish for
``graceful_shutdown_ms``, and cancels the rest (Temporal retries them on another worker).
Building the runtime is this module's job, outside ``runstream.tasks``, which sits below it.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import os
import signal
import sys
from typing import Any

from runstream.runtime import Runstream


def load_runtime(target: str) -> Runstream:
    """The ``Runstream`` named by ``module:attr`` (or returned by a function of that name)."""
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
    if runtime.durable_runs is not None:  # the agents' durable runs (runstream.durable) too
        runtime.durable_runs.run_worker = True
    await runtime.start()
    queues = ", ".join(manager.worker_queues())
    print(f"runstream worker ready (pid {os.getpid()}): {queues} on {manager.temporal.address}", flush=True)
    try:
        await stop.wait()
    finally:
        await runtime.close()


def worker_command(argv: list[str]) -> int:
    from runstream.tasks.temporal.worker import exit_process

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
