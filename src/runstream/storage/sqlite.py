"""SQLite :class:`~runstream.storage.base.Storage` on ``aiosqlite``.

One connection per instance, opened, tuned (WAL, ``synchronous=NORMAL``, foreign keys, a busy
timeout) and migrated on first use. Every call holds an asyncio lock for its whole transaction:
a single connection has a single transaction, so without the lock a statement from one task
could land inside another task's transaction (and be rolled back with it). Writes use
``BEGIN IMMEDIATE`` so read-modify-write calls are atomic against other processes too; reads use
a deferred transaction so a count and its page see the same snapshot. ``update_task``, the
task manager's compare-and-set, is one conditional ``UPDATE ... RETURNING`` in autocommit, so
SQLite's write lock is never held while the event loop is busy elsewhere; so is
``claim_snapshot`` (every new run claims its id), an ``INSERT ... ON CONFLICT DO NOTHING
RETURNING``.

Datetimes are stored as fixed-width UTC text (so text order is time order), JSON as text.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Collection, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from datetime import datetime
from typing import Unpack

import aiosqlite

from runstream._json import JsonObject, JsonValue
from runstream._uninterrupted import run_to_end
from runstream.storage import _sqlite_driver as _driver
from runstream.storage import _sqlite_schema as schema
from runstream.storage._query import (
    SqlParams,
    check_expected_metadata,
    check_last,
    check_paging,
    check_thread_order_field,
    expired_where,
    latest_messages_sql,
    limit_clause,
    make_page,
    neighbour_messages_sql,
    normalise_statuses,
    order_clause,
    task_where,
    upsert_sql,
)
from runstream.storage._rows import (
    MESSAGE_COLUMNS,
    RESOURCE_COLUMNS,
    TASK_COLUMNS,
    THREAD_COLUMNS,
    FetchedRow,
    MessageRow,
    datetime_to_text,
    decode_json,
    encode_json,
    encode_json_object,
    message_from_row,
    message_to_row,
    resource_from_row,
    resource_to_row,
    task_changes,
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
    StorageError,
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

_THREAD_SELECT = f"SELECT {', '.join(THREAD_COLUMNS)} FROM threads"
_MESSAGE_SELECT = f"SELECT {', '.join(MESSAGE_COLUMNS)} FROM messages"

_RESOURCE_SELECT = f"SELECT {', '.join(RESOURCE_COLUMNS)} FROM resources"
_TASK_SELECT = f"SELECT {', '.join(TASK_COLUMNS)} FROM background_tasks"
_IDS_PARAM = "(SELECT value FROM json_each(?))"
_CLAIM_ATTEMPTS = 3
"""How often a claim tries again when the snapshot it lost to was deleted before it read it."""
"""Binds a whole id list as one JSON array, so no list outgrows SQLite's variable limit."""


def _bind(value: object) -> object:
    return datetime_to_text(value) if isinstance(value, datetime) else value


def _metadata_condition(key: str, value: str | None, params: SqlParams) -> str:
    """SQL for "metadata's ``key`` is the string ``value``" (``None``: absent or null), as
    :func:`~runstream.storage._query.metadata_matches` decides it."""
    if value is None:
        return f"COALESCE(json_type(metadata, {params.add(f'$.{key}')}), 'null') = 'null'"
    path = f"$.{key}"
    return (
        f"(json_type(metadata, {params.add(path)}) = 'text'"
        f" AND json_extract(metadata, {params.add(path)}) = {params.add(value)})"
    )


def _ids_json(ids: Collection[str]) -> str:
    return encode_json(list(ids), what="id list")


async def _enable_wal(db: aiosqlite.Connection, timeout_ms: int) -> None:
    """Switch the file to WAL mode; retried, since SQLite's busy handler does not cover this
    switch while another connection (e.g. a second process opening the file) holds a lock."""
    deadline = asyncio.get_running_loop().time() + timeout_ms / 1000
    while True:
        try:
            async with db.execute("PRAGMA journal_mode = WAL") as cursor:
                await cursor.fetchone()
            return
        except _driver.operational_errors() as exc:
            if "locked" not in str(exc) or asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.01)


