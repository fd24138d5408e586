"""Background-task configuration and the request the agent loop hands to the manager."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from runstream.storage import TaskRecord
from runstream.tools import Tool

Backpressure = Literal["queue", "reject", "fallback-sync"]


class BackgroundTaskError(Exception):
    """Base class of the manager's errors."""


class TaskNotFoundError(BackgroundTaskError, LookupError):
    """No task with that id."""


class TaskStateError(BackgroundTaskError):
    """The task is not in a state that allows the operation (e.g. resuming a completed task)."""


class ConcurrencyLimitError(BackgroundTaskError):
    """Backpressure ``reject``: no free slot for a new task."""


@dataclass(slots=True)
class RetryConfig:
    max_retries: int = 0
    retry_delay_ms: int = 1000
    backoff_multiplier: float = 2.0
    max_retry_delay_ms: int = 30_000

    def delay_ms(self, retry_count: int) -> float:
        """Delay before retry number ``retry_count`` (1-based)."""
        return float(
            min(
                self.retry_delay_ms * self.backoff_multiplier ** max(retry_count - 1, 0),
                self.max_retry_delay_ms,
            )
        )


@dataclass(slots=True)
class CleanupConfig:
    completed_ttl_ms: int = 3_600_000
    failed_ttl_ms: int = 86_400_000
    cleanup_interval_ms: int = 60_000


@dataclass(slots=True)
class BackgroundTaskConfig:
    """The manager's settings (Mastra's ``BackgroundTaskManagerConfig``; same defaults)."""

    enabled: bool = True
    global_concurrency: int = 10
    per_agent_concurrency: int = 5
    backpressure: Backpressure = "queue"
    default_timeout_ms: int = 300_000
    default_retries: RetryConfig = field(default_factory=RetryConfig)
    cleanup: CleanupConfig | None = None
    recover_stale_tasks_on_start: bool = True
    progress_interval_ms: int = 3000
    wait_timeout_ms: int | None = None

    @classmethod
    def coerce(
        cls, value: BackgroundTaskConfig | Mapping[str, Any] | bool | None
    ) -> BackgroundTaskConfig | None:
        """Accept a config, ``True``, or Mastra's camelCase mapping (``{"enabled": True, ...}``)."""
        if value is None or value is False:
            return None
        if value is True:
            return cls()
        if isinstance(value, BackgroundTaskConfig):
            return value if value.enabled else None
        if not value.get("enabled", True):
            return None

        def pick(camel: str, snake: str, default: Any) -> Any:
            return value.get(camel, value.get(snake, default))

        retries = pick("defaultRetries", "default_retries", None) or {}
        cleanup = pick("cleanup", "cleanup", None)
        return cls(
            global_concurrency=pick("globalConcurrency", "global_concurrency", 10),
            per_agent_concurrency=pick("perAgentConcurrency", "per_agent_concurrency", 5),
            backpressure=pick("backpressure", "backpressure", "queue"),
            default_timeout_ms=pick("defaultTimeoutMs", "default_timeout_ms", 300_000),
            default_retries=retries
            if isinstance(retries, RetryConfig)
            else RetryConfig(
                max_retries=retries.get("maxRetries", retries.get("max_retries", 0)),
                retry_delay_ms=retries.get("retryDelayMs", retries.get("retry_delay_ms", 1000)),
                backoff_multiplier=retries.get("backoffMultiplier", retries.get("backoff_multiplier", 2.0)),
                max_retry_delay_ms=retries.get("maxRetryDelayMs", retries.get("max_retry_delay_ms", 30_000)),
            ),
            cleanup=cleanup
            if isinstance(cleanup, CleanupConfig) or cleanup is None
            else CleanupConfig(
                completed_ttl_ms=cleanup.get("completedTtlMs", cleanup.get("completed_ttl_ms", 3_600_000)),
                failed_ttl_ms=cleanup.get("failedTtlMs", cleanup.get("failed_ttl_ms", 86_400_000)),
                cleanup_interval_ms=cleanup.get(
                    "cleanupIntervalMs", cleanup.get("cleanup_interval_ms", 60_000)
                ),
            ),
            recover_stale_tasks_on_start=pick(
                "recoverStaleTasksOnStart", "recover_stale_tasks_on_start", True
            ),
            progress_interval_ms=pick("progressIntervalMs", "progress_interval_ms", 3000),
            wait_timeout_ms=pick("waitTimeoutMs", "wait_timeout_ms", None),
        )


TerminalHook = Callable[[TaskRecord], Awaitable[None]]
"""Called with the final record after it is stored and *before* the terminal event is published
(this is where the agent writes the real result into memory)."""


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
    on_terminal: TerminalHook | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    """Stored with the task (the run's trace context, so its span can link to the run)."""
