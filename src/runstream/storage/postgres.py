"""PostgreSQL :class:`~runstream.storage.base.Storage` on ``asyncpg``: several processes, one database.

An ``asyncpg`` pool is created, and the schema migrated, on first use (see
:mod:`runstream.storage._postgres_schema`). Single statements run on a pooled connection in
autocommit. Calls that read more than once (a count and its page) run in a read-only
``REPEATABLE READ`` transaction, so they see one snapshot. Writes that read first lock the rows
they change (``SELECT ... FOR UPDATE``) in a ``READ COMMITTED`` transaction; ``update_task``'s
compare-and-set is a single conditional ``UPDATE``, and ``save_thread``'s owner check is part of
its upsert, so no concurrent writer can slip in between a check and a write.

A call whose connection dropped (killed, a server restart) is made once more on a fresh pooled
connection: a dropped connection is not a failed call (nor an HTTP 500).

Lock order: a thread's row before its messages' rows (``save_messages``, ``update_message`` and
``delete_thread`` all take them so, threads sorted by id), so these calls never deadlock.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Collection, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from datetime import datetime
from typing import Any, Unpack

import asyncpg
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt

from runstream._json import JsonObject, JsonValue
from runstream.storage import _postgres_schema as _schema
from runstream.storage._postgres_schema import Connection
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
    decode_json,
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

_MAX_IDENTIFIER_BYTES = 63
"""PostgreSQL silently truncates longer identifiers, which could merge two schemas into one."""


@contextmanager
def _translate_errors() -> Iterator[None]:
    try:
        yield
    except (asyncpg.PostgresError, asyncpg.InterfaceError, asyncpg.InternalClientError, OSError) as exc:
        raise StorageError(f"PostgreSQL error: {exc}") from exc


_CONNECTION_LOST = (
    asyncpg.ConnectionDoesNotExistError,
    asyncpg.PostgresConnectionError,
    asyncpg.AdminShutdownError,
    asyncpg.CannotConnectNowError,
    asyncpg.InternalClientError,
    ConnectionError,
)
"""A call failed for its connection, not for what it asked. ``InternalClientError`` ("cannot
switch to state ...; another operation is in progress") is what asyncpg raises on a pooled
connection whose server ended it while it was idle (``pg_terminate_backend``)."""


def _connection_lost(exc: BaseException) -> bool:
    """A storage call failed because its connection dropped (killed, a server restart)."""
    return isinstance(exc, StorageError) and isinstance(exc.__cause__, _CONNECTION_LOST)


def _retried_once(method: Any) -> Any:
    """``method``, called once more, on a fresh pooled connection, if its connection dropped
    (the pool then replaces every connection it holds), so a dropped connection is not a
    failed call."""

    @functools.wraps(method)
    async def call(self: PostgresStorage, *args: Any, **kwargs: Any) -> Any:
        async for attempt in AsyncRetrying(
            stop=stop_after_attempt(2), retry=retry_if_exception(_connection_lost), reraise=True
        ):
            with attempt:
                return await method(self, *args, **kwargs)
        raise AssertionError("unreachable: tenacity re-raises the last error")

    return call


def _row(record: asyncpg.Record | None) -> FetchedRow | None:
    return None if record is None else dict(record.items())


def _rows(records: Sequence[asyncpg.Record]) -> list[FetchedRow]:
    return [dict(record.items()) for record in records]


def _affected(status: str) -> int:
    """The row count of a command tag such as ``DELETE 3`` or ``INSERT 0 1``."""
    return int(status.rsplit(" ", 1)[-1])


def _upsert(
    table: str, row: Mapping[str, object], conflict_columns: Sequence[str] = ("id",)
) -> tuple[str, list[object]]:
    params = SqlParams("numeric")
    return upsert_sql(table, row, conflict_columns, params), params.values


def _metadata_condition(key: str, value: str | None, params: SqlParams) -> str:
    """SQL for "metadata's ``key`` is the string ``value``" (``None``: absent or null), as
    :func:`~runstream.storage._query.metadata_matches` decides it."""
    kind = f"json_typeof(metadata -> {key}::text)"
    if value is None:
        return f"COALESCE({kind}, 'null') = 'null'"
    return f"({kind} = 'string' AND metadata ->> {key}::text = {params.add(value)}::text)"


class PostgresStorage:
    def __init__(self, dsn: str, *, schema: str = "runstream", min_size: int = 1, max_size: int = 10) -> None:
        """``dsn`` is a libpq URL (``postgresql://user@host:5432/db``); tables live in ``schema``,
        created on first use. ``min_size``/``max_size`` bound the connection pool."""
        if not schema or len(schema.encode()) > _MAX_IDENTIFIER_BYTES:
            raise InvalidArgumentError(f"schema name must be 1 to 63 bytes, got {schema!r}")
        if not 0 <= min_size <= max_size or max_size < 1:
            raise InvalidArgumentError(
                f"need 0 <= min_size <= max_size and max_size >= 1, got {min_size}, {max_size}"
            )
        self._dsn = dsn
        self._schema = schema
        self._min_size = min_size
        self._max_size = max_size
        self._pool: asyncpg.Pool | None = None
        self._lock = asyncio.Lock()
        self._closed = False
        quoted = _schema.quote_ident(schema)
        self._threads = f"{quoted}.threads"
        self._messages = f"{quoted}.messages"
        self._tool_calls = f"{quoted}.message_tool_calls"
        self._tasks = f"{quoted}.background_tasks"
        self._state = f"{quoted}.thread_state"
        self._snapshots = f"{quoted}.snapshots"
        self._resources = f"{quoted}.resources"
        self._resource_select = f"SELECT {', '.join(RESOURCE_COLUMNS)} FROM {self._resources}"
        self._thread_select = f"SELECT {', '.join(THREAD_COLUMNS)} FROM {self._threads}"
        self._message_select = f"SELECT {', '.join(MESSAGE_COLUMNS)} FROM {self._messages}"
        self._task_select = f"SELECT {', '.join(TASK_COLUMNS)} FROM {self._tasks}"

    async def _get_pool(self) -> asyncpg.Pool:
        async with self._lock:
            if self._closed:
                raise StorageClosedError()
            if self._pool is None:
                pool = await asyncpg.create_pool(self._dsn, min_size=self._min_size, max_size=self._max_size)
                try:
                    async with pool.acquire() as conn:
                        await _schema.migrate(conn, self._schema, _schema.MIGRATIONS)
                except BaseException:
                    pool.terminate()
                    raise
                self._pool = pool
            return self._pool

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[Connection]:
        with _translate_errors():
            pool = await self._get_pool()
            async with pool.acquire() as conn:
                try:
                    yield conn
                except _CONNECTION_LOST:
                    # The server likely ended the pool's other connections too (a kill, a
                    # restart): replace them all, so the call made again gets a fresh one.
                    await pool.expire_connections()
                    raise

    @asynccontextmanager
    async def _transaction(self, *, read_only: bool) -> AsyncIterator[Connection]:
        async with self._connection() as conn:
            transaction = (
                conn.transaction(isolation="repeatable_read", readonly=True)
                if read_only
                else conn.transaction()
            )
            async with transaction:
                yield conn

    def _read(self) -> AbstractAsyncContextManager[Connection]:
        return self._transaction(read_only=True)

    def _write(self) -> AbstractAsyncContextManager[Connection]:
        return self._transaction(read_only=False)

    async def _fetchrow(self, sql: str, *args: object) -> FetchedRow | None:
        async with self._connection() as conn:
            return _row(await conn.fetchrow(sql, *args))

    async def _execute(self, sql: str, *args: object) -> int:
        async with self._connection() as conn:
            return _affected(await conn.execute(sql, *args))

    async def init(self) -> None:
        with _translate_errors():
            await self._get_pool()

    async def close(self) -> None:
        async with self._lock:
            self._closed = True
            if self._pool is not None:
                pool, self._pool = self._pool, None
                await pool.close()

    # -- threads ---------------------------------------------------------------------------

    async def save_thread(self, thread: Thread) -> None:
        sql, values = _upsert(self._threads, thread_to_row(thread))
        # The owner check is part of the upsert: a conflicting row of another resource is left as is.
        sql += " WHERE threads.resource_id = excluded.resource_id"
        async with self._write() as conn:
            if _affected(await conn.execute(sql, *values)) == 0:
                owner = await conn.fetchval(
                    f"SELECT resource_id FROM {self._threads} WHERE id = $1", thread.id
                )
                raise ThreadResourceMismatchError(thread.id, owner, thread.resource_id)

    async def get_thread(self, thread_id: str) -> Thread | None:
        row = await self._fetchrow(f"{self._thread_select} WHERE id = $1", thread_id)
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
        params = SqlParams("numeric")
        sql = (
            f"{self._thread_select} WHERE resource_id = {params.add(resource_id)}"
            f"{order_clause(check_thread_order_field(order_by), order)}{limit_clause(page, per_page, params)}"
        )
        async with self._read() as conn:
            total = await conn.fetchval(
                f"SELECT count(*) FROM {self._threads} WHERE resource_id = $1", resource_id
            )
            rows = _rows(await conn.fetch(sql, *params.values))
        return make_page([thread_from_row(row) for row in rows], total, page, per_page)

    async def update_thread(
        self, thread_id: str, *, title: str | None = None, metadata: Mapping[str, JsonValue] | None = None
    ) -> Thread:
        async with self._write() as conn:
            row = _row(await conn.fetchrow(f"{self._thread_select} WHERE id = $1 FOR UPDATE", thread_id))
            if row is None:
                raise NotFoundError("Thread", thread_id)
            thread = thread_from_row(row)
            if title is not None:
                thread.title = title
            if metadata is not None:
                thread.metadata = {**thread.metadata, **metadata}
            thread.updated_at = utc_now()
            new_row = thread_to_row(thread)
            sql, values = _upsert(self._threads, new_row)
            await conn.execute(sql, *values)
        return thread_from_row(new_row)

    async def delete_thread(self, thread_id: str) -> bool:
        async with self._write() as conn:
            await conn.execute(f"SELECT 1 FROM {self._threads} WHERE id = $1 FOR UPDATE", thread_id)
            await conn.execute(f"DELETE FROM {self._messages} WHERE thread_id = $1", thread_id)
            await conn.execute(f"DELETE FROM {self._tool_calls} WHERE thread_id = $1", thread_id)
            await conn.execute(f"DELETE FROM {self._state} WHERE thread_id = $1", thread_id)
            return _affected(await conn.execute(f"DELETE FROM {self._threads} WHERE id = $1", thread_id)) > 0

    # -- resources -------------------------------------------------------------------------

    async def get_resource(self, resource_id: str) -> Resource | None:
        row = await self._fetchrow(f"{self._resource_select} WHERE id = $1", resource_id)
        return None if row is None else resource_from_row(row)

    async def update_resource(
        self,
        resource_id: str,
        *,
        working_memory: str | None = None,
        metadata: Mapping[str, JsonValue] | None = None,
    ) -> Resource:
        async with self._write() as conn:
            # Lock the row (or, for a first write, the id's advisory lock) so that concurrent
            # updates of one resource apply one after the other.
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext($1))", f"resource:{resource_id}")
            row = _row(await conn.fetchrow(f"{self._resource_select} WHERE id = $1", resource_id))
            existing = None if row is None else resource_from_row(row)
            new_row = resource_to_row(updated_resource(existing, resource_id, working_memory, metadata))
            sql, values = _upsert(self._resources, new_row)
            await conn.execute(sql, *values)
        return resource_from_row(new_row)

    # -- messages --------------------------------------------------------------------------

    async def _check_owner(self, conn: Connection, thread_id: str, resource_id: str) -> None:
        owner = await conn.fetchval(f"SELECT resource_id FROM {self._threads} WHERE id = $1", thread_id)
        if owner is None:
            raise NotFoundError("Thread", thread_id)
        if owner != resource_id:
            raise ThreadResourceMismatchError(thread_id, owner, resource_id)

    async def _store_messages(self, conn: Connection, rows: Sequence[MessageRow]) -> None:
        """Lock the target threads (sorted), check their owners, upsert, bump ``updated_at``."""
        pairs = dict.fromkeys((row["thread_id"], row["resource_id"]) for row in rows)
        thread_ids = sorted({thread_id for thread_id, _ in pairs})
        locked = await conn.fetch(
            f"SELECT id, resource_id FROM {self._threads} WHERE id = ANY($1::text[]) ORDER BY id FOR UPDATE",
            thread_ids,
        )
        owners = {record["id"]: record["resource_id"] for record in locked}
        for thread_id, resource_id in pairs:
            if thread_id not in owners:
                raise NotFoundError("Thread", thread_id)
            if owners[thread_id] != resource_id:
                raise ThreadResourceMismatchError(thread_id, owners[thread_id], resource_id)
        sql, _ = _upsert(self._messages, rows[0])
        await conn.executemany(sql, [list(row.values()) for row in rows])
        await conn.execute(
            f"DELETE FROM {self._tool_calls} WHERE message_id = ANY($1::text[])", [row["id"] for row in rows]
        )
        calls = {(row["thread_id"], call_id): row["id"] for row in rows for call_id in tool_call_ids(row)}
        if calls:
            await conn.executemany(
                f"INSERT INTO {self._tool_calls} (thread_id, tool_call_id, message_id) VALUES ($1, $2, $3)"
                " ON CONFLICT (thread_id, tool_call_id) DO UPDATE SET message_id = EXCLUDED.message_id",
                [[thread_id, call_id, message_id] for (thread_id, call_id), message_id in calls.items()],
            )
        await conn.execute(
            f"UPDATE {self._threads} SET updated_at = $1 WHERE id = ANY($2::text[])", utc_now(), thread_ids
        )

    async def save_messages(self, messages: Sequence[StoredMessage]) -> None:
        rows = [message_to_row(message) for message in messages]
        if not rows:
            return
        async with self._write() as conn:
            await self._store_messages(conn, rows)

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
        params = SqlParams("numeric")
        if last is not None:
            sql = latest_messages_sql(self._messages, params, thread_id, last)
        else:
            where = f" WHERE thread_id = {params.add(thread_id)}"
            sql = (
                f"{self._message_select}{where}{order_clause('created_at', 'asc')}"
                f"{limit_clause(page, per_page, params)}"
            )
        async with self._read() as conn:
            if resource_id is not None:
                await self._check_owner(conn, thread_id, resource_id)
            total = await conn.fetchval(
                f"SELECT count(*) FROM {self._messages} WHERE thread_id = $1", thread_id
            )
            rows = _rows(await conn.fetch(sql, *params.values))
        items = [message_from_row(row) for row in rows]
        return (
            make_page(items, total, 0, last) if last is not None else make_page(items, total, page, per_page)
        )

    async def get_messages(self, message_ids: Collection[str]) -> list[StoredMessage]:
        sql = f"{self._message_select} WHERE id = ANY($1::text[]){order_clause('created_at', 'asc')}"
        async with self._connection() as conn:
            rows = _rows(await conn.fetch(sql, list(message_ids)))
        return [message_from_row(row) for row in rows]

    async def messages_around(
        self, message_ids: Collection[str], *, before: int = 0, after: int = 0
    ) -> list[StoredMessage]:
        found: dict[str, FetchedRow] = {}
        columns = ", ".join(MESSAGE_COLUMNS)
        async with self._read() as conn:
            sql = f"SELECT {columns}, seq FROM {self._messages} WHERE id = ANY($1::text[])"
            for row in _rows(await conn.fetch(sql, list(message_ids))):
                found[row["id"]] = row
            for message_id in list(found):
                for earlier, count in ((True, before), (False, after)):
                    if count > 0:
                        params = SqlParams("numeric")
                        sql = neighbour_messages_sql(
                            self._messages, params, message_id, count, earlier=earlier
                        )
                        found.update((row["id"], row) for row in _rows(await conn.fetch(sql, *params.values)))
        return [
            message_from_row(row) for row in sorted(found.values(), key=lambda r: (r["created_at"], r["seq"]))
        ]

    async def update_message(self, message_id: str, mutate: MessageMutator) -> StoredMessage:
        async with self._write() as conn:
            # The thread first, then the message: the order save_messages takes them in.
            await conn.execute(
                f"SELECT 1 FROM {self._threads} AS t JOIN {self._messages} AS m ON m.thread_id = t.id"
                " WHERE m.id = $1 FOR UPDATE OF t",
                message_id,
            )
            row = _row(await conn.fetchrow(f"{self._message_select} WHERE id = $1 FOR UPDATE", message_id))
            if row is None:
                raise NotFoundError("Message", message_id)
            updated = mutate(message_from_row(row))
            if updated.id != message_id:
                raise InvalidArgumentError(
                    f"update_message cannot change a message id ({message_id} -> {updated.id})"
                )
            new_row = message_to_row(updated)
            await self._store_messages(conn, [new_row])
        return message_from_row(new_row)

    async def delete_messages(self, message_ids: Collection[str]) -> int:
        ids = list(message_ids)
        async with self._write() as conn:
            await conn.execute(f"DELETE FROM {self._tool_calls} WHERE message_id = ANY($1::text[])", ids)
            return _affected(
                await conn.execute(f"DELETE FROM {self._messages} WHERE id = ANY($1::text[])", ids)
            )

    async def latest_messages(self, thread_id: str, count: int) -> list[StoredMessage]:
        check_last(count, 0, None)
        params = SqlParams("numeric")
        sql = latest_messages_sql(self._messages, params, thread_id, count)
        async with self._read() as conn:
            rows = _rows(await conn.fetch(sql, *params.values))
        return [message_from_row(row) for row in rows]

    async def find_tool_call_message(self, thread_id: str, tool_call_id: str) -> StoredMessage | None:
        sql = (
            f"{self._message_select} WHERE id = (SELECT message_id FROM {self._tool_calls}"
            " WHERE thread_id = $1 AND tool_call_id = $2) AND thread_id = $1"
        )
        async with self._connection() as conn:
            row = _row(await conn.fetchrow(sql, thread_id, tool_call_id))
        return None if row is None else message_from_row(row)

    # -- background tasks ------------------------------------------------------------------

    async def save_task(self, task: TaskRecord) -> None:
        sql, values = _upsert(self._tasks, task_to_row(task))
        await self._execute(sql, *values)

    async def get_task(self, task_id: str) -> TaskRecord | None:
        row = await self._fetchrow(f"{self._task_select} WHERE id = $1", task_id)
        return None if row is None else task_from_row(row)

    async def list_tasks(self, task_filter: TaskFilter | None = None) -> Page[TaskRecord]:
        task_filter = task_filter or TaskFilter()
        count_params, params = SqlParams("numeric"), SqlParams("numeric")
        count_sql = f"SELECT count(*) FROM {self._tasks}{task_where(task_filter, count_params)}"
        sql = (
            f"{self._task_select}{task_where(task_filter, params)}{order_clause('created_at', task_filter.order)}"
            f"{limit_clause(task_filter.page, task_filter.per_page, params)}"
        )
        async with self._read() as conn:
            total = await conn.fetchval(count_sql, *count_params.values)
            rows = _rows(await conn.fetch(sql, *params.values))
        return make_page([task_from_row(row) for row in rows], total, task_filter.page, task_filter.per_page)

    async def count_tasks(self, task_filter: TaskFilter | None = None) -> int:
        params = SqlParams("numeric")
        sql = f"SELECT count(*) FROM {self._tasks}{task_where(task_filter or TaskFilter(), params)}"
        async with self._connection() as conn:
            return int(await conn.fetchval(sql, *params.values))

    async def update_task(
        self,
        task_id: str,
        *,
        expected_status: TaskStatus | Collection[TaskStatus] | None = None,
        expected_metadata: Mapping[str, str | None] | None = None,
        **fields: Unpack[TaskUpdate],
    ) -> TaskRecord | None:
        changes = task_changes(task_id, fields)
        statuses = normalise_statuses(expected_status)
        expected = check_expected_metadata(expected_metadata)
        params = SqlParams("numeric")
        where = f"id = {params.add(task_id)}"
        if statuses is not None:
            where += f" AND status = ANY({params.add(list(statuses))}::text[])"
        for key, value in (expected or {}).items():
            where += f" AND {_metadata_condition(params.add(key), value, params)}"
        # With no fields to change, "id = id" still matches (and returns) the record like a write would.
        assignments = ", ".join(f"{column} = {params.add(value)}" for column, value in changes.items())
        sql = f"UPDATE {self._tasks} SET {assignments or 'id = id'} WHERE {where} RETURNING {', '.join(TASK_COLUMNS)}"
        row = await self._fetchrow(sql, *params.values)
        return None if row is None else task_from_row(row)

    async def delete_tasks(self, task_ids: Collection[str]) -> int:
        return await self._execute(f"DELETE FROM {self._tasks} WHERE id = ANY($1::text[])", list(task_ids))

    async def delete_tasks_older_than(
        self, status: TaskStatus | Collection[TaskStatus], before: datetime
    ) -> int:
        params = SqlParams("numeric")
        where = expired_where(normalise_statuses(status) or (), to_utc(before, what="before"), params)
        return await self._execute(f"DELETE FROM {self._tasks}{where}", *params.values)

    # -- thread state ----------------------------------------------------------------------

    async def get_thread_state(self, thread_id: str, key: str) -> JsonObject | None:
        sql = f"SELECT value FROM {self._state} WHERE thread_id = $1 AND state_key = $2"
        row = await self._fetchrow(sql, thread_id, key)
        return None if row is None else dict(decode_json(row["value"]))

    async def set_thread_state(self, thread_id: str, key: str, value: Mapping[str, object]) -> None:
        row = {
            "thread_id": thread_id,
            "state_key": key,
            "value": encode_json_object(value, what=f"thread state {key!r}"),
            "updated_at": utc_now(),
        }
        sql, values = _upsert(self._state, row, ("thread_id", "state_key"))
        await self._execute(sql, *values)

    async def delete_thread_state(self, thread_id: str, key: str) -> bool:
        sql = f"DELETE FROM {self._state} WHERE thread_id = $1 AND state_key = $2"
        return await self._execute(sql, thread_id, key) > 0

    # -- snapshots -------------------------------------------------------------------------

    async def save_snapshot(self, namespace: str, snapshot_id: str, data: Mapping[str, object]) -> None:
        row = {
            "namespace": namespace,
            "id": snapshot_id,
            "data": encode_json_object(data, what=f"snapshot {namespace}/{snapshot_id}"),
            "updated_at": utc_now(),
        }
        sql, values = _upsert(self._snapshots, row, ("namespace", "id"))
        await self._execute(sql, *values)

    async def load_snapshot(self, namespace: str, snapshot_id: str) -> JsonObject | None:
        sql = f"SELECT data FROM {self._snapshots} WHERE namespace = $1 AND id = $2"
        row = await self._fetchrow(sql, namespace, snapshot_id)
        return None if row is None else dict(decode_json(row["data"]))

    async def claim_snapshot(
        self, namespace: str, snapshot_id: str, data: Mapping[str, object]
    ) -> JsonObject:
        encoded = encode_json_object(data, what=f"snapshot {namespace}/{snapshot_id}")
        insert = (
            f"INSERT INTO {self._snapshots} (namespace, id, data, updated_at) VALUES ($1, $2, $3, $4) "
            "ON CONFLICT (namespace, id) DO NOTHING RETURNING data"
        )
        select = f"SELECT data FROM {self._snapshots} WHERE namespace = $1 AND id = $2"
        async with self._write() as conn:
            row = await conn.fetchrow(insert, namespace, snapshot_id, encoded, utc_now())
            if row is None:  # claimed before: what the claim holds
                row = await conn.fetchrow(select, namespace, snapshot_id)
        assert row is not None
        return dict(decode_json(row["data"]))

    async def delete_snapshot(self, namespace: str, snapshot_id: str) -> bool:
        sql = f"DELETE FROM {self._snapshots} WHERE namespace = $1 AND id = $2"
        return await self._execute(sql, namespace, snapshot_id) > 0

    async def list_snapshots(self, namespace: str) -> list[str]:
        sql = f"SELECT id FROM {self._snapshots} WHERE namespace = $1 ORDER BY seq"
        async with self._connection() as conn:
            return [str(row["id"]) for row in await conn.fetch(sql, namespace)]


for _name, _method in list(vars(PostgresStorage).items()):
    if not _name.startswith("_") and _name not in ("init", "close") and asyncio.iscoroutinefunction(_method):
        setattr(PostgresStorage, _name, _retried_once(_method))
