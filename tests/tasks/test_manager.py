"""BackgroundTaskManager: lifecycle, retries, timeouts, cancel, suspend/resume, concurrency, events."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from tasks_testkit import Gate, MakeManager, make_tool, read, request, types

from runstream.abort import AbortError
from runstream.chunks import dumps
from runstream.storage import SqliteStorage, Storage, TaskFilter, TaskRecord, TaskStatus
from runstream.storage.records import utc_now
from runstream.tasks.bus import TaskEvent, TaskSettled
from runstream.tasks.config import (
    BackgroundTaskError,
    CleanupConfig,
    ConcurrencyLimitError,
    RetryConfig,
    TaskNotFoundError,
    TaskStateError,
)
from runstream.tools import Tool, ToolContext
from tests.task_targets import RecordingTarget


async def echo(args: dict[str, Any], ctx: ToolContext) -> Any:
    return {"echo": args.get("value")}


ECHO = make_tool("echo", echo)


# -- completion and failure ------------------------------------------------------------------


async def test_completes_with_running_then_completed_events(
    storage: Storage, make_manager: MakeManager
) -> None:
    manager = make_manager(storage)
    async with manager.subscribe(agent_id="agent-1") as events:
        record = await manager.enqueue(request(ECHO, {"value": 7}, tool_call_id="call-7"))
        assert record is not None
        done = await manager.wait_for(record.id)
        chunks = await read(events, 2)

    assert types(chunks) == ["background-task-running", "background-task-completed"]
    assert done.status == "completed"
    assert done.result == {"echo": 7}
    assert done.retry_count == 0 and done.max_retries == 0 and done.timeout_ms == 300_000
    assert done.started_at is not None and done.completed_at is not None
    assert done.started_at <= done.completed_at
    running, completed = chunks
    assert running.run_id == "run-1" and running.from_ == "AGENT"
    assert running.payload == {
        "taskId": record.id,
        "toolName": "echo",
        "toolCallId": "call-7",
        "runId": "run-1",
        "agentId": "agent-1",
        "startedAt": done.started_at,
        "args": {"value": 7},
    }
    assert completed.payload["result"] == {"echo": 7}
    assert completed.payload["completedAt"] == done.completed_at
    assert isinstance(completed.payload["completedAt"], datetime)
    assert '"completedAt":"' in dumps(completed.to_wire())  # ISO on the wire


async def test_failure_keeps_message_and_stack(storage: Storage, make_manager: MakeManager) -> None:
    async def boom(args: dict[str, Any], ctx: ToolContext) -> Any:
        raise ValueError("boom")

    failed_hook: list[TaskRecord] = []

    async def on_failed(record: TaskRecord) -> None:
        failed_hook.append(record)

    manager = make_manager(storage, on_task_failed=on_failed)
    async with manager.subscribe() as events:
        record = await manager.enqueue(request(make_tool("boom", boom)))
        assert record is not None
        done = await manager.wait_for(record.id)
        chunks = await read(events, 2)

    assert done.status == "failed"
    assert done.error is not None and done.error["message"] == "boom"
    assert "ValueError: boom" in done.error["stack"] and "Traceback" in done.error["stack"]
    assert types(chunks) == ["background-task-running", "background-task-failed"]
    assert chunks[1].payload["error"]["message"] == "boom"
    assert "stack" in chunks[1].payload["error"]
    assert [r.id for r in failed_hook] == [record.id]


async def test_global_complete_hook_runs_once(make_manager: MakeManager) -> None:
    completed: list[str] = []
    manager = make_manager(on_task_complete=lambda record: completed.append(record.id))
    record = await manager.enqueue(request(ECHO))
    assert record is not None
    await manager.wait_for(record.id)
    await manager.shutdown()
    assert completed == [record.id]


async def test_tool_output_is_wrapped_in_order_for_a_slow_subscriber(make_manager: MakeManager) -> None:
    async def chatty(args: dict[str, Any], ctx: ToolContext) -> Any:
        for i in range(100):
            await ctx.writer.write({"step": i})
        await ctx.writer.custom({"type": "data-progress", "data": {"pct": 100}})
        return "done"

    manager = make_manager()
    events = manager.subscribe(run_id="run-1")
    record = await manager.enqueue(request(make_tool("chatty", chatty), tool_call_id="call-c"))
    assert record is not None
    await manager.wait_for(record.id)  # the subscriber has not read anything yet
    chunks = await read(events, 103)
    await events.close()

    assert types(chunks) == [
        "background-task-running",
        *["background-task-output"] * 101,
        "background-task-completed",
    ]
    first = chunks[1].payload
    assert first["taskId"] == record.id and first["toolCallId"] == "call-c" and first["agentId"] == "agent-1"
    assert first["payload"] == {
        "type": "tool-output",
        "runId": "run-1",
        "from": "USER",
        "payload": {"output": {"step": 0}, "toolCallId": "call-c", "toolName": "chatty"},
    }
    assert [c.payload["payload"]["payload"]["output"]["step"] for c in chunks[1:101]] == list(range(100))
    assert chunks[101].payload["payload"] == {"type": "data-progress", "data": {"pct": 100}}


async def test_invalid_args_fail_without_retry(make_manager: MakeManager) -> None:
    calls: list[int] = []

    async def typed(args: dict[str, Any], ctx: ToolContext) -> Any:
        calls.append(1)

    tool = Tool("typed", typed, input_schema={"type": "object", "required": ["city"]})
    manager = make_manager()
    record = await manager.enqueue(request(tool, {}, max_retries=3))
    assert record is not None
    done = await manager.wait_for(record.id)
    assert done.status == "failed" and done.retry_count == 0
    assert done.error is not None and "Tool input validation failed for typed" in done.error["message"]
    assert calls == []


async def test_non_json_result_fails_the_task(make_manager: MakeManager) -> None:
    async def weird(args: dict[str, Any], ctx: ToolContext) -> Any:
        return {"value": object()}

    manager = make_manager()
    record = await manager.enqueue(request(make_tool("weird", weird)))
    assert record is not None
    done = await manager.wait_for(record.id)
    assert done.status == "failed" and done.error is not None


# -- timeout and retries ---------------------------------------------------------------------


async def test_timeout_aborts_the_tool_and_reports_failed(
    storage: Storage, make_manager: MakeManager
) -> None:
    seen: list[object] = []

    async def slow(args: dict[str, Any], ctx: ToolContext) -> Any:
        seen.append(await ctx.abort_signal.wait())
        raise AbortError(ctx.abort_signal.reason)

    manager = make_manager(storage)
    async with manager.subscribe() as events:
        record = await manager.enqueue(request(make_tool("slow", slow), timeout_ms=50, max_retries=2))
        assert record is not None
        done = await manager.wait_for(record.id)
        chunks = await read(events, 2)

    assert done.status == "timed_out"
    assert done.error == {"message": "Task timed out after 50ms", "name": "TimeoutError"}
    assert done.retry_count == 0  # a timeout is not retried
    assert types(chunks) == ["background-task-running", "background-task-failed"]
    assert chunks[1].payload["error"]["message"] == "Task timed out after 50ms"
    assert len(seen) == 1 and str(seen[0]) == "Task timed out after 50ms"


async def test_retry_then_success_emits_no_chunk_for_the_retry(make_manager: MakeManager) -> None:
    attempts: list[int] = []

    async def flaky(args: dict[str, Any], ctx: ToolContext) -> Any:
        attempts.append(ctx.attempt)
        if ctx.attempt == 1:
            raise RuntimeError("transient")
        return "ok"

    manager = make_manager()
    async with manager.subscribe() as events:
        record = await manager.enqueue(request(make_tool("flaky", flaky), max_retries=1))
        assert record is not None
        done = await manager.wait_for(record.id)
        chunks = await read(events, 2)
    assert attempts == [1, 2]
    assert done.status == "completed" and done.result == "ok" and done.retry_count == 1
    assert types(chunks) == ["background-task-running", "background-task-completed"]


async def test_retries_exhausted(make_manager: MakeManager) -> None:
    attempts: list[int] = []

    async def broken(args: dict[str, Any], ctx: ToolContext) -> Any:
        attempts.append(ctx.attempt)
        raise RuntimeError(f"attempt {ctx.attempt}")

    manager = make_manager(default_retries=RetryConfig(max_retries=2, retry_delay_ms=0))
    record = await manager.enqueue(request(make_tool("broken", broken)))
    assert record is not None and record.max_retries == 2
    done = await manager.wait_for(record.id)
    assert attempts == [1, 2, 3]
    assert done.status == "failed" and done.retry_count == 2
    assert done.error is not None and done.error["message"] == "attempt 3"


async def test_retry_waits_the_configured_delay(make_manager: MakeManager) -> None:
    stamps: list[float] = []

    async def flaky(args: dict[str, Any], ctx: ToolContext) -> Any:
        stamps.append(asyncio.get_running_loop().time())
        if ctx.attempt == 1:
            raise RuntimeError("transient")

    manager = make_manager(default_retries=RetryConfig(retry_delay_ms=40))
    record = await manager.enqueue(request(make_tool("flaky", flaky), max_retries=1))
    assert record is not None
    assert (await manager.wait_for(record.id)).status == "completed"
    assert stamps[1] - stamps[0] >= 0.035


# -- cancel ----------------------------------------------------------------------------------


async def test_cancel_pending_task(make_manager: MakeManager) -> None:
    gate = Gate()
    manager = make_manager(global_concurrency=1)
    first = await manager.enqueue(request(gate.tool, {"label": "first"}))
    second = await manager.enqueue(request(gate.tool, {"label": "second"}))
    assert first is not None and second is not None and second.status == "pending"
    async with manager.subscribe(task_id=second.id) as events:
        await manager.cancel(second.id)
        [cancelled] = await read(events, 1)
    gate.open.set()
    await manager.wait_for(first.id)

    record = await manager.get_task(second.id)
    assert record is not None and record.status == "cancelled" and record.completed_at is not None
    assert cancelled.type == "background-task-cancelled"
    assert cancelled.payload["completedAt"] == record.completed_at
    assert gate.started == ["first"]
    assert not manager.is_active(second.id)


async def test_cancel_running_task_aborts_the_tool(storage: Storage, make_manager: MakeManager) -> None:
    reasons: list[object] = []

    async def patient(args: dict[str, Any], ctx: ToolContext) -> Any:
        reasons.append(await ctx.abort_signal.wait())
        return "too late"

    started = asyncio.Event()

    async def on_running(args: dict[str, Any], ctx: ToolContext) -> Any:
        started.set()
        return await patient(args, ctx)

    manager = make_manager(storage)
    async with manager.subscribe() as events:
        record = await manager.enqueue(request(make_tool("patient", on_running)))
        assert record is not None
        await started.wait()
        await manager.cancel(record.id)
        chunks = await read(events, 2)
    done = await manager.get_task(record.id)
    assert done is not None and done.status == "cancelled" and done.result is None
    assert types(chunks) == ["background-task-running", "background-task-cancelled"]
    assert [str(r) for r in reasons] == ["Task cancelled"]
    assert not manager.is_active(record.id)


async def test_cancel_running_task_that_ignores_the_signal(make_manager: MakeManager) -> None:
    gate = Gate()
    manager = make_manager()
    record = await manager.enqueue(request(gate.tool))
    assert record is not None
    await gate.wait_started()
    await manager.cancel(record.id)
    assert gate.running == 0  # its asyncio task was cancelled after the grace period
    assert gate.contexts[0].abort_signal.aborted
    assert (await manager.wait_for(record.id)).status == "cancelled"


async def test_cancel_suspended_task(make_manager: MakeManager) -> None:
    async def ask(args: dict[str, Any], ctx: ToolContext) -> Any:
        await ctx.suspend({"question": "which city?"})

    manager = make_manager()
    record = await manager.enqueue(request(make_tool("ask", ask)))
    assert record is not None
    assert (await manager.wait_for(record.id)).status == "suspended"
    async with manager.subscribe() as events:
        await manager.cancel(record.id)
        [cancelled] = await read(events, 1)
    assert cancelled.type == "background-task-cancelled"
    assert (await manager.wait_for(record.id)).status == "cancelled"


async def test_cancel_unknown_and_settled_tasks(make_manager: MakeManager) -> None:
    manager = make_manager()
    with pytest.raises(TaskNotFoundError, match="Task not found: nope"):
        await manager.cancel("nope")
    record = await manager.enqueue(request(ECHO))
    assert record is not None
    done = await manager.wait_for(record.id)
    await manager.cancel(record.id)  # no-op
    assert await manager.get_task(record.id) == done


# -- suspend / resume ------------------------------------------------------------------------


async def test_suspend_then_resume_completes(storage: Storage, make_manager: MakeManager) -> None:
    seen: list[tuple[Any, Any, int]] = []

    async def ask(args: dict[str, Any], ctx: ToolContext) -> Any:
        seen.append((ctx.resume_data, ctx.suspend_payload, ctx.attempt))
        if ctx.resume_data is None:
            await ctx.suspend({"question": "which city?"})
        return {"city": ctx.resume_data["city"]}

    manager = make_manager(storage)
    async with manager.subscribe() as events:
        record = await manager.enqueue(request(make_tool("ask", ask), {"q": 1}))
        assert record is not None
        suspended = await manager.wait_for(record.id)
        assert suspended.status == "suspended"
        assert suspended.suspend_payload == {"question": "which city?"} and suspended.suspended_at is not None
        assert not manager.is_active(record.id)

        resumed = await manager.resume(record.id, {"city": "Oslo"})
        assert (
            resumed.status == "running" and resumed.suspend_payload is None and resumed.suspended_at is None
        )
        done = await manager.wait_for(record.id)
        chunks = await read(events, 4)

    assert types(chunks) == [
        "background-task-running",
        "background-task-suspended",
        "background-task-resumed",
        "background-task-completed",
    ]
    assert chunks[1].payload["suspendPayload"] == {"question": "which city?"}
    assert chunks[1].payload["suspendedAt"] == suspended.suspended_at
    assert chunks[1].payload["args"] == {"q": 1}
    assert chunks[2].payload["args"] == {"q": 1} and chunks[2].payload["startedAt"] == resumed.started_at
    assert seen == [(None, None, 1), ({"city": "Oslo"}, {"question": "which city?"}, 1)]
    assert done.status == "completed" and done.result == {"city": "Oslo"}
    assert done.resume_data == {"city": "Oslo"}


async def test_resume_errors(make_manager: MakeManager) -> None:
    manager = make_manager()
    with pytest.raises(TaskNotFoundError, match="Task not found: nope"):
        await manager.resume("nope", {})
    record = await manager.enqueue(request(ECHO))
    assert record is not None
    await manager.wait_for(record.id)
    with pytest.raises(
        TaskStateError, match=r"Cannot resume task in status 'completed' \(expected 'suspended'\)"
    ):
        await manager.resume(record.id, {})


async def test_resume_without_a_free_slot_is_refused(make_manager: MakeManager) -> None:
    async def ask(args: dict[str, Any], ctx: ToolContext) -> Any:
        await ctx.suspend("wait")

    gate = Gate()
    manager = make_manager(global_concurrency=1)
    suspended = await manager.enqueue(request(make_tool("ask", ask)))
    assert suspended is not None
    await manager.wait_for(suspended.id)
    blocker = await manager.enqueue(request(gate.tool))
    assert blocker is not None
    await gate.wait_started()
    with pytest.raises(ConcurrencyLimitError, match='cannot resume task for tool "ask"'):
        await manager.resume(suspended.id, "go")
    gate.open.set()


async def test_retry_count_survives_suspend_and_resume(make_manager: MakeManager) -> None:
    async def tool(args: dict[str, Any], ctx: ToolContext) -> Any:
        if ctx.resume_data is None:
            if ctx.attempt == 1:
                raise RuntimeError("first attempt fails")
            await ctx.suspend("need input")
        return ctx.attempt

    manager = make_manager()
    record = await manager.enqueue(request(make_tool("multi", tool), max_retries=3))
    assert record is not None
    assert (await manager.wait_for(record.id)).retry_count == 1
    await manager.resume(record.id, "input")
    done = await manager.wait_for(record.id)
    assert done.status == "completed" and done.retry_count == 1 and done.result == 2


# -- the settled event: the outcome written first, then one TaskSettled carrying it -----------


async def test_the_outcome_is_written_before_its_settled_event_is_published(
    make_manager: MakeManager,
) -> None:
    target = RecordingTarget.new()
    manager = make_manager()
    events = manager.subscribe()
    log = target.log

    async def listen() -> TaskEvent:
        while True:
            event = await events.next_event()
            log.append(event.chunk.type)
            if event.chunk.type == "background-task-completed":
                return event

    listener = asyncio.create_task(listen())
    record = await manager.enqueue(request(ECHO, target=target))
    assert record is not None
    settled = await asyncio.wait_for(listener, 5)
    await events.close()
    assert log == [
        "background-task-running",
        "write-start:completed",
        "write-end",
        "background-task-completed",
    ]
    assert isinstance(settled, TaskSettled)
    assert (settled.written, settled.record.status, settled.record.result) == (
        "run",
        "completed",
        {"echo": None},
    )
    assert (settled.record.thread_id, settled.record.resource_id) == ("thread-1", "user-1")


async def test_a_failing_write_is_told_by_the_event_and_does_not_lose_it(make_manager: MakeManager) -> None:
    manager = make_manager()
    async with manager.subscribe() as events:
        record = await manager.enqueue(request(ECHO, target=RecordingTarget.new(fails=True)))
        assert record is not None
        event = await events.next_event()
        while event.chunk.type != "background-task-completed":
            event = await events.next_event()
    assert isinstance(event, TaskSettled) and event.written == "failed"


async def test_without_a_target_nothing_is_written_for_the_request(make_manager: MakeManager) -> None:
    manager = make_manager()
    async with manager.subscribe() as events:
        record = await manager.enqueue(request(ECHO))
        assert record is not None
        event = await events.next_event()
        while not isinstance(event, TaskSettled):
            event = await events.next_event()
    assert event.written == "none" and event.chunk.type == "background-task-completed"


async def test_suspension_and_cancellation_are_written_too(make_manager: MakeManager) -> None:
    target = RecordingTarget.new()

    async def ask(args: dict[str, Any], ctx: ToolContext) -> Any:
        await ctx.suspend("wait")

    manager = make_manager()
    record = await manager.enqueue(request(make_tool("ask", ask), target=target))
    assert record is not None
    await manager.wait_for(record.id)
    await manager.cancel(record.id)
    assert [entry for entry in target.log if entry.startswith("write-start")] == [
        "write-start:suspended",
        "write-start:cancelled",
    ]


# -- backpressure and concurrency ------------------------------------------------------------


async def test_queue_backpressure_dispatches_oldest_first(make_manager: MakeManager) -> None:
    gate = Gate()
    manager = make_manager(global_concurrency=1)
    records = [await manager.enqueue(request(gate.tool, {"label": label})) for label in ("a", "b", "c")]
    assert [r.status for r in records if r is not None] == ["running", "pending", "pending"]
    await gate.wait_started()
    assert manager.is_active(records[1].id)  # type: ignore[union-attr]
    gate.open.set()
    for record in records:
        assert record is not None
        assert (await manager.wait_for(record.id)).status == "completed"
    assert gate.started == ["a", "b", "c"]
    assert gate.peak == 1


async def test_reject_backpressure_raises_and_deletes(make_manager: MakeManager, memory: Storage) -> None:
    gate = Gate("slow-search")
    manager = make_manager(global_concurrency=1, backpressure="reject")
    first = await manager.enqueue(request(gate.tool))
    assert first is not None
    with pytest.raises(ConcurrencyLimitError) as error:
        await manager.enqueue(request(gate.tool, tool_call_id="call-2"))
    assert str(error.value) == 'Concurrency limit reached, cannot enqueue task for tool "slow-search"'
    assert [r.id for r in (await memory.list_tasks()).items] == [first.id]
    gate.open.set()


async def test_fallback_sync_backpressure_returns_none(make_manager: MakeManager, memory: Storage) -> None:
    gate = Gate()
    manager = make_manager(per_agent_concurrency=1, backpressure="fallback-sync")
    first = await manager.enqueue(request(gate.tool))
    assert first is not None
    assert await manager.enqueue(request(gate.tool, tool_call_id="call-2")) is None
    assert (await memory.list_tasks()).total == 1
    other_agent = await manager.enqueue(request(gate.tool, agent_id="agent-2"))
    assert other_agent is not None and other_agent.status == "running"
    gate.open.set()


async def test_global_concurrency_limit(make_manager: MakeManager, memory: Storage) -> None:
    gate = Gate()
    manager = make_manager(global_concurrency=2, per_agent_concurrency=10)
    records = [
        await manager.enqueue(request(gate.tool, {"label": str(i)}, agent_id=f"agent-{i % 3}"))
        for i in range(6)
    ]
    await gate.wait_started(2)
    assert await memory.count_tasks(_status("running")) == 2
    assert await memory.count_tasks(_status("pending")) == 4
    assert sorted(manager.running_task_ids()) == sorted(r.id for r in records[:2] if r is not None)
    gate.open.set()
    for record in records:
        assert record is not None
        await manager.wait_for(record.id)
    assert gate.peak == 2 and len(gate.started) == 6


async def test_per_agent_concurrency_limit(make_manager: MakeManager) -> None:
    gates = {"a": Gate("tool-a"), "b": Gate("tool-b")}
    manager = make_manager(global_concurrency=10, per_agent_concurrency=1)
    records = [await manager.enqueue(request(gates["a"].tool, agent_id="a")) for _ in range(3)]
    other = await manager.enqueue(request(gates["b"].tool, agent_id="b"))
    await gates["a"].wait_started()
    await gates["b"].wait_started()
    assert manager.running_task_ids(agent_id="a") == [records[0].id]  # type: ignore[union-attr]
    assert other is not None and manager.running_task_ids(agent_id="b") == [other.id]
    for gate in gates.values():
        gate.open.set()
    for record in [*records, other]:
        assert record is not None
        await manager.wait_for(record.id)
    assert gates["a"].peak == 1 and len(gates["a"].started) == 3


def _status(status: TaskStatus) -> TaskFilter:
    return TaskFilter(status=status)


# -- subscriptions ---------------------------------------------------------------------------


async def test_subscription_filters(make_manager: MakeManager) -> None:
    manager = make_manager()
    subscriptions = {
        "agent": manager.subscribe(agent_id="agent-2"),
        "run": manager.subscribe(run_id="run-2"),
        "thread": manager.subscribe(thread_id="thread-2"),
        "resource": manager.subscribe(resource_id="user-2"),
        "all": manager.subscribe(),
    }
    specs = {
        "plain": {},
        "agent": {"agent_id": "agent-2"},
        "run": {"run_id": "run-2"},
        "thread": {"thread_id": "thread-2"},
        "resource": {"resource_id": "user-2"},
    }
    ids: dict[str, str] = {}
    for name, overrides in specs.items():
        record = await manager.enqueue(request(ECHO, **overrides))  # type: ignore[arg-type]
        assert record is not None
        ids[name] = record.id
        await manager.wait_for(record.id)
    subscriptions["task"] = manager.subscribe(task_id=ids["plain"])
    await manager.shutdown()  # ends every subscription after what was published

    seen = {name: [chunk async for chunk in sub] for name, sub in subscriptions.items()}
    for name in ("agent", "run", "thread", "resource"):
        assert {c.payload["taskId"] for c in seen[name]} == {ids[name]}, name
        assert types(seen[name]) == ["background-task-running", "background-task-completed"]
    assert len(seen["all"]) == 10
    assert seen["task"] == []  # subscribed after that task finished


async def test_include_existing_snapshot(make_manager: MakeManager) -> None:
    gate = Gate()
    manager = make_manager()
    finished = await manager.enqueue(request(ECHO))
    assert finished is not None
    await manager.wait_for(finished.id)
    running = await manager.enqueue(request(gate.tool, {"label": "x"}))
    assert running is not None
    await gate.wait_started()

    async with manager.subscribe(agent_id="agent-1", include_existing=True) as events:
        [snapshot] = await read(events, 1)
        gate.open.set()
        [completed] = await read(events, 1)
    assert snapshot.type == "background-task-running"
    assert snapshot.payload["taskId"] == running.id and snapshot.payload["args"] == {"label": "x"}
    assert completed.type == "background-task-completed" and completed.payload["taskId"] == running.id

    async with manager.subscribe(agent_id="someone-else", include_existing=True) as others:
        await manager.shutdown()
        assert [c async for c in others] == []


async def test_closing_a_subscription_ends_a_waiting_reader(make_manager: MakeManager) -> None:
    manager = make_manager()
    events = manager.subscribe()
    reader = asyncio.create_task(anext(events))
    await asyncio.sleep(0)
    await events.close()
    with pytest.raises(StopAsyncIteration):
        await reader


# -- waiting and progress --------------------------------------------------------------------


async def test_wait_for(make_manager: MakeManager) -> None:
    gate = Gate()
    manager = make_manager()
    with pytest.raises(TaskNotFoundError):
        await manager.wait_for("nope")
    record = await manager.enqueue(request(gate.tool))
    assert record is not None
    with pytest.raises(TimeoutError):
        await manager.wait_for(record.id, timeout_ms=20)
    waiter = asyncio.create_task(manager.wait_for(record.id))
    await gate.wait_started()
    gate.open.set()
    done = await waiter
    assert done.status == "completed"
    assert await manager.wait_for(record.id) == done  # already settled: returns at once


async def test_progress_snapshot_and_stream(make_manager: MakeManager) -> None:
    gate = Gate()
    manager = make_manager()
    record = await manager.enqueue(request(gate.tool))
    assert record is not None
    snapshot = manager.progress_snapshot([record.id, "other"], run_id="run-9")
    assert snapshot.type == "background-task-progress" and snapshot.run_id == "run-9"
    assert snapshot.payload == {"taskIds": [record.id], "runningCount": 1, "elapsedMs": 0}

    chunks = []
    async for chunk in manager.progress([record.id], interval_ms=60_000, run_id="run-9"):
        chunks.append(chunk)
        gate.open.set()  # the stream ends on the completion, not at the next interval
    assert [c.payload["runningCount"] for c in chunks] == [1]
    assert [c async for c in manager.progress([record.id], interval_ms=10)] == []


async def test_progress_ticks_while_a_task_runs(make_manager: MakeManager) -> None:
    gate = Gate()
    manager = make_manager()
    record = await manager.enqueue(request(gate.tool))
    assert record is not None
    ticks = []
    async for chunk in manager.progress([record.id], interval_ms=5):
        ticks.append(chunk.payload["elapsedMs"])
        if len(ticks) == 3:
            gate.open.set()
    assert len(ticks) >= 3 and ticks == sorted(ticks) and ticks[0] == 0


# -- cleanup ---------------------------------------------------------------------------------


def _settled(task_id: str, status: str, age: timedelta) -> TaskRecord:
    now = utc_now()
    return TaskRecord(
        id=task_id,
        status=status,  # type: ignore[arg-type]
        tool_name="echo",
        tool_call_id=task_id,
        args={},
        agent_id="agent-1",
        run_id="run-1",
        created_at=now - age,
        completed_at=now - age,
    )


async def test_cleanup_deletes_records_past_their_ttl(make_manager: MakeManager, memory: Storage) -> None:
    hour = timedelta(hours=1)
    for task_id, status, age in [
        ("old-completed", "completed", 2 * hour),
        ("new-completed", "completed", timedelta(minutes=5)),
        ("failed-2h", "failed", 2 * hour),
        ("failed-25h", "failed", 25 * hour),
        ("timed-out-25h", "timed_out", 25 * hour),
        ("cancelled-25h", "cancelled", 25 * hour),
        ("suspended-25h", "suspended", 25 * hour),
    ]:
        await memory.save_task(_settled(task_id, status, age))
    manager = make_manager(cleanup=CleanupConfig())
    assert await manager.cleanup() == 4
    left = sorted(r.id for r in (await memory.list_tasks()).items)
    assert left == ["failed-2h", "new-completed", "suspended-25h"]


async def test_cleanup_loop_runs_on_its_interval(make_manager: MakeManager, memory: Storage) -> None:
    swept = asyncio.Event()
    real = memory.delete_tasks_older_than

    async def spy(*args: Any, **kwargs: Any) -> int:
        deleted = await real(*args, **kwargs)
        swept.set()
        return deleted

    memory.delete_tasks_older_than = spy  # type: ignore[method-assign]
    await memory.save_task(_settled("old", "completed", timedelta(hours=2)))
    manager = make_manager(cleanup=CleanupConfig(cleanup_interval_ms=10))
    await manager.start()
    await asyncio.wait_for(swept.wait(), 5)
    assert await memory.get_task("old") is None


# -- recovery, registry, shutdown ------------------------------------------------------------


def _stale(task_id: str, status: str, *, max_retries: int, tool_name: str = "echo") -> TaskRecord:
    return TaskRecord(
        id=task_id,
        status=status,  # type: ignore[arg-type]
        tool_name=tool_name,
        tool_call_id=f"call-{task_id}",
        args={"value": task_id},
        agent_id="agent-1",
        run_id="run-old",
        started_at=utc_now() if status == "running" else None,
        max_retries=max_retries,
    )


async def test_start_recovers_stale_tasks(storage: Storage, make_manager: MakeManager) -> None:
    for record in [
        _stale("retryable", "running", max_retries=1),
        _stale("no-retries", "running", max_retries=0),
        _stale("waiting", "suspended", max_retries=0),
        _stale("queued", "pending", max_retries=0),
    ]:
        await storage.save_task(record)
    manager = make_manager(storage)
    manager.register_tool("agent-1", ECHO)
    async with manager.subscribe() as events:
        await manager.start()
        retried = await manager.wait_for("retryable")
        queued = await manager.wait_for("queued")
        failed = await storage.get_task("no-retries")
        chunks = await read(events, 5)
    assert (
        retried.status == "completed" and retried.result == {"echo": "retryable"} and retried.retry_count == 1
    )
    assert queued.status == "completed"
    assert failed is not None and failed.status == "failed"
    assert failed.error == {"message": "Worker process terminated before task completed"}
    assert (await storage.get_task("waiting")).status == "suspended"  # type: ignore[union-attr]
    assert chunks[0].type == "background-task-failed" and chunks[0].payload["taskId"] == "no-retries"


async def test_no_recovery_when_disabled(make_manager: MakeManager, memory: Storage) -> None:
    await memory.save_task(_stale("stale", "running", max_retries=1))
    manager = make_manager(recover_stale_tasks_on_start=False)
    manager.register_tool("agent-1", ECHO)
    await manager.start()
    assert (await memory.get_task("stale")).status == "running"  # type: ignore[union-attr]


async def test_unregistered_tool_fails_with_a_clear_message(
    make_manager: MakeManager, memory: Storage
) -> None:
    await memory.save_task(_stale("orphan", "pending", max_retries=2, tool_name="lost-tool"))
    manager = make_manager()
    await manager.start()
    done = await manager.wait_for("orphan")
    assert done.status == "failed" and done.retry_count == 0
    assert done.error is not None and 'No executor registered for tool "lost-tool"' in done.error["message"]


async def test_shutdown_leaves_retryable_tasks_running(make_manager: MakeManager, memory: Storage) -> None:
    gate = Gate()
    manager = make_manager()
    retryable = await manager.enqueue(request(gate.tool, max_retries=1))
    final = await manager.enqueue(request(gate.tool, max_retries=0))
    assert retryable is not None and final is not None
    await gate.wait_started(2)
    await manager.shutdown()
    await manager.shutdown()  # idempotent

    assert all(ctx.abort_signal.aborted for ctx in gate.contexts) and gate.running == 0
    assert (await memory.get_task(retryable.id)).status == "running"  # type: ignore[union-attr]
    stopped = await memory.get_task(final.id)
    assert stopped is not None and stopped.status == "failed"
    assert stopped.error == {"message": "Worker process terminated before task completed"}
    with pytest.raises(BackgroundTaskError, match="shutting down"):
        await manager.enqueue(request(ECHO))
    with pytest.raises(BackgroundTaskError, match="shut down during wait_for"):
        await manager.wait_for(retryable.id)


async def test_is_active_tracks_local_tasks(make_manager: MakeManager) -> None:
    gate = Gate()
    manager = make_manager(global_concurrency=1)
    running = await manager.enqueue(request(gate.tool))
    queued = await manager.enqueue(request(gate.tool))
    assert running is not None and queued is not None
    assert manager.is_active(running.id) and manager.is_active(queued.id)
    assert manager.running_task_ids() == [running.id]
    gate.open.set()
    await manager.wait_for(queued.id)
    assert not manager.is_active(running.id) and not manager.is_active(queued.id)


async def test_restart_recovery_after_the_worker_process_is_killed(
    tmp_path: Path, make_manager: MakeManager
) -> None:
    """Process A runs tasks on a SQLite file and is SIGKILLed; a fresh manager here recovers."""
    db_path = tmp_path / "tasks.db"
    worker = await asyncio.create_subprocess_exec(
        sys.executable,
        str(Path(__file__).with_name("crash_worker.py")),
        str(db_path),
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert worker.stdout is not None
        line = await asyncio.wait_for(worker.stdout.readline(), 30)
    finally:
        worker.send_signal(signal.SIGKILL)
        await worker.wait()
    assert worker.returncode == -signal.SIGKILL
    ids = json.loads(line)

    async def hang(args: dict[str, Any], ctx: ToolContext) -> Any:
        return {"recovered": args["label"], "attempt": ctx.attempt}

    async def ask(args: dict[str, Any], ctx: ToolContext) -> Any:
        return {"name": ctx.resume_data}

    storage = SqliteStorage(db_path)
    try:
        before = await storage.get_task(ids["retry"])
        assert before is not None and before.status == "running"  # left behind by the dead process
        manager = make_manager(storage)
        manager.register_tool("crash-agent", make_tool("hang", hang))
        manager.register_tool("crash-agent", make_tool("ask", ask))
        await manager.start()

        retried = await manager.wait_for(ids["retry"], timeout_ms=5000)
        assert retried.status == "completed" and retried.retry_count == 1
        assert retried.result == {"recovered": "retry", "attempt": 2}
        failed = await storage.get_task(ids["once"])
        assert failed is not None and failed.status == "failed"
        assert failed.error == {"message": "Worker process terminated before task completed"}
        suspended = await storage.get_task(ids["ask"])
        assert suspended is not None and suspended.status == "suspended"
        assert suspended.suspend_payload == {"question": "name?"}

        await manager.resume(ids["ask"], "Ada")  # no closure here: the static registry runs it
        resumed = await manager.wait_for(ids["ask"], timeout_ms=5000)
        assert resumed.status == "completed" and resumed.result == {"name": "Ada"}
        await manager.shutdown()
    finally:
        await storage.close()
