"""An agent's until-idle streams (``stream(..., until_idle=True)``): the first turn, then a
continuation turn for each batch of background results, merged into one stream per thread
(``runstream.agent.until_idle`` is the merge itself; this is the agent's side of it)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, cast

from runstream.abort import AbortController
from runstream.agent.run_options import InvalidOptionError, RunOptions
from runstream.agent.until_idle import IdleOptions, until_idle_stream
from runstream.chunks import StreamChunk
from runstream.models.base import PromptMessage
from runstream.run._run_scores import TurnScores
from runstream.run.output import RunOutput

if TYPE_CHECKING:
    from runstream.tasks.coordination import TaskManager

UntilIdle = bool | Mapping[str, object]
"""``until_idle=``: ``True``, or Mastra's options (``{"maxIdleMs", "resumeWindowMs", "maxContinuations"}``)."""


@dataclass(slots=True)
class FlowRequest:
    """What :meth:`IdleStreams.open` offers the durable runs while it starts the first turn: a
    durable runner that can drive the whole until-idle stream itself (``runstream.durable``'s
    until-idle flows) starts it instead of a plain first turn, and says so (``started``)."""

    until_idle: UntilIdle
    started: bool = False


durable_flow: ContextVar[FlowRequest | None] = ContextVar("runstream_durable_flow", default=None)


def check_idle_options(until_idle: UntilIdle) -> None:
    """Bad options fail before anything starts, even where until-idle falls back to a plain stream."""
    if isinstance(until_idle, Mapping):
        try:
            IdleOptions.coerce(dict(until_idle), progress_interval_ms=0)
        except (TypeError, ValueError) as exc:  # IdleOptions' InvalidInputError too: one class
            raise InvalidOptionError(str(exc)) from exc


class IdleStreams:
    """One agent's open until-idle streams, one per thread: a newer stream on a thread takes
    over the tasks the older one waited for (the older one is aborted)."""

    def __init__(self, agent_id: str) -> None:
        self.agent_id = agent_id
        self._open: dict[tuple[str, str], AbortController] = {}

    async def open(
        self,
        manager: TaskManager,
        options: RunOptions,
        until_idle: UntilIdle,
        first_turn: Callable[[], Awaitable[RunOutput]],
        next_turn: Callable[[RunOptions], Awaitable[RunOutput]],
    ) -> RunOutput:
        """The merged stream: ``first_turn()``, then ``next_turn(options)`` with the finished
        tasks' context for each continuation."""
        scope = options.memory
        assert scope is not None
        idle = IdleOptions.coerce(
            dict(until_idle) if isinstance(until_idle, Mapping) else None,
            manager.config.progress_interval_ms,
        )
        key = (scope.thread_id, scope.resource_id)
        running: set[str] = set()
        previous = self._open.get(key)
        if previous is not None:  # take over the tasks the older stream was waiting for
            previous.abort("superseded by a newer until-idle stream on the same thread")
            running.update(manager.running_task_ids(thread_id=scope.thread_id, resource_id=scope.resource_id))
        controller = AbortController()
        self._open[key] = controller
        subscription = manager.subscribe(  # as Mastra's untilIdle: live events only
            agent_id=self.agent_id,
            thread_id=scope.thread_id,
            resource_id=scope.resource_id,
            include_existing=False,
        )
        request = FlowRequest(until_idle)
        token = durable_flow.set(request)
        try:
            first = await first_turn()
        finally:
            durable_flow.reset(token)
        if request.started:  # the durable runs merge the stream where they run
            await subscription.close()
            if self._open.get(key) is controller:
                del self._open[key]
            return first
        if options.abort_signal is not None:
            options.abort_signal.add_listener(controller.abort)
        controller.signal.add_listener(first.abort)

        turns = [first]

        async def continuation(context: list[PromptMessage]) -> RunOutput:
            turn = await next_turn(
                replace(options, context=(*options.context, *context), abort_signal=controller.signal)
            )
            turns.append(turn)
            return turn

        async def the_first_turn() -> RunOutput:
            return first

        source = until_idle_stream(
            the_first_turn, continuation, subscription, options=idle, controller=controller, running=running
        )

        async def forget() -> None:
            if self._open.get(key) is controller:
                del self._open[key]

        # (the merge's task events are typed as any chunk until agent/until_idle.py is typed)
        chunks = cast("AsyncIterator[StreamChunk]", source)
        merged = RunOutput(chunks, first.state, controller, on_close=forget)
        merged.scoring = TurnScores(turns)  # each turn is scored as it ends: theirs, in turn order
        return merged
