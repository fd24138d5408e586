"""TemporalTaskManager in one process (a local worker) on a real Temporal dev server: the task
semantics of the in-process manager, mapped onto workflows and activities."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import is_cancelled_exception

from runstream.abort import AbortError
from runstream.storage import InMemoryStorage, TaskRecord
from runstream.tasks.config import (
    BackgroundTaskConfig,
    BackgroundTaskError,
    ConcurrencyLimitError,
    RetryConfig,
    TaskRequest,
)
from runstream.tasks.temporal import TemporalSettings, TemporalTaskManager
from runstream.tasks.temporal.devserver import TemporalDevServer, free_port
from runstream.tasks.temporal.slots import SlotsState, SlotsWorkflow, slots_workflow_id
from runstream.tools import Tool, ToolContext
from tests.task_targets import RecordingTarget

AGENT = "agent-t"
WAIT_S = 30

Execute = Callable[[dict[str, Any], ToolContext], Awaitable[Any]]
MakeManager = Callable[..., Awaitable[TemporalTaskManager]]


@pytest.fixture
async def make_manager(temporal_server: TemporalDevServer) -> AsyncIterator[MakeManager]:
    managers: list[TemporalTaskManager] = []

    async def make(**config: Any) -> TemporalTaskManager:
        settings = TemporalSettings(
            address=temporal_server.address,
            task_queue=f"q-{uuid.uuid4().hex[:10]}",
            heartbeat_timeout_ms=2000,
        )
        retries = RetryConfig(retry_delay_ms=10, max_retry_delay_ms=50)
        manager = TemporalTaskManager(
            InMemoryStorage(),
            BackgroundTaskConfig(default_retries=retries, **config),
            temporal=settings,
            run_worker=True,
        )
        managers.append(manager)
        return manager

    yield make
    for manager in managers:
        await manager.shutdown()


def request(tool: Tool, label: str = "a", **fields: Any) -> TaskRequest:
    return TaskRequest(
        tool=tool,
        tool_call_id=f"call-{label}",
        args={"label": label},
        agent_id=AGENT,
        run_id="run-1",
        **fields,
    )


def tool(name: str, execute: Execute) -> Tool:
    return Tool(name, execute, input_schema={"type": "object"})


async def start(manager: TemporalTaskManager, *tools: Tool) -> None:
    for each in tools:
        manager.register_tool(AGENT, each)
    await manager.start()


async def settled(manager: TemporalTaskManager, record: TaskRecord | None) -> TaskRecord:
    assert record is not None
    return await manager.wait_for(record.id, timeout_ms=WAIT_S * 1000)


async def workflow_outcome(manager: TemporalTaskManager, task_id: str) -> str:
    """How the task's workflow ended: its result, or ``cancelled``."""
    try:
        async with asyncio.timeout(WAIT_S):
            return str(await manager.workflow_handle(task_id).result())
    except WorkflowFailureError as failure:
        assert is_cancelled_exception(failure.cause), failure
        return "cancelled"


async def test_a_task_runs_as_a_workflow_and_its_result_is_announced_once(make_manager: MakeManager) -> None:
    async def echo(args: dict[str, Any], ctx: ToolContext) -> Any:
        await ctx.writer.write({"type": "note", "label": args["label"]})
        return {"echo": args["label"], "attempt": ctx.attempt, "background": ctx.is_background_task}

    manager = await make_manager()
    echo_tool = tool("echo", echo)
    await start(manager, echo_tool)
    target = RecordingTarget.new()
    events = manager.subscribe(agent_id=AGENT)
    record = await manager.enqueue(request(echo_tool, target=target))
    final = await settled(manager, record)
    assert final.status == "completed"
    assert final.result == {"echo": "a", "attempt": 1, "background": True}
    assert target.log == ["write-start:completed", "write-end"]
    seen = []
    async with asyncio.timeout(WAIT_S):
        async for chunk in events:
            seen.append(chunk.type)
            if chunk.type == "background-task-completed":
                break
    assert seen == ["background-task-running", "background-task-output", "background-task-completed"]
    assert not manager.is_active(final.id)
    assert await workflow_outcome(manager, final.id) == "completed"
    await events.close()


