"""Exceptions raised by every storage backend.

All of them derive from :class:`StorageError`, so callers that only care whether storage failed
can catch one type; the subclasses exist for the cases a caller handles differently.
"""

from __future__ import annotations

from runstream import errors as base


class StorageError(base.RunstreamError):
    """Base class for storage failures."""


class NotFoundError(StorageError, base.NotFoundError):
    """An operation needs a record that does not exist (for example updating a missing thread)."""

    def __init__(self, kind: str, record_id: str) -> None:
        super().__init__(f"{kind} not found: {record_id}")
        self.kind = kind
        self.record_id = record_id


class ThreadResourceMismatchError(StorageError):
    """A thread id was used together with a resource id that does not own the thread.

    Threads are resource-scoped: letting resource B write to (or read) resource A's thread would
    leak one user's conversation into another's. The wording follows Mastra's memory error.
    """

    def __init__(self, thread_id: str, owner_resource_id: str, requested_resource_id: str) -> None:
        super().__init__(
            f"Thread with id {thread_id} is for resource with id {owner_resource_id} "
            f"but resource {requested_resource_id} was queried."
        )
        self.thread_id = thread_id
        self.owner_resource_id = owner_resource_id
        self.requested_resource_id = requested_resource_id


class InvalidArgumentError(StorageError, ValueError):
    """A record or argument cannot be stored as given (naive datetime, non-JSON payload, ...)."""


class SchemaVersionError(StorageError):
    """The database was written by a newer schema than this code knows how to use."""

    def __init__(self, found: int, supported: int) -> None:
        super().__init__(
            f"Database schema version {found} is newer than the latest supported version {supported}"
        )
        self.found = found
        self.supported = supported


class StorageClosedError(StorageError):
    """The storage was used after :meth:`close`."""

    def __init__(self) -> None:
        super().__init__("Storage is closed")