@contextmanager
def _translate_errors() -> Iterator[None]:
    try:
        yield
    except _driver.errors() as exc:
        raise StorageError(f"SQLite error: {exc}") from exc


class _Tx:
    """The statements a transaction runs; parameters are bound through :func:`_bind`."""

    def __init__(self, db: aiosqlite.Connection) -> None:
        self._db = db

    async def run(self, sql: str, params: Sequence[object] = ()) -> int:
        async with self._db.execute(sql, [_bind(p) for p in params]) as cursor:
            return cursor.rowcount

    async def rows(self, sql: str, params: Sequence[object] = ()) -> list[FetchedRow]:
        async with self._db.execute(sql, [_bind(p) for p in params]) as cursor:
            names = [column[0] for column in cursor.description]
            return [dict(zip(names, values, strict=True)) for values in await cursor.fetchall()]

    async def row(self, sql: str, params: Sequence[object] = ()) -> FetchedRow | None:
        found = await self.rows(sql, params)
        return found[0] if found else None

    async def count(self, sql: str, params: Sequence[object] = ()) -> int:
        found = await self.row(sql, params)
        return int(next(iter(found.values()))) if found else 0

    async def upsert(
        self, table: str, row: Mapping[str, object], conflict_columns: Sequence[str] = ("id",)
    ) -> None:
        params = SqlParams("qmark")
        await self.run(upsert_sql(table, row, conflict_columns, params), params.values)


