"""From a started run to an SSE response: streamed directly, or detached into the replay log.

Direct: the response pulls the run; a client disconnect aborts it (Mastra's behaviour), and the
run winds down in the background so its turn still reaches memory. Detached (until-idle runs,
and any stream whose URL has ``?resumable=true``): the run is pumped into the replay log by the
server and the response only reads the log, so a dropped connection loses nothing and stops
nothing. With ``?resumable=true`` each event carries ``id: <runId>:<seq>``; re-sending the
request with ``Last-Event-ID`` (or ``GET /runs/:runId/stream``) continues after that event.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass
from typing import TypeVar

from starlette.requests import Request

from runstream.agent import Agent
from runstream.chunks import AgentChunk
from runstream.memory import MemoryScope
from runstream.run.output import RunOutput
from runstream.server.auth import Principal
from runstream.server.context import ServerContext
from runstream.server.errors import ApiError
from runstream.server.resumable import (
    LiveSlot,
    ReplayGapError,
    RunAlreadyStreamingError,
    RunInfo,
    TooManyRunsError,
)
from runstream.server.run_ids import run_key
from runstream.server.sse import DONE, SSEResponse, data_frame
from runstream.server.wire import FrameEncoder, encode_json, failure_json, redact, run_events

logger = logging.getLogger("runstream.server")

_winding_down: set[asyncio.Task[None]] = set()
T = TypeVar("T")


def reserve(ctx: ServerContext, resource_id: str | None) -> LiveSlot:
    """A place under the live-run caps for a run of ``resource_id`` (429 with ``retry-after``
    when the process or the resource is full), taken before anything runs."""
    try:
        return ctx.registry.reserve(resource_id)
    except TooManyRunsError as exc:
        raise ApiError(429, str(exc), headers={"retry-after": "1"}) from None


@dataclass(slots=True)
class Run:
    """A started run and what the server must do around it.

    ``slot``: its place under the live-run caps, released when its stream ends (finished,
    failed, aborted), or, when its client went away, once it has wound down."""

    out: RunOutput
    agent: Agent
    slot: LiveSlot
    scope: MemoryScope | None = None
    abandoned: bool = False

    @property
    def run_id(self) -> str:
        return self.out.run_id

    def release(self) -> None:
        self.slot.release()

    async def chunks(self) -> AsyncGenerator[AgentChunk, None]:
        """The run's chunks; the slot is released at their end (a failure included)."""
        try:
            async for chunk in self.out.full_stream:
                yield chunk
        except Exception:
            self.release()
            raise
        self.release()

    def events(self, wrap: Callable[[str], T]) -> AsyncIterator[T]:
        """The run as ``wrap(wire JSON)``, ending in-band with error + finish if it fails."""
        return run_events(self.chunks(), self.run_id, wrap)

    async def frames(self) -> AsyncGenerator[bytes, None]:
        """The run as SSE events, then ``[DONE]`` (error + finish in-band if it fails): what a
        direct stream sends, one generator between the run and the response."""
        encoder = FrameEncoder()
        try:
            async for chunk in self.chunks():
                frame = encoder.frame(chunk)
                if frame is not None:
                    yield frame
        except Exception as exc:
            logger.exception("run %s failed while streaming", self.run_id)
            for text in failure_json(self.run_id, exc):
                yield data_frame(text)
        yield DONE

    def abandon(self) -> None:
        """The client went away: abort, and let the run wind down (its turn is still saved);
        its slot is released once it has."""
        if self.abandoned:
            return
        self.abandoned = True
        logger.info("run %s: client disconnected, aborting the run", self.run_id)
        self.out.abort("client disconnected")
        task = asyncio.create_task(self.out.consume())
        _winding_down.add(task)
        task.add_done_callback(self._wound_down)

    def _wound_down(self, task: asyncio.Task[None]) -> None:
        _winding_down.discard(task)
        self.release()


def wants_ids(request: Request) -> bool:
    return request.query_params.get("resumable", "").lower() in ("1", "true", "yes")


def parse_event_id(value: str) -> tuple[str | None, int]:
    """``<runId>:<seq>`` (or a bare ``<seq>``) → ``(run id or None, seq)``; 400 if malformed."""
    run_id, _, seq = value.rpartition(":")
    if not seq.isdigit():
        raise ApiError(400, f"Invalid Last-Event-ID {value!r}: expected '<runId>:<seq>'")
    return run_id or None, int(seq)


