"""Run callbacks: Mastra's ``onChunk``, ``onStepFinish``, ``onFinish``, ``onError`` and
``onAbort`` options of ``stream()``/``generate()``.

Each callback (sync or async) runs when its chunk passes, *before* the chunk reaches the
consumers, so a consumer that sees ``finish`` knows ``on_finish`` has run:

* ``on_chunk(chunk)``: the content chunks Mastra hands to ``onChunk`` (text and reasoning
  deltas, sources, streamed tool input, tool calls, results, errors and denials, raw chunks,
  ``background-task-started``);
* ``on_step_finish(step)``: at each ``step-finish``, the step (as in ``await out.steps``) with its
  ``toolResults``, the ``runId`` and the ``model`` (``{"modelId", "provider"}``);
* ``on_finish(result)``: at ``finish``, what ``await out.get_full_output()`` returns, plus the
  ``model``;
* ``on_error({"error": error})``: at an ``error`` chunk;
* ``on_abort({"steps": [...], "text": ...})``: at ``abort``, the finished steps and the text of
  the step that was cut off.

A callback that raises ends the run with that error, as in Mastra (where it becomes a
``MastraError``).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from runstream.chunks import AgentChunk, ToolResultPayload
from runstream.run._run_state import LoopConfig, RunState, StepRecord
from runstream.run.output import FullOutput

Callback = Callable[[Any], Awaitable[None] | None]

ON_CHUNK_TYPES = frozenset(
    {
        "text-delta",
        "reasoning-delta",
        "source",
        "tool-call",
        "tool-call-input-streaming-start",
        "tool-call-delta",
        "tool-call-input-streaming-end",
        "tool-result",
        "tool-error",
        "tool-output-denied",
        "raw",
        "background-task-started",
    }
)


@dataclass(slots=True)
class RunCallbacks:
    on_chunk: Callback | None = None
    on_step_finish: Callback | None = None
    on_finish: Callback | None = None
    on_error: Callback | None = None
    on_abort: Callback | None = None


class CallbackObserver:
    """The callbacks as an observer of a run's chunks (``runstream.run._sources.Observer``): called as
    each chunk passes, before the consumers get it."""

    __slots__ = ("callbacks", "full_output", "model", "state", "step_text")

    def __init__(
        self,
        cfg: LoopConfig,
        state: RunState,
        callbacks: RunCallbacks,
        full_output: Callable[[], FullOutput],
    ) -> None:
        self.callbacks = callbacks
        self.state = state
        self.full_output = full_output
        self.model = {"modelId": cfg.model.model_id, "provider": cfg.model.provider}
        self.step_text: list[str] = []  # the text of the step in flight, for on_abort

    async def __call__(self, chunk: AgentChunk) -> Sequence[AgentChunk]:
        callbacks, kind = self.callbacks, chunk.type
        if callbacks.on_abort is not None:
            if kind == "step-start":
                self.step_text.clear()
            elif chunk.type == "text-delta":
                self.step_text.append(chunk.payload["text"])
        if callbacks.on_chunk is not None and kind in ON_CHUNK_TYPES:
            await _call(callbacks.on_chunk, chunk)
        elif kind == "step-finish" and callbacks.on_step_finish is not None and self.state.steps:
            await _call(callbacks.on_step_finish, _step_event(self.state, self.model))
        elif kind == "finish" and callbacks.on_finish is not None:
            await _call(callbacks.on_finish, {**self.full_output(), "model": self.model})
        elif chunk.type == "error" and callbacks.on_error is not None:
            await _call(callbacks.on_error, {"error": chunk.payload.get("error")})
        elif kind == "abort" and callbacks.on_abort is not None:
            steps = list(self.state.steps)
            await _call(callbacks.on_abort, {"steps": steps, "text": "".join(self.step_text)})
        return ()


class StepFinishEvent(StepRecord):
    """What ``on_step_finish`` gets: the step, its tools' results, the run and the model."""

    toolResults: list[ToolResultPayload]
    runId: str
    model: dict[str, str]


def _step_event(state: RunState, model: dict[str, str]) -> StepFinishEvent:
    step = state.steps[-1]
    ids = {call["toolCallId"] for call in step.get("toolCalls", [])}
    results = [c.payload for c in state.tool_results if c.payload.get("toolCallId") in ids]
    return {**step, "toolResults": results, "runId": state.run_id, "model": model}


async def _call(hook: Callback, event: Any) -> None:
    result = hook(event)
    if result is not None and inspect.isawaitable(result):  # (a plain function returns None)
        await result
