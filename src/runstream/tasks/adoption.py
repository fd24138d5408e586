"""A tool running as a background task hands an already-started job to its task
(Mastra's ``context.background.adopt(operation)``).

    @tool(background={"enabled": True})
    async def transcode(url: str, ctx: ToolContext) -> str:
        job = await encoder.submit(url)                  # already running elsewhere
        ctx.background.adopt(BackgroundTaskOperation(completion=job.result(), cancel=job.cancel))
        return "submitted"                               # the task's result is the job's

The task then ends with the operation's result (or its error) instead of the tool's return
value, and a cancel or a timeout of the task calls ``cancel(reason)``. A tool may adopt one
operation, and only before it returns; ``ctx.background`` is ``None`` outside a background task.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from runstream.abort import AbortSignal
from runstream.tasks.config import TaskStateError

logger = logging.getLogger(__name__)


class AdoptionError(TaskStateError, RuntimeError):
    """``ctx.background.adopt`` called when the task takes no operation (any more): after the
    tool returned, or a second time. Also the ``RuntimeError`` it was before the error tree."""


@dataclass(slots=True)
class BackgroundTaskOperation:
    """A process-local job: its result, and how to stop it."""

    completion: Awaitable[Any]
    cancel: Callable[[object], Awaitable[None] | None] | None = None


class BackgroundTaskAdoption:
    """``ctx.background`` of a tool that runs as a background task."""

    def __init__(
        self, task_id: str, disposition: Literal["deferred", "awaited"], abort_signal: AbortSignal
    ) -> None:
        self.task_id = task_id
        self.disposition = disposition
        self._signal = abort_signal
        self._operation: BackgroundTaskOperation | None = None
        self._completion: asyncio.Future[Any] | None = None
        self._accepting = True
        self._cancelled = False
        self._remove_listener: Callable[[], None] | None = None
        self._cancelling: asyncio.Future[None] | None = None

    def adopt(self, operation: BackgroundTaskOperation) -> None:
        """Make ``operation`` this task's work (its result is the task's result)."""
        if not self._accepting:
            raise AdoptionError("A background operation must be adopted before the tool returns")
        if self._operation is not None:
            raise AdoptionError("A background tool may adopt only one operation")
        self._operation = operation
        self._completion = asyncio.ensure_future(operation.completion)
        if operation.cancel is not None:
            self._remove_listener = self._signal.add_listener(lambda reason: self._spawn_cancel(reason))
            if self._signal.aborted:
                self._spawn_cancel(self._signal.reason)

    @property
    def adopted(self) -> bool:
        return self._operation is not None

    async def result(self, returned: Any) -> Any:
        """The task's result once the tool returned ``returned``."""
        self._accepting = False
        if self._completion is None:
            return returned
        try:
            return await self._completion
        finally:
            self._close()

    async def failed(self, reason: BaseException) -> None:
        """The task failed: if the tool itself raised, its adopted operation is cancelled."""
        raised_by_tool, self._accepting = self._accepting, False
        if raised_by_tool and self._operation is not None:
            await self._cancel(reason)
        self._close()

    def _spawn_cancel(self, reason: object) -> None:
        self._cancelling = asyncio.ensure_future(self._cancel(reason))

    async def _cancel(self, reason: object) -> None:
        operation = self._operation
        if operation is None or operation.cancel is None or self._cancelled:
            return
        self._cancelled = True
        try:
            outcome = operation.cancel(reason)
            if inspect.isawaitable(outcome):
                await outcome
        except Exception:
            logger.exception("background task %s: cancelling its adopted operation failed", self.task_id)

    def _close(self) -> None:
        if self._remove_listener is not None:
            self._remove_listener()
            self._remove_listener = None
