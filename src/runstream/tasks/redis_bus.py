"""An :class:`~runstream.tasks.bus.EventBus` over Redis pub/sub, for managers in several processes.

Every event reaches this process's subscribers at once (through an :class:`InProcessEventBus`)
and goes to the Redis channel ``<prefix>:events`` for the other processes; a bus skips its own
messages when they come back. A message is ``{"origin", "n", "chunk", "record"}`` (and, for a
:class:`~runstream.tasks.bus.TaskSettled`, ``"written"``): the chunk's wire JSON and
``TaskRecord.to_wire()``, rebuilt with :func:`record_from_wire` and :func:`chunk_from_wire`. Subscriptions filter locally.

Delivery guarantee:

* In this process, as :class:`InProcessEventBus`: every event, in publish order.
* To other processes, in publish order per publishing process: one writer task sends the
  events one after another, and a send that fails on a dropped connection is retried (with
  backoff) before the next, so a publisher's outage loses nothing while fewer than
  ``max_backlog`` events wait.
* Redis pub/sub alone is at-most-once: a subscriber whose connection is down misses what is
  published meanwhile. So every event also goes, in the same atomic script, to the bus's
  replay log (a Redis stream, ``<prefix>:events-log``, about :data:`EVENTS_LOG_KEPT` entries),
  and its pub/sub message names its log entry. A reader that lost its connection
  re-subscribes, then reads the log after the last entry it heard and delivers what it missed
  (``running`` and ``output`` events too), in order, before the messages that follow; each
  event once. It also calls ``on_reconnect``: where the log no longer holds the gap (trimmed,
  or Redis restarted without its data), the record in storage stays the truth, and the bus's
  owner calls :meth:`RedisEventBus.reconcile`, which hands every subscriber here the settled
  states (terminal, suspended) stored since the last message heard before the gap, each once
  (``TemporalTaskManager`` does, in any process, for every subscriber).
* An event of a task on a thread also goes, in the same round trip, to the thread's replay
  stream (a Redis stream, about :data:`THREAD_EVENTS_KEPT` entries): a
  :class:`ThreadEvents` reader (a durable until-idle flow) reads it after a known entry, so
  one that stopped is taken up where it stopped, every event once, gaps or not.

Events from other processes are handled one at a time, in arrival order; ``before_delivery``
(if given) is awaited before each reaches this process's subscribers, and may drop it. That is
how a manager makes a request's hook (the memory write) happen before its readers see the event.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Any, ParamSpec, TypeVar, cast

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_delay, wait_exponential_jitter

from runstream.chunks import chunk_from_wire, dumps
from runstream.errors import InvalidInputError
from runstream.storage import TaskRecord
from runstream.tasks.bus import (
    BusSubscription,
    InProcessEventBus,
    MissedEvents,
    TaskEvent,
    TaskEventFilter,
    TaskSettled,
)
from runstream.tasks.lifecycle import TaskChunk

logger = logging.getLogger(__name__)

READ_POLL_S = 1.0
"""The reader wakes this often, so a health check can notice a silently dead connection."""
HEALTH_CHECK_S = 15
BACKOFF_MIN_S = 0.05
BACKOFF_MAX_S = 5.0
CLOSE_FLUSH_S = 2.0
"""How long ``close`` waits for queued messages to be sent."""

_TRANSIENT = (RedisConnectionError, RedisTimeoutError, OSError)
GAP_MARGIN_S = 2.0
"""How far before the last message heard a gap is taken to start: a message may be lost in a
dying connection's buffers, and another process's clock stamps the records read back."""
EVENTS_LOG_KEPT = 10_000
"""About how many events the bus's replay log keeps (a reader's gap up to that many events is
replayed; see the module docstring)."""
THREAD_EVENTS_KEPT = 10_000
"""About how many events of one thread its replay stream keeps (:class:`ThreadEvents`)."""
THREAD_EVENTS_TTL_S = 86_400
"""How long a thread's replay stream lives after its last event (an until-idle flow's limit)."""
REPLAY_BATCH = 500
"""How many entries of the bus's log a reader back from a gap reads per call."""
REPLAY_BLOCK_MS = 1000
REPLAY_SEEN = 1000
"""How many events a replay remembers by publisher and number (a send retried after a dropped
connection may have written the stream twice)."""
RETRY_FOR_S = 30.0
"""How long :func:`retrying` calls Redis again after dropped connections before giving up."""
T = TypeVar("T")
P = ParamSpec("P")

