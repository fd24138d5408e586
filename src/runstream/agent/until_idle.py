"""Until-idle streams: one outer stream over the first turn, the lifecycle chunks of the thread's
background tasks, and a continuation turn each time the agent is idle with finished tasks.

The outer stream merges two sources — the current turn's chunks and the task manager's events
for this thread and resource — in the order they come (:class:`_Inbox`). A turn is read
through :meth:`RunOutput.relay`, a few dozen chunks at most ahead of the reader, so its chunks
are kept once: in the outer stream's buffer. Between turns, while tasks run, it emits a
``background-task-progress`` snapshot every ``progress_interval_ms`` and closes silently after
``max_idle_ms`` without events. When no task runs and terminal events are queued, it starts one
continuation turn (``agent.stream([], …)`` with a system directive naming the finished tool
calls, not saved to memory) for the whole batch. It closes when nothing runs, nothing is queued
and no turn is active.

A suspended task counts as finished (its continuation tells the user it waits for input), as in
Mastra. Mastra's stream still catches a resume that lands while that continuation's model call
runs, so whether a quick resume (a UI or policy answering the suspension at once) reaches the
stream would depend on how fast the model is. Instead, the stream stays open for
``resume_window_ms`` after a ``background-task-suspended`` event; a resume inside the window
is followed in this stream, a later one only reaches memory.

Mastra puts no bound on continuation turns, so a model that starts a background task in every
turn keeps a stream (and, on a server, a detached run with no client) alive forever. Here a
stream runs at most ``max_continuations`` continuation turns (default 25); when one more would
be needed it ends with an ``error`` chunk saying so. The finished tasks' results are in memory
already, so the next user turn sees them.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Final, Literal, NotRequired

from pydantic import StrictFloat, StrictInt, TypeAdapter, ValidationError
from typing_extensions import TypedDict

from runstream import _tracing as tracing
from runstream._config_mapping import CONFIG, read_dataclass
from runstream._json import JsonObject
from runstream.abort import AbortController
from runstream.chunks import (
    AnyChunk,
    BackgroundTaskProgressChunk,
    ErrorChunk,
    TaskProgressPayload,
    WireChunk,
    chunk_from_wire,
)
from runstream.errors import InvalidInputError, RunstreamError
from runstream.models.base import PromptMessage
from runstream.run.output import RunOutput
from runstream.storage import TaskRecord
from runstream.tasks.bus import TaskSettled, TaskSubscription

DEFAULT_MAX_IDLE_MS = 300_000
DEFAULT_RESUME_WINDOW_MS = 500
DEFAULT_MAX_CONTINUATIONS = 25
TERMINAL = {
    "background-task-completed": "completed",
    "background-task-failed": "failed",
    "background-task-cancelled": "cancelled",
    "background-task-suspended": "suspended",
}
STARTS_RUNNING = {"background-task-started", "background-task-running", "background-task-resumed"}

StartTurn = Callable[[list[PromptMessage]], Awaitable[RunOutput]]
"""Starts a continuation turn given its extra system context messages."""

EVENTS_AFTER: Final = "eventsAfter"
"""A durable flow's key in a snapshot: where the thread's replay stream is taken up again."""


class LedgerJson(TypedDict):
    """:class:`_Ledger`'s state in a :class:`DriverSnapshot` (chunks as their wire JSON, times
    as wall-clock epochs)."""

    running: list[str]
    queued: list[WireChunk]
    resumeWindows: dict[str, float]
    processed: list[tuple[str, str]]
    unansweredCalls: list[str]
    held: dict[str, list[WireChunk]]
    turnRun: str | None
    announced: list[str]
    beforeStart: dict[str, list[WireChunk]]


class DriverSnapshot(TypedDict):
    """:meth:`IdleDriver.snapshot`: the driver's state between two items, as JSON."""

    runId: str
    turnActive: bool
    turnRunId: str | None
    turnChunks: int
    continuations: int
    idleDeadline: float | None
    nextProgress: float | None
    waitingSince: float | None
    ledger: LedgerJson
    eventsAfter: NotRequired[str]
    """Set by a durable flow: see :data:`EVENTS_AFTER`."""


