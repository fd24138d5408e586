"""Output processors: inspect, rewrite or drop chunks as they stream, and judge whole steps.

A processor implements any of these hooks:

* ``process_input(messages, ctx)`` — an *input* processor (``input_processors=``): sees the run's
  new messages before the first model call; returns replacements, or ``None`` to keep them.
* ``process_output_stream(chunk, ctx)`` — called for each model chunk before it is streamed;
  return the chunk (possibly rewritten), or ``None`` to drop it.
* ``process_output_step(step, ctx)`` — called after each model step with its text and tool calls.

Any may call ``ctx.abort(reason, retry=..., metadata=...)``, which raises :class:`TripWire`:
the run emits a ``tripwire`` chunk (from ``process_input``: before the model is ever called). From
``process_output_step`` a ``retry=True`` tripwire asks
the model to try the step again with the reason as feedback (up to ``max_processor_retries``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn, Protocol, TypedDict, runtime_checkable

from runstream.chunks import AgentChunk, TripwirePayload
from runstream.errors import RunstreamError


class TripWire(RunstreamError):
    """Raised by ``ctx.abort()`` in a processor; ends (or retries) the run with a ``tripwire``."""

    def __init__(
        self, reason: str, *, retry: bool = False, metadata: Any = None, processor_id: str | None = None
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry = retry
        self.metadata = metadata
        self.processor_id = processor_id

    def payload(self) -> TripwirePayload:
        out: TripwirePayload = {"reason": self.reason}
        if self.retry:
            out["retry"] = True
        if self.metadata is not None:
            out["metadata"] = self.metadata
        if self.processor_id is not None:
            out["processorId"] = self.processor_id
        return out


@dataclass(slots=True)
class ProcessorContext:
    """What a processor hook receives besides the chunk or step."""

    processor_id: str
    run_id: str
    retry_count: int = 0
    state: dict[str, Any] = field(default_factory=dict)
    stream_parts: list[AgentChunk] = field(default_factory=list)

    def abort(
        self, reason: str = "Processor aborted", *, retry: bool = False, metadata: object = None
    ) -> NoReturn:
        raise TripWire(reason, retry=retry, metadata=metadata, processor_id=self.processor_id)


class StepToolCall(TypedDict):
    """A call the step made, by id."""

    toolCallId: str


@dataclass(slots=True)
class StepView:
    """A finished model step as ``process_output_step`` sees it."""

    text: str
    tool_calls: list[StepToolCall]
    finish_reason: str
    step_number: int


@runtime_checkable
class Processor(Protocol):
    """An output processor. Only ``id`` is required; implement the hooks you need."""

    @property
    def id(self) -> str: ...


async def run_stream_processors(
    processors: Sequence[Any], chunk: AgentChunk, contexts: dict[str, ProcessorContext]
) -> AgentChunk | None:
    """Pass ``chunk`` through every processor's ``process_output_stream``; ``None`` = dropped."""
    current: AgentChunk | None = chunk
    for processor in processors:
        hook = getattr(processor, "process_output_stream", None)
        if hook is None or current is None:
            continue
        ctx = contexts[processor.id]
        current = await hook(current, ctx)
        if current is not None:
            ctx.stream_parts.append(current)
    return current


async def run_step_processors(
    processors: Sequence[Any], step: StepView, contexts: dict[str, ProcessorContext]
) -> None:
    for processor in processors:
        hook = getattr(processor, "process_output_step", None)
        if hook is not None:
            await hook(step, contexts[processor.id])
