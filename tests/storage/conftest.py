from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from postgres_testkit import postgres_storage, require_postgres, unreachable_reason

from runstream.storage import InMemoryStorage, SqliteStorage, Storage


@pytest.fixture(scope="session")
def postgres_problem() -> str | None:
    """Probed once per session: why PostgreSQL cannot be used, or ``None``."""
    return unreachable_reason()


@pytest.fixture(params=["memory", "sqlite", "postgres"])
async def storage(
    request: pytest.FixtureRequest, tmp_path: Path, postgres_problem: str | None
) -> AsyncIterator[Storage]:
    """Every contract test runs against each backend (SQLite on a real file, PostgreSQL in a
    fresh schema)."""
    if request.param == "postgres":
        require_postgres(postgres_problem)
        async with postgres_storage() as backend:
            yield backend
        return
    backend: Storage = (
        InMemoryStorage() if request.param == "memory" else SqliteStorage(tmp_path / "store.db")
    )
    yield backend
    await backend.close()