_SNAPSHOT = TypeAdapter(DriverSnapshot)


def read_snapshot(raw: JsonObject) -> DriverSnapshot:
    """A stored :class:`DriverSnapshot`, checked (a malformed one is an error, not a guess)."""
    try:
        return _SNAPSHOT.validate_python(raw, strict=False)
    except ValidationError as exc:
        raise InvalidInputError(f"not an until-idle driver snapshot: {exc}") from None


@dataclass(slots=True)
class IdleOptions:
    max_idle_ms: float = DEFAULT_MAX_IDLE_MS
    progress_interval_ms: float = 3000
    resume_window_ms: float = DEFAULT_RESUME_WINDOW_MS
    max_continuations: int = DEFAULT_MAX_CONTINUATIONS

    @classmethod
    def coerce(
        cls, value: IdleOptions | Mapping[str, object] | bool | None, progress_interval_ms: float
    ) -> IdleOptions:
        """The options of ``until_idle=``: Mastra's ``{"maxIdleMs", "resumeWindowMs",
        "maxContinuations"}`` (or the snake_case names); ``True``/``None``: the defaults."""
        if isinstance(value, IdleOptions):
            return value
        if not isinstance(value, Mapping):
            return cls(progress_interval_ms=progress_interval_ms)
        given = read_dataclass(_IdleChoices, value, where="until_idle")
        idle, window, turns = given.max_idle_ms, given.resume_window_ms, given.max_continuations
        return cls(
            max_idle_ms=DEFAULT_MAX_IDLE_MS if idle is None else idle,
            progress_interval_ms=progress_interval_ms,
            resume_window_ms=DEFAULT_RESUME_WINDOW_MS if window is None else window,
            max_continuations=DEFAULT_MAX_CONTINUATIONS if turns is None else turns,
        )


@dataclass(slots=True)
class _IdleChoices:
    """The caller's until-idle options, read by pydantic (``read_dataclass``: either spelling,
    no other key); a value out of range is an error naming the option."""

    __pydantic_config__ = CONFIG

    max_idle_ms: StrictFloat | None = None
    resume_window_ms: StrictFloat | None = None
    max_continuations: StrictInt | None = None

    def __post_init__(self) -> None:
        idle, window, turns = self.max_idle_ms, self.resume_window_ms, self.max_continuations
        if idle is not None and (not math.isfinite(idle) or idle <= 0):
            raise InvalidInputError(f"max_idle_ms must be a positive finite number, got {idle!r}")
        if window is not None and (not math.isfinite(window) or window < 0):
            raise InvalidInputError(f"resume_window_ms must be a finite number >= 0, got {window!r}")
        if turns is not None and turns < 0:
            raise InvalidInputError(f"max_continuations must be an integer >= 0, got {turns!r}")


def continuation_directive(batch: list[AnyChunk]) -> str:
    """The system message of a continuation turn: which background calls ended, and how."""
    by_outcome: dict[str, list[str]] = {}
    for chunk in batch:
        payload = chunk.payload
        entry = f"{payload['toolCallId']} ({payload['toolName']}), background task {payload['taskId']}"
        by_outcome.setdefault(TERMINAL[chunk.type], []).append(entry)
    lines = [
        "The following tool calls ran as background tasks; they are not new foreground calls and "
        "must not be reinterpreted as such."
    ]
    guidance = {
        "completed": "Completed — their results are now in the conversation; do not call the same tool again "
        "for them:",
        "failed": "Failed — the failure is in the conversation; do not retry unless the user asks:",
        "cancelled": "Cancelled by the user — there are no results; do not treat them as completed or call "
        "them again:",
        "suspended": "Suspended — they wait for explicit input from the user; do not resume them yourself, "
        "tell the user what they are waiting for:",
    }
    for outcome in ("completed", "failed", "cancelled", "suspended"):
        if outcome in by_outcome:
            lines.append(guidance[outcome])
            lines.extend(f"- {entry}" for entry in by_outcome[outcome])
    return "\n".join(lines)


