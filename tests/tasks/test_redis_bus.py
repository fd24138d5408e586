"""RedisEventBus against a real Redis: wire round trip, fan-out, order, filtering, reconnects."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from bus_listener import REDIS_URL, ScriptProcess, require_redis

from runstream.chunks import AnyChunk, BackgroundTaskOutputChunk, BackgroundTaskRunningChunk
from runstream.storage import TaskRecord
from runstream.tasks.bus import BusSubscription, TaskEvent, TaskEventFilter
from runstream.tasks.redis_bus import RedisEventBus, record_from_wire

MakeBus = Callable[..., RedisEventBus]


def record(task_id: str = "task-1", run_id: str = "run-1", **fields: Any) -> TaskRecord:
    fields.setdefault("created_at", datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC))
    fields.setdefault("status", "running")
    return TaskRecord(
        id=task_id,
        tool_name="tool",
        tool_call_id="call-1",
        args={"q": 1},
        agent_id="agent-1",
        run_id=run_id,
        started_at=datetime(2024, 1, 2, 3, 4, 5, 678_000, tzinfo=UTC),
        **fields,
    )


def output(rec: TaskRecord, seq: int) -> TaskEvent:
    payload: Any = {
        "taskId": rec.id,
        "toolName": rec.tool_name,
        "toolCallId": rec.tool_call_id,
        "runId": rec.run_id,
        "agentId": rec.agent_id,
        "payload": {"seq": seq},
    }
    return TaskEvent(BackgroundTaskOutputChunk(rec.run_id, payload), rec)


def seqs(events: list[TaskEvent]) -> list[int]:
    return [e.chunk.payload["payload"]["seq"] for e in events]


async def take(subscription: BusSubscription, count: int, timeout_s: float = 10) -> list[TaskEvent]:
    async with asyncio.timeout(timeout_s):
        return [await anext(subscription) for _ in range(count)]


@pytest.fixture
def prefix() -> str:
    require_redis()
    return f"test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def make_bus(prefix: str) -> AsyncIterator[MakeBus]:
    buses: list[RedisEventBus] = []

    def make(channel_prefix: str = prefix) -> RedisEventBus:
        bus = RedisEventBus(REDIS_URL, channel_prefix=channel_prefix)
        buses.append(bus)
        return bus

    yield make
    for bus in buses:
        await bus.close()


def test_record_round_trips_through_the_wire_at_millisecond_precision() -> None:
    original = record(
        thread_id="thread-1",
        result={"ok": [1, 2]},
        error={"message": "boom"},
        created_at=datetime(2024, 1, 2, 3, 4, 5, 678_901, tzinfo=UTC),
        completed_at=datetime(2024, 1, 2, 3, 5, tzinfo=UTC),
        retry_count=1,
        max_retries=2,
        suspend_payload={"q": "?"},
        resume_data={"a": "!"},
        metadata={"owner": "w1"},
    )
    back = record_from_wire(original.to_wire())
    assert back.created_at == datetime(2024, 1, 2, 3, 4, 5, 678_000, tzinfo=UTC)
    back.created_at = original.created_at
    assert back == original
    assert record_from_wire(record().to_wire()) == record()


async def test_an_event_reaches_local_and_remote_subscribers_intact(make_bus: MakeBus) -> None:
    here, there = make_bus(), make_bus()
    local, remote = here.subscribe(TaskEventFilter()), there.subscribe(TaskEventFilter())
    assert await here.connect() and await there.connect()
    rec = record(metadata={"owner": "w1", "lease_until": "2024-01-02T03:05:00.000Z"})
    payload: Any = {**output(rec, 0).chunk.payload, "startedAt": rec.started_at, "args": rec.args}
    del payload["payload"]
    chunk: AnyChunk = BackgroundTaskRunningChunk(rec.run_id, payload)
    here.publish(TaskEvent(chunk, rec))
    [mine], [theirs] = await take(local, 1), await take(remote, 1)
    assert mine.chunk is chunk and mine.record is rec
    assert theirs.chunk.to_wire() == chunk.to_wire() and theirs.record == rec


async def test_events_keep_publish_order_and_are_filtered_locally(make_bus: MakeBus) -> None:
    here, there = make_bus(), make_bus()
    everything = there.subscribe(TaskEventFilter())
    one_run = there.subscribe(TaskEventFilter(run_id="run-b"))
    assert await here.connect() and await there.connect()
    a, b = record("task-a", "run-a"), record("task-b", "run-b")
    for seq in range(200):
        here.publish(output(a if seq % 3 else b, seq))
    assert seqs(await take(everything, 200)) == list(range(200))
    assert seqs(await take(one_run, 67)) == list(range(0, 200, 3))


async def test_buses_with_another_prefix_do_not_hear_each_other(make_bus: MakeBus, prefix: str) -> None:
    here, stranger = make_bus(), make_bus(prefix + "-other")
    listener = make_bus()
    events = listener.subscribe(TaskEventFilter())
    assert await here.connect() and await stranger.connect() and await listener.connect()
    stranger.publish(output(record(), 1))
    here.publish(output(record(), 2))
    assert seqs(await take(events, 1)) == [2]


async def test_close_delivers_what_was_published_then_ends_subscriptions(make_bus: MakeBus) -> None:
    bus = make_bus()
    events = bus.subscribe(TaskEventFilter())
    bus.publish(output(record(), 1))
    await bus.close()
    bus.publish(output(record(), 2))  # after close: neither raises nor arrives
    assert seqs([e async for e in events]) == [1]


async def kill_connections(client_name: str) -> int:
    import redis.asyncio

    admin = redis.asyncio.Redis.from_url(REDIS_URL, decode_responses=True)
    try:
        clients = await admin.client_list()
        killed = [c["id"] for c in clients if c.get("name") == client_name]
        for client_id in killed:
            await admin.client_kill_filter(_id=client_id)
        return len(killed)
    finally:
        await admin.aclose()


def client_name(bus: RedisEventBus) -> str:
    return str(bus.client.connection_pool.connection_kwargs["client_name"])


async def test_a_publisher_whose_connection_drops_resends_in_order(make_bus: MakeBus) -> None:
    here, there = make_bus(), make_bus()
    events = there.subscribe(TaskEventFilter())
    assert await here.connect() and await there.connect()
    here.publish(output(record(), 0))
    assert seqs(await take(events, 1)) == [0]
    assert await kill_connections(client_name(here)) == 2  # its reader and its writer
    for seq in range(1, 6):
        here.publish(output(record(), seq))
    assert seqs(await take(events, 5)) == [1, 2, 3, 4, 5]


async def test_a_subscriber_held_away_gets_what_was_published_meanwhile_once_in_order(
    make_bus: MakeBus, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its connection killed (``CLIENT KILL``) and held down while ``running`` and ``output``
    events are published: once back, the subscriber gets every one of them from the bus's log,
    in order, each once, then the live ones. A message that reaches it twice (a send retried
    after a lost reply) is delivered once."""
    import redis.asyncio

    from runstream.tasks import redis_bus

    here, there, witness = make_bus(), make_bus(), make_bus()
    events, witnessed = there.subscribe(TaskEventFilter()), witness.subscribe(TaskEventFilter())
    assert await here.connect() and await there.connect() and await witness.connect()
    here.publish(output(record(), 0))
    assert seqs(await take(events, 1)) == [0]
    lost, reconnect = asyncio.Event(), asyncio.Event()

    async def held_down(backoff: object) -> None:  # the reader that lost its connection waits here
        lost.set()
        await reconnect.wait()

    monkeypatch.setattr(redis_bus._Backoff, "sleep", held_down)
    assert await kill_connections(client_name(there)) == 1  # its reader (it never sent)
    async with asyncio.timeout(10):
        await lost.wait()
    running = record("task-2")
    payload: Any = {**output(running, 0).chunk.payload, "startedAt": running.started_at, "args": running.args}
    del payload["payload"]
    here.publish(TaskEvent(BackgroundTaskRunningChunk(running.run_id, payload), running))
    for seq in range(1, 5):
        here.publish(output(record(), seq))
    assert len(await take(witnessed, 6)) == 6  # all published while the subscriber is away
    reconnect.set()
    back = await take(events, 5)
    assert back[0].chunk.type == "background-task-running" and seqs(back[1:]) == [1, 2, 3, 4]
    admin = redis.asyncio.Redis.from_url(REDIS_URL, decode_responses=True)
    try:
        [(_, fields)] = await admin.xrevrange(f"{prefix}:events-log", count=1)
        await admin.publish(f"{prefix}:events", fields["m"])  # message 5 again
    finally:
        await admin.aclose()
    here.publish(output(record(), 5))
    assert seqs(await take(events, 1)) == [5]


