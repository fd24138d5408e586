"""Background tasks: the manager, its configuration, dispatch from the loop, until-idle streams."""

from runstream.tasks.config import (
    BackgroundTaskConfig,
    BackgroundTaskError,
    CleanupConfig,
    ConcurrencyLimitError,
    RetryConfig,
    TaskNotFoundError,
    TaskRequest,
    TaskStateError,
)
from runstream.tasks.manager import BackgroundTaskManager
from runstream.tasks.policy import AgentBackgroundConfig

__all__ = [
    "AgentBackgroundConfig",
    "BackgroundTaskConfig",
    "BackgroundTaskError",
    "BackgroundTaskManager",
    "CleanupConfig",
    "ConcurrencyLimitError",
    "RetryConfig",
    "TaskNotFoundError",
    "TaskRequest",
    "TaskStateError",
]