async def test_max_retries_is_the_retry_policy(make_manager: MakeManager) -> None:
    async def flaky(args: dict[str, Any], ctx: ToolContext) -> Any:
        if ctx.attempt < 3:
            raise RuntimeError(f"boom {ctx.attempt}")
        return ctx.attempt

    manager = await make_manager()
    flaky_tool = tool("flaky", flaky)
    await start(manager, flaky_tool)
    done = await settled(manager, await manager.enqueue(request(flaky_tool, max_retries=2)))
    assert (done.status, done.result, done.retry_count) == ("completed", 3, 2)
    failed = await settled(manager, await manager.enqueue(request(flaky_tool, "b", max_retries=1)))
    assert (failed.status, failed.retry_count) == ("failed", 1)
    assert failed.error is not None and failed.error["message"] == "boom 2"


async def test_timeout_ms_times_the_attempt_out_through_its_abort_signal(make_manager: MakeManager) -> None:
    reasons: list[str] = []

    async def slow(args: dict[str, Any], ctx: ToolContext) -> Any:
        await ctx.abort_signal.wait()
        reasons.append(str(ctx.abort_signal.reason))
        raise AbortError("stopped")

    manager = await make_manager()
    slow_tool = tool("slow", slow)
    await start(manager, slow_tool)
    final = await settled(manager, await manager.enqueue(request(slow_tool, timeout_ms=300)))
    assert final.status == "timed_out"
    assert final.error == {"message": "Task timed out after 300ms", "name": "TimeoutError"}
    assert reasons == ["Task timed out after 300ms"]


async def test_cancel_reaches_the_tools_abort_signal(make_manager: MakeManager) -> None:
    started, aborted = asyncio.Event(), asyncio.Event()

    async def hang(args: dict[str, Any], ctx: ToolContext) -> Any:
        started.set()
        await ctx.abort_signal.wait()
        aborted.set()
        raise AbortError("aborted")

    manager = await make_manager()
    hang_tool = tool("hang", hang)
    await start(manager, hang_tool)
    record = await manager.enqueue(request(hang_tool))
    assert record is not None
    async with asyncio.timeout(WAIT_S):
        await started.wait()
        await manager.cancel(record.id)
        await aborted.wait()
    final = await settled(manager, record)
    assert final.status == "cancelled"
    assert await workflow_outcome(manager, record.id) == "cancelled"


async def test_suspend_then_resume_runs_the_tool_again_with_the_data(make_manager: MakeManager) -> None:
    calls: list[tuple[Any, Any]] = []

    async def ask(args: dict[str, Any], ctx: ToolContext) -> Any:
        calls.append((ctx.resume_data, ctx.suspend_payload))
        if ctx.resume_data is None:
            await ctx.suspend({"question": "name?"})
        return {"answer": ctx.resume_data}

    manager = await make_manager()
    ask_tool = tool("ask", ask)
    await start(manager, ask_tool)
    record = await manager.enqueue(request(ask_tool))
    suspended = await settled(manager, record)
    assert (suspended.status, suspended.suspend_payload) == ("suspended", {"question": "name?"})
    assert not manager.is_active(suspended.id)
    resumed = await manager.resume(suspended.id, {"name": "Ada"})
    assert resumed.status == "running"
    final = await settled(manager, record)
    assert (final.status, final.result) == ("completed", {"answer": {"name": "Ada"}})
    assert calls == [(None, None), ({"name": "Ada"}, {"question": "name?"})]


async def test_cancel_of_a_suspended_task_ends_its_workflow(make_manager: MakeManager) -> None:
    async def ask(args: dict[str, Any], ctx: ToolContext) -> Any:
        await ctx.suspend({"q": 1})

    manager = await make_manager()
    ask_tool = tool("ask", ask)
    await start(manager, ask_tool)
    record = await settled(manager, await manager.enqueue(request(ask_tool)))
    assert record.status == "suspended"
    await manager.cancel(record.id)
    assert (await settled(manager, record)).status == "cancelled"
    assert await workflow_outcome(manager, record.id) == "cancelled"


async def slots_state(manager: TemporalTaskManager, done: Callable[[SlotsState], bool]) -> SlotsState:
    """The slots workflow's state once ``done`` holds (Temporal's state is read by polling:
    no event tells it)."""
    handle = manager.client.get_workflow_handle(slots_workflow_id(manager.temporal.task_queue))
    async with asyncio.timeout(WAIT_S):
        while not done(state := await handle.query(SlotsWorkflow.state)):  # noqa: ASYNC110
            await asyncio.sleep(0.05)
    return state


