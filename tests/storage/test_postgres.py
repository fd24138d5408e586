"""PostgreSQL-specific behaviour: schema migration, several pools on one database, CAS, JSON fidelity."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable
from datetime import timedelta, timezone
from typing import Any

import asyncpg
import pytest
from postgres_testkit import POSTGRES_URL, drop_schema, fresh_schema, require_postgres
from storage_testkit import at, message, task, thread, tool_call_message

from runstream.storage import (
    InvalidArgumentError,
    PostgresStorage,
    SchemaVersionError,
    StorageError,
    StoredMessage,
    TaskFilter,
    Thread,
)
from runstream.storage import _postgres_schema as schema_module

LATEST = schema_module.MIGRATIONS[-1].version
OpenStorage = Callable[..., PostgresStorage]


@pytest.fixture(autouse=True)
def _needs_postgres(postgres_problem: str | None) -> None:
    require_postgres(postgres_problem)


@pytest.fixture
async def schema() -> AsyncIterator[str]:
    """A fresh schema name with characters that need quoting; dropped afterwards."""
    name = f'{fresh_schema()} "Odd" Name'
    yield name
    await drop_schema(name)


@pytest.fixture
async def open_storage(schema: str) -> AsyncIterator[OpenStorage]:
    """Opens storages (each with its own pool) on the one test schema; closes them all."""
    opened: list[PostgresStorage] = []

    def open_(**options: int) -> PostgresStorage:
        opened.append(PostgresStorage(POSTGRES_URL, schema=schema, **options))
        return opened[-1]

    yield open_
    for storage in opened:
        await storage.close()


async def query(sql: str, *args: Any) -> list[asyncpg.Record]:
    """Inspect the database on a plain connection, independent of the code under test."""
    conn = await asyncpg.connect(POSTGRES_URL)
    try:
        return await conn.fetch(sql, *args)
    finally:
        await conn.close()


def test_migrations_are_numbered_in_order() -> None:
    versions = [migration.version for migration in schema_module.MIGRATIONS]
    assert versions == list(range(1, len(versions) + 1))


async def test_concurrent_first_use_from_several_pools_migrates_once(
    schema: str, open_storage: OpenStorage
) -> None:
    storages = [open_storage(min_size=2) for _ in range(4)]

    await asyncio.gather(*(s.get_task(f"k{i}") for s in storages for i in range(5)))

    quoted = schema_module.quote_ident(schema)
    assert [r["version"] for r in await query(f"SELECT version FROM {quoted}.schema_version")] == list(
        range(1, LATEST + 1)
    )
    tables = {
        r["tablename"] for r in await query("SELECT tablename FROM pg_tables WHERE schemaname = $1", schema)
    }
    assert tables == {
        "schema_version",
        "threads",
        "messages",
        "background_tasks",
        "thread_state",
        "snapshots",
        "message_tool_calls",
        "resources",
    }
    indexes = {
        r["indexname"] for r in await query("SELECT indexname FROM pg_indexes WHERE schemaname = $1", schema)
    }
    assert {"threads_resource_updated", "messages_thread_created", "background_tasks_status"} <= indexes


async def test_an_added_migration_runs_on_an_existing_schema(
    schema: str, open_storage: OpenStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = open_storage()
    await old.save_task(task("k1", status="running"))
    await old.close()
    added = schema_module.Migration(
        LATEST + 1,
        "lease owner for background tasks",
        ("ALTER TABLE {schema}.background_tasks ADD COLUMN lease_owner TEXT",),
    )
    monkeypatch.setattr(schema_module, "MIGRATIONS", (*schema_module.MIGRATIONS, added))

    upgraded = open_storage()
    assert await upgraded.get_task("k1") == task("k1", status="running")

    quoted = schema_module.quote_ident(schema)
    assert (await query(f"SELECT max(version) FROM {quoted}.schema_version"))[0][0] == LATEST + 1
    columns = await query(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2",
        schema,
        "background_tasks",
    )
    assert "lease_owner" in {r["column_name"] for r in columns}


async def test_a_schema_from_a_newer_version_is_refused(schema: str, open_storage: OpenStorage) -> None:
    await open_storage().init()
    await query(f"INSERT INTO {schema_module.quote_ident(schema)}.schema_version (version) VALUES (999)")

    with pytest.raises(SchemaVersionError, match="999"):
        await open_storage().get_thread("t1")


async def test_two_storages_on_one_database_see_each_others_writes(open_storage: OpenStorage) -> None:
    first, second = open_storage(), open_storage()
    await first.save_thread(thread())
    await first.save_messages([tool_call_message("m1", "call-0")])
    await second.save_task(task("k1"))
    await second.set_thread_state("t1", "goal", {"objective": "x"})

    def add_part(index: int) -> Callable[[StoredMessage], StoredMessage]:
        def mutate(stored: StoredMessage) -> StoredMessage:
            stored.content["parts"].append({"type": "text", "text": f"done {index}"})
            return stored

        return mutate

    await asyncio.gather(*(s.update_message("m1", add_part(i)) for i in range(10) for s in (first, second)))

    [stored] = await second.get_messages(["m1"])
    assert len([part for part in stored.content["parts"] if part["type"] == "text"]) == 20
    assert await first.get_task("k1") == task("k1")
    assert await first.get_thread_state("t1", "goal") == {"objective": "x"}
    assert await first.delete_thread("t1") is True
    assert await second.get_thread("t1") is None and await second.get_thread_state("t1", "goal") is None


async def test_concurrent_rewrites_and_resaves_do_not_deadlock(open_storage: OpenStorage) -> None:
    """Rewrites (message, then thread in the old order) against re-saves spanning two threads."""
    first, second = open_storage(), open_storage()
    await first.save_thread(thread("t1"))
    await first.save_thread(thread("t2"))
    await first.save_messages([message("m1", "t1"), message("m2", "t2")])

    def touch(stored: StoredMessage) -> StoredMessage:
        stored.content["parts"].append({"type": "text", "text": "touched"})
        return stored

    await asyncio.gather(
        *(first.update_message(message_id, touch) for message_id in ("m1", "m2") for _ in range(10)),
        *(second.save_messages([message("m2", "t2"), message("m1", "t1")]) for _ in range(10)),
    )

    assert [m.id for m in await second.get_messages(["m1", "m2"])] == ["m1", "m2"]


async def test_compare_and_set_under_concurrency_has_one_winner(open_storage: OpenStorage) -> None:
    first, second = open_storage(), open_storage()
    await first.save_task(task("k1"))

    async def claim(storage: PostgresStorage, worker: int) -> bool:
        claimed = await storage.update_task(
            "k1", expected_status="pending", status="running", metadata={"worker": worker}
        )
        return claimed is not None

    results = await asyncio.gather(*(claim((first, second)[i % 2], i) for i in range(20)))

    assert results.count(True) == 1
    stored = await second.get_task("k1")
    assert stored is not None and stored.status == "running"
    assert stored.metadata == {"worker": results.index(True)}


async def test_json_round_trips_exactly(open_storage: OpenStorage) -> None:
    """JSON columns keep the text: key order, NUL characters and float spelling survive."""
    storage = open_storage()
    nested: dict[str, Any] = {"leaf": "🌿"}
    for depth in range(40):
        nested = {f"level{depth}": [nested, depth]}
    payload: dict[str, Any] = {
        "z-first": "héllo — 你好 🌍 مرحبا e\u0301",
        "a-second": {"nul": "a\u0000b", "quote": '"\\', "newline": "x\ny"},
        "floats": [0.1, 1e100, -0.0, 1.5e-300, 2.0],
        "ints": [0, -1, 2**63 + 1, 10**30],
        "nested": nested,
        "empty": [{}, [], ""],
    }
    await storage.save_thread(thread(metadata=payload))
    await storage.save_messages(
        [StoredMessage("m1", "t1", "r1", "assistant", {"format": 2, "parts": [payload]})]
    )
    await storage.save_task(
        task("k1", result=payload, suspend_payload=[payload], resume_data="just a string")
    )
    await storage.save_snapshot("workflow", "run-1", payload)

    expected = json.loads(json.dumps(payload))
    stored_thread = await storage.get_thread("t1")
    [stored_message] = await storage.get_messages(["m1"])
    stored_task = await storage.get_task("k1")
    assert stored_thread is not None and stored_task is not None
    for value in (
        stored_thread.metadata,
        stored_message.content["parts"][0],
        stored_task.result,
        stored_task.suspend_payload[0],
        await storage.load_snapshot("workflow", "run-1"),
    ):
        assert json.dumps(value) == json.dumps(expected)
    assert type(stored_task.result["floats"][1]) is float and stored_task.resume_data == "just a string"


async def test_cleanup_by_age(open_storage: OpenStorage) -> None:
    writer, cleaner = open_storage(), open_storage()
    minus_five = timezone(timedelta(hours=-5))
    await writer.save_task(task("done-old", status="completed", completed_at=at(10)))
    await writer.save_task(task("done-at-cutoff", status="completed", completed_at=at(50)))
    await writer.save_task(task("done-new", status="completed", completed_at=at(51)))
    await writer.save_task(task("failed-old", status="failed", completed_at=at(49).astimezone(minus_five)))
    await writer.save_task(task("cancelled-never-completed", status="cancelled", created=5))
    await writer.save_task(task("running-old", status="running", created=0))

    assert await cleaner.delete_tasks_older_than(["completed", "failed"], at(50).astimezone(minus_five)) == 2
    assert await cleaner.delete_tasks_older_than("cancelled", at(6)) == 1
    assert await cleaner.delete_tasks_older_than("running", at(0)) == 0

    remaining = [t.id for t in (await writer.list_tasks(TaskFilter())).items]
    assert remaining == ["done-at-cutoff", "done-new", "running-old"]


async def test_failures_surface_as_storage_errors(open_storage: OpenStorage) -> None:
    unreachable = PostgresStorage("postgresql://postgres@127.0.0.1:1/test", schema=fresh_schema())
    with pytest.raises(StorageError, match="PostgreSQL error"):
        await unreachable.get_thread("t1")
    await unreachable.close()

    storage = open_storage()
    with pytest.raises(StorageError, match="PostgreSQL error"):
        await storage.save_thread(Thread("t1", "r1", title="NUL \x00 in a text column"))
    assert await storage.get_thread("t1") is None


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"schema": ""}, "schema"),
        ({"schema": "x" * 64}, "schema"),
        ({"min_size": 5, "max_size": 2}, "max_size"),
        ({"max_size": 0}, "max_size"),
    ],
)
def test_constructor_refuses_bad_options(options: dict[str, Any], fragment: str) -> None:
    with pytest.raises(InvalidArgumentError, match=fragment):
        PostgresStorage(POSTGRES_URL, **options)


def test_importing_the_storage_package_does_not_need_asyncpg() -> None:
    code = "import sys, runstream.storage; assert 'asyncpg' not in sys.modules, 'asyncpg imported eagerly'"
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert completed.returncode == 0, completed.stderr


async def test_the_tool_call_index_is_built_for_messages_saved_before_it(
    schema: str, open_storage: OpenStorage
) -> None:
    """Migration 2 indexes the tool calls of messages a version-1 schema already holds."""
    old = open_storage()
    await old.save_thread(thread())
    await old.save_messages([tool_call_message("m1", "call-1"), tool_call_message("m2", "call-1", created=1)])
    await old.close()
    quoted = schema_module.quote_ident(schema)
    await query(f"DROP TABLE {quoted}.message_tool_calls")
    await query(f"DROP TABLE {quoted}.resources")  # migration 3
    await query(f"DELETE FROM {quoted}.schema_version WHERE version >= 2")

    upgraded = open_storage()
    found = await upgraded.find_tool_call_message("t1", "call-1")
    assert found is not None and found.id == "m2"  # the call id's newest message


def _terminate_while_blocked(pid: int) -> None:
    """``pg_terminate_backend(pid)`` from another thread, the test's event loop blocked meanwhile:
    the pooled connection looks alive until its next statement meets the closed socket."""

    async def terminate() -> None:
        admin = await asyncpg.connect(POSTGRES_URL)
        try:
            await admin.execute("SELECT pg_terminate_backend($1)", pid)
        finally:
            await admin.close()

    worker = threading.Thread(target=asyncio.run, args=(terminate(),))
    worker.start()
    worker.join()


async def test_a_call_on_a_dropped_connection_is_made_again_on_a_fresh_one(schema: str) -> None:
    storage = PostgresStorage(POSTGRES_URL, schema=schema, min_size=1, max_size=1)
    try:
        await storage.save_thread(thread("t-1", "r-1"))
        for call in (lambda: storage.get_thread("t-1"), lambda: storage.save_thread(thread("t-1", "r-1"))):
            async with storage._connection() as conn:
                pid = await conn.fetchval("SELECT pg_backend_pid()")
            _terminate_while_blocked(pid)
            await call()  # no StorageError: once more, on a new connection
            async with storage._connection() as conn:
                assert await conn.fetchval("SELECT pg_backend_pid()") != pid
        got = await storage.get_thread("t-1")
        assert got is not None and got.resource_id == "r-1"
    finally:
        await storage.close()


async def test_a_call_after_every_pooled_connection_was_killed_is_made_again_on_a_fresh_one(
    schema: str,
) -> None:
    """Every idle connection of the pool ended by the server (a kill, a restart): the next call
    meets one of them, and is made again on a fresh connection, not on another dead one."""
    storage = PostgresStorage(POSTGRES_URL, schema=schema, min_size=3, max_size=3)
    try:
        await storage.save_thread(thread("t-1", "r-1"))
        pool = await storage._get_pool()
        held = [await pool.acquire() for _ in range(3)]
        pids = [await conn.fetchval("SELECT pg_backend_pid()") for conn in held]
        for conn in held:
            await pool.release(conn)
        admin = await asyncpg.connect(POSTGRES_URL)
        try:
            await admin.execute("SELECT pg_terminate_backend(pid) FROM unnest($1::int[]) AS pid", pids)
        finally:
            await admin.close()
        for _ in range(3):  # each call finds its answer, whichever dead connection it met first
            got = await storage.get_thread("t-1")
            assert got is not None and got.resource_id == "r-1"
        async with storage._connection() as conn:
            assert await conn.fetchval("SELECT pg_backend_pid()") not in pids
    finally:
        await storage.close()
