from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from runstream.storage import InMemoryStorage, SqliteStorage, Storage


@pytest.fixture(params=["memory", "sqlite"])
async def storage(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Storage]:
    """Every contract test runs against each backend (SQLite on a real file)."""
    backend: Storage = (
        InMemoryStorage() if request.param == "memory" else SqliteStorage(tmp_path / "store.db")
    )
    yield backend
    await backend.close()
