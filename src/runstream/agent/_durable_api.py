"""Mastra's durable-agent API on runstream's durable agents (``Agent(durable=True)``).

A durable agent saves its run after every step (``runstream.agent._suspension.DURABLE_NAMESPACE``);
a run whose process died leaves its last snapshot behind. As Mastra's ``DurableAgent``:

- ``list_active_runs(thread_id=, resource_id=, from_date=, to_date=, per_page=, page=)``: those
  runs (not the ones streaming in this process), ``{"runs": [{runId, status, threadId,
  resourceId, createdAt, updatedAt}], "total"}``;
- ``recover(run_id, on_chunk=, on_step_finish=, on_finish=, on_error=, abort_signal=)``: one run,
  continued from its last step, as a stream (the callbacks act on the recovered run);
- ``recover_active_runs(run_id=, **filters)``: every matching run, each driven to its end here,
  ``{"recovered": [{runId, status, error?}], "succeeded", "failed"}``; ``Runstream(recovery=
  {"durableAgents": "auto"})`` does this for every durable agent at start;
- ``observe(run_id, offset=)``: the chunks of a durable run streaming in this process, from
  ``offset``, live until it ends (:class:`RunLog`); ``idle_timeout_ms`` (with ``is_alive``)
  bounds the wait on a silent run.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, NotRequired, TypedDict, Unpack, cast

from runstream._json import JsonValue
from runstream.abort import AbortSignal
from runstream.agent import _suspension as suspension
from runstream.agent.run_options import StreamOptions
from runstream.chunks import AgentChunk, ErrorChunk
from runstream.errors import InvalidInputError, InvalidTypeError, NotFoundError
from runstream.run._callbacks import Callback
from runstream.run.output import RunOutput
from runstream.storage import Storage

logger = logging.getLogger(__name__)

MAX_FINISHED_LOGS = 100
"""Finished runs whose chunks stay observable (the oldest go first)."""


# -- discovery ------------------------------------------------------------------------------------


class ActiveRunFilters(TypedDict, total=False):
    """``list_active_runs()``'s filters (Mastra's ``listActiveRuns`` arguments)."""

    thread_id: str | None
    resource_id: str | None
    from_date: datetime | str | None
    to_date: datetime | str | None
    per_page: int | None
    page: int | None


class ActiveRun(TypedDict):
    runId: str
    status: Literal["running"]
    threadId: JsonValue
    resourceId: JsonValue
    createdAt: JsonValue
    updatedAt: JsonValue


class ActiveRuns(TypedDict):
    runs: list[ActiveRun]
    total: int


class RecoveredRun(TypedDict):
    runId: str
    status: Literal["success", "failed"]
    error: NotRequired[Exception]


class RecoveredRuns(TypedDict):
    """``recover_active_runs()``'s report (Mastra's ``recoverActiveRuns``)."""

    recovered: list[RecoveredRun]
    succeeded: int
    failed: int


class RecoverOptions(TypedDict, total=False):
    """``recover()``'s options: the run's callbacks, ``abort_signal``, and ``on_suspended``."""

    on_chunk: Callback | None
    on_step_finish: Callback | None
    on_finish: Callback | None
    on_error: Callback | None
    on_suspended: Callable[[SuspendedEvent], object] | None
    abort_signal: AbortSignal | None


class SuspendedEvent(TypedDict):
    """What ``on_suspended`` is called with when a recovered run stops for a human."""

    toolCallId: NotRequired[str]
    toolName: NotRequired[str]
    args: NotRequired[Any]
    suspendPayload: NotRequired[Any]
    resumeSchema: NotRequired[str]
    type: Literal["approval", "suspension"]


class ObserveOptions(TypedDict, total=False):
    """``observe()``'s options: where to start, and how long a quiet run is waited on."""

    offset: int
    idle_timeout_ms: float | None
    is_alive: Callable[[], object] | None


def _date(value: object, name: str) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if not isinstance(value, datetime):
        raise InvalidTypeError(f"{name} must be a datetime or an ISO-8601 string, not {type(value).__name__}")
    return value


