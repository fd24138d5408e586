"""``WorkflowRunOutput``: what ``run.stream()`` / ``run.resume_stream()`` return.

Like Mastra's ``WorkflowRunOutput``, the stream opens with ``workflow-start`` and always ends
with ``workflow-finish``, whose ``workflowStatus`` is derived from the chunks that passed (a
``workflow-step-suspended`` makes it ``suspended``, a failed ``workflow-step-result`` ``failed``,
``workflow-canceled`` ``canceled``, otherwise ``success``) and whose usage sums the ``finish``
chunks of agent steps. The run executes in its own task whether or not anyone reads; chunks are
buffered, and every consumer of ``full_stream`` sees all of them from the first.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from runstream.chunks import AnyChunk, Chunk, WorkflowChunk
from runstream.workflows._results import StepResult, TripwireRecord

USAGE_KEYS = (
    "inputTokens",
    "outputTokens",
    "totalTokens",
    "cachedInputTokens",
    "cacheCreationInputTokens",
    "reasoningTokens",
)


def mapping_or_empty(value: object) -> Mapping[str, object]:
    """A wire value read as an object (``{}`` when it is missing or no object)."""
    return value if isinstance(value, Mapping) else {}


@dataclass(slots=True)
class WorkflowResult:
    """How a run (or one resume of it) ended."""

    status: str
    """``success``, ``failed``, ``suspended`` or ``canceled``."""
    run_id: str
    steps: dict[str, StepResult]
    input: Any
    state: dict[str, Any] = field(default_factory=dict)
    result: Any = None
    error: Any = None
    suspended: list[list[str]] = field(default_factory=list)
    """Paths of the suspended steps (``["outer-step", "inner-step"]`` for a nested one)."""
    suspend_payload: dict[str, Any] = field(default_factory=dict)
    tripwire: TripwireRecord | None = None


class WorkflowRunOutput:
    """One stream of a workflow run, and its aggregates."""

    def __init__(self, run_id: str, workflow_id: str) -> None:
        self.run_id = run_id
        self.workflow_id = workflow_id
        self.status = "running"
        self.error: BaseException | None = None
        self._buffer: list[AnyChunk] = [WorkflowChunk("workflow-start", run_id, {"workflowId": workflow_id})]
        self._done = False
        self._waiters: list[asyncio.Future[None]] = []
        self._usage = dict.fromkeys(USAGE_KEYS, 0)
        self._result: WorkflowResult | None = None
        self._tripwire: Any = None

    # -- producer side (the run's task) ------------------------------------------------------
    def push(self, chunk: AnyChunk) -> None:
        if self._done:
            return
        payload = chunk.payload if isinstance(chunk.payload, Mapping) else {}
        if chunk.type == "workflow-step-output":
            self._add_usage(payload.get("output"))
        elif chunk.type == "workflow-canceled":
            self.status = "canceled"
        elif chunk.type == "workflow-step-suspended":
            self.status = "suspended"
        elif chunk.type == "workflow-step-result" and payload.get("status") == "failed":
            self._tripwire = payload.get("tripwire")
            self.status = "tripwire" if self._tripwire else "failed"
        self._buffer.append(chunk)
        self._wake()

    def resolve(self, result: WorkflowResult) -> None:
        self._result = result

    def reject(self, error: BaseException) -> None:
        self.error = error
        self.status = "failed"

    def close(self) -> None:
        """Append ``workflow-finish`` and end the stream."""
        if self._done:
            return
        if self.status == "running":
            self.status = "success"
        payload: dict[str, object] = {
            "workflowStatus": self.status,
            "metadata": {"error": self.error, "errorMessage": str(self.error)} if self.error else {},
            "output": {"usage": dict(self._usage)},
        }
        if self.status == "success" and self._result is not None and self._result.status == "success":
            payload["finalWorkflowResult"] = self._result.result
        if self.status == "tripwire" and self._tripwire:
            payload["tripwire"] = self._tripwire
        self._buffer.append(WorkflowChunk("workflow-finish", self.run_id, payload))
        self._done = True
        self._wake()

    def _add_usage(self, inner: Any) -> None:
        wire = inner.to_wire() if isinstance(inner, Chunk) else inner
        if not isinstance(wire, Mapping) or wire.get("type") != "finish":
            return
        body = mapping_or_empty(wire.get("payload"))
        usage = body.get("usage") or mapping_or_empty(body.get("output")).get("usage")
        if not isinstance(usage, Mapping):
            return
        if "promptTokens" in usage and "inputTokens" not in usage:
            usage = {
                **usage,
                "inputTokens": usage["promptTokens"],
                "outputTokens": usage.get("completionTokens"),
            }
        for key in USAGE_KEYS:
            value = usage.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool):
                self._usage[key] += int(value)

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def _wait(self) -> None:
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        await waiter

    # -- consumer side -------------------------------------------------------------------------
    @property
    def full_stream(self) -> AsyncIterator[AnyChunk]:
        """Every chunk of this stream, from ``workflow-start`` to ``workflow-finish``."""
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[AnyChunk]:
        i = 0
        while True:
            while i < len(self._buffer):
                yield self._buffer[i]
                i += 1
            if self._done:
                return
            await self._wait()

    async def consume(self) -> None:
        while not self._done:
            await self._wait()

    @property
    async def result(self) -> WorkflowResult:
        """The run's result once the stream ended; raises the error that ended it early."""
        await self.consume()
        if self._result is None:
            raise self.error or RuntimeError("the workflow stream ended without a result")
        return self._result

    @property
    async def usage(self) -> dict[str, int]:
        """Token usage summed over the agent steps of this stream."""
        await self.consume()
        return dict(self._usage)
