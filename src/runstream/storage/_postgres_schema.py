"""PostgreSQL schema, as an ordered list of migrations recorded in a ``schema_version`` table.

Everything lives in one PostgreSQL schema (``runstream`` unless configured), so several
deployments can share a database. Statements name it as ``{schema}``, filled in with the quoted
identifier. To change the schema, append a :class:`Migration` with the next version number;
never edit one that has shipped.

``migrate`` runs in one transaction holding a transaction-level advisory lock keyed on the
schema name: processes starting together queue on the lock, and each later one finds the
migrations already applied.

Every table has a ``BIGSERIAL`` ``seq`` that records first-save order, used to break timestamp
ties (it is the trailing column of the listing indexes, so ordered scans need no sort); upserts
keep it. JSON fields are ``JSON``, not ``JSONB``: ``JSON`` keeps the text exactly, so values
read back as ``json.loads(json.dumps(v))`` like on the other backends (``JSONB`` refuses
``"\\u0000"`` in strings, reorders keys and rewrites floats such as ``1e100`` as integers).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeAlias

from asyncpg import Record
from asyncpg.pool import PoolConnectionProxy

from runstream.storage.errors import SchemaVersionError

Connection: TypeAlias = "PoolConnectionProxy[Record]"
"""A pooled connection (the stubs' generic is not subscriptable at runtime)."""


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
            """CREATE TABLE {schema}.threads (
                seq BIGSERIAL PRIMARY KEY,
                id TEXT NOT NULL UNIQUE,
                resource_id TEXT NOT NULL,
                title TEXT,
                metadata JSON NOT NULL,
                created_at TIMESTAMPTZ NOT NULL,
                updated_at TIMESTAMPTZ NOT NULL
            )""",
            "CREATE INDEX threads_resource_updated ON {schema}.threads (resource_id, updated_at, seq)",
            "CREATE INDEX threads_resource_created ON {schema}.threads (resource_id, created_at, seq)",
            """CREATE TABLE {schema}.messages (
                seq BIGSERIAL PRIMARY KEY,
                id TEXT NOT NULL UNIQUE,
                thread_id TEXT NOT NULL REFERENCES {schema}.threads (id),
                resource_id TEXT NOT NULL,
                role TEXT NOT NULL,
                type TEXT NOT NULL,
                content JSON NOT NULL,
                created_at TIMESTAMPTZ NOT NULL
            )""",
            "CREATE INDEX messages_thread_created ON {schema}.messages (thread_id, created_at, seq)",
            """CREATE TABLE {schema}.background_tasks (
                seq BIGSERIAL PRIMARY KEY,
                id TEXT NOT NULL UNIQUE,
                status TEXT NOT NULL,
                tool_name TEXT NOT NULL,
                tool_call_id TEXT NOT NULL,
                args JSON NOT NULL,
                agent_id TEXT NOT NULL,
                run_id TEXT NOT NULL,
                thread_id TEXT,
                resource_id TEXT,
                result JSON,
                error JSON,
                created_at TIMESTAMPTZ NOT NULL,
                started_at TIMESTAMPTZ,
                suspended_at TIMESTAMPTZ,
                completed_at TIMESTAMPTZ,
                retry_count INTEGER NOT NULL,
                max_retries INTEGER NOT NULL,
                timeout_ms BIGINT NOT NULL,
                suspend_payload JSON,
                resume_data JSON,
                metadata JSON NOT NULL
            )""",
            "CREATE INDEX background_tasks_status ON {schema}.background_tasks (status, created_at, seq)",
            "CREATE INDEX background_tasks_agent ON {schema}.background_tasks (agent_id, status)",
            "CREATE INDEX background_tasks_run ON {schema}.background_tasks (run_id)",
            "CREATE INDEX background_tasks_thread ON {schema}.background_tasks (thread_id)",
            "CREATE INDEX background_tasks_tool_call ON {schema}.background_tasks (tool_call_id)",
            """CREATE TABLE {schema}.thread_state (
                seq BIGSERIAL PRIMARY KEY,
                thread_id TEXT NOT NULL,
                state_key TEXT NOT NULL,
                value JSON NOT NULL,
                updated_at TIMESTAMPTZ NOT NULL,
                UNIQUE (thread_id, state_key)
            )""",
            """CREATE TABLE {schema}.snapshots (
                seq BIGSERIAL PRIMARY KEY,
                namespace TEXT NOT NULL,
                id TEXT NOT NULL,
                data JSON NOT NULL,
                updated_at TIMESTAMPTZ NOT NULL,
                UNIQUE (namespace, id)
            )""",
        ),
    ),
    Migration(
        2,
        "tool-call index: the message holding each tool call of a thread",
        (
            """CREATE TABLE {schema}.message_tool_calls (
                thread_id TEXT NOT NULL,
                tool_call_id TEXT NOT NULL,
                message_id TEXT NOT NULL,
                PRIMARY KEY (thread_id, tool_call_id)
            )""",
            "CREATE INDEX message_tool_calls_message ON {schema}.message_tool_calls (message_id)",
            """INSERT INTO {schema}.message_tool_calls (thread_id, tool_call_id, message_id)
            SELECT DISTINCT ON (m.thread_id, p.value -> 'toolInvocation' ->> 'toolCallId')
                m.thread_id, p.value -> 'toolInvocation' ->> 'toolCallId', m.id
            FROM {schema}.messages AS m, jsonb_array_elements(
                CASE WHEN jsonb_typeof(m.content::jsonb -> 'parts') = 'array'
                THEN m.content::jsonb -> 'parts' ELSE '[]'::jsonb END
            ) AS p
            WHERE m.role = 'assistant'
                AND jsonb_typeof(p.value) = 'object'
                AND p.value ->> 'type' = 'tool-invocation'
                AND jsonb_typeof(p.value -> 'toolInvocation' -> 'toolCallId') = 'string'
            ORDER BY m.thread_id, p.value -> 'toolInvocation' ->> 'toolCallId', m.seq DESC""",
        ),
    ),
    Migration(
        3,
        "resources: resource-scoped working memory",
        (
            """CREATE TABLE {schema}.resources (
                seq BIGSERIAL PRIMARY KEY,
                id TEXT NOT NULL UNIQUE,
                working_memory TEXT,
                metadata JSON NOT NULL,
                created_at TIMESTAMPTZ NOT NULL,
                updated_at TIMESTAMPTZ NOT NULL
            )""",
        ),
    ),
)


