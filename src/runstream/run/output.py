"""``RunOutput``: what ``agent.stream()`` returns.

The run's chunks come from one async generator (the loop). ``full_stream`` can be iterated by
any number of consumers, each from the first chunk, whenever they start: chunks are kept in a
buffer, and whichever consumer is ahead pulls the next chunk from the generator (the others wait
for it). With one consumer that is a plain pull-through, no task and no queue. Text and
reasoning deltas are buffered as plain strings, so a late consumer gets equal (not identical)
delta chunks; that keeps a long reply at a few bytes per token. A run whose one reader keeps
the chunks itself (an until-idle stream's turn) is read through :meth:`RunOutput.relay`,
which keeps none.

Aggregates (``await out.text``, ``await out.usage`` …) drive the stream to its end if nobody
else does, then read the run's state.
"""

from __future__ import annotations

import asyncio
import logging
import warnings
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Coroutine, Generator, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, NotRequired, TypedDict, TypeVar, cast

from runstream._json import JsonObject
from runstream.abort import AbortController
from runstream.chunks import (
    AgentChunk,
    ChunkFrom,
    FileChunk,
    FilePayload,
    ObjectChunk,
    ReasoningDeltaChunk,
    SourceChunk,
    SourcePayload,
    StreamChunk,
    TextDeltaChunk,
    ToolCallChunk,
    ToolCallPayload,
    ToolResultChunk,
    ToolResultPayload,
    TripwirePayload,
    Usage,
)
from runstream.errors import RunFailedError, StateConflictError
from runstream.models.base import PromptMessage
from runstream.run._run_scores import ScoringData
from runstream.run._run_state import RunState, Status
from runstream.run._run_state import StepRecord as StepRecord
from runstream.run._sources import SUB_STREAM, Observer, PartSource, SubStream

if TYPE_CHECKING:
    from runstream.run._run_scores import RunScore, RunScores

logger = logging.getLogger("runstream.run")
T = TypeVar("T")


_DeltaChunk = TextDeltaChunk | ReasoningDeltaChunk
"""The chunks the replay buffer keeps as runs of plain strings."""

_DELTA_CLASSES = (TextDeltaChunk, ReasoningDeltaChunk)


class _Dropped(list[str]):
    """Where a relayed run's delta texts go (:meth:`RunOutput.relay`): nowhere."""

    __slots__ = ()

    def append(self, text: str, /) -> None:
        pass


_DROPPED = _Dropped()


class _DeltaRun:
    """Consecutive deltas of one text or reasoning block, as kept in the replay buffer."""

    __slots__ = ("cls", "from_", "id", "run_id", "texts")

    def __init__(self, cls: type[_DeltaChunk], run_id: str, from_: ChunkFrom, id: str, first: str) -> None:
        self.cls = cls
        self.run_id = run_id
        self.from_ = from_
        self.id = id
        self.texts = [first]

    def takes(self, chunk: _DeltaChunk) -> bool:
        """Whether ``chunk`` (of this run's class) is a plain delta that continues this run."""
        payload = chunk.payload
        return (
            len(payload) == 2
            and payload["id"] == self.id
            and chunk.run_id == self.run_id
            and chunk.from_ == self.from_
        )

    def chunk(self, index: int) -> _DeltaChunk:
        return self.cls(self.run_id, {"id": self.id, "text": self.texts[index]}, self.from_)