BeforeDelivery = Callable[[TaskEvent], Awaitable[bool]]
"""Runs before another process's event reaches the subscribers here; ``False`` drops it."""


def redis_client(url: str, name: str) -> Redis:
    """A client whose commands fail at once on a dropped connection: the callers retry with
    their own backoff (and, for pub/sub, know that they reconnected)."""
    return Redis.from_url(
        url,
        decode_responses=True,
        retry=Retry(NoBackoff(), 0),
        health_check_interval=HEALTH_CHECK_S,
        client_name=name,
    )


async def retrying(call: Callable[P, Awaitable[T]], *args: P.args, **kwargs: P.kwargs) -> T:
    """``call(*args, **kwargs)``, made again on a fresh connection after a dropped one
    (``CLIENT KILL``, a Redis restart), with jittered backoff, for :data:`RETRY_FOR_S` at most.
    Only for calls that are idempotent (reads, and writes keyed by a sequence number)."""
    async for attempt in AsyncRetrying(
        retry=retry_if_exception_type(_TRANSIENT),
        wait=wait_exponential_jitter(initial=BACKOFF_MIN_S, max=1.0),
        stop=stop_after_delay(RETRY_FOR_S),
        reraise=True,
    ):
        with attempt:
            return await call(*args, **kwargs)
    raise AssertionError("unreachable: tenacity re-raises the last error")


class _Backoff:
    def __init__(self) -> None:
        self.delay = BACKOFF_MIN_S

    async def sleep(self) -> None:
        await asyncio.sleep(self.delay)
        self.delay = min(self.delay * 2, BACKOFF_MAX_S)

    def reset(self) -> None:
        self.delay = BACKOFF_MIN_S


_SEND = """
local id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[3], '*', 'm', ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[5])
if #KEYS > 1 then
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[4], '*', 'm', ARGV[2])
  redis.call('EXPIRE', KEYS[2], ARGV[5])
end
redis.call('PUBLISH', ARGV[1], '{"entry":"' .. id .. '",' .. string.sub(ARGV[2], 2))
return id
"""
"""A message to the channel's log (and a thread's stream), then to the channel with its log
entry's id as the first key of its JSON object (readers that do not know it ignore it)."""
_ENTRY_PREFIX = '{"entry":"'