def quote_ident(name: str) -> str:
    """``name`` as a quoted SQL identifier (any characters, case kept)."""
    return '"' + name.replace('"', '""') + '"'


def lock_key(schema: str) -> int:
    """A stable signed 64-bit advisory-lock key for migrating ``schema`` (same in every process)."""
    digest = hashlib.sha256(f"runstream.migrate:{schema}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


async def migrate(conn: Connection, schema: str, migrations: Sequence[Migration]) -> int:
    """Create ``schema`` if needed and apply the migrations it lacks; returns its version afterwards."""
    latest = migrations[-1].version if migrations else 0
    quoted = quote_ident(schema)
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", lock_key(schema))
        await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {quoted}")
        await conn.execute(
            f"CREATE TABLE IF NOT EXISTS {quoted}.schema_version "
            "(version INTEGER PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
        )
        current = int(await conn.fetchval(f"SELECT COALESCE(MAX(version), 0) FROM {quoted}.schema_version"))
        if current > latest:
            raise SchemaVersionError(current, latest)
        for migration in migrations:
            if migration.version <= current:
                continue
            for statement in migration.statements:
                await conn.execute(statement.replace("{schema}", quoted))
            await conn.execute(
                f"INSERT INTO {quoted}.schema_version (version) VALUES ($1)", migration.version
            )
    return max(current, latest)