class RunOutput:
    """A run's streams and aggregates (Mastra's ``MastraModelOutput``)."""

    def __init__(
        self,
        source: AsyncIterator[StreamChunk | SubStream | PartSource],
        state: RunState,
        controller: AbortController,
        *,
        on_close: Callable[[], Awaitable[None]] | None = None,
        first: AgentChunk | None = None,
        observers: Sequence[Observer] = (),
    ) -> None:
        """``first``: the run's first chunk, when it is known before ``source`` runs (a new
        run's ``start``): a consumer gets it without entering the source (a run with
        ``observers`` has its source yield it, so that they see it too). ``observers``: see
        :data:`Observer`, called in order (each sees the chunks the earlier ones added)."""
        # Typed as chunks for the hot path; a sub-stream among them is spotted by its type.
        self._pull: Callable[[], Awaitable[Any]] = source.__anext__
        self._source: PartSource | None = None
        """The part source ``_pull`` pulls parts from (``None``: it pulls chunks)."""
        self._outer: list[tuple[Callable[[], Awaitable[Any]], PartSource | None]] = []
        """Where to pull from once the current sub-stream ends (innermost last)."""
        self._buffer: list[StreamChunk | _DeltaRun] = []
        self._done = False
        self._pulling = False
        self._waiters: list[asyncio.Future[None]] = []
        self._kept = 0  # chunks pulled so far (a consumer that sees it move was overtaken)
        self._open_run: _DeltaRun | None = None  # the delta run at the buffer's end, if any
        self._open_index = 0
        self._on_close = on_close
        self._observers = tuple(observers)
        self._keeps = True
        """``False`` once :meth:`relay` took the run: its buffer then holds no more than the
        chunks an observer added last, with the chunk they came with (for the reader to take)."""
        self.state = state
        self._controller = controller
        if first is not None:
            assert not observers, "an observed run's source yields its first chunk"
            self._keep(first)

    # -- identity -------------------------------------------------------------------------------
    @property
    def run_id(self) -> str:
        return self.state.run_id

    @property
    def message_id(self) -> str:
        return self.state.message_id

    # -- streams --------------------------------------------------------------------------------
    @property
    def full_stream(self) -> AsyncIterator[AgentChunk]:
        """Every chunk of the run, from the first one.

        Typed as the closed union :data:`runstream.chunks.AgentChunk`, so that
        ``if chunk.type == "text-delta":`` narrows ``chunk.payload`` to a ``TextDeltaPayload``.
        A tool's custom ``data-*`` chunks (``ctx.writer.custom``) are its
        :class:`runstream.chunks.DataChunk` members: pick them out with ``isinstance`` or
        ``case DataChunk(data)``. (A run's own chunks are all of it; a stream read back from the
        wire, a durable run's log or an until-idle stream's task events, may hold a chunk of a
        type this version does not know, streamed as it came: :class:`~runstream.chunks.UnknownChunk`.)"""
        if not self._keeps:
            raise StateConflictError(
                f"run {self.run_id}'s chunks are relayed to another stream: read that one"
            )
        return cast("AsyncIterator[AgentChunk]", self._iterate())

    def relay(self) -> AsyncGenerator[AgentChunk, None]:
        """Every chunk of the run, for its one reader, which keeps them itself: none is kept
        here, so a long run is held once. An until-idle stream reads each turn this way (its
        own buffer keeps the turn's chunks). Call it before anything reads the run; the run has
        no other stream then (:class:`~runstream.errors.StateConflictError`), and its
        aggregates wait for the relay to end the run. Closing the relay before the run's end
        (``aclose()``) ends the run as a cancelled reader does: aborted."""
        self._keeps = False
        self._open_run = None
        return cast("AsyncGenerator[AgentChunk, None]", self._relayed())

    async def _relayed(self) -> AsyncGenerator[StreamChunk, None]:
        chunks = self._iterate()
        try:
            async for chunk in chunks:
                yield chunk
        except GeneratorExit:  # the one reader stopped: nobody else will drive the run
            await chunks.aclose()
            if not self._done:
                await self._cancelled(self._source)
            raise

    async def _iterate(self) -> AsyncGenerator[StreamChunk, None]:
        buffer = self._buffer
        i = 0  # position: entry i of the buffer, and j texts into it when it is a delta run
        j = 0
        while True:
            if i < len(buffer):  # behind the furthest consumer: replay the buffer
                entry = buffer[i]
                if type(entry) is not _DeltaRun:
                    yield entry  # type: ignore[misc]
                    i += 1
                    continue
                if j < len(entry.texts):
                    yield entry.chunk(j)
                    j += 1
                    continue
                if i + 1 < len(buffer) or self._done:
                    i += 1
                    j = 0
                    continue
            if self._done:
                return
            if self._pulling:
                waiter = asyncio.get_running_loop().create_future()
                self._waiters.append(waiter)
                await waiter
                continue
            # This consumer is the furthest ahead: it pulls the next chunks for everyone for as
            # long as nobody else pulls in between (with one consumer, a plain pull-through).
            observed = self._observers
            run = self._open_run
            chunk: Any  # a chunk, a sub-stream, a part source, or a provider part while a part
            # source is pulled: told apart by their classes below, with no call per token
            texts: list[str] = run.texts if run is not None else [] if self._keeps else _DROPPED
            kept = self._kept
            while True:
                source = self._source  # a model step's parts being pulled (else chunks)
                if source is not None and source.signal.aborted:  # (stopped: see _pop)
                    self._end_parts(source, None)
                    continue
                self._pulling = True
                try:
                    chunk = await self._pull()
                    if source is not None:
                        chunk = source.translate(chunk)
                except StopAsyncIteration:
                    self._pulling = False
                    if self._pop():
                        continue
                    self._wake_waiters()
                    await self._close()
                    return
                except (asyncio.CancelledError, GeneratorExit):
                    await self._cancelled(source)
                    raise
                except Exception as exc:
                    self._stop_pulling()
                    if source is None:
                        await self._failed(exc)
                        raise
                    self._end_parts(source, exc)  # the provider's stream failed: the step records it
                    continue
                self._pulling = False  # (inline: the hot path)
                if self._waiters:
                    self._wake_waiters()
                if observed and (added := await self._observe(chunk, source)):
                    i, j = self._keep_all([*added, chunk])  # replayed from the first one added
                    break
                if (source is not None and source.continues) or (
                    run is not None
                    and type(chunk) is run.cls
                    and len(payload := chunk.payload) == 2
                    and payload["id"] == run.id
                    and chunk.run_id == run.run_id
                    and chunk.from_ == run.from_
                ):  # the hot path: one more delta of the open run (a part source vouches for its own)
                    texts.append(chunk.payload["text"])
                    kept += 1
                    self._kept = kept
                    yield chunk
                    if self._kept != kept:  # another consumer pulled meanwhile: replay
                        i, j = self._open_index, len(texts)
                        break
                    continue
                if chunk is None:  # a part that streams nothing
                    continue
                kind = type(chunk)
                if kind is SUB_STREAM:  # a sub-stream: pulled from directly
                    self._push(chunk.__anext__, None)
                    continue
                if isinstance(chunk, PartSource):  # a model step's parts: translated here
                    self._push(chunk.parts.__anext__, chunk)
                    continue
                i, j = self._keep(chunk)
                kept = self._kept
                run = self._open_run
                if run is not None:
                    texts = run.texts
                yield chunk
                if self._kept != kept:  # another consumer pulled meanwhile: replay from i, j
                    break

    async def _observe(self, chunk: Any, source: PartSource | None) -> Sequence[AgentChunk]:
        """Hand ``chunk`` (if a chunk: not nothing, a sub-stream or a part source) to the
        observers; returns what they add before it (each observer sees what the earlier ones
        added, then ``chunk``). An observer that raises ends the run with its error (as a run
        callback does in Mastra)."""
        if chunk is None or type(chunk) is SUB_STREAM or isinstance(chunk, PartSource):
            return ()
        added: Sequence[AgentChunk] = ()
        try:
            for observer in self._observers:
                if not added:
                    added = await observer(chunk)
                    continue
                seen: list[AgentChunk] = []
                for each in added:
                    seen.extend(await observer(each))
                    seen.append(each)
                seen.extend(await observer(chunk))
                added = seen
        except (asyncio.CancelledError, GeneratorExit):
            await self._cancelled(source)
            raise
        except Exception as exc:
            self._stop_pulling()
            await self._close_part_sources(source)
            await self._failed(exc)
            raise
        return added

    def _keep_all(self, chunks: list[StreamChunk]) -> tuple[int, int]:
        """Keep ``chunks``; returns the position of the first one."""
        if not self._keeps:  # a relay: held until its one reader (past the earlier ones) takes them
            self._kept += len(chunks)
            self._buffer[:] = chunks
            return 0, 0
        run = self._open_run
        position = (self._open_index, len(run.texts)) if run is not None else (len(self._buffer), 0)
        for each in chunks:
            self._keep(each)
        return position

    async def _close_part_sources(self, source: PartSource | None) -> None:
        for part_source in (source, *(outer for _, outer in self._outer)):
            if part_source is not None:  # (one whose part's sub-stream was being pulled too)
                await part_source.aclose()

    async def _cancelled(self, source: PartSource | None) -> None:
        """A consumer was cancelled mid-pull: that ends the run (reader cancel = abort)."""
        self._stop_pulling()
        await self._close_part_sources(source)
        self._controller.abort("stream consumer cancelled")
        if self.state.status == "running":
            self.state.status = "aborted"
        await self._close()

    async def _failed(self, exc: Exception) -> None:
        """A bug below the loop must still end the stream."""
        self.state.error = exc
        self.state.status = "failed"
        await self._close()

    def _push(self, pull: Callable[[], Awaitable[Any]], source: PartSource | None) -> None:
        """Pull from a handed-over sub-stream or part source until it ends, then go back."""
        self._outer.append((self._pull, self._source))
        self._pull = pull
        self._source = source

    def _pop(self) -> bool:
        """The current stream ended: a part source goes on with its last chunks (unless it
        :meth:`~runstream.run._sources.PartSource.ran_out` with none), a sub-stream back to the
        stream that handed it over. ``False`` when the run's own stream ended."""
        source = self._source
        if source is not None and not source.ran_out():
            self._end_parts(source, None)
            return True
        if not self._outer:
            return False
        self._pull, source = self._outer.pop()
        self._source = source
        if source is not None and source.stopped:  # (only a part's sub-stream stops its source)
            self._end_parts(source, None)
        return True

    def _end_parts(self, source: PartSource, error: Exception | None) -> None:
        """The part source is done: its last chunks come in its place."""
        self._pull = source.end(error).__anext__
        self._source = None

    def _keep(self, chunk: StreamChunk) -> tuple[int, int]:
        """Buffer a chunk for later consumers; returns the position just after it.

        Runs of plain text/reasoning deltas are kept as one list of strings (a few bytes per
        token instead of a chunk object and a dict): later consumers get equal, fresh chunks.
        """
        self._kept += 1
        buffer = self._buffer
        if not self._keeps:  # a relay keeps nothing
            return len(buffer), 0
        if isinstance(chunk, _DELTA_CLASSES):
            payload = chunk.payload
            if len(payload) == 2:
                run = self._open_run
                kind = type(chunk)
                if run is not None and run.cls is kind and run.takes(chunk):
                    texts = run.texts
                    texts.append(payload["text"])
                    return self._open_index, len(texts)
                self._open_run = _DeltaRun(kind, chunk.run_id, chunk.from_, payload["id"], payload["text"])
                self._open_index = len(buffer)
                buffer.append(self._open_run)
                return self._open_index, 1
        self._open_run = None
        buffer.append(chunk)
        return len(buffer), 0

    def _stop_pulling(self) -> None:
        self._pulling = False
        self._wake_waiters()

    def _wake_waiters(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def _close(self) -> None:
        if self._done:
            return
        self._done = True
        self._wake_waiters()  # (an aggregate waiting for a relay's end)
        if self._on_close is not None:
            on_close, self._on_close = self._on_close, None
            await on_close()

    @property
    def text_stream(self) -> AsyncIterator[str]:
        """Only the text deltas."""

        chunks = self.full_stream

        async def texts() -> AsyncIterator[str]:
            async for chunk in chunks:
                if isinstance(chunk, TextDeltaChunk):
                    yield chunk.payload["text"]
            self.raise_if_failed()

        return texts()

    @property
    def object_stream(self) -> AsyncIterator[Any]:
        """The partial objects of a structured-output run."""

        chunks = self.full_stream

        async def objects() -> AsyncIterator[Any]:
            async for chunk in chunks:
                if isinstance(chunk, ObjectChunk):
                    yield chunk.object

        return objects()

    # -- control --------------------------------------------------------------------------------
    def abort(self, reason: object = None) -> None:
        """Abort the run: the stream ends with ``abort`` and ``finish``."""
        self._controller.abort(reason)

    async def consume(self) -> None:
        """Drive the stream to its end (without keeping a reference to the chunks); a relayed
        run's reader drives it: wait for the end."""
        if self._keeps:
            async for _ in self._iterate():
                pass
            return
        while not self._done:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            await waiter

    def raise_if_failed(self) -> None:
        """Raise :class:`RunFailedError` (its cause: the run's error) if the run failed."""
        state = self.state
        if state.status == "failed" and state.error is not None:
            raise RunFailedError(state.run_id, state.error)

    def _after(self, read: Callable[[], T], name: str) -> Aggregate[T]:
        async def wait() -> T:
            await self.consume()
            self.raise_if_failed()
            return read()

        return Aggregate(wait, name)

    # -- aggregates (awaitables, like Mastra's promise getters) -----------------------------------
    @property
    def text(self) -> Aggregate[str]:
        return self._after(lambda: self.state.text, "text")

    @property
    def reasoning_text(self) -> Aggregate[str]:
        return self._after(lambda: "".join(self.state.reasoning), "reasoning_text")

    @property
    def tool_calls(self) -> Aggregate[list[ToolCallChunk]]:
        """The model's tool calls, every step."""
        return self._after(lambda: list(self.state.tool_calls), "tool_calls")

    @property
    def tool_results(self) -> Aggregate[list[ToolResultChunk]]:
        """The tools' results (a failed call is a ``tool-error`` chunk of the stream, not here)."""
        return self._after(lambda: list(self.state.tool_results), "tool_results")

    @property
    def sources(self) -> Aggregate[list[SourceChunk]]:
        return self._after(lambda: list(self.state.sources), "sources")

    @property
    def files(self) -> Aggregate[list[FileChunk]]:
        return self._after(lambda: list(self.state.files), "files")

    @property
    def finish_reason(self) -> Aggregate[str | None]:
        return self._after(lambda: self.state.finish_reason, "finish_reason")

    @property
    def usage(self) -> Aggregate[Usage]:
        """Token usage summed over all steps (``totalUsage`` in Mastra)."""
        return self._after(self._usage, "usage")

    total_usage = usage

    @property
    def steps(self) -> Aggregate[list[StepRecord]]:
        return self._after(lambda: list(self.state.steps), "steps")

    @property
    def object(self) -> Aggregate[Any]:
        return self._after(lambda: self.state.object, "object")

    @property
    def messages(self) -> Aggregate[list[PromptMessage]]:
        """The response messages of this run (assistant and tool messages)."""
        return self._after(lambda: list(self.state.response_messages), "messages")

    scoring: RunScores | None = None
    """The jobs of the agent's ``scorers`` on this run, once it ended with success (see :attr:`scores`)."""
    scoring_data: ScoringData | None = None
    """What the scorers see of this run, once it ended, when it was asked for
    (``return_scorer_data=True``): ``scoringData`` in :meth:`get_full_output`."""

    @property
    def scores(self) -> Aggregate[list[RunScore]]:
        """The run's scores from its agent's ``scorers`` (``runstream.agent._scorers``): after the
        run ends, those its scorers made (sampled, not failed), once they are in; ``[]`` for a run
        that did not succeed or an agent without scorers. (A closed runtime cancels scoring.)"""

        async def wait() -> list[RunScore]:
            await self.consume()
            return [] if self.scoring is None else await self.scoring.wait()

        return Aggregate(wait, "scores")

    @property
    def suspend_payload(self) -> Aggregate[Any]:
        return self._after(lambda: self.state.suspend_payload, "suspend_payload")

    def _usage(self) -> Usage:
        return cast(Usage, total_usage(self.state))

    async def get_full_output(self) -> FullOutput:
        """Everything at once, after the run ends; a failed run raises :class:`RunFailedError`
        (as Mastra's ``getFullOutput()`` rejects)."""
        await self.consume()
        self.raise_if_failed()
        full = full_output(self.state)
        if self.scoring_data is not None:
            full["scoringData"] = self.scoring_data
        return full

    # -- synchronous state ------------------------------------------------------------------------
    @property
    def status(self) -> str:
        return self.state.status

    @property
    def error(self) -> BaseException | None:
        return self.state.error

    @property
    def tripwire(self) -> TripwirePayload | None:
        return self.state.tripwire


class Aggregate(Coroutine[object, object, T], Generic[T]):
    """An awaitable aggregate of a run (``out.text``, ``out.usage`` …): a coroutine made when
    awaited. Printed without ``await`` it says so (and warns) instead of showing
    ``<coroutine object ...>``; never awaited, it does not warn at garbage collection."""

    __slots__ = ("_coro", "_make", "_name")

    def __init__(self, make: Callable[[], Coroutine[Any, Any, T]], name: str) -> None:
        self._make = make
        self._name = name
        self._coro: Coroutine[Any, Any, T] | None = None

    def _inner(self) -> Coroutine[Any, Any, T]:
        if self._coro is None:
            self._coro = self._make()
        return self._coro

    def __await__(self) -> Generator[Any, None, T]:
        return self._inner().__await__()

    def send(self, value: object) -> object:
        return self._inner().send(value)

    def throw(
        self,
        typ: type[BaseException] | BaseException,
        val: object = None,
        tb: TracebackType | None = None,
        /,
    ) -> object:
        inner = self._inner()
        if isinstance(typ, BaseException):  # (an exception object takes no separate value)
            return inner.throw(typ, None, tb)
        return inner.throw(typ, val, tb)

    def close(self) -> None:
        if self._coro is not None:
            self._coro.close()

    def __repr__(self) -> str:
        warnings.warn(
            f"out.{self._name} is awaitable: use `await out.{self._name}` to get its value",
            RuntimeWarning,
            stacklevel=2,
        )
        return f"<runstream aggregate out.{self._name}: not awaited, use `await out.{self._name}`>"

    __str__ = __repr__


def total_usage(state: RunState) -> JsonObject:
    """The run's usage without the last step's raw one, the three counts always there."""
    usage = {k: v for k, v in state.usage.items() if k != "raw"}
    for key in ("inputTokens", "outputTokens", "totalTokens"):
        usage.setdefault(key, 0)
    return usage


class FullOutput(TypedDict):
    """A run's aggregates at once (``await out.get_full_output()``, ``agent.generate()``; what
    ``on_finish`` gets, with the ``model``)."""

    runId: str
    text: str
    reasoningText: str
    usage: JsonObject
    totalUsage: JsonObject
    steps: list[StepRecord]
    finishReason: str | None
    toolCalls: list[ToolCallPayload]
    toolResults: list[ToolResultPayload]
    sources: list[SourcePayload]
    files: list[FilePayload]
    object: Any
    """The structured output's object (the user's own value)."""
    error: BaseException | None
    tripwire: TripwirePayload | None
    suspendPayload: Any
    """What the tool that suspended the run gave (the tool's own value)."""
    messages: list[PromptMessage]
    status: Status
    scoringData: NotRequired[ScoringData]
    """What the scorers see of the run (asked for with ``return_scorer_data=True``)."""


def full_output(state: RunState) -> FullOutput:
    """A run's aggregates in one mapping (``get_full_output``, and what ``on_finish`` gets)."""
    return {
        "runId": state.run_id,
        "text": state.text,
        "reasoningText": "".join(state.reasoning),
        "usage": total_usage(state),
        "totalUsage": total_usage(state),
        "steps": list(state.steps),
        "finishReason": state.finish_reason,
        "toolCalls": [c.payload for c in state.tool_calls],
        "toolResults": [c.payload for c in state.tool_results],
        "sources": [c.payload for c in state.sources],
        "files": [c.payload for c in state.files],
        "object": state.object,
        "error": state.error,
        "tripwire": state.tripwire,
        "suspendPayload": state.suspend_payload,
        "messages": list(state.response_messages),
        "status": state.status,
    }