class _Ledger:
    """What the outer stream knows about the thread's tasks: which run, which finished (queued
    for the next continuation), which wait in a resume window, and which events are held back.

    Two orders hold whatever the timing: a task's ``background-task-started`` (a chunk of the
    turn, delivered between model parts) precedes its other events (straight from the manager,
    which may run the task before the turn's next part), and a reader never sees a task finish
    before the tool call's (placeholder) result."""

    def __init__(self, running: set[str], resume_window_ms: float) -> None:
        self.running = running
        self.queued: list[AnyChunk] = []
        self.resume_window_ms = resume_window_ms
        self.resume_windows: dict[str, float] = {}  # suspended task id -> when its window ends
        self._processed: set[tuple[str, str]] = set()
        self._unanswered_calls: set[str] = set()  # tool calls of the turn without a result yet
        self._held: dict[str, list[AnyChunk]] = {}
        self._turn_run: str | None = None  # the run id of the turn in flight
        self._announced: set[str] = set()  # tasks whose started chunk the reader has seen
        self._before_start: dict[str, list[AnyChunk]] = {}  # task id -> events that came early

    def turn_started(self, run_id: str) -> None:
        self._turn_run = run_id

    def turn_chunk(self, chunk: AnyChunk) -> list[AnyChunk]:
        """The turn's chunk, then any task events it releases."""
        if chunk.type == "background-task-started":
            task_id = chunk.payload["taskId"]
            self.running.add(task_id)
            self._announced.add(task_id)
            early = self._before_start.pop(task_id, [])
            return [chunk, *(event for e in early for event in self._admit(e))]
        if chunk.type == "tool-call":
            self._unanswered_calls.add(chunk.payload["toolCallId"])
        elif chunk.type in ("tool-result", "tool-error"):
            call_id = chunk.payload["toolCallId"]
            self._unanswered_calls.discard(call_id)
            return [chunk, *self._accepted(self._held.pop(call_id, []))]
        return [chunk]

    def turn_ended(self) -> list[AnyChunk]:
        """The turn is over: every held event is released."""
        self._turn_run = None
        self._unanswered_calls.clear()
        held = [event for events in (*self._before_start.values(), *self._held.values()) for event in events]
        self._before_start.clear()
        self._held.clear()
        return self._accepted(held)

    def task_event(self, event: AnyChunk) -> list[AnyChunk]:
        """The manager's event, unless it is a duplicate or held back."""
        task_id = event.payload["taskId"]
        if event.run_id == self._turn_run and task_id not in self._announced:
            self._before_start.setdefault(task_id, []).append(event)  # until the turn announces it
            return []
        return self._admit(event)

    def _admit(self, event: AnyChunk) -> list[AnyChunk]:
        if event.type in TERMINAL and event.payload["toolCallId"] in self._unanswered_calls:
            self._held.setdefault(event.payload["toolCallId"], []).append(event)
            return []
        return self._accepted([event])

    def to_json(self) -> LedgerJson:
        wire = _wire_list
        now, wall = time.monotonic(), time.time()
        return {
            "running": sorted(self.running),
            "queued": wire(self.queued),
            "resumeWindows": {task: wall + (end - now) for task, end in self.resume_windows.items()},
            "processed": sorted(self._processed),
            "unansweredCalls": sorted(self._unanswered_calls),
            "held": {call: wire(events) for call, events in self._held.items()},
            "turnRun": self._turn_run,
            "announced": sorted(self._announced),
            "beforeStart": {task: wire(events) for task, events in self._before_start.items()},
        }

    def restore(self, data: LedgerJson) -> None:
        chunks = _chunk_list
        self.running.clear()
        self.running.update(data["running"])
        self.queued = chunks(data["queued"])
        self.resume_windows = {task: _monotonic(end) or 0.0 for task, end in data["resumeWindows"].items()}
        self._processed = set(data["processed"])
        self._unanswered_calls = set(data["unansweredCalls"])
        self._held = {call: chunks(events) for call, events in data["held"].items()}
        self._turn_run = data["turnRun"]
        self._announced = set(data["announced"])
        self._before_start = {task: chunks(events) for task, events in data["beforeStart"].items()}

    @property
    def turn_run(self) -> str | None:
        return self._turn_run

    def take_batch(self) -> list[AnyChunk]:
        batch, self.queued = self.queued, []
        return batch

    def window_open(self) -> bool:
        now = time.monotonic()
        return any(end > now for end in self.resume_windows.values())

    def _accepted(self, events: list[AnyChunk]) -> list[AnyChunk]:
        accepted = []
        for event in events:
            task_id = event.payload["taskId"]
            if event.type in TERMINAL:
                key = (task_id, event.type)
                if key in self._processed:  # delivered twice (at-least-once buses)
                    continue
                self._processed.add(key)
                self.running.discard(task_id)
                self.queued.append(event)
                self.resume_windows.pop(task_id, None)
                if event.type == "background-task-suspended" and self.resume_window_ms:
                    self.resume_windows[task_id] = time.monotonic() + self.resume_window_ms / 1000
            elif event.type in STARTS_RUNNING:
                self.running.add(task_id)
                self.resume_windows.pop(task_id, None)
                self._processed.discard((task_id, "background-task-suspended"))  # may suspend again
            accepted.append(event)
        return accepted