async def owned_run(ctx: ServerContext, run_id: str, principal: Principal) -> RunInfo:
    info = await ctx.registry.log.info(run_id) or await flow_info(ctx, run_id)
    if info is None or not principal.owns(info.resource_id):
        raise ApiError(404, f"Run {run_id} not found (finished runs are kept for a limited time)")
    return info


async def flow_info(ctx: ServerContext, run_id: str) -> RunInfo | None:
    """A durable until-idle stream's owner (it lives in the durable runs' log, not the replay
    log: the workers write it, and every API process reads it)."""
    runs = ctx.runstream.durable_runs
    owner = await runs.flow_owner(run_id) if runs is not None else None
    return None if owner is None else RunInfo(run_id, *owner)


async def _flow_events(ctx: ServerContext, run_id: str, after: int) -> AsyncIterator[tuple[int, str]]:
    """A durable until-idle stream's events, as the server sends chunks (:func:`chunk_json`)."""
    runs = ctx.runstream.durable_runs
    assert runs is not None
    async for seq, data in runs.read_flow(run_id, after):
        text = encode_json(redact(json.loads(data)))
        if text is not None:
            yield seq, text


def replay(
    ctx: ServerContext, run_id: str, after: int, *, ids: bool, flow: bool | None = None
) -> SSEResponse:
    """The run's events after ``after``, then the live ones, then ``[DONE]`` (``flow``: from a
    durable until-idle stream's log; ``None``: that log if the replay log does not know it)."""

    async def frames() -> AsyncGenerator[bytes, None]:
        from_flow = flow
        if from_flow is None:
            from_flow = (
                ctx.runstream.durable_runs is not None
                and await ctx.registry.log.info(run_id) is None
                and await flow_info(ctx, run_id) is not None
            )
        source = _flow_events(ctx, run_id, after) if from_flow else ctx.registry.log.read(run_id, after)
        try:
            async for seq, data in source:
                yield data_frame(data, f"{run_id}:{seq}" if ids else None)
        except ReplayGapError as exc:
            error = {
                "type": "error",
                "runId": run_id,
                "from": "AGENT",
                "payload": {"error": {"message": str(exc)}},
            }
            yield data_frame(encode_json(error) or "{}")
        yield DONE

    return SSEResponse(frames(), heartbeat_s=ctx.heartbeat_s)


async def reconnect(ctx: ServerContext, request: Request, principal: Principal) -> SSEResponse | None:
    """A request carrying ``Last-Event-ID`` continues its run instead of starting a new one."""
    header = request.headers.get("last-event-id")
    if not header:
        return None
    named, seq = parse_event_id(header)
    if named is None:
        raise ApiError(400, "Last-Event-ID must name the run ('<runId>:<seq>') on this route")
    run_id = run_key(principal, named)
    await owned_run(ctx, run_id, principal)
    return replay(ctx, run_id, seq, ids=True)


async def respond(
    ctx: ServerContext, request: Request, run: Run, principal: Principal, *, detach: bool = False
) -> SSEResponse:
    """Stream ``run`` as Mastra SSE (see the module docstring for direct vs detached)."""
    ids = wants_ids(request)
    if not (detach or ids):
        return SSEResponse(run.frames(), heartbeat_s=ctx.heartbeat_s, on_disconnect=run.abandon)
    if detach and await flow_info(ctx, run.run_id) is not None:  # the workers write its log
        return replay(ctx, run.run_id, 0, ids=ids, flow=True)
    await detach_run(ctx, run, principal)
    return replay(ctx, run.run_id, 0, ids=ids)


async def detach_run(ctx: ServerContext, run: Run, principal: Principal) -> None:
    """Have the server pump ``run`` into its replay log, owned by its memory resource."""
    owner = run.scope.resource_id if run.scope is not None else principal.resource_id
    info = RunInfo(run.run_id, run.agent.id, owner)
    try:
        await ctx.registry.start(info, run.events(str), run.out.abort, run.slot)
    except RunAlreadyStreamingError as exc:
        run.abandon()  # (it winds down, then its slot is released)
        raise ApiError(409, str(exc)) from None