class RedisChannel:
    """One pub/sub channel: ``send`` queues (never blocks) for a single writer task, so messages
    leave in order; a reader task awaits ``on_message`` for each incoming message, one after
    another. Both reconnect with exponential backoff; ``on_reconnect`` is called when the reader
    is subscribed again after losing its connection. With ``log_key`` (messages must then be
    JSON objects), every message also goes to that Redis stream, and a reader back from a lost
    connection first delivers the messages logged after the last one it heard: none is missed
    while the log holds them. The tasks start on first use inside a running event loop."""

    def __init__(
        self,
        client: Redis,
        name: str,
        on_message: Callable[[str], Awaitable[None]],
        *,
        on_reconnect: Callable[[], None] | None = None,
        max_backlog: int = 10_000,
        log_key: str | None = None,
    ) -> None:
        self.client = client
        self.name = name
        self.log_key = log_key
        self._send_logged = client.register_script(_SEND)
        self._last_entry: str | None = None
        """The log entry of the last message heard (or, before any, the log's end when the
        reader first subscribed): a reader back from a gap replays the log after it."""
        self._on_message = on_message
        self._on_reconnect = on_reconnect
        self._max_backlog = max_backlog
        self._backlog: deque[tuple[str, str | None]] = deque()
        self._queued = asyncio.Event()
        self._drained = asyncio.Event()
        self._subscribed = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._closed = False
        self._heard = time.time()
        self.gap_since: float | None = None
        """When the oldest gap not yet reconciled began (the last message heard before it,
        epoch seconds); ``None`` when there is none."""
        self.gaps = 0
        """How many times the reader lost its connection."""

    def start(self) -> None:
        if self._tasks or self._closed:
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # not in a loop yet: the next call from async code starts them
            return
        self._tasks = [
            asyncio.create_task(self._write_loop(), name=f"redis writer {self.name}"),
            asyncio.create_task(self._read_loop(), name=f"redis reader {self.name}"),
        ]

    def send(self, payload: str, stream_key: str | None = None) -> None:
        """Queue ``payload`` for the channel (and, with ``stream_key``, for that Redis stream too:
        :class:`ThreadEvents` replays it)."""
        if self._closed:
            return
        if len(self._backlog) >= self._max_backlog:
            self._backlog.popleft()
            logger.warning("Redis channel %s: backlog full, dropped the oldest message", self.name)
        self._backlog.append((payload, stream_key))
        self._drained.clear()
        self._queued.set()
        self.start()

    @property
    def subscribed(self) -> bool:
        return self._subscribed.is_set()

    async def wait_subscribed(self, timeout_s: float) -> bool:
        """Whether the reader is subscribed (messages published from now on arrive) in time."""
        self.start()
        try:
            async with asyncio.timeout(timeout_s):
                await self._subscribed.wait()
        except TimeoutError:
            return False
        return True

    async def close(self) -> None:
        """Send what is queued (for at most ``CLOSE_FLUSH_S``), then stop both tasks."""
        self._closed = True
        if self._tasks and self._backlog:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._drained.wait(), CLOSE_FLUSH_S)
        if not self._tasks:  # never started
            return
        for task in self._tasks:
            task.cancel()
        # Bounded: a redis-py connection cancelled mid-read can be slow to let go; never hang here.
        _, stuck = await asyncio.wait(self._tasks, timeout=CLOSE_FLUSH_S)
        if stuck:
            logger.warning("Redis channel %s: %d task(s) did not stop on close", self.name, len(stuck))

    async def _write_loop(self) -> None:
        backoff = _Backoff()
        while True:
            while not self._backlog:
                self._queued.clear()
                await self._queued.wait()
            try:
                await self._send(*self._backlog[0])
            except _TRANSIENT as exc:
                logger.warning("Redis channel %s: send failed (%s), retrying", self.name, exc)
                await backoff.sleep()
                continue
            except RedisError:
                logger.exception("Redis channel %s: message rejected, dropped", self.name)
            self._backlog.popleft()
            if not self._backlog:
                self._drained.set()
            backoff.reset()

    async def _send(self, payload: str, stream_key: str | None) -> None:
        if self.log_key is not None:
            keys = [self.log_key] if stream_key is None else [self.log_key, stream_key]
            args: list[str | int] = [
                self.name,
                payload,
                EVENTS_LOG_KEPT,
                THREAD_EVENTS_KEPT,
                THREAD_EVENTS_TTL_S,
            ]
            await self._send_logged(keys=keys, args=args)
            return
        if stream_key is None:
            await self.client.publish(self.name, payload)
            return
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.xadd(stream_key, {"m": payload}, maxlen=THREAD_EVENTS_KEPT, approximate=True)
            pipe.expire(stream_key, THREAD_EVENTS_TTL_S)
            pipe.publish(self.name, payload)
            await pipe.execute()

    async def _read_loop(self) -> None:
        backoff = _Backoff()
        lost = False
        while True:
            pubsub = self.client.pubsub()
            try:
                if self._last_entry is None:
                    await self._mark_log_end()
                await pubsub.subscribe(self.name)
                while True:
                    message = await pubsub.get_message(timeout=READ_POLL_S)
                    if message is None:
                        continue
                    self._heard = time.time()
                    if message["type"] == "subscribe":
                        if lost:
                            await self._replay()
                        self._subscribed.set()
                        backoff.reset()
                        if lost and self._on_reconnect is not None:
                            self._on_reconnect()
                        lost = False
                    elif message["type"] == "message":
                        await self._heard_message(message["data"])
            except (RedisError, OSError) as exc:
                if self._subscribed.is_set():
                    lost = True
                    self.gaps += 1
                    if self.gap_since is None:
                        self.gap_since = self._heard
                    logger.warning(
                        "Redis channel %s: connection lost (%s); messages published until it is "
                        "back are not received",
                        self.name,
                        exc,
                    )
                self._subscribed.clear()
                await backoff.sleep()
            finally:
                with contextlib.suppress(Exception, asyncio.CancelledError):
                    await asyncio.wait_for(
                        cast(Any, pubsub).aclose(), CLOSE_FLUSH_S
                    )  # (typed from redis 8 on)

    async def _heard_message(self, data: str) -> None:
        """A pub/sub message: its log entry is noted, and one already replayed is skipped."""
        if data.startswith(_ENTRY_PREFIX):
            entry = data[len(_ENTRY_PREFIX) : data.index('"', len(_ENTRY_PREFIX))]
            if self._last_entry is not None and _entry_order(entry) <= _entry_order(self._last_entry):
                return
            self._last_entry = entry
        await self._deliver(data)

    async def _mark_log_end(self) -> None:
        """Where a first gap's replay starts: the log's end before the reader first subscribes
        (what is published from its subscription on comes through pub/sub)."""
        if self.log_key is None:
            return
        last = await self.client.xrevrange(self.log_key, count=1)
        self._last_entry = str(last[0][0]) if last else "0-0"

    async def _replay(self) -> None:
        """Deliver the messages logged after the last one heard (called once subscribed again,
        so whatever is published from then on comes through pub/sub, after these)."""
        if self.log_key is None or self._last_entry is None:
            return
        while True:
            entries: list[tuple[str, dict[str, str]]] = cast(
                Any, await self.client.xrange(self.log_key, f"({self._last_entry}", "+", count=REPLAY_BATCH)
            )  # (decode_responses: strings)
            for entry_id, fields in entries:
                self._last_entry = entry_id
                await self._deliver(fields["m"])
            if len(entries) < REPLAY_BATCH:
                if entries:
                    logger.info("Redis channel %s: replayed the messages of a gap from its log", self.name)
                return

    async def _deliver(self, data: str) -> None:
        try:
            await self._on_message(data)
        except Exception:
            logger.exception("Redis channel %s: could not handle a message", self.name)