async def until_idle_stream(
    first_turn: Callable[[], Awaitable[RunOutput]],
    continuation: StartTurn,
    subscription: TaskSubscription,
    *,
    options: IdleOptions,
    controller: AbortController,
    running: set[str],
) -> AsyncIterator[AnyChunk]:
    """The merged outer stream (see the module docstring). ``subscription``: the manager's events
    for the thread and resource, made before the first turn runs (no event is missed);
    ``running``: the task ids to wait for (may start with tasks of a superseded stream)."""
    driver = IdleDriver(continuation, subscription, options=options, controller=controller, running=running)
    try:
        driver.start(await first_turn())
        async for outputs in driver.steps():
            for chunk in outputs:
                yield chunk
    finally:
        await driver.close()


class IdleDriver:
    """The until-idle stream as a machine that takes one item at a time (a turn's chunk, a task
    event, a turn's end, a timer) and gives the chunks it makes of it (:meth:`steps`).

    Between two items its whole state is :meth:`snapshot` (JSON), and :meth:`restore` builds a
    driver that goes on from there: a durable until-idle flow (``runstream.durable.idle``)
    stores the snapshot with the chunks it wrote, so another process continues the stream
    where a lost one left it (the turn in flight re-read after its last chunk taken in)."""

    def __init__(
        self,
        continuation: StartTurn,
        subscription: TaskSubscription,
        *,
        options: IdleOptions,
        controller: AbortController,
        running: set[str],
    ) -> None:
        self.continuation = continuation
        self.subscription = subscription
        self.options = options
        self.controller = controller
        self.ledger = _Ledger(running, options.resume_window_ms)
        self.inbox = _Inbox()
        self.pumps = _Pumps(subscription, self.inbox)
        self._unlisten = controller.signal.add_listener(lambda _reason: self.inbox.wake())
        self._abort_taken = False
        """Whether :meth:`steps` has seen the abort (mid-turn it goes on to the turn's end)."""
        self.turn_active = False
        self.turn_chunks = 0
        """Chunks of the turn in flight taken in so far."""
        self.idle_deadline: float | None = None
        self.next_progress = 0.0
        self.waiting_since = 0.0
        self.continuations = 0
        self.run_id = ""
        self.events_taken = 0
        """Events of the subscription taken in so far (not counting :meth:`inject`'s): where a
        replayable subscription is taken up again."""

    def start(self, out: RunOutput) -> None:
        """Follow ``out``, the first turn."""
        self.run_id = self.run_id or out.run_id
        self._follow(out)

    def _follow(self, out: RunOutput) -> None:
        self.turn_active = True
        self.turn_chunks = 0
        self.ledger.turn_started(out.run_id)
        self.pumps.start_turn(out)

    def inject(self, event: AnyChunk) -> None:
        """A task event found some other way than the subscription (e.g. re-read from storage)."""
        self.inbox.put("injected", event)

    async def steps(self) -> AsyncIterator[list[AnyChunk]]:
        """The chunks made of each item taken, until the stream ends."""
        options, ledger, inbox = self.options, self.ledger, self.inbox
        running, items = ledger.running, inbox.items
        while True:
            if not self.turn_active and not running:  # idle: a continuation turn, or the end
                if ledger.queued:
                    if self.continuations >= options.max_continuations:
                        yield [_continuation_limit_error(self.run_id, options.max_continuations)]
                        return
                    self.continuations += 1
                    self.idle_deadline = None
                    self.turn_active = True
                    self._follow(await _continue(self.continuation, ledger.take_batch(), self.pumps.settled))
                elif not ledger.window_open():
                    return
            if self.controller.signal.aborted and not self._abort_taken:
                self._abort_taken = True
                if not self.turn_active:  # aborted between turns: pending continuations never start
                    yield _already_queued_task_events(items)
                    return
                # Aborted mid-turn: drain the turn (its abort and finish chunks), then close.
            now = time.monotonic()
            if not self.turn_active and running and self.idle_deadline is None:
                self.idle_deadline = now + options.max_idle_ms / 1000
            if not items:
                wait = (
                    None
                    if self.turn_active
                    else _wait_s(now, running, self.idle_deadline, self.next_progress, ledger)
                )
                await inbox.wait(wait)
                if not items:  # the abort, or the time to wait is up
                    progress = self._timed_out()
                    if progress is None:
                        return
                    if progress:
                        yield progress
                    continue
            kind, chunk = inbox.take()
            if chunk is None:  # the turn ended
                self.turn_active = False
                released = ledger.turn_ended()
                self.waiting_since = time.monotonic()
                self.next_progress = self.waiting_since + options.progress_interval_ms / 1000
                if self.controller.signal.aborted:  # what already happened still reaches the reader
                    yield [*released, *_already_queued_task_events(items)]
                    return
                yield released
            elif kind == "turn":
                self.turn_chunks += 1
                yield ledger.turn_chunk(chunk)
            else:  # a task event
                self.events_taken += kind == "task"
                events = ledger.task_event(chunk)
                if events:
                    self.idle_deadline = None  # every manager event re-arms the idle window
                    yield events

    def _timed_out(self) -> list[AnyChunk] | None:
        """Woken with no item: the chunks to stream (a progress snapshot, or none), or ``None``
        when the stream ends (the idle timeout, or the resume windows over with nothing to wait
        for)."""
        if self.turn_active or (self.controller.signal.aborted and not self._abort_taken):
            return []  # (the abort: handled at the top of the loop)
        now = time.monotonic()
        if self.idle_deadline is not None and now >= self.idle_deadline:
            return None  # idle timeout: close silently
        running = self.ledger.running
        if not running:
            return [] if self.ledger.window_open() else None
        if now >= self.next_progress:
            self.next_progress = now + self.options.progress_interval_ms / 1000
            return [_progress(self.run_id, running, round((now - self.waiting_since) * 1000))]
        return []

    def snapshot(self) -> DriverSnapshot:
        """The driver's state between two items, as JSON (times as wall-clock epochs)."""
        return {
            "runId": self.run_id,
            "turnActive": self.turn_active,
            "turnRunId": self.ledger.turn_run,
            "turnChunks": self.turn_chunks,
            "continuations": self.continuations,
            "idleDeadline": _epoch(self.idle_deadline),
            "nextProgress": _epoch(self.next_progress),
            "waitingSince": _epoch(self.waiting_since),
            "ledger": self.ledger.to_json(),
        }

    def restore(self, data: DriverSnapshot) -> None:
        """Take the state of a :meth:`snapshot` (before following the turn in flight again)."""
        self.run_id = data["runId"]
        self.continuations = data["continuations"]
        self.idle_deadline = _monotonic(data["idleDeadline"])
        self.next_progress = _monotonic(data["nextProgress"]) or 0.0
        self.waiting_since = _monotonic(data["waitingSince"]) or 0.0
        self.ledger.restore(data["ledger"])

    def resume_turn(self, out: RunOutput, taken: int) -> None:
        """Follow the turn in flight again: ``out`` yields its chunks after the ``taken`` first."""
        self._follow(out)
        self.turn_chunks = taken

    async def close(self) -> None:
        self._unlisten()
        if not self.controller.signal.aborted and (self.turn_active or self.ledger.running):
            # The reader went away mid-stream: stop the turn in flight (tasks keep running).
            self.controller.abort("until-idle stream closed")
        await self.subscription.close()
        await self.pumps.close()


