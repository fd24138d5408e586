"""Dict-backed :class:`~runstream.storage.base.Storage` for tests and single-process use.

It keeps the same encoded rows as the SQL backends (JSON as text, datetimes normalised to UTC),
so it validates and round-trips payloads exactly like they do, and every read decodes a fresh
copy. No method awaits while touching the dicts, so each call is atomic under asyncio.
Dict insertion order stands in for the SQL ``seq`` column (save order, kept on re-save).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from datetime import datetime
from typing import TypeVar, Unpack

from runstream._json import JsonObject, JsonValue
from runstream.storage._query import (
    check_expected_metadata,
    check_last,
    check_order,
    check_paging,
    check_task_filter,
    check_thread_order_field,
    make_page,
    metadata_matches,
    normalise_statuses,
    page_bounds,
    task_expired,
    task_matches,
)
from runstream.storage._rows import (
    MessageRow,
    ResourceRow,
    TaskRow,
    ThreadRow,
    apply_task_update,
    check_task_update,
    decode_json,
    encode_json_object,
    message_from_row,
    message_to_row,
    resource_from_row,
    resource_to_row,
    task_from_row,
    task_to_row,
    thread_from_row,
    thread_to_row,
    to_utc,
    tool_call_ids,
    updated_resource,
)
from runstream.storage.base import MessageMutator
from runstream.storage.errors import (
    InvalidArgumentError,
    NotFoundError,
    StorageClosedError,
    ThreadResourceMismatchError,
)
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
    utc_now,
)

R = TypeVar("R", ThreadRow, MessageRow, TaskRow)


def _ordered(rows: Iterable[R], stamp: Callable[[R], datetime], order: SortOrder) -> list[R]:
    """Sort by ``stamp``; ties in save order (reversed for ``desc``, like ``seq DESC``)."""
    indexed = sorted(enumerate(rows), key=lambda pair: (stamp(pair[1]), pair[0]), reverse=order == "desc")
    return [row for _, row in indexed]


def _created(row: MessageRow | TaskRow) -> datetime:
    return row["created_at"]


def _slice(rows: list[R], page: int, per_page: int | None) -> list[R]:
    offset, limit = page_bounds(page, per_page)
    return rows[offset:] if limit is None else rows[offset : offset + limit]


class InMemoryStorage:
    def __init__(self) -> None:
        self._threads: dict[str, ThreadRow] = {}
        self._messages: dict[str, MessageRow] = {}
        self._tool_calls: dict[tuple[str, str], str] = {}
        """(thread id, tool call id) -> the id of the message holding the call"""
        self._tasks: dict[str, TaskRow] = {}
        # Decoded twins of the task rows, for filtering without decoding every row (never handed out).
        self._task_view: dict[str, TaskRecord] = {}
        self._thread_state: dict[tuple[str, str], str] = {}
        self._resources: dict[str, ResourceRow] = {}
        self._snapshots: dict[tuple[str, str], str] = {}
        self._closed = False

    def _check_open(self) -> None:
        if self._closed:
            raise StorageClosedError()

    async def init(self) -> None:
        self._check_open()

    async def close(self) -> None:
        self._closed = True

    # -- threads ---------------------------------------------------------------------------

    async def save_thread(self, thread: Thread) -> None:
        self._check_open()
        row = thread_to_row(thread)
        existing = self._threads.get(thread.id)
        if existing is not None and existing["resource_id"] != thread.resource_id:
            raise ThreadResourceMismatchError(thread.id, existing["resource_id"], thread.resource_id)
        self._threads[thread.id] = row

    async def get_thread(self, thread_id: str) -> Thread | None:
        self._check_open()
        row = self._threads.get(thread_id)
        return None if row is None else thread_from_row(row)

    async def list_threads(
        self,
        resource_id: str,
        *,
        page: int = 0,
        per_page: int | None = None,
        order_by: ThreadOrderField = "updated_at",
        order: SortOrder = "desc",
    ) -> Page[Thread]:
        self._check_open()
        check_paging(page, per_page)
        rows = [row for row in self._threads.values() if row["resource_id"] == resource_id]
        column = check_thread_order_field(order_by)
        rows = _ordered(rows, lambda row: row[column], check_order(order))
        items = [thread_from_row(row) for row in _slice(rows, page, per_page)]
        return make_page(items, len(rows), page, per_page)

    async def update_thread(
        self, thread_id: str, *, title: str | None = None, metadata: Mapping[str, JsonValue] | None = None
    ) -> Thread:
        self._check_open()
        row = self._threads.get(thread_id)
        if row is None:
            raise NotFoundError("Thread", thread_id)
        updated: ThreadRow = {**row, "updated_at": utc_now()}
        if title is not None:
            updated["title"] = title
        if metadata is not None:
            merged = {**decode_json(row["metadata"]), **metadata}
            updated["metadata"] = encode_json_object(merged, what="thread metadata")
        self._threads[thread_id] = updated
        return thread_from_row(updated)

    async def delete_thread(self, thread_id: str) -> bool:
        self._check_open()
        for message_id in [m["id"] for m in self._messages.values() if m["thread_id"] == thread_id]:
            del self._messages[message_id]
        for key in [key for key in self._tool_calls if key[0] == thread_id]:
            del self._tool_calls[key]
        for key in [key for key in self._thread_state if key[0] == thread_id]:
            del self._thread_state[key]
        return self._threads.pop(thread_id, None) is not None

    # -- resources -------------------------------------------------------------------------

    async def get_resource(self, resource_id: str) -> Resource | None:
        self._check_open()
        row = self._resources.get(resource_id)
        return None if row is None else resource_from_row(row)

    async def update_resource(
        self,
        resource_id: str,
        *,
        working_memory: str | None = None,
        metadata: Mapping[str, JsonValue] | None = None,
    ) -> Resource:
        self._check_open()
        row = self._resources.get(resource_id)
        existing = None if row is None else resource_from_row(row)
        new_row = resource_to_row(updated_resource(existing, resource_id, working_memory, metadata))
        self._resources[resource_id] = new_row
        return resource_from_row(new_row)

    # -- messages --------------------------------------------------------------------------

    def _owned_thread(self, thread_id: str, resource_id: str) -> ThreadRow:
        thread = self._threads.get(thread_id)
        if thread is None:
            raise NotFoundError("Thread", thread_id)
        if thread["resource_id"] != resource_id:
            raise ThreadResourceMismatchError(thread_id, thread["resource_id"], resource_id)
        return thread

    def _store_messages(self, rows: Sequence[MessageRow]) -> None:
        """Validate every row against its thread first, then write: all or nothing."""
        for row in rows:
            self._owned_thread(row["thread_id"], row["resource_id"])
        for row in rows:
            self._messages[row["id"]] = row
            for call_id in tool_call_ids(row):
                self._tool_calls[(row["thread_id"], call_id)] = row["id"]
        now = utc_now()
        for thread_id in {row["thread_id"] for row in rows}:
            self._threads[thread_id] = {**self._threads[thread_id], "updated_at": now}

    async def save_messages(self, messages: Sequence[StoredMessage]) -> None:
        self._check_open()
        self._store_messages([message_to_row(message) for message in messages])

    async def list_messages(
        self,
        thread_id: str,
        *,
        resource_id: str | None = None,
        last: int | None = None,
        page: int = 0,
        per_page: int | None = None,
    ) -> Page[StoredMessage]:
        self._check_open()
        check_last(last, page, per_page)
        if resource_id is not None:
            self._owned_thread(thread_id, resource_id)
        rows = _ordered((m for m in self._messages.values() if m["thread_id"] == thread_id), _created, "asc")
        if last is not None:
            selected = rows[len(rows) - last :] if last else []
            return make_page([message_from_row(row) for row in selected], len(rows), 0, last)
        items = [message_from_row(row) for row in _slice(rows, page, per_page)]
        return make_page(items, len(rows), page, per_page)

    async def latest_messages(self, thread_id: str, count: int) -> list[StoredMessage]:
        return (await self.list_messages(thread_id, last=count)).items

    async def get_messages(self, message_ids: Collection[str]) -> list[StoredMessage]:
        self._check_open()
        wanted = set(message_ids)
        rows = (row for row in self._messages.values() if row["id"] in wanted)
        return [message_from_row(row) for row in _ordered(rows, _created, "asc")]

    async def messages_around(
        self, message_ids: Collection[str], *, before: int = 0, after: int = 0
    ) -> list[StoredMessage]:
        self._check_open()
        if before < 0 or after < 0:
            raise InvalidArgumentError("before and after must be >= 0")
        chosen: dict[str, MessageRow] = {}
        threads: dict[str, list[MessageRow]] = {}
        for message_id in message_ids:
            row = self._messages.get(message_id)
            if row is None:
                continue
            thread = threads.get(row["thread_id"])
            if thread is None:
                members = (m for m in self._messages.values() if m["thread_id"] == row["thread_id"])
                thread = threads[row["thread_id"]] = _ordered(members, _created, "asc")
            at = next(i for i, m in enumerate(thread) if m["id"] == message_id)
            chosen.update((m["id"], m) for m in thread[max(0, at - before) : at + after + 1])
        order = {message_id: i for i, message_id in enumerate(self._messages)}
        rows = sorted(chosen.values(), key=lambda m: (m["created_at"], order[m["id"]]))
        return [message_from_row(row) for row in rows]

    async def update_message(self, message_id: str, mutate: MessageMutator) -> StoredMessage:
        self._check_open()
        row = self._messages.get(message_id)
        if row is None:
            raise NotFoundError("Message", message_id)
        updated = mutate(message_from_row(row))
        if updated.id != message_id:
            raise InvalidArgumentError(
                f"update_message cannot change a message id ({message_id} -> {updated.id})"
            )
        new_row = message_to_row(updated)
        self._store_messages([new_row])
        return message_from_row(new_row)

    async def delete_messages(self, message_ids: Collection[str]) -> int:
        self._check_open()
        return sum(self._messages.pop(message_id, None) is not None for message_id in set(message_ids))

    async def find_tool_call_message(self, thread_id: str, tool_call_id: str) -> StoredMessage | None:
        self._check_open()
        row = self._messages.get(self._tool_calls.get((thread_id, tool_call_id), ""))
        # A pointer can be stale (its message deleted, moved or rewritten without the call).
        if row is None or row["thread_id"] != thread_id or tool_call_id not in tool_call_ids(row):
            return None
        return message_from_row(row)

    # -- background tasks ------------------------------------------------------------------

    async def save_task(self, task: TaskRecord) -> None:
        self._check_open()
        row = task_to_row(task)
        self._tasks[task.id] = row
        self._task_view[task.id] = task_from_row(row)

    async def get_task(self, task_id: str) -> TaskRecord | None:
        self._check_open()
        row = self._tasks.get(task_id)
        return None if row is None else task_from_row(row)

    def _matching_rows(self, task_filter: TaskFilter) -> list[TaskRow]:
        check_task_filter(task_filter)
        rows = (self._tasks[i] for i, view in self._task_view.items() if task_matches(task_filter, view))
        return _ordered(rows, _created, task_filter.order)

    async def list_tasks(self, task_filter: TaskFilter | None = None) -> Page[TaskRecord]:
        self._check_open()
        task_filter = task_filter or TaskFilter()
        rows = self._matching_rows(task_filter)
        items = [task_from_row(row) for row in _slice(rows, task_filter.page, task_filter.per_page)]
        return make_page(items, len(rows), task_filter.page, task_filter.per_page)

    async def count_tasks(self, task_filter: TaskFilter | None = None) -> int:
        self._check_open()
        task_filter = task_filter or TaskFilter()
        check_task_filter(task_filter)
        return sum(1 for view in self._task_view.values() if task_matches(task_filter, view))

    async def update_task(
        self,
        task_id: str,
        *,
        expected_status: TaskStatus | Collection[TaskStatus] | None = None,
        expected_metadata: Mapping[str, str | None] | None = None,
        **fields: Unpack[TaskUpdate],
    ) -> TaskRecord | None:
        self._check_open()
        check_task_update(fields)
        statuses = normalise_statuses(expected_status)
        expected = check_expected_metadata(expected_metadata)
        row = self._tasks.get(task_id)
        if row is None:
            return None
        current = task_from_row(row)
        if statuses is not None and current.status not in statuses:
            return None
        if expected is not None and not metadata_matches(current.metadata, expected):
            return None
        new_row = task_to_row(apply_task_update(current, fields))
        self._tasks[task_id] = new_row
        self._task_view[task_id] = task_from_row(new_row)
        return task_from_row(new_row)

    async def delete_tasks(self, task_ids: Collection[str]) -> int:
        self._check_open()
        deleted = 0
        for task_id in set(task_ids):
            self._task_view.pop(task_id, None)
            deleted += self._tasks.pop(task_id, None) is not None
        return deleted

    async def delete_tasks_older_than(
        self, status: TaskStatus | Collection[TaskStatus], before: datetime
    ) -> int:
        self._check_open()
        statuses = normalise_statuses(status) or ()
        cutoff = to_utc(before, what="before")
        expired = [
            task_id for task_id, view in self._task_view.items() if task_expired(view, statuses, cutoff)
        ]
        for task_id in expired:
            del self._tasks[task_id]
            del self._task_view[task_id]
        return len(expired)

    # -- thread state ----------------------------------------------------------------------

    async def get_thread_state(self, thread_id: str, key: str) -> JsonObject | None:
        self._check_open()
        value = self._thread_state.get((thread_id, key))
        return None if value is None else dict(decode_json(value))

    async def set_thread_state(self, thread_id: str, key: str, value: Mapping[str, object]) -> None:
        self._check_open()
        self._thread_state[(thread_id, key)] = encode_json_object(value, what=f"thread state {key!r}")

    async def delete_thread_state(self, thread_id: str, key: str) -> bool:
        self._check_open()
        return self._thread_state.pop((thread_id, key), None) is not None

    # -- snapshots -------------------------------------------------------------------------

    async def save_snapshot(self, namespace: str, snapshot_id: str, data: Mapping[str, object]) -> None:
        self._check_open()
        self._snapshots[(namespace, snapshot_id)] = encode_json_object(
            data, what=f"snapshot {namespace}/{snapshot_id}"
        )

    async def load_snapshot(self, namespace: str, snapshot_id: str) -> JsonObject | None:
        self._check_open()
        data = self._snapshots.get((namespace, snapshot_id))
        return None if data is None else dict(decode_json(data))

    async def claim_snapshot(
        self, namespace: str, snapshot_id: str, data: Mapping[str, object]
    ) -> JsonObject:
        self._check_open()
        encoded = encode_json_object(data, what=f"snapshot {namespace}/{snapshot_id}")
        return dict(decode_json(self._snapshots.setdefault((namespace, snapshot_id), encoded)))

    async def delete_snapshot(self, namespace: str, snapshot_id: str) -> bool:
        self._check_open()
        return self._snapshots.pop((namespace, snapshot_id), None) is not None

    async def list_snapshots(self, namespace: str) -> list[str]:
        self._check_open()
        return [snapshot_id for (ns, snapshot_id) in self._snapshots if ns == namespace]
