"""The shared SQL rendering, pinned in both placeholder styles (SQLite today, PostgreSQL next)."""

from __future__ import annotations

from storage_testkit import at

from runstream.storage import TaskFilter
from runstream.storage._query import SqlParams, expired_where, limit_clause, task_where, upsert_sql


def test_task_where_in_numeric_style() -> None:
    params = SqlParams("numeric")

    where = task_where(TaskFilter(status=["pending", "running"], agent_id="a1", from_date=at(0)), params)

    assert where == " WHERE status IN ($1, $2) AND agent_id = $3 AND created_at >= $4"
    assert params.values == ["pending", "running", "a1", at(0)]


def test_task_where_without_conditions_is_empty() -> None:
    assert task_where(TaskFilter(), SqlParams("qmark")) == ""


def test_empty_status_list_matches_nothing() -> None:
    assert task_where(TaskFilter(status=[]), SqlParams("qmark")) == " WHERE 1 = 0"
    assert expired_where((), at(0), SqlParams("qmark")) == " WHERE 1 = 0"


def test_upsert_and_limit_in_numeric_style() -> None:
    params = SqlParams("numeric")

    upsert = upsert_sql("threads", {"id": "t1", "title": "x"}, ("id",), params)
    limit = limit_clause(2, 10, params)

    assert upsert == (
        "INSERT INTO threads (id, title) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET title = excluded.title"
    )
    assert limit == " LIMIT $3 OFFSET $4"
    assert params.values == ["t1", "x", 10, 20]