def _epoch(moment: float | None) -> float | None:
    return None if moment is None else time.time() + (moment - time.monotonic())


def _monotonic(epoch: float | None) -> float | None:
    return None if epoch is None else time.monotonic() + (epoch - time.time())


def _wire_list(chunks: list[AnyChunk]) -> list[WireChunk]:
    return [chunk.to_wire() for chunk in chunks]


def _chunk_list(wire: list[WireChunk]) -> list[AnyChunk]:
    return [chunk_from_wire(raw) for raw in wire]


async def _continue(
    continuation: StartTurn, batch: list[AnyChunk], settled: dict[str, TaskRecord]
) -> RunOutput:
    """Start the continuation turn that tells the model about ``batch`` (its tasks' outcomes,
    whose records ``settled`` holds as their events brought them)."""
    records: dict[str, TaskRecord] = {}
    for chunk in batch:
        record = settled.pop(chunk.payload["taskId"], None)
        if record is not None:
            records[record.id] = record
    token = tracing.continuation_task_ids(batch, records)
    try:
        return await continuation([{"role": "system", "content": continuation_directive(batch)}])
    finally:
        tracing.end_continuation(token)


def _wait_s(
    now: float, running: set[str], idle_deadline: float | None, next_progress: float, ledger: _Ledger
) -> float | None:
    """Between turns: how long to wait for the next item. While tasks run, until the idle
    deadline or the next progress chunk; else until the last resume window closes (``None``:
    no limit)."""
    if running and idle_deadline is not None:
        return max(0.0, min(idle_deadline, next_progress) - now)
    if not running and ledger.resume_windows:
        return max(0.0, max(ledger.resume_windows.values()) - now)
    return None