@pytest.fixture
async def spawn(tmp_path: Path) -> AsyncIterator[Callable[..., Awaitable[ScriptProcess]]]:
    """Starts ``bus_listener.py`` processes; each is killed and reaped at teardown, whatever
    the test's outcome (a failed or timed-out test must not leave listeners running)."""
    spawned: list[ScriptProcess] = []

    async def start(*args: str) -> ScriptProcess:
        spawned.append(await ScriptProcess.spawn(tmp_path, *args))
        return spawned[-1]

    try:
        yield start
    finally:
        await asyncio.gather(*(process.kill() for process in spawned))


async def test_events_fan_out_to_every_process(
    make_bus: MakeBus, prefix: str, spawn: Callable[..., Awaitable[ScriptProcess]]
) -> None:
    listeners = [await spawn("listen", prefix, "40") for _ in range(2)]
    await asyncio.gather(*(listener.ready() for listener in listeners))  # both start at once
    bus = make_bus()
    tasks = [record("task-a"), record("task-b")]
    for seq in range(40):
        bus.publish(output(tasks[seq % 2], seq))
    for listener in listeners:
        lines = [line for line in await listener.drain() if line["event"] == "got"]
        assert [line["seq"] for line in lines] == list(range(40))
        assert {line["task"] for line in lines[::2]} == {"task-a"}
        assert listener.process.returncode == 0