def _entry_order(entry: str) -> tuple[int, int]:
    milliseconds, _, sequence = entry.partition("-")
    return int(milliseconds), int(sequence or 0)


class RedisEventBus:
    """Task lifecycle events shared by every process on the same Redis and channel prefix."""

    def __init__(
        self,
        url: str,
        *,
        channel_prefix: str = "runstream",
        max_backlog: int = 10_000,
        before_delivery: BeforeDelivery | None = None,
        on_reconnect: Callable[[], None] | None = None,
    ) -> None:
        self._origin = uuid.uuid4().hex
        self._sent = 0
        self.channel_prefix = channel_prefix
        self.client = redis_client(url, f"{channel_prefix}:bus:{self._origin[:8]}")
        self._local = InProcessEventBus()
        self._before_delivery = before_delivery
        self._channel = RedisChannel(
            self.client,
            f"{channel_prefix}:events",
            self._receive,
            on_reconnect=on_reconnect,
            max_backlog=max_backlog,
            log_key=f"{channel_prefix}:events-log",
        )
        self._heard: dict[str, int] = {}
        """The last message number heard from each publishing bus (a send retried after a
        dropped connection may have reached Redis twice)."""

    async def connect(self, timeout_s: float = 5.0) -> bool:
        """Start the Redis tasks; whether the bus receives other processes' events (in time).

        ``subscribe`` is effective locally at once, but across processes only from here on.
        """
        return await self._channel.wait_subscribed(timeout_s)

    def publish(self, event: TaskEvent) -> None:
        self._local.publish(event)
        self._sent += 1
        record = event.record
        message: dict[str, object] = {
            "origin": self._origin,
            "n": self._sent,
            "chunk": event.chunk.to_wire(),
            "record": record.to_wire(),
        }
        if isinstance(event, TaskSettled):
            message["written"] = event.written
        try:
            payload = dumps(message)
        except (TypeError, ValueError):
            logger.exception("task %s: event is not JSON, not sent to other processes", record.id)
            return
        key = None if record.thread_id is None else self.thread_key(record.thread_id, record.resource_id)
        self._channel.send(payload, key)

    def thread_key(self, thread_id: str, resource_id: str | None) -> str:
        """The Redis stream that keeps a thread's task events for replays (:class:`ThreadEvents`)."""
        return f"{self.channel_prefix}:thread-events:{json.dumps([resource_id, thread_id])}"

    def thread_events(self, wanted: TaskEventFilter, after: str | None = None) -> ThreadEvents:
        """The events of ``wanted.thread_id`` matching ``wanted``, read from the thread's replay
        stream after the entry ``after`` (``None``: from the time of :meth:`ThreadEvents.start`),
        live, each once, whichever process published them, gaps or not."""
        if wanted.thread_id is None:
            raise InvalidInputError("a replay follows one thread: thread_id is required")
        return ThreadEvents(self.client, self.thread_key(wanted.thread_id, wanted.resource_id), wanted, after)

    async def reconcile(self, missed: MissedEvents) -> bool:
        """After a gap in the subscription: hand this process's subscribers the settled states
        ``missed`` finds since the gap began (see :meth:`InProcessEventBus.reconcile`). The gap
        counts as reconciled once a pass, made while subscribed and with no new gap meanwhile,
        found every state announced (a new gap calls ``on_reconnect`` again); whether a pass
        should follow shortly (some state was not announced yet)."""
        channel = self._channel
        since, gaps = channel.gap_since, channel.gaps
        if since is None:
            return False
        moment = datetime.fromtimestamp(since - GAP_MARGIN_S, UTC)
        waiting = await self._local.reconcile(missed, moment)
        if not waiting and channel.gaps == gaps and channel.subscribed:
            channel.gap_since = None
        return waiting

    def deliver_locally(self, event: TaskEvent) -> None:
        """Hand an event to this process's subscribers only (one found in storage after a gap)."""
        self._local.publish(event)

    def subscribe(self, event_filter: TaskEventFilter) -> BusSubscription:
        self._channel.start()
        return self._local.subscribe(event_filter)

    async def close(self) -> None:
        await self._channel.close()
        await self._local.close()
        await self.client.aclose()

    async def _receive(self, data: str) -> None:
        message = json.loads(data)
        origin = message.get("origin")
        if origin == self._origin or not self._first_time(str(origin), int(message.get("n") or 0)):
            return
        event = _event_from_wire(message)
        if self._before_delivery is None or await self._before_delivery(event):
            self._local.publish(event)

    def _first_time(self, origin: str, n: int) -> bool:
        """Whether message ``n`` of ``origin`` is new (each bus numbers its messages in the
        order it sends them, and they reach Redis in that order)."""
        if n and n <= self._heard.get(origin, 0):
            return False
        self._heard[origin] = n
        return True


