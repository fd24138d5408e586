"""The scores an agent's ``scorers`` leave on a run (``runstream.agent._scorers`` makes them;
``RunOutput.scores`` waits for them)."""

from __future__ import annotations

import asyncio
from typing import Literal, TypedDict


class RunScore(TypedDict):
    """A score an agent's scorer left on a run (Mastra's live score: ``source: "LIVE"``), as
    stored in the span store and listed by ``GET /api/observability/scores``."""

    scorerId: str
    scorerName: str
    scorerKey: str
    """The scorer's key in the agent's ``scorers``."""
    score: float
    reason: str | None
    source: Literal["LIVE"]
    entityType: Literal["AGENT"]
    entityId: str
    entityName: str
    runId: str
    traceId: str | None
    """The run's stored trace (``None`` without a span store, or when the trace was not sampled)."""
    spanId: str | None
    resourceId: str | None
    threadId: str | None


class RunScores:
    """A run's scorer jobs and the scores they made (``RunOutput.scores`` awaits them)."""

    __slots__ = ("scores", "tasks")

    def __init__(self) -> None:
        self.tasks: list[asyncio.Task[None]] = []
        self.scores: list[RunScore] = []

    async def wait(self) -> list[RunScore]:
        """The scores once every job has ended (a job cancelled at close leaves none)."""
        await asyncio.gather(*self.tasks, return_exceptions=True)
        return list(self.scores)
