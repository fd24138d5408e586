"""Where Temporal is, and how runstream's background tasks are scheduled on it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TemporalSettings:
    """Where Temporal is and how its tasks are scheduled."""

    address: str = "localhost:7233"
    namespace: str = "default"
    tls: bool = False
    """TLS to the server (Temporal Cloud needs it; so does an ``api_key``)."""
    api_key: str | None = None
    """A Temporal Cloud API key (or pass a connected ``client`` for mTLS and other options)."""
    task_queue: str = "runstream"
    """The workflows' queue; each agent's attempts go to ``<task_queue>@<agent id>``."""
    heartbeat_timeout_ms: int = 10_000
    """A worker silent this long is taken for dead and its attempt runs elsewhere."""
    recheck_interval_ms: int = 5_000
    """Without an event for this long, ``wait_for`` and the enqueuing process re-read the
    records they wait for (Redis pub/sub can lose events)."""
    cluster_limits: bool = True
    """Hold ``global_concurrency`` and the per-agent limits across all workers (each attempt
    takes a slot of the task queue's slots workflow, a few signals more per attempt); off, the
    limits hold per worker process only."""
    graceful_shutdown_ms: int = 10_000
    """How long a stopping worker lets running attempts finish before cancelling them (they
    are then retried on another worker)."""

    def activity_queue(self, agent_id: str) -> str:
        return f"{self.task_queue}@{agent_id}"

    def workflow_id(self, task_id: str) -> str:
        return f"runstream-task-{task_id}"