class ThreadEvents:
    """A :class:`BusSubscription` over a thread's replay stream (a Redis stream written with
    each event's pub/sub message): it reads after a known entry, so a reader that stopped (a
    lost worker) goes on where it stopped, with no event lost or repeated, through dropped
    connections. :meth:`position` says where a later reader goes on."""

    def __init__(self, client: Redis, key: str, wanted: TaskEventFilter, after: str | None) -> None:
        self.client = client
        self.key = key
        self.wanted = wanted
        self._start = after
        self._cursor = after
        """The last entry read from Redis."""
        self._yielded: list[str] = []
        """The entries of the events yielded, in order."""
        self._ready: deque[tuple[str, TaskEvent]] = deque()
        self._seen: deque[tuple[str, int]] = deque(maxlen=REPLAY_SEEN)
        self._closed = False

    async def start(self) -> None:
        """Fix where reading starts: after ``after``, or after the stream's last entry now."""
        if self._start is None:
            last = await retrying(self.client.xrevrange, self.key, count=1)
            self._start = self._cursor = str(last[0][0]) if last else "0-0"

    def position(self, taken: int) -> str:
        """The entry after which a later reader goes on once the first ``taken`` events this one
        yielded are used."""
        assert self._start is not None, "start() first"
        return self._yielded[taken - 1] if taken else self._start

    def __aiter__(self) -> ThreadEvents:
        return self

    async def __anext__(self) -> TaskEvent:
        await self.start()
        while not self._ready:
            if self._closed:
                raise StopAsyncIteration
            assert self._cursor is not None
            streams: dict[Any, Any] = {self.key: self._cursor}
            read: list[tuple[str, list[tuple[str, dict[str, str]]]]] = cast(
                Any, await retrying(self.client.xread, streams, count=100, block=REPLAY_BLOCK_MS)
            )
            for _, entries in read or []:
                for entry_id, fields in entries:
                    self._cursor = str(entry_id)
                    self._take(self._cursor, fields["m"])
        entry_id, event = self._ready.popleft()
        self._yielded.append(entry_id)
        return event

    def _take(self, entry_id: str, data: str) -> None:
        message = json.loads(data)
        mark = (str(message.get("origin")), int(message.get("n") or 0))
        if mark in self._seen:  # written twice by a send retried after a dropped connection
            return
        self._seen.append(mark)
        event = _event_from_wire(message)
        if self.wanted.matches(event.record):
            self._ready.append((entry_id, event))

    async def close(self) -> None:
        self._closed = True


