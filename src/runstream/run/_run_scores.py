"""The scores an agent's ``scorers`` leave on a run (``runstream.agent._scorers`` makes them;
``RunOutput.scores`` waits for them), and what scorers see of a run (``scoringData``)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Literal, Protocol, TypedDict

from runstream.models.base import PromptMessage
from runstream.run._run_state import LoopConfig, RunState


class RunScore(TypedDict):
    """A score an agent's scorer left on a run (Mastra's live score: ``source: "LIVE"``), as
    stored in the span store and listed by ``GET /api/observability/scores``."""

    scorerId: str
    scorerName: str
    scorerKey: str
    """The scorer's key in the agent's ``scorers`` (or the run's own)."""
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


class Scored(Protocol):
    """A run whose scoring is known once it ended (a ``RunOutput``)."""

    @property
    def scoring(self) -> RunScores | None: ...


class TurnScores(RunScores):
    """The scores of an until-idle stream: each of its turns' (each a run its agent's scorers
    score), in turn order. ``turns`` grows as the stream starts them; :meth:`wait` is called
    once the stream ended, when every turn has its scoring."""

    __slots__ = ("turns",)

    def __init__(self, turns: Sequence[Scored]) -> None:
        super().__init__()
        self.turns = turns

    async def wait(self) -> list[RunScore]:
        scores: list[RunScore] = []
        for turn in self.turns:
            if turn.scoring is not None:
                scores += await turn.scoring.wait()
        return scores


class ScorerInput(TypedDict):
    """What a run was given (Mastra's ``ScorerRunInputForAgent``, as prompt messages)."""

    inputMessages: list[PromptMessage]
    rememberedMessages: list[PromptMessage]
    """The thread's history loaded into the run."""
    systemMessages: list[PromptMessage]
    taggedSystemMessages: dict[str, list[PromptMessage]]
    """Mastra's system messages added by tag (runstream has none: always ``{}``)."""


class ScoringData(TypedDict):
    """Mastra's ``scoringData`` (``returnScorerData``): a run's input and its response messages,
    as the agent's scorers see them."""

    input: ScorerInput
    output: list[PromptMessage]


def scoring_data(cfg: LoopConfig, state: RunState) -> ScoringData:
    """What scorers see of the ended run ``state``."""
    return {
        "input": {
            "inputMessages": state.new_input_messages,
            "rememberedMessages": state.messages[: state.history_count],
            "systemMessages": list(cfg.system),
            "taggedSystemMessages": {},
        },
        "output": state.response_messages,
    }