class SqliteStorage:
    def __init__(self, path: str | os.PathLike[str], *, busy_timeout_ms: int = 5000) -> None:
        """``path`` is a file (created on first use) or ``":memory:"``.

        ``busy_timeout_ms`` bounds how long a call waits for another process's write lock.
        """
        self._path = path
        self._busy_timeout_ms = busy_timeout_ms
        self._db: aiosqlite.Connection | None = None
        self._lock = asyncio.Lock()
        self._closed = False

    @property
    def path(self) -> str:
        """The database file (or ``":memory:"``): other stores (vectors) share it."""
        return os.fspath(self._path)

    async def _connection(self) -> aiosqlite.Connection:
        """Open, tune and migrate on first use. Caller holds ``self._lock``."""
        if self._closed:
            raise StorageClosedError()
        if self._db is None:
            db = await _driver.connect(os.fspath(self._path))
            try:
                await db.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_ms)}")
                await _enable_wal(db, self._busy_timeout_ms)
                await db.execute("PRAGMA synchronous = NORMAL")
                await db.execute("PRAGMA foreign_keys = ON")
                await schema.migrate(db, schema.MIGRATIONS)
            except BaseException:
                await db.close()
                raise
            self._db = db
        return self._db

    @asynccontextmanager
    async def _transaction(self, begin: str) -> AsyncIterator[_Tx]:
        """One transaction on the shared connection, which a cancelled caller never leaves open.

        aiosqlite runs statements in its own thread, in order: a statement whose caller was
        cancelled still runs. So ``BEGIN``, ``COMMIT`` and ``ROLLBACK`` are awaited to the end even
        when the caller is cancelled meanwhile (see :func:`run_to_end`), and a rollback is queued
        behind whatever statement was in flight. Without this, a request cancelled at the wrong
        moment left the connection inside a transaction and every later call failed with "cannot
        start a transaction within a transaction".
        """
        async with self._lock:
            with _translate_errors():
                db = await self._connection()
                if await run_to_end(db.execute(begin)):
                    await run_to_end(db.execute("ROLLBACK"))
                    raise asyncio.CancelledError()
                try:
                    yield _Tx(db)
                except BaseException:
                    await run_to_end(db.execute("ROLLBACK"))
                    raise
                try:
                    cancelled = await run_to_end(db.execute("COMMIT"))
                except BaseException:
                    if db.in_transaction:
                        await run_to_end(db.execute("ROLLBACK"))
                    raise
                if cancelled:  # committed all the same; the caller still learns it was cancelled
                    raise asyncio.CancelledError()

    def _read(self) -> AbstractAsyncContextManager[_Tx]:
        return self._transaction("BEGIN")

    def _write(self) -> AbstractAsyncContextManager[_Tx]:
        return self._transaction("BEGIN IMMEDIATE")

    async def init(self) -> None:
        async with self._lock:
            with _translate_errors():
                await self._connection()

    async def close(self) -> None:
        async with self._lock:
            self._closed = True
            if self._db is not None:
                db, self._db = self._db, None
                await db.close()

    # -- threads ---------------------------------------------------------------------------

    async def save_thread(self, thread: Thread) -> None:
        row = thread_to_row(thread)
        async with self._write() as tx:
            existing = await tx.row("SELECT resource_id FROM threads WHERE id = ?", [thread.id])
            if existing is not None and existing["resource_id"] != thread.resource_id:
                raise ThreadResourceMismatchError(thread.id, existing["resource_id"], thread.resource_id)
            await tx.upsert("threads", row)

    async def get_thread(self, thread_id: str) -> Thread | None:
        async with self._read() as tx:
            row = await tx.row(f"{_THREAD_SELECT} WHERE id = ?", [thread_id])
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
        check_paging(page, per_page)
        params = SqlParams("qmark")
        sql = (
            f"{_THREAD_SELECT} WHERE resource_id = {params.add(resource_id)}"
            f"{order_clause(check_thread_order_field(order_by), order)}{limit_clause(page, per_page, params)}"
        )
        async with self._read() as tx:
            total = await tx.count("SELECT COUNT(*) FROM threads WHERE resource_id = ?", [resource_id])
            rows = await tx.rows(sql, params.values)
        return make_page([thread_from_row(row) for row in rows], total, page, per_page)

    async def update_thread(
        self, thread_id: str, *, title: str | None = None, metadata: Mapping[str, JsonValue] | None = None
    ) -> Thread:
        async with self._write() as tx:
            row = await tx.row(f"{_THREAD_SELECT} WHERE id = ?", [thread_id])
            if row is None:
                raise NotFoundError("Thread", thread_id)
            thread = thread_from_row(row)
            if title is not None:
                thread.title = title
            if metadata is not None:
                thread.metadata = {**thread.metadata, **metadata}
            thread.updated_at = utc_now()
            new_row = thread_to_row(thread)
            await tx.upsert("threads", new_row)
        return thread_from_row(new_row)

    async def delete_thread(self, thread_id: str) -> bool:
        async with self._write() as tx:
            await tx.run("DELETE FROM messages WHERE thread_id = ?", [thread_id])
            await tx.run("DELETE FROM message_tool_calls WHERE thread_id = ?", [thread_id])
            await tx.run("DELETE FROM thread_state WHERE thread_id = ?", [thread_id])
            return await tx.run("DELETE FROM threads WHERE id = ?", [thread_id]) > 0

    # -- resources -------------------------------------------------------------------------

    async def get_resource(self, resource_id: str) -> Resource | None:
        async with self._read() as tx:
            row = await tx.row(f"{_RESOURCE_SELECT} WHERE id = ?", [resource_id])
        return None if row is None else resource_from_row(row)

    async def update_resource(
        self,
        resource_id: str,
        *,
        working_memory: str | None = None,
        metadata: Mapping[str, JsonValue] | None = None,
    ) -> Resource:
        async with self._write() as tx:
            row = await tx.row(f"{_RESOURCE_SELECT} WHERE id = ?", [resource_id])
            existing = None if row is None else resource_from_row(row)
            new_row = resource_to_row(updated_resource(existing, resource_id, working_memory, metadata))
            await tx.upsert("resources", new_row)
        return resource_from_row(new_row)

    # -- messages --------------------------------------------------------------------------

    @staticmethod
    async def _check_owner(tx: _Tx, thread_id: str, resource_id: str) -> None:
        thread = await tx.row("SELECT resource_id FROM threads WHERE id = ?", [thread_id])
        if thread is None:
            raise NotFoundError("Thread", thread_id)
        if thread["resource_id"] != resource_id:
            raise ThreadResourceMismatchError(thread_id, thread["resource_id"], resource_id)

    async def _store_messages(self, tx: _Tx, rows: Sequence[MessageRow]) -> None:
        for thread_id, resource_id in dict.fromkeys((r["thread_id"], r["resource_id"]) for r in rows):
            await self._check_owner(tx, thread_id, resource_id)
        for row in rows:
            await tx.upsert("messages", row)
            await tx.run("DELETE FROM message_tool_calls WHERE message_id = ?", [row["id"]])
            for call_id in tool_call_ids(row):
                await tx.run(
                    "INSERT OR REPLACE INTO message_tool_calls (thread_id, tool_call_id, message_id) VALUES (?, ?, ?)",
                    [row["thread_id"], call_id, row["id"]],
                )
        thread_ids = list(dict.fromkeys(row["thread_id"] for row in rows))
        await tx.run(
            f"UPDATE threads SET updated_at = ? WHERE id IN {_IDS_PARAM}", [utc_now(), _ids_json(thread_ids)]
        )

    async def save_messages(self, messages: Sequence[StoredMessage]) -> None:
        rows = [message_to_row(message) for message in messages]
        if not rows:
            return
        async with self._write() as tx:
            await self._store_messages(tx, rows)

    async def list_messages(
        self,
        thread_id: str,
        *,
        resource_id: str | None = None,
        last: int | None = None,
        page: int = 0,
        per_page: int | None = None,
    ) -> Page[StoredMessage]:
        check_last(last, page, per_page)
        params = SqlParams("qmark")
        if last is not None:
            sql = latest_messages_sql("messages", params, thread_id, last)
        else:
            where = f" WHERE thread_id = {params.add(thread_id)}"
            sql = f"{_MESSAGE_SELECT}{where}{order_clause('created_at', 'asc')}{limit_clause(page, per_page, params)}"
        async with self._read() as tx:
            if resource_id is not None:
                await self._check_owner(tx, thread_id, resource_id)
            total = await tx.count("SELECT COUNT(*) FROM messages WHERE thread_id = ?", [thread_id])
            rows = await tx.rows(sql, params.values)
        items = [message_from_row(row) for row in rows]
        return (
            make_page(items, total, 0, last) if last is not None else make_page(items, total, page, per_page)
        )

    async def latest_messages(self, thread_id: str, count: int) -> list[StoredMessage]:
        check_last(count, 0, None)
        params = SqlParams("qmark")
        sql = latest_messages_sql("messages", params, thread_id, count)
        async with self._read() as tx:
            rows = await tx.rows(sql, params.values)
        return [message_from_row(row) for row in rows]

    async def get_messages(self, message_ids: Collection[str]) -> list[StoredMessage]:
        sql = f"{_MESSAGE_SELECT} WHERE id IN {_IDS_PARAM}{order_clause('created_at', 'asc')}"
        async with self._read() as tx:
            rows = await tx.rows(sql, [_ids_json(message_ids)])
        return [message_from_row(row) for row in rows]

    async def messages_around(
        self, message_ids: Collection[str], *, before: int = 0, after: int = 0
    ) -> list[StoredMessage]:
        found: dict[str, FetchedRow] = {}
        async with self._read() as tx:
            for row in await tx.rows(
                f"SELECT {', '.join(MESSAGE_COLUMNS)}, seq FROM messages WHERE id IN {_IDS_PARAM}",
                [_ids_json(message_ids)],
            ):
                found[row["id"]] = row
            for message_id in list(found):
                for earlier, count in ((True, before), (False, after)):
                    if count > 0:
                        params = SqlParams("qmark")
                        sql = neighbour_messages_sql("messages", params, message_id, count, earlier=earlier)
                        found.update((row["id"], row) for row in await tx.rows(sql, params.values))
        return [
            message_from_row(row) for row in sorted(found.values(), key=lambda r: (r["created_at"], r["seq"]))
        ]

    async def update_message(self, message_id: str, mutate: MessageMutator) -> StoredMessage:
        async with self._write() as tx:
            row = await tx.row(f"{_MESSAGE_SELECT} WHERE id = ?", [message_id])
            if row is None:
                raise NotFoundError("Message", message_id)
            updated = mutate(message_from_row(row))
            if updated.id != message_id:
                raise InvalidArgumentError(
                    f"update_message cannot change a message id ({message_id} -> {updated.id})"
                )
            new_row = message_to_row(updated)
            await self._store_messages(tx, [new_row])
        return message_from_row(new_row)

    async def delete_messages(self, message_ids: Collection[str]) -> int:
        ids = [_ids_json(message_ids)]
        async with self._write() as tx:
            await tx.run(f"DELETE FROM message_tool_calls WHERE message_id IN {_IDS_PARAM}", ids)
            return await tx.run(f"DELETE FROM messages WHERE id IN {_IDS_PARAM}", ids)

    async def find_tool_call_message(self, thread_id: str, tool_call_id: str) -> StoredMessage | None:
        sql = (
            f"{_MESSAGE_SELECT} WHERE id = (SELECT message_id FROM message_tool_calls"
            " WHERE thread_id = ? AND tool_call_id = ?) AND thread_id = ?"
        )
        async with self._read() as tx:
            row = await tx.row(sql, [thread_id, tool_call_id, thread_id])
        return None if row is None else message_from_row(row)

    # -- background tasks ------------------------------------------------------------------

    async def save_task(self, task: TaskRecord) -> None:
        row = task_to_row(task)
        async with self._write() as tx:
            await tx.upsert("background_tasks", row)

    async def get_task(self, task_id: str) -> TaskRecord | None:
        async with self._read() as tx:
            row = await tx.row(f"{_TASK_SELECT} WHERE id = ?", [task_id])
        return None if row is None else task_from_row(row)

    async def list_tasks(self, task_filter: TaskFilter | None = None) -> Page[TaskRecord]:
        task_filter = task_filter or TaskFilter()
        count_params, params = SqlParams("qmark"), SqlParams("qmark")
        count_sql = f"SELECT COUNT(*) FROM background_tasks{task_where(task_filter, count_params)}"
        sql = (
            f"{_TASK_SELECT}{task_where(task_filter, params)}{order_clause('created_at', task_filter.order)}"
            f"{limit_clause(task_filter.page, task_filter.per_page, params)}"
        )
        async with self._read() as tx:
            total = await tx.count(count_sql, count_params.values)
            rows = await tx.rows(sql, params.values)
        return make_page([task_from_row(row) for row in rows], total, task_filter.page, task_filter.per_page)

    async def count_tasks(self, task_filter: TaskFilter | None = None) -> int:
        params = SqlParams("qmark")
        sql = f"SELECT COUNT(*) FROM background_tasks{task_where(task_filter or TaskFilter(), params)}"
        async with self._read() as tx:
            return await tx.count(sql, params.values)

    async def update_task(
        self,
        task_id: str,
        *,
        expected_status: TaskStatus | Collection[TaskStatus] | None = None,
        expected_metadata: Mapping[str, str | None] | None = None,
        **fields: Unpack[TaskUpdate],
    ) -> TaskRecord | None:
        # One conditional UPDATE in autocommit: the write lock is held for that statement only,
        # not across event-loop turns (a busy event loop would hold up every other process).
        changes = task_changes(task_id, fields)
        statuses = normalise_statuses(expected_status)
        expected = check_expected_metadata(expected_metadata)
        params = SqlParams("qmark")
        assignments = ", ".join(f"{column} = {params.add(value)}" for column, value in changes.items())
        where = f"id = {params.add(task_id)}"
        if statuses is not None:
            where += f" AND status IN ({params.add_all(statuses)})" if statuses else " AND 1 = 0"
        for key, value in (expected or {}).items():
            where += f" AND {_metadata_condition(key, value, params)}"
        # With no fields to change, "id = id" still matches (and returns) the record like a write would.
        sql = (
            f"UPDATE background_tasks SET {assignments or 'id = id'} WHERE {where} "
            f"RETURNING {', '.join(TASK_COLUMNS)}"
        )
        async with self._lock:
            with _translate_errors():
                db = await self._connection()
                values = await db.execute_fetchall(sql, [_bind(p) for p in params.values])
        rows = list(values)
        return None if not rows else task_from_row(dict(zip(TASK_COLUMNS, rows[0], strict=True)))

    async def delete_tasks(self, task_ids: Collection[str]) -> int:
        async with self._write() as tx:
            return await tx.run(
                f"DELETE FROM background_tasks WHERE id IN {_IDS_PARAM}", [_ids_json(task_ids)]
            )

    async def delete_tasks_older_than(
        self, status: TaskStatus | Collection[TaskStatus], before: datetime
    ) -> int:
        params = SqlParams("qmark")
        where = expired_where(normalise_statuses(status) or (), to_utc(before, what="before"), params)
        async with self._write() as tx:
            return await tx.run(f"DELETE FROM background_tasks{where}", params.values)

    # -- thread state ----------------------------------------------------------------------

    async def get_thread_state(self, thread_id: str, key: str) -> JsonObject | None:
        async with self._read() as tx:
            row = await tx.row(
                "SELECT value FROM thread_state WHERE thread_id = ? AND state_key = ?", [thread_id, key]
            )
        return None if row is None else dict(decode_json(row["value"]))

    async def set_thread_state(self, thread_id: str, key: str, value: Mapping[str, object]) -> None:
        row = {
            "thread_id": thread_id,
            "state_key": key,
            "value": encode_json_object(value, what=f"thread state {key!r}"),
            "updated_at": utc_now(),
        }
        async with self._write() as tx:
            await tx.upsert("thread_state", row, ("thread_id", "state_key"))

    async def delete_thread_state(self, thread_id: str, key: str) -> bool:
        async with self._write() as tx:
            sql = "DELETE FROM thread_state WHERE thread_id = ? AND state_key = ?"
            return await tx.run(sql, [thread_id, key]) > 0

    # -- snapshots -------------------------------------------------------------------------

    async def save_snapshot(self, namespace: str, snapshot_id: str, data: Mapping[str, object]) -> None:
        row = {
            "namespace": namespace,
            "id": snapshot_id,
            "data": encode_json_object(data, what=f"snapshot {namespace}/{snapshot_id}"),
            "updated_at": utc_now(),
        }
        async with self._write() as tx:
            await tx.upsert("snapshots", row, ("namespace", "id"))

    async def load_snapshot(self, namespace: str, snapshot_id: str) -> JsonObject | None:
        async with self._read() as tx:
            row = await tx.row(
                "SELECT data FROM snapshots WHERE namespace = ? AND id = ?", [namespace, snapshot_id]
            )
        return None if row is None else dict(decode_json(row["data"]))

    async def claim_snapshot(
        self, namespace: str, snapshot_id: str, data: Mapping[str, object]
    ) -> JsonObject:
        encoded = encode_json_object(data, what=f"snapshot {namespace}/{snapshot_id}")
        # Statements in autocommit, as update_task's: a new claim is one round trip to the
        # connection's thread, not a transaction of three (every new run claims its id, and
        # claims queue behind each other). The insert is atomic on its own; a claim that lost
        # reads the winner's data, and claims again in the rare case another process deleted
        # it in between.
        for _ in range(_CLAIM_ATTEMPTS):
            async with self._lock:
                with _translate_errors():
                    db = await self._connection()
                    rows = await db.execute_fetchall(
                        "INSERT INTO snapshots (namespace, id, data, updated_at) VALUES (?, ?, ?, ?) "
                        "ON CONFLICT (namespace, id) DO NOTHING RETURNING data",
                        [namespace, snapshot_id, encoded, _bind(utc_now())],
                    )
                    if not rows:
                        rows = await db.execute_fetchall(
                            "SELECT data FROM snapshots WHERE namespace = ? AND id = ?",
                            [namespace, snapshot_id],
                        )
            found = list(rows)
            if found:
                return dict(decode_json(found[0][0]))
        raise StorageError(
            f"snapshot {namespace}/{snapshot_id} was deleted while it was claimed, {_CLAIM_ATTEMPTS} times"
        )

    async def delete_snapshot(self, namespace: str, snapshot_id: str) -> bool:
        async with self._write() as tx:
            return (
                await tx.run("DELETE FROM snapshots WHERE namespace = ? AND id = ?", [namespace, snapshot_id])
                > 0
            )

    async def list_snapshots(self, namespace: str) -> list[str]:
        async with self._read() as tx:
            rows = await tx.rows("SELECT id FROM snapshots WHERE namespace = ? ORDER BY seq", [namespace])
        return [str(row["id"]) for row in rows]