async def list_active_runs(
    storage: Storage | None,
    agent_id: str,
    live: set[str],
    *,
    thread_id: str | None = None,
    resource_id: str | None = None,
    from_date: datetime | str | None = None,
    to_date: datetime | str | None = None,
    per_page: int | None = None,
    page: int | None = None,
) -> ActiveRuns:
    """The agent's durable runs no process of this one drives, filtered and paged as Mastra's."""
    since, until = _date(from_date, "from_date"), _date(to_date, "to_date")
    if (per_page is not None and per_page < 1) or (page is not None and page < 0):
        raise InvalidInputError("per_page must be at least 1 and page at least 0")
    runs: list[ActiveRun] = []
    for run_id in await storage.list_snapshots(suspension.DURABLE_NAMESPACE) if storage else []:
        data = await storage.load_snapshot(suspension.DURABLE_NAMESPACE, run_id) if storage else None
        if data is None or data.get("agentId") != agent_id or run_id in live:
            continue
        options = data.get("options")
        memory = options.get("memory") if isinstance(options, dict) else None
        memory = memory if isinstance(memory, dict) else {}
        created = _date(data.get("createdAt"), "createdAt")
        if thread_id is not None and memory.get("thread") != thread_id:
            continue
        if resource_id is not None and memory.get("resource") != resource_id:
            continue
        if created is not None and ((since and created < since) or (until and created > until)):
            continue
        runs.append(
            {
                "runId": run_id,
                "status": "running",
                "threadId": memory.get("thread"),
                "resourceId": memory.get("resource"),
                "createdAt": data.get("createdAt"),
                "updatedAt": data.get("savedAt"),
            }
        )
    total = len(runs)
    if per_page is not None and page is not None:  # as Mastra: paged only when both are given
        runs = runs[page * per_page : (page + 1) * per_page]
    return {"runs": runs, "total": total}


# -- recovery ---------------------------------------------------------------------------------

RECOVER_OPTIONS = frozenset(
    {"on_chunk", "on_step_finish", "on_finish", "on_error", "on_suspended", "abort_signal"}
)


def recover_options(
    options: RecoverOptions,
) -> tuple[StreamOptions, Callable[[AgentChunk], Awaitable[None]] | None]:
    """``recover()``'s run options, and a watcher for ``on_suspended`` (Mastra's
    ``onSuspended``, called with ``{toolCallId, toolName, args, suspendPayload?, resumeSchema?,
    type}`` when the recovered run stops for a human)."""
    unknown = set(options) - RECOVER_OPTIONS
    if unknown:
        raise InvalidTypeError(f"recover() got unknown options: {', '.join(sorted(unknown))}")
    run_options = cast(StreamOptions, {key: value for key, value in options.items() if key != "on_suspended"})
    on_suspended = options.get("on_suspended")
    if on_suspended is None:
        return run_options, None
    if not callable(on_suspended):
        raise InvalidTypeError("on_suspended must be a function")

    async def watch(chunk: AgentChunk) -> None:
        if chunk.type in ("tool-call-approval", "tool-call-suspended"):
            payload = dict(chunk.payload)
            keys = ("toolCallId", "toolName", "args", "suspendPayload", "resumeSchema")
            event = {key: payload[key] for key in keys if key in payload}
            event["type"] = "approval" if chunk.type == "tool-call-approval" else "suspension"
            result = on_suspended(cast(SuspendedEvent, event))
            if inspect.isawaitable(result):
                await result

    return run_options, watch


async def recover_active_runs(
    recover: Callable[[str], Awaitable[RunOutput]],
    listed: Callable[..., Awaitable[ActiveRuns]],
    *,
    run_id: str | None = None,
    **filters: Unpack[ActiveRunFilters],
) -> RecoveredRuns:
    """Recover each matching run (or ``run_id`` alone) and drive it to its end; a failure is
    reported per run and does not stop the others (Mastra's ``recoverActiveRuns``)."""
    ids = [run_id] if run_id is not None else [run["runId"] for run in (await listed(**filters))["runs"]]
    recovered: list[RecoveredRun] = []
    for each in ids:
        try:
            out = await recover(each)
            async for _ in out.full_stream:
                pass
            recovered.append({"runId": each, "status": "success"})
        except Exception as exc:  # reported, and the next run is recovered
            logger.warning("recovering durable run %s failed: %s", each, exc)
            recovered.append({"runId": each, "status": "failed", "error": exc})
    succeeded = sum(1 for r in recovered if r["status"] == "success")
    return {"recovered": recovered, "succeeded": succeeded, "failed": len(recovered) - succeeded}


