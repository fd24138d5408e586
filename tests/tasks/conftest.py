from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tasks_testkit import MakeManager

from runstream.storage import InMemoryStorage, SqliteStorage, Storage
from runstream.tasks.config import BackgroundTaskConfig, RetryConfig
from runstream.tasks.manager import BackgroundTaskManager, TaskHook


@pytest.fixture
async def memory() -> AsyncIterator[Storage]:
    backend = InMemoryStorage()
    yield backend
    await backend.close()


@pytest.fixture(params=["memory", "sqlite"])
async def storage(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Storage]:
    """For the tests where the backend matters (persistence of every field, CAS on SQLite)."""
    backend: Storage = (
        InMemoryStorage() if request.param == "memory" else SqliteStorage(tmp_path / "tasks.db")
    )
    yield backend
    await backend.close()


@pytest.fixture
async def make_manager(memory: Storage) -> AsyncIterator[MakeManager]:
    """Builds managers (on the in-memory storage unless given one) and shuts them all down."""
    managers: list[BackgroundTaskManager] = []

    def make(
        storage: Storage | None = None,
        *,
        on_task_complete: TaskHook | None = None,
        on_task_failed: TaskHook | None = None,
        **config: object,
    ) -> BackgroundTaskManager:
        config.setdefault("default_retries", RetryConfig(retry_delay_ms=0))
        manager = BackgroundTaskManager(
            storage or memory,
            BackgroundTaskConfig(**config),  # type: ignore[arg-type]
            on_task_complete=on_task_complete,
            on_task_failed=on_task_failed,
        )
        managers.append(manager)
        return manager

    yield make
    for manager in managers:
        await manager.shutdown()
