"""PostgreSQL for the storage tests: every storage gets a fresh schema, dropped afterwards.

The server comes from ``RUNSTREAM_TEST_POSTGRES_URL``. Under ``CI=true`` an unreachable server
fails the Postgres tests; elsewhere they are skipped with the reason.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
import pytest

from runstream.storage import PostgresStorage
from runstream.storage._postgres_schema import quote_ident
from tests.conftest import POSTGRES_URL

IN_CI = os.environ.get("CI", "").lower() in {"true", "1"}


def unreachable_reason() -> str | None:
    """Why the test server cannot be used, or ``None`` if it can (one connection attempt)."""

    async def probe() -> None:
        conn = await asyncpg.connect(POSTGRES_URL, timeout=5)
        await conn.close()

    try:
        asyncio.run(probe())
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        return f"PostgreSQL unreachable at {POSTGRES_URL} (set RUNSTREAM_TEST_POSTGRES_URL): {exc!r}"
    return None


def require_postgres(reason: str | None) -> None:
    if reason is not None:
        if IN_CI:
            pytest.fail(f"CI=true requires PostgreSQL: {reason}")
        pytest.skip(reason)


def fresh_schema() -> str:
    return f"runstream_test_{uuid.uuid4().hex}"


async def drop_schema(name: str) -> None:
    conn = await asyncpg.connect(POSTGRES_URL)
    try:
        await conn.execute(f"DROP SCHEMA IF EXISTS {quote_ident(name)} CASCADE")
    finally:
        await conn.close()


@asynccontextmanager
async def postgres_storage(schema: str | None = None, **options: int) -> AsyncIterator[PostgresStorage]:
    """A storage on ``schema`` (a fresh one by default), closed and its schema dropped on exit."""
    name = schema or fresh_schema()
    storage = PostgresStorage(POSTGRES_URL, schema=name, **options)
    try:
        yield storage
    finally:
        await storage.close()
        await drop_schema(name)
