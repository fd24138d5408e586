"""A runstream app configured from the environment, as the Dockerfile at the repository root runs it.

    runstream serve app:api_runtime --host 0.0.0.0 --port 4111   # an API process
    runstream worker app:api_runtime                              # a background-task worker

RUNSTREAM_MODEL      a model string, e.g. "openai/gpt-4.1-mini" (default: a scripted model)
DATABASE_URL         PostgreSQL for memory and tasks (default: the SQLite file RUNSTREAM_SQLITE_PATH)
TEMPORAL_ADDRESS     with DATABASE_URL: background tasks run on Temporal, their tools on workers
REDIS_URL            with TEMPORAL_ADDRESS: task events reach every API process
RUNSTREAM_API_TOKEN  the bearer token callers must send (read by the server)
"""

from __future__ import annotations

import asyncio
import os

from runstream import Agent, ToolContext, tool
from runstream.memory import Memory
from runstream.models.base import LanguageModel
from runstream.runtime import Runstream
from runstream.storage import PostgresStorage, SqliteStorage, Storage
from runstream.testing import ScriptedModel, Text, ToolCall


@tool(background=True)
async def research(topic: str, ctx: ToolContext) -> dict[str, str]:
    """Research a topic in depth (slow: runs in the background).

    Args:
        topic: What to research.
    """
    await ctx.writer.write({"status": f"reading about {topic}"})
    await asyncio.sleep(1)
    return {"topic": topic, "summary": f"{topic} looks healthy"}


def model() -> LanguageModel | str:
    return os.environ.get("RUNSTREAM_MODEL") or ScriptedModel.turns(
        ToolCall("research", {"topic": "solana"}), Text("Research started."), Text("Solana looks healthy.")
    )


def storage() -> Storage:
    if url := os.environ.get("DATABASE_URL"):
        return PostgresStorage(url)
    return SqliteStorage(os.environ.get("RUNSTREAM_SQLITE_PATH", "runstream.db"))


def api_runtime() -> Runstream:
    """The runtime of API processes (``runstream serve``) and workers (``runstream worker``).

    Without ``TEMPORAL_ADDRESS`` one process runs its own background tasks; with it, tasks are
    Temporal workflows whose tools run on ``runstream worker`` processes (an API process runs none).
    """
    agent = Agent("researcher", instructions="Research.", model=model(), tools=[research], memory=Memory())
    store = storage()
    address = os.environ.get("TEMPORAL_ADDRESS")
    if not address:  # one process: it runs its own tasks
        return Runstream(agents=[agent], storage=store, background_tasks={"enabled": True})
    if not os.environ.get("DATABASE_URL"):
        raise SystemExit(
            "TEMPORAL_ADDRESS needs DATABASE_URL: API processes and workers share one PostgreSQL"
        )
    from runstream.tasks.temporal import TemporalSettings, TemporalTaskManager

    manager = TemporalTaskManager(
        store, temporal=TemporalSettings(address=address), redis_url=os.environ.get("REDIS_URL") or None
    )
    return Runstream(agents=[agent], storage=store, task_manager=manager)