async def test_a_reconnected_subscriber_says_so(prefix: str) -> None:
    """What was published during the gap is lost, so the bus tells its owner it is back."""
    back = asyncio.Event()
    bus = RedisEventBus(REDIS_URL, channel_prefix=prefix, on_reconnect=back.set)
    try:
        assert await bus.connect()
        assert not back.is_set()
        assert await kill_connections(client_name(bus)) == 1
        async with asyncio.timeout(10):
            await back.wait()
    finally:
        await bus.close()


async def test_before_delivery_runs_first_and_can_drop_an_event(make_bus: MakeBus, prefix: str) -> None:
    order: list[str] = []

    async def before_delivery(event: TaskEvent) -> bool:
        order.append(f"before {event.chunk.payload['payload']['seq']}")
        return event.chunk.payload["payload"]["seq"] != 1

    here = make_bus()
    there = RedisEventBus(REDIS_URL, channel_prefix=prefix, before_delivery=before_delivery)
    try:
        events = there.subscribe(TaskEventFilter())
        assert await here.connect() and await there.connect()
        for seq in range(3):
            here.publish(output(record(), seq))
        delivered = await take(events, 2)
        order += [f"got {seq}" for seq in seqs(delivered)]
        assert order == ["before 0", "before 1", "before 2", "got 0", "got 2"]
    finally:
        await there.close()


async def test_a_reconciled_subscriber_gets_what_its_gap_lost_once(prefix: str) -> None:
    """After a gap, ``reconcile`` hands the subscribers the settled states storage holds since
    the gap began (here: read by ``missed``); a settled state already delivered is not again."""
    back = asyncio.Event()
    here = RedisEventBus(REDIS_URL, channel_prefix=prefix, on_reconnect=back.set)
    events = here.subscribe(TaskEventFilter(run_id="run-1"))
    ended = record("task-a", status="completed", completed_at=datetime.now(UTC))
    asked: list[TaskEventFilter] = []

    async def missed(wanted: TaskEventFilter, since: datetime) -> tuple[list[TaskEvent], bool]:
        asked.append(wanted)
        assert since <= ended.completed_at  # type: ignore[operator]
        return [TaskEvent(output(ended, 0).chunk, ended), TaskEvent(output(ended, 1).chunk, ended)], False

    try:
        assert await here.connect()
        assert not await here.reconcile(missed)  # no gap yet: storage is not read
        assert asked == []
        assert await kill_connections(client_name(here)) == 1
        async with asyncio.timeout(10):
            await back.wait()
        assert not await here.reconcile(missed)
        assert asked == [TaskEventFilter(run_id="run-1")]
        here.publish(output(ended, 2))  # the same settled state, live: dropped
        here.publish(output(record("task-b", "run-1"), 3))
        assert seqs(await take(events, 2)) == [0, 3]
        assert not await here.reconcile(missed)  # the gap is reconciled: storage is not read again
        assert len(asked) == 1
    finally:
        await here.close()


async def test_a_threads_events_replay_from_where_a_reader_stopped_each_once(make_bus: MakeBus) -> None:
    """Every event of a thread also goes to the thread's replay stream: a reader that stopped
    (a lost worker) is taken up after the last event it used, through a killed connection,
    and gets the events published meanwhile (non-terminal ones too), each once."""
    here, there = make_bus(), make_bus()
    on_thread = record("task-a", thread_id="thread-1", resource_id="user-1")
    elsewhere = record("task-b", thread_id="thread-2", resource_id="user-1")
    wanted = TaskEventFilter(agent_id="agent-1", thread_id="thread-1", resource_id="user-1")
    first = there.thread_events(wanted)
    await first.start()
    for seq in range(3):
        here.publish(output(on_thread, seq))
        here.publish(output(elsewhere, 100 + seq))
    assert seqs(await take(first, 2)) == [0, 1]
    resume_at = first.position(2)
    await first.close()
    for seq in range(3, 5):  # while no reader listens
        here.publish(output(on_thread, seq))
    later = there.thread_events(wanted, resume_at)
    assert seqs(await take(later, 2)) == [2, 3]
    assert await kill_connections(client_name(there)) >= 1
    here.publish(output(on_thread, 5))
    assert seqs(await take(later, 2)) == [4, 5]
    await later.close()
    rest = there.thread_events(wanted, later.position(3))  # a reader after 4 takes up at 5
    assert seqs(await take(rest, 1)) == [5] and later.position(0) == resume_at
    await rest.close()