_Kind = Literal["turn", "task", "injected"]

RELAY_AHEAD = 64
"""How many items a turn's pump puts in the :class:`_Inbox` ahead of the reader before it
waits for room (until half of them are taken): a fast model's long turn is held once, in the
outer stream's buffer, not a second time in flight."""


class _Inbox:
    """The items the driver takes in, in the order they came: ``("turn", chunk)`` and, when
    the turn ends, ``("turn", None)`` from the turn in flight; ``("task", event)`` from the
    manager; ``("injected", event)`` from :meth:`IdleDriver.inject`. An item costs an append;
    the driver waits (one future) only when there is none, a turn's pump only when
    :data:`RELAY_AHEAD` items wait."""

    def __init__(self) -> None:
        self.items: deque[tuple[_Kind, AnyChunk | None]] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._room: asyncio.Future[None] | None = None

    def take(self) -> tuple[_Kind, AnyChunk | None]:
        items = self.items
        item = items.popleft()
        room = self._room
        if room is not None and len(items) <= RELAY_AHEAD // 2 and not room.done():
            room.set_result(None)
        return item

    async def room(self) -> None:
        """Until the reader has taken half of the items waiting."""
        room = self._room = asyncio.get_running_loop().create_future()
        try:
            await room
        finally:
            self._room = None

    def put(self, kind: _Kind, chunk: AnyChunk | None) -> None:
        self.items.append((kind, chunk))
        self.wake()

    def wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait(self, at_most_s: float | None) -> None:
        """Until an item comes or :meth:`wake` (the abort), at most ``at_most_s`` seconds."""
        loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        timer = None if at_most_s is None else loop.call_later(at_most_s, self.wake)
        try:
            await waiter
        finally:
            self._waiter = None
            if timer is not None:
                timer.cancel()