# -- observing ----------------------------------------------------------------------------------


@dataclass(eq=False)
class RunLog:
    """The chunks of one durable run streaming in this process, for :func:`observe`."""

    chunks: list[AgentChunk] = field(default_factory=list)
    done: bool = False
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    watchers: list[Callable[[AgentChunk], Any]] = field(default_factory=list)
    """Called with each chunk as it passes (``recover(on_suspended=)``)."""

    def append(self, chunk: AgentChunk) -> None:
        self.chunks.append(chunk)
        self._wake()

    def close(self) -> None:
        self.done = True
        self._wake()

    def _wake(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()


class RunLogs:
    """The observable runs of one agent: those streaming, and the last finished ones."""

    def __init__(self) -> None:
        self._logs: dict[str, RunLog] = {}

    def open(self, run_id: str) -> RunLog:
        log = self._logs.pop(run_id, None) or RunLog()
        log.done = False
        self._logs[run_id] = log
        finished = [key for key, each in self._logs.items() if each.done]
        for key in finished[: max(0, len(finished) - MAX_FINISHED_LOGS)]:
            del self._logs[key]
        return log

    def get(self, run_id: str) -> RunLog | None:
        return self._logs.get(run_id)

    def watch(self, run_id: str, watcher: Callable[[AgentChunk], Any]) -> None:
        """Call ``watcher`` with each chunk of the run's next stream."""
        self._logs.setdefault(run_id, RunLog()).watchers.append(watcher)

    def unwatch(self, run_id: str) -> None:
        """Drop the watchers of a run that did not start (and its log, if it never streamed)."""
        log = self._logs.get(run_id)
        if log is not None and not log.chunks:
            del self._logs[run_id]
        elif log is not None:
            log.watchers.clear()

    def observer(self, run_id: str) -> RunLogObserver:
        """An observer (``runstream.run._sources.Observer``) that logs each chunk of the run for
        :func:`observe` (observable from now on); :meth:`RunLogObserver.close` when it ends."""
        return RunLogObserver(self.open(run_id))


class RunLogObserver:
    """Logs a run's chunks as they pass and calls the log's watchers."""

    __slots__ = ("log",)

    def __init__(self, log: RunLog) -> None:
        self.log = log

    async def __call__(self, chunk: AgentChunk) -> Sequence[AgentChunk]:
        log = self.log
        log.append(chunk)
        for watcher in log.watchers:
            result = watcher(chunk)
            if inspect.isawaitable(result):
                await result
        return ()

    def close(self) -> None:
        """The run's stream ended."""
        self.log.watchers.clear()
        self.log.close()


async def observe(
    log: RunLog | None,
    run_id: str,
    *,
    offset: int = 0,
    idle_timeout_ms: float | None = None,
    is_alive: Callable[[], object] | None = None,
) -> AsyncIterator[AgentChunk]:
    """The run's chunks from ``offset`` on, following it live until it ends. After
    ``idle_timeout_ms`` without a chunk, ``is_alive()`` (sync or async) decides whether to keep
    waiting; otherwise the stream ends with an ``error`` chunk, as Mastra's."""
    if log is None:
        raise NotFoundError(f"no durable run {run_id!r} streams (or has streamed) in this process")
    if offset < 0:
        raise InvalidInputError(f"offset must be at least 0, got {offset}")
    index = offset
    while True:
        while index < len(log.chunks):
            yield log.chunks[index]
            index += 1
        if log.done:
            return
        changed = log.changed
        try:
            await asyncio.wait_for(
                changed.wait(), None if idle_timeout_ms is None else idle_timeout_ms / 1000
            )
        except TimeoutError:
            alive = is_alive() if is_alive is not None else False
            if inspect.isawaitable(alive):
                alive = await alive
            if not alive:
                message = f"Stream idle for {idle_timeout_ms}ms with no producer (run {run_id})"
                yield ErrorChunk(run_id, {"type": "error", "error": NotFoundError(message)})
                return
