"""A runstream app configured from the environment, as the Dockerfile at the repository root runs it.

    runstream serve app:api_runtime --host 0.0.0.0 --port 4111   # an API process
    python app.py worker                                          # a background-task worker

RUNSTREAM_MODEL      a model string, e.g. "openai/gpt-4.1-mini" (default: a scripted model)
DATABASE_URL         PostgreSQL for memory and tasks (default: the SQLite file RUNSTREAM_SQLITE_PATH)
REDIS_URL            with DATABASE_URL: API processes enqueue, worker processes run the tasks
RUNSTREAM_API_TOKEN  the bearer token callers must send (read by the server)
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys

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


def build(*, worker: bool) -> Runstream:
    """The runtime; ``worker`` says whether this process runs background tasks itself."""
    agent = Agent("researcher", instructions="Research.", model=model(), tools=[research], memory=Memory())
    store = storage()
    redis_url = os.environ.get("REDIS_URL")
    if not redis_url:  # one process: it runs its own tasks
        return Runstream(agents=[agent], storage=store, background_tasks={"enabled": True})
    if not os.environ.get("DATABASE_URL"):
        raise SystemExit("REDIS_URL needs DATABASE_URL: API processes and workers share one PostgreSQL")
    from runstream.tasks.distributed import DistributedTaskManager

    manager = DistributedTaskManager(store, redis_url=redis_url, worker=worker)
    return Runstream(agents=[agent], storage=store, task_manager=manager)


def api_runtime() -> Runstream:
    """For ``runstream serve app:api_runtime``: with workers (REDIS_URL), it runs no task itself."""
    return build(worker=not os.environ.get("REDIS_URL"))


async def run_worker() -> None:
    """Run background tasks until SIGTERM or SIGINT, then stop taking new ones and exit."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    async with build(worker=True):
        print("runstream worker: ready", flush=True)
        await stop.wait()
    print("runstream worker: stopped", flush=True)


if __name__ == "__main__":
    if sys.argv[1:] != ["worker"]:
        raise SystemExit("usage: python app.py worker  (API processes: runstream serve app:api_runtime)")
    asyncio.run(run_worker())
