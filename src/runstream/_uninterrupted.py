"""Work that must finish once started, whatever cancellations arrive meanwhile: transaction
control (a ``BEGIN`` without its ``COMMIT`` or ``ROLLBACK`` leaves a connection unusable) and a
score's write (stored whole or not at all)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any


async def run_to_end(work: Awaitable[Any]) -> bool:
    """Await ``work`` to its end whatever cancellations arrive meanwhile (anyio, under Starlette,
    re-delivers one at every await until its scope exits); ``True`` if one arrived, for the
    caller to act on (roll back, re-raise) once the work is done."""
    task = asyncio.ensure_future(work)
    cancelled = False
    while True:
        try:
            await asyncio.shield(task)
            return cancelled
        except asyncio.CancelledError:
            if task.done() and task.cancelled():
                raise
            cancelled = True
