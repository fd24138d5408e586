"""Tools and requests for the manager tests. Tools block on events the test sets, never on time."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from runstream.chunks import AnyChunk
from runstream.tasks.bus import TaskSubscription
from runstream.tasks.config import TaskRequest
from runstream.tasks.manager import BackgroundTaskManager
from runstream.tasks.settling import RunTarget
from runstream.tools import Tool, ToolContext

Execute = Callable[[dict[str, Any], ToolContext], Awaitable[Any]]
MakeManager = Callable[..., BackgroundTaskManager]


def make_tool(name: str, execute: Execute) -> Tool:
    return Tool(name, execute, input_schema={"type": "object"})


def request(
    tool: Tool,
    args: dict[str, Any] | None = None,
    *,
    agent_id: str = "agent-1",
    run_id: str = "run-1",
    thread_id: str | None = "thread-1",
    resource_id: str | None = "user-1",
    tool_call_id: str = "call-1",
    timeout_ms: int | None = None,
    max_retries: int | None = None,
    target: RunTarget | None = None,
) -> TaskRequest:
    return TaskRequest(
        tool=tool,
        tool_call_id=tool_call_id,
        args=args or {},
        agent_id=agent_id,
        run_id=run_id,
        thread_id=thread_id,
        resource_id=resource_id,
        timeout_ms=timeout_ms,
        max_retries=max_retries,
        target=target,
    )


class Gate:
    """A tool that reports when it starts and finishes only when the test opens the gate.

    ``running``/``peak`` count executions in flight, so concurrency limits can be asserted from
    inside the tools.
    """

    def __init__(self, name: str = "gated") -> None:
        self.open = asyncio.Event()
        self.started: list[str] = []
        self.contexts: list[ToolContext] = []
        self.running = 0
        self.peak = 0
        self._started_events: dict[int, asyncio.Event] = {}
        self.tool = make_tool(name, self._execute)

    async def _execute(self, args: dict[str, Any], ctx: ToolContext) -> Any:
        self.started.append(args.get("label", ""))
        self.contexts.append(ctx)
        self.running += 1
        self.peak = max(self.peak, self.running)
        for count, event in self._started_events.items():
            if len(self.started) >= count:
                event.set()
        try:
            await self.open.wait()
        finally:
            self.running -= 1
        return {"label": args.get("label", "")}

    async def wait_started(self, count: int = 1) -> None:
        if len(self.started) < count:
            await asyncio.wait_for(self._started_events.setdefault(count, asyncio.Event()).wait(), 5)


async def read(subscription: TaskSubscription, count: int) -> list[AnyChunk]:
    """The next ``count`` chunks (bounded, so a missing event fails instead of hanging)."""
    return [await asyncio.wait_for(anext(subscription), 5) for _ in range(count)]


async def read_until(subscription: TaskSubscription, *types: str) -> list[AnyChunk]:
    """Chunks up to and including the first one of ``types``."""
    chunks: list[AnyChunk] = []
    while not chunks or chunks[-1].type not in types:
        chunks.append(await asyncio.wait_for(anext(subscription), 5))
    return chunks


def types(chunks: list[AnyChunk]) -> list[str]:
    return [chunk.type for chunk in chunks]