def _event_from_wire(message: Mapping[str, Any]) -> TaskEvent:
    """The event of a bus message: a :class:`TaskSettled` when it says what came of the
    outcome's memory write."""
    chunk = cast(TaskChunk, chunk_from_wire(message["chunk"]))  # (a bus message holds a task's chunk)
    record = record_from_wire(message["record"])
    written = message.get("written")
    return TaskEvent(chunk, record) if written is None else TaskSettled(chunk, record, written)


def record_from_wire(wire: Mapping[str, Any]) -> TaskRecord:
    """The inverse of :meth:`TaskRecord.to_wire` (dates come back at millisecond precision)."""

    def date(key: str) -> datetime | None:
        value = wire.get(key)
        return None if value is None else datetime.fromisoformat(value)

    return TaskRecord(
        id=wire["id"],
        status=wire["status"],
        tool_name=wire["toolName"],
        tool_call_id=wire["toolCallId"],
        args=wire["args"],
        agent_id=wire["agentId"],
        run_id=wire["runId"],
        thread_id=wire.get("threadId"),
        resource_id=wire.get("resourceId"),
        result=wire.get("result"),
        error=wire.get("error"),
        created_at=datetime.fromisoformat(wire["createdAt"]),
        started_at=date("startedAt"),
        suspended_at=date("suspendedAt"),
        completed_at=date("completedAt"),
        retry_count=wire["retryCount"],
        max_retries=wire["maxRetries"],
        timeout_ms=wire["timeoutMs"],
        suspend_payload=wire.get("suspendPayload"),
        resume_data=wire.get("resumeData"),
        metadata=wire.get("metadata") or {},
    )
