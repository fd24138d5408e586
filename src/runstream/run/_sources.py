"""What a run's stream is made of, besides chunks: a sub-stream (:data:`SubStream`) or a model
step's provider parts (:class:`PartSource`) handed over whole, to be pulled to their end by the
run's :class:`~runstream.run.output.RunOutput`, and the observers (:data:`Observer`) that see
each chunk before any consumer does. The loop and the model step produce these; ``RunOutput``
drives them."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from types import AsyncGeneratorType
from typing import Any

from runstream.abort import AbortSignal
from runstream.chunks import AgentChunk

SubStream = AsyncGenerator[AgentChunk, None]
"""A part of a stream handed over whole, as one of its items: ``RunOutput`` pulls from it until
it ends, then from the source again. The loop hands over each model step's chunks this way
(``runstream.run._loop.run_chunks``): a generator layer less per token."""


SUB_STREAM: Any = AsyncGeneratorType
"""The type of a sub-stream (what a stream's item is compared with)."""


class PartSource:
    """A model step's provider stream, handed over as one item of a stream, like a sub-stream:
    its consumer pulls the provider's parts itself and turns each into chunks with
    :meth:`translate`, so a token costs a function call rather than a generator layer.
    ``RunOutput`` drives it inline."""

    __slots__ = ()

    parts: AsyncIterator[Any]
    signal: AbortSignal
    stopped: bool
    """Set by a part's sub-stream when the part ended the stream (an error part, a tripwire): no
    further part is pulled, as none is once ``signal`` is aborted."""
    continues: bool
    """Set by :meth:`translate` when its chunk is a plain text delta (two payload keys, the
    run's id, from ``AGENT``) of the same block as the chunk it made just before, with
    nothing in between: the consumer adds it to the delta run it keeps without checking."""

    def translate(self, part: Any) -> AgentChunk | SubStream | None:
        """A part's chunk; for a part with more to do than one chunk, a sub-stream of its chunks
        (then :attr:`stopped` is read again); ``None`` when the part streams nothing."""
        raise NotImplementedError

    def end(self, error: Exception | None) -> SubStream:
        """The last chunks once the parts ran out, stopped, or failed with ``error``; closes the
        parts first."""
        raise NotImplementedError

    def ran_out(self) -> bool:
        """The parts ran out: ``True`` when that settled the source with no chunk left to
        stream and nothing to close (the usual end), ``False`` when :meth:`end` must run."""
        return False

    async def aclose(self) -> None:
        """Close the provider's stream (a no-op once it ended)."""
        aclose = getattr(self.parts, "aclose", None)
        if aclose is not None:
            await aclose()


Observer = Callable[[AgentChunk], Awaitable[Sequence[AgentChunk]]]
"""Sees each chunk of a run before any consumer does (run callbacks, a thread's title event, a
durable run's log): ``RunOutput`` awaits it, and streams the chunks it returns (usually none)
just before that chunk. A run without observers takes the same path with no per-chunk cost."""
