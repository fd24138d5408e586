"""Process A of the restart test: starts tasks on a SQLite file, reports them, then hangs.

Usage: ``python crash_worker.py DB_PATH``. Prints one JSON line ``{"retry": id, "once": id,
"ask": id}`` once the two ``hang`` tasks are running (their tools have started) and the ``ask``
task is suspended; then waits to be killed.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from runstream.storage import SqliteStorage
from runstream.tasks.config import BackgroundTaskConfig, TaskRequest
from runstream.tasks.manager import BackgroundTaskManager
from runstream.tools import Tool, ToolContext

AGENT = "crash-agent"


async def main(db_path: str) -> None:
    manager = BackgroundTaskManager(SqliteStorage(db_path), BackgroundTaskConfig())
    started: dict[str, asyncio.Event] = {}

    async def hang(args: dict[str, Any], ctx: ToolContext) -> Any:
        started[args["label"]].set()
        await asyncio.Event().wait()

    async def ask(args: dict[str, Any], ctx: ToolContext) -> Any:
        await ctx.suspend({"question": "name?"})

    def task(tool: Tool, label: str, max_retries: int) -> TaskRequest:
        return TaskRequest(
            tool=tool,
            tool_call_id=f"call-{label}",
            args={"label": label},
            agent_id=AGENT,
            run_id="run-a",
            max_retries=max_retries,
        )

    hang_tool = Tool("hang", hang, input_schema={"type": "object"})
    ids: dict[str, str] = {}
    for label, retries in (("retry", 1), ("once", 0)):
        started[label] = asyncio.Event()
        record = await manager.enqueue(task(hang_tool, label, retries))
        assert record is not None
        await started[label].wait()
        ids[label] = record.id
    record = await manager.enqueue(task(Tool("ask", ask, input_schema={"type": "object"}), "ask", 0))
    assert record is not None
    assert (await manager.wait_for(record.id)).status == "suspended"
    ids["ask"] = record.id
    print(json.dumps(ids), flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
