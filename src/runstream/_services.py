"""What a :class:`~runstream.Runstream` shares with the agents it holds.

An agent is configuration; running it needs the runtime's storage and background task manager.
The runtime hands those over as this small value (:meth:`Agent.bind`), so the agent never holds
the runtime itself and the two modules do not import each other.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from runstream.storage import Storage
from runstream.tasks.coordination import TaskManager
from runstream.tools import Tool


@dataclass(frozen=True, slots=True)
class RuntimeServices:
    storage: Storage
    task_manager: TaskManager | None
    start: Callable[[], Awaitable[None]]
    """Initialises the storage and starts the task manager (idempotent)."""


class Toolset(Protocol):
    """Tools that come and go while an agent lives (an MCP client is one): started with the
    runtime (or the first run), closed with the runtime, read per run."""

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    def tools(self) -> Mapping[str, Tool]: ...

    def on_tools_changed(self, listener: Callable[[dict[str, Tool]], None]) -> None: ...
