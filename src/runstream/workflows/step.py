"""``Step``: one unit of a workflow, and the context its ``execute(ctx)`` receives.

``ctx.suspend(payload)`` and ``ctx.bail(value)`` end the execution at once by raising a
control-flow signal the engine catches (Mastra lets the code run on after ``suspend()`` and
takes its return value; here nothing after the call runs, which is what ``return await
suspend(...)`` in Mastra code means anyway).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NoReturn

from pydantic import BaseModel

from runstream._schema import Schema
from runstream.abort import AbortSignal
from runstream.errors import ConfigurationError

if TYPE_CHECKING:
    from runstream.workflows.events import Sink

SchemaLike = Schema | type[BaseModel] | Mapping[str, object] | None
Execute = Callable[["StepContext"], object]
"""A step's code: its output, or an awaitable of it."""


class StepSuspended(BaseException):
    """Raised by :meth:`StepContext.suspend`; a ``BaseException`` so ``except Exception`` in step
    code does not swallow it."""

    def __init__(self, payload: object) -> None:
        super().__init__("step suspended")
        self.payload = payload


class StepBailed(BaseException):
    """Raised by :meth:`StepContext.bail`."""

    def __init__(self, value: object) -> None:
        super().__init__("step bailed")
        self.value = value


class Step:
    """A workflow step: schemas plus an async (or sync) ``execute(ctx)``.

    Schemas are JSON schemas or pydantic models; with a pydantic ``input_schema`` the step sees
    ``ctx.input_data`` as the model instance (likewise ``resume_data``), and it may return a
    model instance as its output. ``retries`` overrides the workflow's ``retry_config``.
    """

    def __init__(
        self,
        id: str,
        execute: Execute,
        *,
        description: str = "",
        input_schema: SchemaLike = None,
        output_schema: SchemaLike = None,
        resume_schema: SchemaLike = None,
        suspend_schema: SchemaLike = None,
        state_schema: SchemaLike = None,
        retries: int | None = None,
    ) -> None:
        if not id:
            raise ConfigurationError("a step needs an id")
        self.id = id
        self.description = description
        self.input_schema = Schema.coerce(input_schema)
        self.output_schema = Schema.coerce(output_schema)
        self.resume_schema = Schema.coerce(resume_schema)
        self.suspend_schema = Schema.coerce(suspend_schema)
        self.state_schema = Schema.coerce(state_schema)
        self.retries = retries
        self._execute = execute

    async def execute(self, ctx: StepContext) -> object:
        result = self._execute(ctx)
        if inspect.isawaitable(result):
            return await result
        return result

    def __repr__(self) -> str:
        return f"Step({self.id!r})"


def step(
    id: str | None = None,
    *,
    description: str = "",
    input_schema: SchemaLike = None,
    output_schema: SchemaLike = None,
    resume_schema: SchemaLike = None,
    suspend_schema: SchemaLike = None,
    state_schema: SchemaLike = None,
    retries: int | None = None,
) -> Callable[[Execute], Step]:
    """Decorator form: ``@step(input_schema=..., output_schema=...) async def name(ctx): ...``."""

    def build(fn: Execute) -> Step:
        return Step(
            id or str(getattr(fn, "__name__", "")),
            fn,
            description=description or inspect.getdoc(fn) or "",
            input_schema=input_schema,
            output_schema=output_schema,
            resume_schema=resume_schema,
            suspend_schema=suspend_schema,
            state_schema=state_schema,
            retries=retries,
        )

    return build


class StepWriter:
    """``write(value)`` → a ``workflow-step-output`` chunk; ``custom({"type": "data-x", ...})`` →
    that ``data-*`` chunk.

    Each call yields to the event loop once, as a write into Mastra's streams does: steps
    writing concurrently (two agents in a foreach) interleave chunk by chunk.
    """

    __slots__ = ("_sink", "run_id", "step_name")

    def __init__(self, sink: Sink, step_name: str, run_id: str) -> None:
        self._sink = sink
        self.step_name = step_name
        self.run_id = run_id

    async def write(self, value: object) -> None:
        self._sink.output(self.step_name, self.run_id, value)
        await asyncio.sleep(0)

    async def custom(self, chunk: Mapping[str, Any]) -> None:
        self._sink.custom(chunk)
        await asyncio.sleep(0)


class StepContext:
    """What a running step can reach besides its input."""

    def __init__(
        self,
        *,
        step: Step,
        run_id: str,
        workflow_id: str,
        input_data: Any,
        state: dict[str, Any],
        writer: StepWriter,
        abort_signal: AbortSignal,
        retry_count: int,
        resume_data: Any,
        suspend_data: Any,
        results: Mapping[str, Any],
    ) -> None:
        self.run_id = run_id
        self.workflow_id = workflow_id
        self.input_data = input_data
        self.state = state
        self.writer = writer
        self.abort_signal = abort_signal
        self.retry_count = retry_count
        self.resume_data = resume_data
        self.suspend_data = suspend_data
        self.state_update: dict[str, Any] | None = None
        self._step = step
        self._results = results

    async def set_state(self, state: Mapping[str, object]) -> None:
        """Update the workflow state; later steps (and loop iterations) see it merged in."""
        if self._step.state_schema is not None:
            self._step.state_schema.validate(state, "Step state data validation failed:")
        self.state_update = dict(state)

    async def suspend(self, payload: object = None) -> NoReturn:
        """Suspend the step (and the run); ``run.resume_stream()`` runs it again with
        ``ctx.resume_data``."""
        if payload is not None and self._step.suspend_schema is not None:
            self._step.suspend_schema.validate(payload, "Step suspend data validation failed:")
        raise StepSuspended(payload)

    def bail(self, value: object = None) -> NoReturn:
        """End the workflow successfully now, with ``value`` as its result."""
        raise StepBailed(value)

    def get_step_result(self, step: str | Step) -> Any:
        """The output of a step that succeeded earlier in this run, else ``None``."""
        result = self._results.get(step if isinstance(step, str) else step.id)
        return (
            result.get("output")
            if isinstance(result, Mapping) and result.get("status") == "success"
            else None
        )

    def get_init_data(self) -> Any:
        """The workflow's input."""
        return self._results.get("input")
