"""Free concurrency slots for one dispatch pass of a task manager."""

from __future__ import annotations

from runstream.storage import Storage, TaskFilter
from runstream.tasks.config import BackgroundTaskConfig


class Slots:
    """Free-slot bookkeeping for one dispatch pass (counts read once, then tracked locally)."""

    def __init__(self, storage: Storage, config: BackgroundTaskConfig, agent_limits: dict[str, int]) -> None:
        self._storage = storage
        self._config = config
        self._agent_limits = agent_limits
        self._total: int | None = None
        self._per_agent: dict[str, int] = {}

    async def take(self, agent_id: str) -> bool:
        if self._total is None:
            self._total = await self._storage.count_tasks(TaskFilter(status="running"))
        if agent_id not in self._per_agent:
            self._per_agent[agent_id] = await self._storage.count_tasks(
                TaskFilter(status="running", agent_id=agent_id)
            )
        if self._total >= self._config.global_concurrency:
            return False
        if self._per_agent[agent_id] >= self._agent_limits.get(agent_id, self._config.per_agent_concurrency):
            return False
        self._total += 1
        self._per_agent[agent_id] += 1
        return True

    def give_back(self, agent_id: str) -> None:
        if self._total is not None:
            self._total -= 1
        self._per_agent[agent_id] -= 1
