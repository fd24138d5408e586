"""Replaying scenarios with the Temporal task manager instead of the in-process one.

With ``RUNSTREAM_CONFORMANCE_TEMPORAL=host:port`` (a Temporal server) a scenario's background
tasks run as Temporal workflows on a worker inside the replaying process, on a task queue of
its own; ``RUNSTREAM_CONFORMANCE_REDIS`` (a Redis URL) makes their events travel over Redis
too. The chunks must be the same as in-process.
"""

from __future__ import annotations

import os
import uuid

from runstream.storage import Storage
from runstream.tasks.config import BackgroundTaskConfig
from runstream.tasks.coordination import TaskManager

TEMPORAL_ENV = "RUNSTREAM_CONFORMANCE_TEMPORAL"
REDIS_ENV = "RUNSTREAM_CONFORMANCE_REDIS"


def temporal_task_manager(storage: Storage, config: BackgroundTaskConfig | None) -> TaskManager | None:
    """The Temporal manager the environment asks for, or ``None`` (the default manager)."""
    address = os.environ.get(TEMPORAL_ENV)
    if not address or config is None:
        return None
    from runstream.tasks.temporal import TemporalSettings, TemporalTaskManager

    queue = f"conformance-{uuid.uuid4().hex[:12]}"
    return TemporalTaskManager(
        storage,
        config,
        temporal=TemporalSettings(address=address, task_queue=queue),
        redis_url=os.environ.get(REDIS_ENV) or None,
        channel_prefix=queue,
        run_worker=True,
    )
