"""The trace list's rows (``ai_traces``) are made from the stored batches when it is first read,
on SQLite and PostgreSQL: each root once, as its batch holds it; a store written before (its
roots written with their batches, no ``roots`` column) reads as it did and takes new spans; the
roots of batches retention removed while they were indexed are not listed."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from runstream.observability import SpanStore, TraceQuery
from runstream.observability.store import _Where, iso
from tests.test_metric_sql import START, backend, feed, open_store, postgres_problem

__all__ = ["backend", "open_store", "postgres_problem"]

ROOTS = "SELECT trace_id, span_id, upto FROM ai_traces ORDER BY trace_id, span_id"


def listed(store: SpanStore) -> list[tuple[str, str]]:
    page, total = store.list_traces(TraceQuery(per_page=10_000))
    assert total == len(page)
    return sorted((str(span["traceId"]), str(span["spanId"])) for span in page)


def roots_in_batches(store: SpanStore) -> list[tuple[str, str]]:
    """The roots the stored batches hold (the processor's OTel roots, the records without a parent)."""
    return sorted(
        (columns["trace_id"], columns["span_id"])
        for columns in store._batches(_Where())
        if columns["parent_span_id"] is None
    )


def test_trace_list_rows_are_made_when_it_is_first_read(open_store: Any) -> None:
    store = open_store()
    feed(store, 300)
    assert store._rows("SELECT COUNT(*) AS n FROM ai_traces") == [{"n": 0}]  # the writes left them
    assert listed(store) == roots_in_batches(store) != []
    indexed = store._rows(ROOTS)
    assert listed(store) == roots_in_batches(store)  # read again: nothing added
    assert store._rows(ROOTS) == indexed
    feed(store, 200, start=START + timedelta(hours=5), seed=2)
    assert listed(store) == roots_in_batches(store)
    assert len(store._rows(ROOTS)) == len(roots_in_batches(store))
    owner = store.trace_owner("given")
    assert owner == (True, "user-a")


def test_a_store_written_before_reads_the_same_and_takes_new_spans(open_store: Any) -> None:
    store = open_store()
    feed(store, 300)
    before = listed(store)
    roots = store._rows(ROOTS)
    # The previous version's layout: roots written with their batches, no ``roots`` column.
    store._backend.write(
        [
            ("ALTER TABLE ai_span_batches DROP COLUMN roots", (), False),
            ("DROP TABLE ai_index_marks", (), False),
        ]
    )
    store.close()
    reopened = open_store()
    assert reopened._rows("SELECT DISTINCT roots FROM ai_span_batches") == [{"roots": 0}]
    assert listed(reopened) == before
    assert reopened._rows(ROOTS) == roots
    feed(reopened, 200, start=START + timedelta(hours=5), seed=2)
    assert listed(reopened) == roots_in_batches(reopened)
    assert len(listed(reopened)) > len(before)


class _Racing(SpanStore):
    """A store whose retention removes every batch just after the trace list's indexing read
    them (a write of another thread landing between the read and the indexing transaction)."""

    armed = False

    def _rows(self, sql: str, params: Any = ()) -> Any:
        rows = super()._rows(sql, params)
        if self.armed and "roots > 0" in sql:
            self.armed = False
            late = START + timedelta(days=30)
            record = {
                "traceId": "late",
                "spanId": "l",
                "name": "r",
                "spanType": "agent_run",
                "startedAt": iso(late),
            }
            self.write_spans([record], now=late)
        return rows


def test_roots_of_batches_removed_while_indexing_are_dropped(tmp_path: Path) -> None:
    store = _Racing(str(tmp_path / "spans.db"))
    try:
        feed(store, 200)
        store.armed = True
        assert listed(store) == []  # the late span came after the read: the next read lists it
        assert listed(store) == [("late", "l")]
        assert store._rows("SELECT COUNT(*) AS n FROM ai_traces") == [{"n": 1}]
    finally:
        store.close()


class _Overtaken(SpanStore):
    """A store where another reader's indexing, begun before the last batch was written, commits
    while this reader is between its read of the batches and its transaction."""

    stage = "idle"
    before_last = 0
    """The newest batch the other reader saw."""

    def _rows(self, sql: str, params: Any = ()) -> Any:
        rows = super()._rows(sql, params)
        if self.stage == "armed" and ("roots > 0" in sql or "ORDER BY upto LIMIT" in sql):
            self.stage = "other"  # the other reader indexes (as it saw the store) and commits
            self.index_roots() if "roots > 0" in sql else self.index_facts()
            self.stage = "done"
        elif self.stage == "other" and "AS latest" in sql:
            rows = [{**rows[0], "latest": self.before_last}]
        elif self.stage == "other" and "ORDER BY upto LIMIT" in sql:
            rows = [row for row in rows if int(row["upto"]) <= self.before_last]
        return rows


def _late_record(at: int) -> dict[str, Any]:
    return {
        "traceId": f"late{at}",
        "spanId": "l",
        "name": "r",
        "spanType": "agent_run",
        "startedAt": iso(START + timedelta(hours=4)),
    }


def test_a_read_overtaken_by_another_readers_indexing_lists_every_stored_trace(tmp_path: Path) -> None:
    """The trace list (and metrics) show every batch stored before the read began, also when
    another reader, that saw fewer batches, indexed between this read's look and its write."""
    store = _Overtaken(str(tmp_path / "spans.db"))
    try:
        feed(store, 200)
        store.before_last = int(store._rows("SELECT MAX(upto) AS n FROM ai_span_batches")[0]["n"])
        store.write_spans([_late_record(1)])
        store.stage = "armed"
        assert ("late1", "l") in listed(store)
        assert store.stage == "done"  # (the other reader did index first)
        assert listed(store) == roots_in_batches(store)

        store.before_last = int(store._rows("SELECT MAX(upto) AS n FROM ai_span_batches")[0]["n"])
        store.write_spans([_late_record(2)])
        store.stage = "armed"
        store.index_facts()
        assert store.stage == "done"
        facts = store._rows("SELECT COUNT(*) AS n FROM ai_span_facts")[0]["n"]
        assert facts == len(list(store._batches(_Where())))
    finally:
        store.close()
