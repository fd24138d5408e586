"""Storage for memory (threads, messages), background-task records, thread state and snapshots.

Pick a backend: :class:`InMemoryStorage` for tests, :class:`SqliteStorage` for a file on disk.
Both implement the :class:`Storage` protocol.
"""

from runstream.storage.base import MessageMutator, Storage
from runstream.storage.errors import (
    InvalidArgumentError,
    NotFoundError,
    SchemaVersionError,
    StorageClosedError,
    StorageError,
    ThreadResourceMismatchError,
)
from runstream.storage.memory import InMemoryStorage
from runstream.storage.records import (
    DEFAULT_TASK_TIMEOUT_MS,
    MessageRole,
    Page,
    SortOrder,
    StoredMessage,
    TaskDateField,
    TaskError,
    TaskFilter,
    TaskRecord,
    TaskStatus,
    TaskUpdate,
    Thread,
    ThreadOrderField,
)
from runstream.storage.sqlite import SqliteStorage

__all__ = [
    "DEFAULT_TASK_TIMEOUT_MS",
    "InMemoryStorage",
    "InvalidArgumentError",
    "MessageMutator",
    "MessageRole",
    "NotFoundError",
    "Page",
    "SchemaVersionError",
    "SortOrder",
    "SqliteStorage",
    "Storage",
    "StorageClosedError",
    "StorageError",
    "StoredMessage",
    "TaskDateField",
    "TaskError",
    "TaskFilter",
    "TaskRecord",
    "TaskStatus",
    "TaskUpdate",
    "Thread",
    "ThreadOrderField",
    "ThreadResourceMismatchError",
]
