"""SQLite schema, as an ordered list of migrations recorded in a ``schema_version`` table.

To change the schema, append a :class:`Migration` with the next version number; never edit one
that has shipped, because existing databases have already applied it. ``migrate`` runs every
migration newer than the database inside one ``BEGIN IMMEDIATE`` transaction, so two processes
opening the same file at once cannot both apply it.

Every table has an ``INTEGER PRIMARY KEY`` ``seq`` (SQLite's rowid; stable across ``VACUUM``)
that records first-save order, used to break timestamp ties; upserts keep it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import aiosqlite

from runstream.storage._rows import datetime_to_text
from runstream.storage.errors import SchemaVersionError
from runstream.storage.records import utc_now


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    description: str
    statements: tuple[str, ...]


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "threads, messages, background tasks, thread state, snapshots",
        (
            """CREATE TABLE threads (
                seq INTEGER PRIMARY KEY,
                id TEXT NOT NULL UNIQUE,
                resource_id TEXT NOT NULL,
                title TEXT,
                metadata TEXT NOT NULL,
                created_at TEXT NOT NULL,
                updated_at TEXT NOT NULL
            )""",
            "CREATE INDEX threads_resource_updated ON threads (resource_id, updated_at)",
            "CREATE INDEX threads_resource_created ON threads (resource_id, created_at)",
            """CREATE TABLE messages (
                seq INTEGER PRIMARY KEY,
                id TEXT NOT NULL UNIQUE,
                thread_id TEXT NOT NULL REFERENCES threads (id),
                resource_id TEXT NOT NULL,
                role TEXT NOT NULL,
                type TEXT NOT NULL,
                content TEXT NOT NULL,
                created_at TEXT NOT NULL
            )""",
            "CREATE INDEX messages_thread_created ON messages (thread_id, created_at)",
            """CREATE TABLE background_tasks (
                seq INTEGER PRIMARY KEY,
                id TEXT NOT NULL UNIQUE,
                status TEXT NOT NULL,
                tool_name TEXT NOT NULL,
                tool_call_id TEXT NOT NULL,
                args TEXT NOT NULL,
                agent_id TEXT NOT NULL,
                run_id TEXT NOT NULL,
                thread_id TEXT,
                resource_id TEXT,
                result TEXT,
                error TEXT,
                created_at TEXT NOT NULL,
                started_at TEXT,
                suspended_at TEXT,
                completed_at TEXT,
                retry_count INTEGER NOT NULL,
                max_retries INTEGER NOT NULL,
                timeout_ms INTEGER NOT NULL,
                suspend_payload TEXT,
                resume_data TEXT,
                metadata TEXT NOT NULL
            )""",
            "CREATE INDEX background_tasks_status ON background_tasks (status, created_at)",
            "CREATE INDEX background_tasks_agent ON background_tasks (agent_id, status)",
            "CREATE INDEX background_tasks_run ON background_tasks (run_id)",
            "CREATE INDEX background_tasks_thread ON background_tasks (thread_id)",
            "CREATE INDEX background_tasks_tool_call ON background_tasks (tool_call_id)",
            """CREATE TABLE thread_state (
                seq INTEGER PRIMARY KEY,
                thread_id TEXT NOT NULL,
                state_key TEXT NOT NULL,
                value TEXT NOT NULL,
                updated_at TEXT NOT NULL,
                UNIQUE (thread_id, state_key)
            )""",
            """CREATE TABLE snapshots (
                seq INTEGER PRIMARY KEY,
                namespace TEXT NOT NULL,
                id TEXT NOT NULL,
                data TEXT NOT NULL,
                updated_at TEXT NOT NULL,
                UNIQUE (namespace, id)
            )""",
        ),
    ),
    Migration(
        2,
        "tool-call index: the message holding each tool call of a thread",
        (
            """CREATE TABLE message_tool_calls (
                thread_id TEXT NOT NULL,
                tool_call_id TEXT NOT NULL,
                message_id TEXT NOT NULL,
                PRIMARY KEY (thread_id, tool_call_id)
            )""",
            "CREATE INDEX message_tool_calls_message ON message_tool_calls (message_id)",
            """INSERT OR REPLACE INTO message_tool_calls (thread_id, tool_call_id, message_id)
            SELECT m.thread_id, json_extract(p.value, '$.toolInvocation.toolCallId'), m.id
            FROM messages AS m, json_each(m.content, '$.parts') AS p
            WHERE m.role = 'assistant'
                AND json_extract(p.value, '$.type') = 'tool-invocation'
                AND json_type(p.value, '$.toolInvocation.toolCallId') = 'text'
            ORDER BY m.seq""",
        ),
    ),
    Migration(
        3,
        "resources: resource-scoped working memory",
        (
            """CREATE TABLE resources (
                seq INTEGER PRIMARY KEY,
                id TEXT NOT NULL UNIQUE,
                working_memory TEXT,
                metadata TEXT NOT NULL,
                created_at TEXT NOT NULL,
                updated_at TEXT NOT NULL
            )""",
        ),
    ),
)


async def migrate(db: aiosqlite.Connection, migrations: Sequence[Migration]) -> int:
    """Apply the migrations the database lacks; returns its version afterwards.

    ``db`` must be in autocommit mode (``isolation_level=None``).
    """
    latest = migrations[-1].version if migrations else 0
    await db.execute("BEGIN IMMEDIATE")
    try:
        await db.execute(
            "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)"
        )
        async with db.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version") as cursor:
            row = await cursor.fetchone()
        current = int(row[0]) if row is not None else 0
        if current > latest:
            raise SchemaVersionError(current, latest)
        for migration in migrations:
            if migration.version <= current:
                continue
            for statement in migration.statements:
                await db.execute(statement)
            await db.execute(
                "INSERT INTO schema_version (version, applied_at) VALUES (?, ?)",
                (migration.version, datetime_to_text(utc_now())),
            )
        await db.execute("COMMIT")
    except BaseException:
        await db.execute("ROLLBACK")
        raise
    return max(current, latest)
