"""SQLite-specific behaviour: pragmas, schema creation and migration, persistence across processes."""

from __future__ import annotations

import asyncio
import re
import sqlite3
import sys
from pathlib import Path

import pytest
from storage_testkit import message, task, thread, tool_call_message

from runstream.storage import SchemaVersionError, SqliteStorage, StorageError, TaskFilter
from runstream.storage import _sqlite_schema as schema

LATEST = schema.MIGRATIONS[-1].version


def read_only(path: Path, sql: str) -> list[tuple[object, ...]]:
    """Inspect the file with a plain sqlite3 connection, independent of the code under test."""
    with sqlite3.connect(path) as db:
        return db.execute(sql).fetchall()


def test_migrations_are_numbered_in_order() -> None:
    versions = [migration.version for migration in schema.MIGRATIONS]
    assert versions == list(range(1, len(versions) + 1))


async def test_schema_is_created_on_first_use(tmp_path: Path) -> None:
    path = tmp_path / "fresh.db"
    storage = SqliteStorage(path)
    assert not path.exists()

    assert await storage.get_thread("t1") is None
    await storage.close()

    tables = {name for (name,) in read_only(path, "SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {
        "schema_version",
        "threads",
        "messages",
        "background_tasks",
        "thread_state",
        "snapshots",
        "resources",
    } <= tables
    assert read_only(path, "SELECT version FROM schema_version") == [(v,) for v in range(1, LATEST + 1)]
    indexes = {name for (name,) in read_only(path, "SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert {"threads_resource_updated", "messages_thread_created", "background_tasks_status"} <= indexes


async def test_wal_mode_is_on(tmp_path: Path) -> None:
    path = tmp_path / "wal.db"
    storage = SqliteStorage(path)
    await storage.init()
    await storage.close()

    assert read_only(path, "PRAGMA journal_mode") == [("wal",)]


async def test_reopening_a_file_keeps_data(tmp_path: Path) -> None:
    path = tmp_path / "reopen.db"
    first = SqliteStorage(path)
    await first.save_thread(thread(title="kept"))
    await first.save_messages([message("m1", created=1), message("m2", created=2)])
    await first.save_task(task("k1", status="completed", result={"rows": 3}))
    await first.set_thread_state("t1", "goal", {"objective": "x"})
    await first.save_snapshot("workflow", "run-1", {"step": 4})
    thread_before = await first.get_thread("t1")
    await first.close()

    second = SqliteStorage(path)
    try:
        assert thread_before is not None and await second.get_thread("t1") == thread_before
        assert (await second.list_messages("t1")).items == [
            message("m1", created=1),
            message("m2", created=2),
        ]
        assert await second.get_task("k1") == task("k1", status="completed", result={"rows": 3})
        assert await second.get_thread_state("t1", "goal") == {"objective": "x"}
        assert await second.load_snapshot("workflow", "run-1") == {"step": 4}
    finally:
        await second.close()


CHILD_WRITER = """
import asyncio, sys
from runstream.storage import SqliteStorage, StoredMessage, TaskRecord, Thread

async def main(path):
    storage = SqliteStorage(path)
    await storage.save_thread(Thread("t1", "r1", title="written by child"))
    content = {"format": 2, "parts": [{"type": "text", "text": "hé from pid"}]}
    await storage.save_messages([StoredMessage("m1", "t1", "r1", "user", content)])
    await storage.save_task(
        TaskRecord("k1", "completed", "research", "call-1", {"q": 1}, "agent-1", "run-1", result={"ok": True})
    )
    await storage.close()

asyncio.run(main(sys.argv[1]))
"""


async def test_data_written_by_another_process_is_visible(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    reader = SqliteStorage(path)
    await reader.init()  # an open connection in this process while the child writes
    try:
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-c", CHILD_WRITER, str(path), stderr=asyncio.subprocess.PIPE
        )
        _, stderr = await asyncio.wait_for(child.communicate(), timeout=60)
        assert child.returncode == 0, stderr.decode()

        stored_thread = await reader.get_thread("t1")
        assert stored_thread is not None and stored_thread.title == "written by child"
        [stored_message] = (await reader.list_messages("t1", resource_id="r1")).items
        assert stored_message.content["parts"][0]["text"] == "hé from pid"
        stored_task = await reader.get_task("k1")
        assert stored_task is not None and (stored_task.status, stored_task.result) == (
            "completed",
            {"ok": True},
        )
    finally:
        await reader.close()


async def test_an_added_migration_runs_on_an_existing_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "old.db"
    old = SqliteStorage(path)
    await old.save_task(task("k1", status="running"))
    await old.close()

    added = schema.Migration(
        LATEST + 1,
        "lease owner for background tasks",
        (
            "ALTER TABLE background_tasks ADD COLUMN lease_owner TEXT",
            "CREATE INDEX background_tasks_lease ON background_tasks (lease_owner)",
        ),
    )
    monkeypatch.setattr(schema, "MIGRATIONS", (*schema.MIGRATIONS, added))
    upgraded = SqliteStorage(path)
    try:
        assert await upgraded.get_task("k1") == task("k1", status="running")
        await upgraded.save_task(task("k2"))
        assert await upgraded.count_tasks(TaskFilter()) == 2
    finally:
        await upgraded.close()

    assert read_only(path, "SELECT MAX(version) FROM schema_version") == [(LATEST + 1,)]
    columns = {row[1] for row in read_only(path, "PRAGMA table_info(background_tasks)")}
    assert "lease_owner" in columns


async def test_a_database_from_a_newer_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "future.db"
    storage = SqliteStorage(path)
    await storage.init()
    await storage.close()
    with sqlite3.connect(path) as db:
        db.execute("INSERT INTO schema_version (version, applied_at) VALUES (999, 'later')")

    newer = SqliteStorage(path)
    with pytest.raises(SchemaVersionError, match="999"):
        await newer.get_thread("t1")
    await newer.close()


async def test_concurrent_first_use_migrates_once(tmp_path: Path) -> None:
    path = tmp_path / "race.db"
    storages = [SqliteStorage(path) for _ in range(3)]
    try:
        await asyncio.gather(*(s.get_task(f"k{i}") for s in storages for i in range(5)))
    finally:
        for storage in storages:
            await storage.close()

    assert read_only(path, "SELECT version FROM schema_version") == [(v,) for v in range(1, LATEST + 1)]


async def test_two_connections_to_one_file_write_concurrently(tmp_path: Path) -> None:
    path = tmp_path / "two.db"
    first, second = SqliteStorage(path), SqliteStorage(path)
    await first.save_thread(thread())

    async def write(storage: SqliteStorage, prefix: str) -> None:
        for i in range(20):
            await storage.save_messages([message(f"{prefix}{i:02}", created=i)])
            await storage.save_task(task(f"{prefix}{i:02}"))

    try:
        await asyncio.gather(write(first, "a"), write(second, "b"))
        assert (await second.list_messages("t1")).total == 40
        assert await first.count_tasks() == 40
    finally:
        await first.close()
        await second.close()


async def test_claims_from_two_connections_to_one_file_have_one_winner(tmp_path: Path) -> None:
    """Claims are single statements in autocommit: two processes (here two connections) claiming
    the same ids at once all see the one winner, stored with the fixed-width time text."""
    path = tmp_path / "claims.db"
    first, second = SqliteStorage(path), SqliteStorage(path)
    attempts = [
        (f"run-{n % 5}", storage, f"{name}{n}")
        for n in range(40)
        for name, storage in (("a", first), ("b", second))
    ]
    try:
        claims = await asyncio.gather(
            *(storage.claim_snapshot("owners", run, {"by": by}) for run, storage, by in attempts)
        )
        for n in range(5):
            seen = {
                claim["by"] for claim, (run, _, _) in zip(claims, attempts, strict=True) if run == f"run-{n}"
            }
            assert len(seen) == 1
            assert await second.load_snapshot("owners", f"run-{n}") == {"by": seen.pop()}
        stamps = [row[0] for row in read_only(path, "SELECT updated_at FROM snapshots")]
        assert len(stamps) == 5
        assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}", str(stamp)) for stamp in stamps)
    finally:
        await first.close()
        await second.close()


async def test_in_memory_database(tmp_path: Path) -> None:
    storage = SqliteStorage(":memory:")
    await storage.save_thread(thread())
    assert await storage.get_thread("t1") is not None
    await storage.close()


async def test_sqlite_failures_surface_as_storage_errors(tmp_path: Path) -> None:
    path = tmp_path / "garbage.db"
    path.write_bytes(b"this is not a database file, just bytes" * 100)
    storage = SqliteStorage(path)

    with pytest.raises(StorageError, match="SQLite error: file is not a database"):
        await storage.get_thread("t1")
    await storage.close()


async def test_the_tool_call_index_is_built_for_messages_saved_before_it(tmp_path: Path) -> None:
    """Migration 2 indexes the tool calls of messages a version-1 database already holds."""
    path = tmp_path / "v1.db"
    old = SqliteStorage(path)
    await old.save_thread(thread())
    await old.save_messages([tool_call_message("m1", "call-1"), tool_call_message("m2", "call-2", created=1)])
    await old.close()
    with sqlite3.connect(path) as db:  # back to version 1: no index yet
        db.execute("DROP TABLE message_tool_calls")
        db.execute("DROP TABLE resources")  # migration 3
        db.execute("DELETE FROM schema_version WHERE version >= 2")

    upgraded = SqliteStorage(path)
    try:
        found = await upgraded.find_tool_call_message("t1", "call-2")
        assert found is not None and found.id == "m2"
    finally:
        await upgraded.close()
