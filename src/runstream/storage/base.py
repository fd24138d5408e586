"""The :class:`Storage` protocol that memory and the background-task manager sit on.

Six domains share one backend: threads, messages, resources (resource-scoped working memory),
background-task records, per-thread key/value state (goal objectives) and namespaced snapshots
(workflow state). Every backend honours the same
contract, pinned by ``tests/storage/test_storage_contract.py``:

* Records go in and come out as copies: mutating an argument after saving it, or a returned
  record, never changes what is stored.
* Datetimes must be timezone-aware and come back in UTC (naive ones raise
  :class:`~runstream.storage.errors.InvalidArgumentError`, as do non-JSON payloads).
* Threads are resource-scoped: a thread id never changes owner, and using it with another
  resource id raises :class:`~runstream.storage.errors.ThreadResourceMismatchError`.
* Listings are zero-based pages; ``per_page=None`` returns everything. Ties on a timestamp keep
  the order in which records were first saved.
* Methods may be called concurrently from many asyncio tasks; each call is atomic.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime
from typing import Protocol, Unpack, runtime_checkable

from runstream._json import JsonObject, JsonValue
from runstream.storage.records import (
    Page,
    Resource,
    SortOrder,
    StoredMessage,
    TaskFilter,
    TaskRecord,
    TaskStatus,
    TaskUpdate,
    Thread,
    ThreadOrderField,
)

MessageMutator = Callable[[StoredMessage], StoredMessage]
"""Receives a copy of the stored message and returns the version to store (may edit in place)."""


@runtime_checkable
class Storage(Protocol):
    async def init(self) -> None:
        """Prepare the backend (connect, create or migrate the schema). Idempotent.

        Calling it is optional: every other method initialises on first use.
        """
        ...

    async def close(self) -> None:
        """Release the backend; later calls raise ``StorageClosedError``. Idempotent."""
        ...

    # -- threads ---------------------------------------------------------------------------

    async def save_thread(self, thread: Thread) -> None:
        """Insert or replace a thread. Raises ``ThreadResourceMismatchError`` if the id is
        already owned by another resource."""
        ...

    async def get_thread(self, thread_id: str) -> Thread | None: ...

    async def list_threads(
        self,
        resource_id: str,
        *,
        page: int = 0,
        per_page: int | None = None,
        order_by: ThreadOrderField = "updated_at",
        order: SortOrder = "desc",
    ) -> Page[Thread]:
        """The threads of one resource only (never another resource's)."""
        ...

    async def update_thread(
        self, thread_id: str, *, title: str | None = None, metadata: Mapping[str, JsonValue] | None = None
    ) -> Thread:
        """Set the title and/or shallow-merge ``metadata`` into the thread's metadata (Mastra's
        ``updateThread`` semantics); bumps ``updated_at``. Raises ``NotFoundError``."""
        ...

    async def delete_thread(self, thread_id: str) -> bool:
        """Delete a thread with its messages and thread state (the state goes even if the thread
        itself never existed). Returns whether the thread existed."""
        ...

    # -- resources -------------------------------------------------------------------------

    async def get_resource(self, resource_id: str) -> Resource | None:
        """What memory keeps about a resource across its threads (resource-scoped working
        memory); ``None`` before anything was stored for it."""
        ...

    async def update_resource(
        self,
        resource_id: str,
        *,
        working_memory: str | None = None,
        metadata: Mapping[str, JsonValue] | None = None,
    ) -> Resource:
        """Create or update a resource record (Mastra's ``updateResource``): ``working_memory``
        replaces the stored one when given, ``metadata`` is shallow-merged; bumps ``updated_at``."""
        ...

    # -- messages --------------------------------------------------------------------------

    async def save_messages(self, messages: Sequence[StoredMessage]) -> None:
        """Upsert by id, all or nothing. Re-saving an id replaces the whole message (it keeps its
        place among equal timestamps) and may move it to another thread. Each target thread must
        exist (``NotFoundError``) and belong to the message's resource
        (``ThreadResourceMismatchError``); its ``updated_at`` is bumped."""
        ...

    async def list_messages(
        self,
        thread_id: str,
        *,
        resource_id: str | None = None,
        last: int | None = None,
        page: int = 0,
        per_page: int | None = None,
    ) -> Page[StoredMessage]:
        """A thread's messages in chronological order.

        ``last=n`` returns the ``n`` most recent ones (still oldest first; cannot be combined
        with ``page``/``per_page``). With ``resource_id`` the thread must exist and belong to that
        resource; without it a missing thread simply has no messages.
        """
        ...

    async def latest_messages(self, thread_id: str, count: int) -> list[StoredMessage]:
        """The thread's ``count`` most recent messages, oldest first (``list_messages(...,
        last=count).items``, without the page's total: counting a thread's messages costs more
        as the thread grows, and a run's history needs only the newest)."""
        ...

    async def get_messages(self, message_ids: Collection[str]) -> list[StoredMessage]:
        """The messages with these ids, chronologically; unknown ids are skipped."""
        ...

    async def messages_around(
        self, message_ids: Collection[str], *, before: int = 0, after: int = 0
    ) -> list[StoredMessage]:
        """The messages with these ids, each with up to ``before`` earlier and ``after`` later
        messages of its own thread (Mastra's ``listMessages({include: [...]})``, semantic
        recall's message range); deduplicated, chronological; unknown ids are skipped. Each
        neighbour lookup is an indexed range read, so the cost does not grow with the thread."""
        ...

    async def update_message(self, message_id: str, mutate: MessageMutator) -> StoredMessage:
        """Atomically read, ``mutate`` and store one message; returns the stored version.

        This is how a finished background task rewrites its tool-invocation part: two tasks of
        the same assistant message finishing together must not overwrite each other's rewrite,
        which a get-then-save from the caller would. The id must not change; the result is
        validated like :meth:`save_messages`. Raises ``NotFoundError``.
        """
        ...

    async def delete_messages(self, message_ids: Collection[str]) -> int:
        """Delete by id; returns how many existed."""
        ...

    async def find_tool_call_message(self, thread_id: str, tool_call_id: str) -> StoredMessage | None:
        """The thread's assistant message holding the tool call ``tool_call_id`` (a
        ``tool-invocation`` part), through an index kept on every save, update and delete, so
        the cost does not grow with the thread. A call id held by several messages of the
        thread (a model that reuses ids) finds the one saved last."""
        ...

    # -- background tasks ------------------------------------------------------------------

    async def save_task(self, task: TaskRecord) -> None:
        """Insert or replace a task record."""
        ...

    async def get_task(self, task_id: str) -> TaskRecord | None: ...

    async def list_tasks(self, task_filter: TaskFilter | None = None) -> Page[TaskRecord]: ...

    async def count_tasks(self, task_filter: TaskFilter | None = None) -> int:
        """How many records match (the filter's paging is ignored): concurrency-slot checks."""
        ...

    async def update_task(
        self,
        task_id: str,
        *,
        expected_status: TaskStatus | Collection[TaskStatus] | None = None,
        expected_metadata: Mapping[str, str | None] | None = None,
        **fields: Unpack[TaskUpdate],
    ) -> TaskRecord | None:
        """Change some fields; returns the updated record, or ``None`` if nothing was written.

        A missing task is a no-op, as in Mastra. With ``expected_status`` this is a
        compare-and-set: the write happens only if the current status is one of those (so a
        stale dispatch cannot restart a finished task). ``expected_metadata`` adds conditions on
        top-level metadata keys (identifiers), each equal to a string, or absent/null for
        ``None``: the Temporal manager's attempt tokens, so an attempt Temporal gave up on cannot
        write over its successor's. Both are checked and the write made in one atomic step.
        """
        ...

    async def delete_tasks(self, task_ids: Collection[str]) -> int:
        """Delete by id; returns how many existed."""
        ...

    async def delete_tasks_older_than(
        self, status: TaskStatus | Collection[TaskStatus], before: datetime
    ) -> int:
        """Cleanup TTLs: delete records in ``status`` whose ``completed_at`` (or ``created_at``
        if never completed) is earlier than ``before``. Returns how many were deleted."""
        ...

    # -- thread state ----------------------------------------------------------------------

    async def get_thread_state(self, thread_id: str, key: str) -> JsonObject | None: ...

    async def set_thread_state(self, thread_id: str, key: str, value: Mapping[str, object]) -> None:
        """Replace the value under (thread, key). The thread need not exist; deleting the
        thread deletes its state."""
        ...

    async def delete_thread_state(self, thread_id: str, key: str) -> bool: ...

    # -- snapshots -------------------------------------------------------------------------

    async def save_snapshot(self, namespace: str, snapshot_id: str, data: Mapping[str, object]) -> None: ...

    async def load_snapshot(self, namespace: str, snapshot_id: str) -> JsonObject | None: ...

    async def claim_snapshot(
        self, namespace: str, snapshot_id: str, data: Mapping[str, object]
    ) -> JsonObject:
        """Store ``data`` unless a snapshot with this id exists; return the stored one (``data``
        if this call created it). One atomic step, so of racing claims exactly one wins: the
        server records who owns a run this way."""
        ...

    async def delete_snapshot(self, namespace: str, snapshot_id: str) -> bool: ...

    async def list_snapshots(self, namespace: str) -> list[str]:
        """The ids of a namespace's snapshots, oldest save first."""
        ...
