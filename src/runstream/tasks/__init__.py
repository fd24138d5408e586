"""Background tasks: the manager, its configuration, dispatch from the loop, the lifecycle events."""

from runstream.tasks.adoption import AdoptionError, BackgroundTaskAdoption, BackgroundTaskOperation
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
from runstream.tasks.coordination import TaskCoordinator, TaskManager
from runstream.tasks.manager import BackgroundTaskManager
from runstream.tasks.policy import AgentBackgroundConfig

__all__ = [
    "AdoptionError",
    "AgentBackgroundConfig",
    "BackgroundTaskAdoption",
    "BackgroundTaskConfig",
    "BackgroundTaskError",
    "BackgroundTaskManager",
    "BackgroundTaskOperation",
    "CleanupConfig",
    "ConcurrencyLimitError",
    "RetryConfig",
    "TaskCoordinator",
    "TaskManager",
    "TaskNotFoundError",
    "TaskRequest",
    "TaskStateError",
]
