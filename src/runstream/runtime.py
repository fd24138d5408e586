"""``Runstream``: the container that gives agents their storage and background task manager."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Any

from runstream.agent import Agent
from runstream.storage import InMemoryStorage, Storage
from runstream.tasks.config import BackgroundTaskConfig
from runstream.tasks.manager import BackgroundTaskManager


class Runstream:
    """Agents plus the services they share.

    ``storage`` holds memory and task records (``SqliteStorage("runstream.db")`` for a file;
    in-memory when omitted). ``background_tasks={"enabled": True, ...}`` creates the task
    manager; without it every tool runs in the foreground.
    """

    def __init__(
        self,
        *,
        agents: Iterable[Agent] = (),
        storage: Storage | None = None,
        background_tasks: BackgroundTaskConfig | Mapping[str, Any] | bool | None = None,
        task_manager: BackgroundTaskManager | None = None,
    ) -> None:
        self.storage: Storage = storage if storage is not None else InMemoryStorage()
        config = BackgroundTaskConfig.coerce(background_tasks)
        if task_manager is None and config is not None:
            task_manager = BackgroundTaskManager(self.storage, config)
        self.task_manager = task_manager
        """``task_manager=`` takes a ready manager, e.g. a ``DistributedTaskManager`` for scale-out."""
        self.agents: dict[str, Agent] = {}
        self._started = False
        self._start_lock = asyncio.Lock()
        for agent in agents:
            self.add_agent(agent)

    def add_agent(self, agent: Agent) -> Agent:
        if agent.id in self.agents:
            raise ValueError(f"an agent with id {agent.id!r} is already registered")
        self.agents[agent.id] = agent
        agent.bind(self)
        return agent

    def get_agent(self, agent_id: str) -> Agent:
        try:
            return self.agents[agent_id]
        except KeyError:
            raise KeyError(f"no agent {agent_id!r}; known: {', '.join(self.agents) or 'none'}") from None

    async def start(self) -> None:
        """Initialise storage and start the task manager (recovering tasks of a previous process)."""
        if self._started:
            return
        async with self._start_lock:
            if self._started:
                return
            await self.storage.init()
            if self.task_manager is not None:
                await self.task_manager.start()
            self._started = True

    async def close(self) -> None:
        if self.task_manager is not None:
            await self.task_manager.shutdown()
        await self.storage.close()
        self._started = False

    async def __aenter__(self) -> Runstream:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
