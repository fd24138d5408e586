"""Process B of the cross-process agent tests: a worker Runstream on PostgreSQL and Redis.

Usage: ``python agent_worker.py POSTGRES_URL SCHEMA PREFIX``. It serves the background tools of
the agent :func:`build_agent` makes (the test process, A, builds the same agent with a scripted
model and a producer manager) until SIGTERM. It prints JSON lines: ``{"event": "ready",
"worker"}`` once started, then what the tools do. ``research`` waits until the test pushes to
the Redis list ``<PREFIX>:gate:<topic>`` (:func:`gate_key`), ``ask`` for ``<question>`` before
it suspends.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from redis.asyncio import Redis
from scaleout_worker import LINE_TIMEOUT_S, REDIS_URL, say

from runstream import Agent, ToolContext, tool
from runstream.abort import AbortError
from runstream.memory import Memory
from runstream.models.base import LanguageModel
from runstream.runtime import Runstream
from runstream.storage import PostgresStorage
from runstream.tasks.config import BackgroundTaskConfig
from runstream.tasks.distributed import DistributedTaskManager, ScaleOutConfig
from runstream.testing import ScriptedModel

AGENT_ID = "bg"
Gate = Callable[[str], Awaitable[None]]


def gate_key(prefix: str, name: str) -> str:
    return f"{prefix}:gate:{name}"


def build_agent(model: LanguageModel, gate: Gate) -> Agent:
    @tool(background=True)
    async def research(topic: str, ctx: ToolContext) -> dict[str, str]:
        """Research a topic (slow)."""
        say(event="started", tool="research", topic=topic)
        await gate(topic)
        return {"topic": topic, "summary": f"{topic} is fast"}

    @tool(background=True)
    async def hang(label: str, ctx: ToolContext) -> str:
        """Work until cancelled."""
        say(event="started", tool="hang", label=label)
        try:
            await ctx.abort_signal.wait()
        finally:
            say(event="aborted", reason=str(ctx.abort_signal.reason))
        raise AbortError("aborted")

    @tool(background=True)
    async def ask(question: str, ctx: ToolContext) -> dict[str, Any]:
        """Ask the user a question."""
        say(event="started", tool="ask", resume_data=ctx.resume_data)
        if ctx.resume_data is None:
            await gate(question)
            await ctx.suspend({"question": question})
        return {"answer": ctx.resume_data}

    return Agent(
        AGENT_ID, instructions="Research.", model=model, tools=[research, hang, ask], memory=Memory()
    )


async def serve(postgres_url: str, schema: str, prefix: str) -> None:
    gates = Redis.from_url(REDIS_URL)

    async def gate(name: str) -> None:
        if await gates.blpop([gate_key(prefix, name)], timeout=LINE_TIMEOUT_S) is None:
            raise TimeoutError(f"gate {name} never opened")

    storage = PostgresStorage(postgres_url, schema=schema)
    manager = DistributedTaskManager(
        storage,
        BackgroundTaskConfig(),
        redis_url=REDIS_URL,
        channel_prefix=prefix,
        scale_out=ScaleOutConfig(
            lease_ms=60_000, renew_interval_ms=20_000, poll_interval_ms=200, control_timeout_ms=10_000
        ),
    )
    runtime = Runstream(
        agents=[build_agent(ScriptedModel(calls=[[]]), gate)], storage=storage, task_manager=manager
    )
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await runtime.start()
    say(event="ready", worker=manager.worker_id)
    await stop.wait()
    await runtime.close()
    await gates.aclose()


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(*sys.argv[1:4]))
