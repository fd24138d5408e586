"""Listing semantics shared by every backend: paging, task filters and the upsert statement.

A task filter is rendered twice, as a Python predicate (in-memory backend) and as a SQL ``WHERE``
clause (SQL backends). Both live here, side by side, so they change together; the contract tests
check that the backends agree. SQL is written in the dialect SQLite and PostgreSQL share; only
the placeholder style differs (:class:`SqlParams`).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Literal, TypeVar, cast, get_args

from runstream._json import JsonValue
from runstream.storage._rows import MESSAGE_COLUMNS, to_utc
from runstream.storage.errors import InvalidArgumentError
from runstream.storage.records import (
    TASK_STATUSES,
    Page,
    SortOrder,
    TaskDateField,
    TaskFilter,
    TaskRecord,
    TaskStatus,
    ThreadOrderField,
)

T = TypeVar("T")

TASK_EQUALITY_FIELDS = ("agent_id", "run_id", "thread_id", "resource_id", "tool_call_id", "tool_name")


def check_paging(page: int, per_page: int | None) -> None:
    if page < 0:
        raise InvalidArgumentError(f"page must be >= 0, got {page}")
    if per_page is not None and per_page < 1:
        raise InvalidArgumentError(f"per_page must be >= 1 or None, got {per_page}")


def check_last(last: int | None, page: int, per_page: int | None) -> None:
    check_paging(page, per_page)
    if last is None:
        return
    if last < 0:
        raise InvalidArgumentError(f"last must be >= 0, got {last}")
    if page != 0 or per_page is not None:
        raise InvalidArgumentError("last cannot be combined with page/per_page")


def check_order(order: str) -> SortOrder:
    if order not in get_args(SortOrder):
        raise InvalidArgumentError(f"order must be 'asc' or 'desc', got {order!r}")
    return cast(SortOrder, order)


def check_thread_order_field(order_by: str) -> ThreadOrderField:
    if order_by not in get_args(ThreadOrderField):
        raise InvalidArgumentError(f"threads cannot be ordered by {order_by!r}")
    return cast(ThreadOrderField, order_by)


def check_task_filter(task_filter: TaskFilter) -> None:
    """Refuse a bad filter up front, even when no record would reach the predicate."""
    check_paging(task_filter.page, task_filter.per_page)
    check_order(task_filter.order)
    normalise_statuses(task_filter.status)
    if task_filter.date_field not in get_args(TaskDateField):
        raise InvalidArgumentError(f"tasks cannot be filtered by date field {task_filter.date_field!r}")
    for bound in (task_filter.from_date, task_filter.to_date):
        if bound is not None:
            to_utc(bound, what="task filter date")


def page_bounds(page: int, per_page: int | None) -> tuple[int, int | None]:
    """``(offset, limit)`` for a zero-based page; ``limit`` is ``None`` for "all"."""
    if per_page is None:
        return 0, None
    return page * per_page, per_page


def make_page(items: list[T], total: int, page: int, per_page: int | None) -> Page[T]:
    offset, _ = page_bounds(page, per_page)
    return Page(items=items, total=total, page=page, per_page=per_page, has_more=offset + len(items) < total)


def normalise_statuses(status: TaskStatus | Collection[TaskStatus] | None) -> tuple[TaskStatus, ...] | None:
    """``None`` means "any status"; an empty collection matches nothing."""
    if status is None:
        return None
    statuses = (status,) if isinstance(status, str) else tuple(status)
    unknown = [s for s in statuses if s not in TASK_STATUSES]
    if unknown:
        raise InvalidArgumentError(f"unknown task status {unknown[0]!r}")
    return statuses


_METADATA_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def check_expected_metadata(expected: Mapping[str, str | None] | None) -> dict[str, str | None] | None:
    """The metadata half of ``update_task``'s compare-and-set: identifier keys, string or ``None``
    values (``None`` means the key is absent or null)."""
    if expected is None:
        return None
    for key, value in expected.items():
        if not isinstance(key, str) or not _METADATA_KEY.fullmatch(key):
            raise InvalidArgumentError(f"expected_metadata keys must be identifiers, got {key!r}")
        if value is not None and not isinstance(value, str):
            raise InvalidArgumentError(f"expected_metadata[{key!r}] must be a string or None")
    return dict(expected)


def metadata_matches(metadata: Mapping[str, JsonValue], expected: Mapping[str, str | None]) -> bool:
    return all(metadata.get(key) == value for key, value in expected.items())


def task_matches(task_filter: TaskFilter, task: TaskRecord) -> bool:
    statuses = normalise_statuses(task_filter.status)
    if statuses is not None and task.status not in statuses:
        return False
    for name in TASK_EQUALITY_FIELDS:
        wanted = getattr(task_filter, name)
        if wanted is not None and getattr(task, name) != wanted:
            return False
    if task_filter.from_date is None and task_filter.to_date is None:
        return True
    value = getattr(task, task_filter.date_field)
    if value is None:
        return False
    if task_filter.from_date is not None and value < to_utc(task_filter.from_date, what="from_date"):
        return False
    return task_filter.to_date is None or value < to_utc(task_filter.to_date, what="to_date")


class SqlParams:
    """Collects bind values and hands out placeholders: ``?`` (qmark) or ``$1`` (numeric)."""

    def __init__(self, style: Literal["qmark", "numeric"]) -> None:
        self.style = style
        self.values: list[object] = []

    def add(self, value: object) -> str:
        self.values.append(value)
        return "?" if self.style == "qmark" else f"${len(self.values)}"

    def add_all(self, values: Sequence[object]) -> str:
        """Comma-separated placeholders for ``values`` (for ``IN (...)``)."""
        return ", ".join(self.add(value) for value in values)


def task_where(task_filter: TaskFilter, params: SqlParams) -> str:
    """The ``WHERE`` clause for ``task_filter`` (empty string when it filters nothing)."""
    check_task_filter(task_filter)
    clauses: list[str] = []
    statuses = normalise_statuses(task_filter.status)
    if statuses is not None:
        clauses.append(f"status IN ({params.add_all(statuses)})" if statuses else "1 = 0")
    for name in TASK_EQUALITY_FIELDS:
        wanted = getattr(task_filter, name)
        if wanted is not None:
            clauses.append(f"{name} = {params.add(wanted)}")
    column = task_filter.date_field
    if task_filter.from_date is not None:
        clauses.append(f"{column} >= {params.add(to_utc(task_filter.from_date, what='from_date'))}")
    if task_filter.to_date is not None:
        clauses.append(f"{column} < {params.add(to_utc(task_filter.to_date, what='to_date'))}")
    return f" WHERE {' AND '.join(clauses)}" if clauses else ""


def upsert_sql(
    table: str, row: Mapping[str, object], conflict_columns: Sequence[str], params: SqlParams
) -> str:
    """``INSERT ... ON CONFLICT DO UPDATE`` replacing every non-key column of ``row``.

    An update keeps the existing row's identity (its ``seq``), so a re-saved record keeps its
    place among records with equal timestamps.
    """
    columns = list(row)
    placeholders = params.add_all([row[column] for column in columns])
    updates = ", ".join(f"{c} = excluded.{c}" for c in columns if c not in conflict_columns)
    return (
        f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({placeholders}) "
        f"ON CONFLICT ({', '.join(conflict_columns)}) DO UPDATE SET {updates}"
    )


def task_expired(task: TaskRecord, statuses: tuple[TaskStatus, ...], before: datetime) -> bool:
    """Cleanup-TTL semantics: in ``statuses`` and finished (or, if never finished, created)
    before ``before``."""
    return task.status in statuses and (task.completed_at or task.created_at) < before


def expired_where(statuses: tuple[TaskStatus, ...], before: datetime, params: SqlParams) -> str:
    """SQL rendering of :func:`task_expired`."""
    if not statuses:
        return " WHERE 1 = 0"
    return (
        f" WHERE status IN ({params.add_all(statuses)})"
        f" AND COALESCE(completed_at, created_at) < {params.add(before)}"
    )


def order_clause(column: str, order: SortOrder) -> str:
    """Order by ``column``, ties by ``seq`` (first-save order) in the same direction.

    ``column`` must come from code, never from input: it is interpolated.
    """
    direction = check_order(order).upper()
    return f" ORDER BY {column} {direction}, seq {direction}"


def limit_clause(page: int, per_page: int | None, params: SqlParams) -> str:
    offset, limit = page_bounds(page, per_page)
    return "" if limit is None else f" LIMIT {params.add(limit)} OFFSET {params.add(offset)}"


def neighbour_messages_sql(
    table: str, params: SqlParams, message_id: str, count: int, *, earlier: bool
) -> str:
    """Up to ``count`` messages of ``message_id``'s thread just before (or after) it in thread
    order, with their ``seq`` (``table`` comes from code). The row-value comparison lets both
    databases walk the ``(thread_id, created_at[, seq])`` index from the anchor, where the
    equivalent ``OR`` read every message of the thread (semantic recall on a long thread)."""
    columns = ", ".join(f"m.{c}" for c in MESSAGE_COLUMNS)
    op, order = ("<", "DESC") if earlier else (">", "ASC")
    anchor = f"(SELECT thread_id, created_at, seq FROM {table} WHERE id = {params.add(message_id)})"
    return (
        f"SELECT {columns}, m.seq FROM {table} AS m, {anchor} AS a WHERE m.thread_id = a.thread_id"
        f" AND (m.created_at, m.seq) {op} (a.created_at, a.seq)"
        f" ORDER BY m.created_at {order}, m.seq {order} LIMIT {params.add(count)}"
    )


def latest_messages_sql(table: str, params: SqlParams, thread_id: str, count: int) -> str:
    """The newest ``count`` messages of the thread, oldest first (``table`` comes from code)."""
    columns = ", ".join(MESSAGE_COLUMNS)
    newest = (
        f"SELECT {columns}, seq FROM {table} WHERE thread_id = {params.add(thread_id)}"
        f"{order_clause('created_at', 'desc')} LIMIT {params.add(count)}"
    )
    return f"SELECT {columns} FROM ({newest}) AS newest{order_clause('created_at', 'asc')}"
