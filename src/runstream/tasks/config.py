"""Background-task configuration and the request the agent loop hands to the manager."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from runstream._config_mapping import CONFIG, Amount, Count, Flag, PositiveCount, read_dataclass
from runstream.errors import NotFoundError, RunstreamError, StateConflictError
from runstream.storage import TaskRecord
from runstream.tasks.settling import RunTarget
from runstream.tools import Tool

Backpressure = Literal["queue", "reject", "fallback-sync"]


class BackgroundTaskError(RunstreamError):
    """Base class of the manager's errors."""


class TaskNotFoundError(BackgroundTaskError, NotFoundError):
    """No task with that id."""


class TaskStateError(BackgroundTaskError, StateConflictError):
    """The task is not in a state that allows the operation (e.g. resuming a completed task)."""


class ConcurrencyLimitError(BackgroundTaskError):
    """Backpressure ``reject``: no free slot for a new task."""


@dataclass(slots=True)
class RetryConfig:
    __pydantic_config__ = CONFIG

    max_retries: Count = 0
    retry_delay_ms: Count = 1000
    backoff_multiplier: Amount = 2.0
    max_retry_delay_ms: Count = 30_000
    retryable_errors: Callable[[BaseException], bool] | None = None
    """Which failures are retried (default: all). Mastra 1.71 declares ``retryableErrors`` but
    never reads it; here it decides."""

    def delay_ms(self, retry_count: int) -> float:
        """Delay before retry number ``retry_count`` (1-based)."""
        return float(
            min(
                self.retry_delay_ms * self.backoff_multiplier ** max(retry_count - 1, 0),
                self.max_retry_delay_ms,
            )
        )

    def is_retryable(self, error: BaseException) -> bool:
        return self.retryable_errors is None or bool(self.retryable_errors(error))

    @classmethod
    def coerce(
        cls, value: RetryConfig | Mapping[str, object] | None, where: str = "defaultRetries"
    ) -> RetryConfig:
        if value is None:
            return cls()
        if isinstance(value, RetryConfig):
            return value
        return read_dataclass(cls, value, where=where)


@dataclass(slots=True)
class CleanupConfig:
    __pydantic_config__ = CONFIG

    completed_ttl_ms: Count = 3_600_000
    failed_ttl_ms: Count = 86_400_000
    cleanup_interval_ms: PositiveCount = 60_000

    @classmethod
    def coerce(cls, value: CleanupConfig | Mapping[str, object], where: str = "cleanup") -> CleanupConfig:
        if isinstance(value, CleanupConfig):
            return value
        return read_dataclass(cls, value, where=where)


TaskHook = Callable[[TaskRecord], Awaitable[None] | None]
"""A user callback on a settled task (``on_task_complete`` and the like); sync or async."""

ManagerMode = Literal["full", "producer", "worker"]


@dataclass(slots=True)
class BackgroundTaskConfig:
    """The manager's settings (Mastra's ``BackgroundTaskManagerConfig``; same defaults).

    ``mode`` is Mastra's deployment role: ``"full"`` and ``"worker"`` run tasks; ``"producer"``
    only enqueues them for workers elsewhere: a
    :class:`~runstream.tasks.temporal.TemporalTaskManager` without ``run_worker``.
    ``progress_throttle_ms`` drops a task's output events that come sooner than that after the
    last one published. ``wait_timeout_ms`` is read by durable agents' loops (see
    ``runstream.tasks.dispatch.wait_in_loop``). ``progress_interval_ms`` (runstream's own) is
    how often a waiting stream reports progress.
    """

    __pydantic_config__ = CONFIG

    enabled: Flag = True
    mode: ManagerMode = "full"
    global_concurrency: PositiveCount = 10
    per_agent_concurrency: PositiveCount = 5
    backpressure: Backpressure = "queue"
    default_timeout_ms: Count = 300_000
    default_retries: RetryConfig = field(default_factory=RetryConfig)
    cleanup: CleanupConfig | None = None
    recover_stale_tasks_on_start: Flag = True
    progress_interval_ms: PositiveCount = 3000
    progress_throttle_ms: Count | None = None
    wait_timeout_ms: Count | None = None
    on_task_complete: TaskHook | None = None
    on_task_failed: TaskHook | None = None
    """Called for failed and timed-out tasks."""
    on_task_cancelled: TaskHook | None = None

    @classmethod
    def coerce(
        cls, value: BackgroundTaskConfig | Mapping[str, object] | bool | None
    ) -> BackgroundTaskConfig | None:
        """Accept a config, ``True``, or Mastra's camelCase mapping (``{"enabled": True, ...}``)."""
        if value is None or value is False:
            return None
        if value is True:
            return cls()
        if isinstance(value, BackgroundTaskConfig):
            return value if value.enabled else None
        config = read_dataclass(cls, value, where="background_tasks")
        return config if config.enabled else None


@dataclass(slots=True)
class TaskRequest:
    """What the agent loop asks the manager to run in the background."""

    tool: Tool
    tool_call_id: str
    args: dict[str, Any]
    agent_id: str
    run_id: str
    thread_id: str | None = None
    resource_id: str | None = None
    timeout_ms: int | None = None
    max_retries: int | None = None
    target: RunTarget | None = None
    """Where the task's settled outcome is written before its event is published (the enqueuing
    run, else its thread's memory); without one, nothing is written for this request."""
    metadata: dict[str, str] = field(default_factory=dict)
    """Stored with the task (the run's trace context, so its span can link to the run)."""
    on_complete: TaskHook | None = None
    """The tool's ``on_complete`` or else the agent's ``on_task_complete`` (as Mastra picks),
    called after the outcome is written and before the event is published."""
    on_failed: TaskHook | None = None
    disposition: Literal["deferred", "awaited"] = "deferred"
    request_context: dict[str, Any] = field(default_factory=dict)
    """The enqueuing run's request context, for the tool (in this process; not stored)."""
