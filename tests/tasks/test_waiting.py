"""Mastra's manager API beyond one task: ``waitForNextTask`` over several tasks with progress,
``stream()``'s ``includeExisting`` (default true), and ``suspendedToolRunId`` for a task that
suspends with a delegated run."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from tasks_testkit import Gate, MakeManager, make_tool, read, request

from runstream.abort import AbortController, AbortError
from runstream.tasks.config import TaskNotFoundError
from runstream.tools import ToolContext


async def test_the_first_of_several_tasks_with_progress(make_manager: MakeManager) -> None:
    slow, fast = Gate("slow"), Gate("fast")
    manager = make_manager()
    first = await manager.enqueue(request(slow.tool, tool_call_id="call-slow"))
    second = await manager.enqueue(request(fast.tool, tool_call_id="call-fast"))
    assert first is not None and second is not None
    await slow.wait_started()
    await fast.wait_started()
    progress: list[int] = []
    reported = asyncio.Event()

    async def on_progress(elapsed_ms: int) -> None:  # async callbacks are awaited
        progress.append(elapsed_ms)
        if len(progress) == 3:
            reported.set()

    waiting = asyncio.ensure_future(
        manager.wait_for_next_task([first.id, second.id], on_progress=on_progress, progress_interval_ms=10)
    )
    await asyncio.wait_for(reported.wait(), 5)
    fast.open.set()
    done = await asyncio.wait_for(waiting, 5)
    assert done.id == second.id and done.status == "completed"
    assert progress[:3] == sorted(progress[:3]) and progress[0] >= 10
    # already ended: returned at once, without progress
    assert (
        await manager.wait_for_next_task([first.id, second.id], on_progress=progress.append)
    ).id == second.id
    slow.open.set()


async def test_bad_waits_are_errors(make_manager: MakeManager) -> None:
    gate = Gate()
    manager = make_manager()
    task = await manager.enqueue(request(gate.tool))
    assert task is not None
    with pytest.raises(ValueError, match="at least one task id"):
        await manager.wait_for_next_task([])
    with pytest.raises(TaskNotFoundError):
        await manager.wait_for_next_task([task.id, "no-such-task"])
    with pytest.raises(ValueError, match="progress_interval_ms"):
        await manager.wait_for_next_task([task.id], progress_interval_ms=0)
    with pytest.raises(TimeoutError):
        await manager.wait_for_next_task([task.id], timeout_ms=30)
    controller = AbortController()
    waiting = asyncio.ensure_future(manager.wait_for_next_task([task.id], abort_signal=controller.signal))
    await gate.wait_started()
    controller.abort("user left")
    with pytest.raises(AbortError, match="user left"):
        await asyncio.wait_for(waiting, 5)
    gate.open.set()


async def test_a_suspended_task_is_still_waited_for(make_manager: MakeManager) -> None:
    async def ask(args: dict[str, Any], ctx: ToolContext) -> Any:
        if ctx.resume_data is None:
            await ctx.suspend({"question": "ok?"})
        return {"answer": ctx.resume_data}

    manager = make_manager()
    task = await manager.enqueue(request(make_tool("ask", ask)))
    assert task is not None
    assert (await manager.wait_for(task.id)).status == "suspended"
    ticked = asyncio.Event()
    waiting = asyncio.ensure_future(
        manager.wait_for_next_task([task.id], progress_interval_ms=10, on_progress=lambda _: ticked.set())
    )
    await asyncio.wait_for(ticked.wait(), 5)
    assert not waiting.done()  # still waiting: suspended is not terminal (as in Mastra)
    await manager.resume(task.id, "yes")
    assert (await asyncio.wait_for(waiting, 5)).result == {"answer": "yes"}


async def test_subscribe_includes_running_tasks_by_default(make_manager: MakeManager) -> None:
    gate = Gate()
    manager = make_manager()
    task = await manager.enqueue(request(gate.tool))
    assert task is not None
    await gate.wait_started()
    async with manager.subscribe(agent_id="agent-1") as events:  # Mastra's includeExisting: true
        [snapshot] = await read(events, 1)
    assert snapshot.type == "background-task-running" and snapshot.payload["taskId"] == task.id
    async with manager.subscribe(agent_id="agent-1", include_existing=False) as quiet:
        gate.open.set()
        [completed] = await read(quiet, 1)
    assert completed.type == "background-task-completed"


async def test_suspended_tool_run_id_reaches_the_resumed_task(make_manager: MakeManager) -> None:
    seen: list[str | None] = []

    async def delegate(args: dict[str, Any], ctx: ToolContext) -> Any:
        seen.append(ctx.suspended_tool_run_id)
        if ctx.resume_data is None:
            await ctx.suspend({"question": "approve?"}, run_id="sub-run-1")
        return {"resumed": ctx.suspended_tool_run_id}

    manager = make_manager()
    task = await manager.enqueue(request(make_tool("delegate", delegate)))
    assert task is not None
    suspended = await manager.wait_for(task.id)
    assert suspended.status == "suspended" and suspended.metadata["suspendedToolRunId"] == "sub-run-1"
    await manager.resume(task.id, {"approved": True})
    done = await manager.wait_for(task.id)
    assert done.result == {"resumed": "sub-run-1"} and seen == [None, "sub-run-1"]