async def test_per_agent_concurrency_holds_through_the_slots_workflow(make_manager: MakeManager) -> None:
    gates = {"a": asyncio.Event(), "b": asyncio.Event()}
    started = asyncio.Queue[str]()

    async def gated(args: dict[str, Any], ctx: ToolContext) -> Any:
        started.put_nowait(args["label"])
        await gates[args["label"]].wait()
        return args["label"]

    manager = await make_manager(per_agent_concurrency=1)
    gated_tool = tool("gated", gated)
    await start(manager, gated_tool)
    records = {label: await manager.enqueue(request(gated_tool, label)) for label in ("a", "b")}
    async with asyncio.timeout(WAIT_S):
        first = await started.get()
    second = "b" if first == "a" else "a"
    waiting = records[second]
    assert waiting is not None
    # the other task's workflow waits for the agent's one slot, held by the first
    state = await slots_state(manager, lambda s: len(s.waiting) == 1)
    workflow_ids = {label: manager.temporal.workflow_id(r.id) for label, r in records.items() if r}
    assert state.holders == {workflow_ids[first]: AGENT}
    assert [w.holder for w in state.waiting] == [workflow_ids[second]]
    assert started.empty()
    gates[first].set()
    async with asyncio.timeout(WAIT_S):
        assert await started.get() == second
    gates[second].set()
    assert (await settled(manager, waiting)).result == second
    state = await slots_state(manager, lambda s: not s.holders)
    assert state.waiting == []


async def test_backpressure_reject_counts_running_tasks(make_manager: MakeManager) -> None:
    gate = asyncio.Event()

    async def gated(args: dict[str, Any], ctx: ToolContext) -> Any:
        await gate.wait()
        return "ok"

    manager = await make_manager(global_concurrency=1, backpressure="reject")
    gated_tool = tool("gated", gated)
    await start(manager, gated_tool)
    events = manager.subscribe(agent_id=AGENT)
    first = await manager.enqueue(request(gated_tool, "a"))
    assert first is not None
    async with asyncio.timeout(WAIT_S):
        assert (await anext(events)).type == "background-task-running"
    with pytest.raises(ConcurrencyLimitError):
        await manager.enqueue(request(gated_tool, "b"))
    gate.set()
    assert (await settled(manager, first)).status == "completed"
    await events.close()


async def test_a_pending_task_without_a_workflow_is_started_by_the_next_manager(
    make_manager: MakeManager,
) -> None:
    """An enqueuing process that died between storing a task and starting its workflow: the
    next manager to start on that storage starts it (and a workflow that exists is kept)."""

    async def echo(args: dict[str, Any], ctx: ToolContext) -> Any:
        return args["label"]

    first = await make_manager()
    echo_tool = tool("echo", echo)
    orphan = TaskRecord(
        id=str(uuid.uuid4()), status="pending", tool_name="echo", tool_call_id="call-o",
        args={"label": "orphan"}, agent_id=AGENT, run_id="run-1", max_retries=0, timeout_ms=0,
    )  # fmt: skip
    await first.storage.save_task(orphan)
    second = TemporalTaskManager(first.storage, first.config, temporal=first.temporal, run_worker=True)
    second.register_tool(AGENT, echo_tool)
    try:
        await second.start()
        final = await second.wait_for(orphan.id, timeout_ms=WAIT_S * 1000)
        assert (final.status, final.result) == ("completed", "orphan")
        await second._recover()  # again: its workflow exists (closed), nothing runs twice
        assert (await second.get_task(orphan.id)).result == "orphan"  # type: ignore[union-attr]
    finally:
        await second.shutdown()


