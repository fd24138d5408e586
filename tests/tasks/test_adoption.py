"""``ctx.background.adopt(operation)``: a tool hands an already-started job to its task."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from tasks_testkit import MakeManager, make_tool, request

from runstream.storage import TaskRecord
from runstream.tasks import BackgroundTaskOperation
from runstream.tasks.config import TaskStateError
from runstream.tools import ToolContext


class Job:
    """An already-started job the test finishes or that a cancel stops."""

    def __init__(self) -> None:
        self.done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.cancelled_with: list[object] = []

    def cancel(self, reason: object) -> None:
        self.cancelled_with.append(reason)
        if not self.done.done():
            self.done.set_exception(RuntimeError("job stopped"))


def adopting(job: Job, seen: list[Any]) -> Any:
    async def execute(args: dict[str, Any], ctx: ToolContext) -> Any:
        seen.append((ctx.background.task_id, ctx.background.disposition))
        ctx.background.adopt(BackgroundTaskOperation(completion=job.done, cancel=job.cancel))
        return "submitted"

    return make_tool("transcode", execute)


async def test_the_task_ends_with_the_adopted_operations_result(make_manager: MakeManager) -> None:
    job, seen = Job(), []
    manager = make_manager()
    record = await manager.enqueue(request(adopting(job, seen)))
    assert record is not None
    waiting = asyncio.ensure_future(manager.wait_for(record.id))
    await asyncio.sleep(0)
    assert not waiting.done()  # the tool returned "submitted"; the task waits for the job
    job.done.set_result({"url": "out.mp4"})
    done = await asyncio.wait_for(waiting, 5)
    assert done.status == "completed" and done.result == {"url": "out.mp4"}
    assert seen == [(record.id, "deferred")] and job.cancelled_with == []


async def test_cancelling_the_task_cancels_the_operation(make_manager: MakeManager) -> None:
    job = Job()
    manager = make_manager()
    record = await manager.enqueue(request(adopting(job, [])))
    assert record is not None
    await asyncio.sleep(0)
    await manager.cancel(record.id)
    assert (await manager.get_task(record.id)).status == "cancelled"  # type: ignore[union-attr]
    assert len(job.cancelled_with) == 1


async def test_a_timeout_cancels_the_operation(make_manager: MakeManager) -> None:
    job = Job()
    manager = make_manager()
    record = await manager.enqueue(request(adopting(job, []), timeout_ms=30))
    assert record is not None
    done = await manager.wait_for(record.id)
    assert done.status == "timed_out"
    assert "Task timed out after 30ms" in str(job.cancelled_with[0])


async def test_one_operation_per_tool_and_only_in_background_tasks(make_manager: MakeManager) -> None:
    job = Job()

    async def greedy(args: dict[str, Any], ctx: ToolContext) -> Any:
        ctx.background.adopt(BackgroundTaskOperation(completion=job.done, cancel=job.cancel))
        ctx.background.adopt(BackgroundTaskOperation(completion=job.done))
        return "never"

    manager = make_manager()
    record = await manager.enqueue(request(make_tool("greedy", greedy)))
    assert record is not None
    done = await manager.wait_for(record.id)
    assert done.status == "failed" and done.error is not None
    assert done.error["message"] == "A background tool may adopt only one operation"
    assert len(job.cancelled_with) == 1  # the tool raised: what it adopted is stopped


async def test_restart_runs_a_task_that_no_process_runs(make_manager: MakeManager) -> None:
    """A task left ``running`` by a dead process (recovery off) is run again by ``restart``."""

    async def echo(args: dict[str, Any], ctx: ToolContext) -> Any:
        return {"echo": args["value"], "attempt": ctx.attempt}

    tool = make_tool("echo", echo)
    manager = make_manager(recover_stale_tasks_on_start=False)
    manager.register_tool("agent-1", tool)
    stale = TaskRecord(
        id="task-left-running",
        status="running",
        tool_name="echo",
        tool_call_id="call-1",
        args={"value": 7},
        agent_id="agent-1",
        run_id="run-1",
    )
    await manager.storage.save_task(stale)
    events = manager.subscribe(task_id=stale.id)
    restarted = await manager.restart(stale.id)
    assert restarted.status == "running"
    done = await manager.wait_for(stale.id)
    assert done.status == "completed" and done.result == {"echo": 7, "attempt": 1}
    kinds = [(await asyncio.wait_for(anext(events), 5)).type for _ in range(2)]
    assert kinds == ["background-task-running", "background-task-completed"]
    await events.close()
    with pytest.raises(
        TaskStateError, match=r"Cannot restart task in status 'completed' \(expected 'running'\)"
    ):
        await manager.restart(stale.id)