class _Pumps:
    """Feed the manager's task events and each turn's chunks into the :class:`_Inbox`. A turn
    is read through :meth:`RunOutput.relay`: it keeps none of its chunks (the outer stream
    does), and it runs at most :data:`RELAY_AHEAD` items ahead of the outer stream's reader."""

    def __init__(self, subscription: TaskSubscription, inbox: _Inbox) -> None:
        self.inbox = inbox
        self.settled: dict[str, TaskRecord] = {}
        """Task id -> its record as of its latest :class:`TaskSettled` event: the outcome the
        continuation turn is about (its span, for the turn's links), with no storage read."""
        self.tasks = [asyncio.create_task(self._events(subscription))]

    async def _events(self, subscription: TaskSubscription) -> None:
        put = self.inbox.put
        while True:
            try:
                event = await subscription.next_event()
            except StopAsyncIteration:
                return
            if isinstance(event, TaskSettled):
                self.settled[event.record.id] = event.record
            put("task", event.chunk)

    def start_turn(self, out: RunOutput) -> None:
        self.tasks.append(asyncio.create_task(self._turn(out)))

    async def _turn(self, out: RunOutput) -> None:
        inbox = self.inbox
        relay = out.relay()
        try:
            async for chunk in relay:
                inbox.put("turn", chunk)
                if len(inbox.items) >= RELAY_AHEAD:
                    await inbox.room()
        finally:
            inbox.put("turn", None)
            await relay.aclose()  # (stopped mid-turn: the turn ends as with a cancelled reader)

    async def close(self) -> None:
        for pump in self.tasks:
            pump.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


def _progress(run_id: str, running: set[str], elapsed_ms: int) -> AnyChunk:
    payload: TaskProgressPayload = {
        "taskIds": sorted(running),
        "runningCount": len(running),
        "elapsedMs": elapsed_ms,
    }
    return BackgroundTaskProgressChunk(run_id, payload)


class ContinuationLimitError(RunstreamError, RuntimeError):
    """An until-idle stream needed more continuation turns than ``max_continuations``."""


def _continuation_limit_error(run_id: str, limit: int) -> ErrorChunk:
    message = (
        f"The until-idle stream ended after {limit} continuation turn(s) (max_continuations): "
        "background tasks kept finishing; their results are in memory for the next turn"
    )
    return ErrorChunk(run_id, {"error": ContinuationLimitError(message)})


def _already_queued_task_events(items: deque[tuple[_Kind, AnyChunk | None]]) -> list[AnyChunk]:
    """The task events that arrived before the stream was aborted (no waiting for more)."""
    events = [chunk for kind, chunk in items if kind != "turn" and chunk is not None]
    items.clear()
    return events