async def test_an_enqueuer_that_hears_no_event_learns_the_outcome_by_re_reading(
    temporal_server: TemporalDevServer,
) -> None:
    """A (no worker, no Redis) hears none of B's events: it re-reads its unsettled tasks every
    ``recheck_interval_ms``, runs the request's hook once, then delivers the missed completion
    to its own subscribers; ``wait_for`` re-reads too. B, without the request, wrote the
    outcome into memory itself (there is no thread here: nothing to find)."""

    async def echo(args: dict[str, Any], ctx: ToolContext) -> Any:
        return args["label"]

    storage = InMemoryStorage()
    settings = TemporalSettings(
        address=temporal_server.address, task_queue=f"q-{uuid.uuid4().hex[:10]}", recheck_interval_ms=200
    )
    echo_tool = tool("echo", echo)
    api = TemporalTaskManager(storage, temporal=settings)
    worker = TemporalTaskManager(storage, temporal=settings, run_worker=True)
    worker.register_tool(AGENT, echo_tool)
    target = RecordingTarget.new()
    try:
        await worker.start()
        await api.start()
        events = api.subscribe(agent_id=AGENT)
        record = await api.enqueue(request(echo_tool, target=target))
        final = await settled(api, record)
        assert (final.status, final.result) == ("completed", "a")
        seen = []
        async with asyncio.timeout(WAIT_S):
            async for chunk in events:
                seen.append(chunk.type)
                if chunk.type == "background-task-completed":
                    break
        assert seen == ["background-task-running", "background-task-completed"]
        assert target.log == ["write-start:completed", "write-end"]
        assert not api.is_active(final.id)
        await events.close()
    finally:
        await api.shutdown()
        await worker.shutdown()


async def test_an_unreachable_temporal_is_a_task_error_at_once() -> None:
    manager = TemporalTaskManager(
        InMemoryStorage(), temporal=TemporalSettings(address=f"127.0.0.1:{free_port()}")
    )
    with pytest.raises(BackgroundTaskError, match="Cannot reach Temporal"):
        await manager.start()


async def test_a_subscriber_that_did_not_start_the_task_gets_the_completion_its_gap_lost(
    temporal_server: TemporalDevServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three processes' managers on one storage and Redis: ``api`` enqueues, ``worker`` runs the
    tool, ``observer`` only follows the agent's tasks. The observer's pub/sub connection is
    killed (``CLIENT KILL``) and held down while the task completes, so the completed event is
    lost to it; once back, it finds the completion in storage and delivers it, once."""
    from redis.asyncio import Redis

    from runstream.tasks import redis_bus
    from tests.conftest import REDIS_URL
    from tests.temporal.test_temporal_cluster import require_redis

    require_redis()
    released, lost, reconnect = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def held_down(backoff: object) -> None:  # a reader that lost its connection waits here
        lost.set()
        await reconnect.wait()

    async def blocked(args: dict[str, Any], ctx: ToolContext) -> Any:
        if args["label"] == "a":
            await released.wait()
        return args["label"]

    storage = InMemoryStorage()
    settings = TemporalSettings(address=temporal_server.address, task_queue=f"q-{uuid.uuid4().hex[:10]}")
    prefix = f"test-{uuid.uuid4().hex[:10]}"
    blocker = tool("blocker", blocked)
    managers = [
        TemporalTaskManager(storage, temporal=settings, redis_url=REDIS_URL, channel_prefix=prefix, **kw)
        for kw in ({}, {"run_worker": True}, {})
    ]
    api, worker, observer = managers
    worker.register_tool(AGENT, blocker)
    admin = Redis.from_url(REDIS_URL, decode_responses=True)
    try:
        for manager in managers:
            await manager.start()
        events = observer.subscribe(agent_id=AGENT, include_existing=False)
        record = await api.enqueue(request(blocker))
        assert record is not None
        async with asyncio.timeout(WAIT_S):
            assert (await anext(events)).type == "background-task-running"

        monkeypatch.setattr(redis_bus._Backoff, "sleep", held_down)
        name = observer.bus.client.connection_pool.connection_kwargs["client_name"]  # type: ignore[attr-defined]
        for client in await admin.client_list():
            if client.get("name") == name:
                await admin.client_kill_filter(_id=client["id"])
        async with asyncio.timeout(WAIT_S):
            await lost.wait()
        released.set()
        final = await settled(api, record)  # stored, written to memory and announced meanwhile
        assert (final.status, final.result) == ("completed", "a")
        reconnect.set()

        async with asyncio.timeout(WAIT_S):
            completed = await anext(events)
            assert (completed.type, completed.payload["taskId"]) == ("background-task-completed", record.id)
            later = await api.enqueue(request(blocker, "b"))  # the next event is the next task's
            assert later is not None
            following = await anext(events)
        assert following.payload["taskId"] == later.id
        await events.close()
    finally:
        await admin.aclose()
        for manager in managers:
            await manager.shutdown()
