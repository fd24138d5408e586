"""Storage for memory (threads, messages, resources), background-task records, thread state and snapshots.

Pick a backend: :class:`InMemoryStorage` for tests, :class:`SqliteStorage` for a file on disk,
:class:`PostgresStorage` for several processes sharing one database (needs the ``postgres``
extra; imported on first access, so this package imports without ``asyncpg``). All implement
the :class:`Storage` protocol.
"""

from typing import TYPE_CHECKING

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
    MessageContent,
    MessageRole,
    Page,
    Resource,
    SortOrder,
    StoredMessage,
    TaskDateField,
    TaskError,
    TaskFilter,
    TaskRecord,
    TaskStatus,
    TaskUpdate,
    TaskWire,
    Thread,
    ThreadOrderField,
)
from runstream.storage.sqlite import SqliteStorage

if TYPE_CHECKING:
    from runstream.storage.postgres import PostgresStorage


def __getattr__(name: str) -> "type[PostgresStorage]":
    if name == "PostgresStorage":
        from runstream.storage.postgres import PostgresStorage

        return PostgresStorage
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DEFAULT_TASK_TIMEOUT_MS",
    "InMemoryStorage",
    "InvalidArgumentError",
    "MessageContent",
    "MessageMutator",
    "MessageRole",
    "NotFoundError",
    "Page",
    "PostgresStorage",
    "Resource",
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
    "TaskWire",
    "Thread",
    "ThreadOrderField",
    "ThreadResourceMismatchError",
]
