"""A run's own ``scorers`` and ``return_scorer_data`` (Mastra's per-call ``scorers`` and
``returnScorerData``), and an until-idle stream's scores.

A run's ``scorers`` replace the agent's for that run (``{}``: none), given as scorers or named (a
key of the agent's ``scorers``, one of its scorers' ids, a scorer registered on the runtime); a
name that is none of these fails the call before it starts, with a did-you-mean; a restored run
(whose options name its scorers) leaves out, logged, a name its runtime does not know.
``return_scorer_data=True`` puts what the scorers see into the full output (``scoringData``).
An until-idle stream's ``scores`` are its turns' scores, in turn order."""

from __future__ import annotations

import asyncio
import logging

import pytest

from runstream import Agent, Runstream, ToolContext, tool
from runstream.agent._scorers import resolve_scorers
from runstream.agent.run_options import RunOptions
from runstream.background_scoring import ScoringRunner
from runstream.errors import InvalidInputError
from runstream.memory import Memory
from runstream.models.base import PromptMessage
from runstream.scoring import AgentScorer, ScoreInput, Scorer, ScorerRef
from runstream.storage import InMemoryStorage
from runstream.testing import ScriptedModel, Text, ToolCall

MEMORY = {"thread": "t1", "resource": "u1"}


def _said(message: PromptMessage) -> str:
    content = message["content"]
    return content if isinstance(content, str) else "".join(p["text"] for p in content if p["type"] == "text")


def answer(data: ScoreInput) -> tuple[float, str]:
    """Quotes the answer it scored."""
    return 1.0, f"said {data.text!r}"


OWN = Scorer(id="own", score=answer, name="Own")
REGISTERED = Scorer(id="relevance", score=answer, name="Relevance")


def judged(*replies: str) -> tuple[Runstream, Agent]:
    agent = Agent("judged", model=ScriptedModel.text(*replies), scorers={"mine": OWN})
    return Runstream(agents=[agent], scorers=[REGISTERED], scoring=ScoringRunner(sample=lambda: 0.5)), agent


async def keys_scored(agent: Agent, **options: object) -> list[tuple[str, str]]:
    out = await agent.stream("Capital of France?", **options)  # type: ignore[arg-type]
    return sorted((score["scorerKey"], score["scorerId"]) for score in await out.scores)


async def test_a_runs_scorers_replace_the_agents_for_that_run() -> None:
    runtime, agent = judged("one", "two", "three", "four", "five", "six")
    extra = Scorer(id="extra", score=answer)
    async with runtime:
        assert await keys_scored(agent) == [("mine", "own")]
        assert await keys_scored(agent, scorers={"added": extra}) == [("added", "extra")]
        # by name: a key of the agent's scorers, one of its scorers' ids, a registered scorer's id
        named = {"again": "mine", "by_id": {"scorer": "own"}, "reg": {"scorer": "relevance", "sampling": 1}}
        assert await keys_scored(agent, scorers=named) == [
            ("again", "own"),
            ("by_id", "own"),
            ("reg", "relevance"),
        ]
        assert await keys_scored(agent, scorers=["relevance"]) == [("relevance", "relevance")]
        # sampled as the agent's are (the runner draws 0.5): a rate of 0.5 scores no run
        assert await keys_scored(agent, scorers={"half": {"scorer": "relevance", "sampling": 0.5}}) == []
        assert await keys_scored(agent, scorers={}) == []  # none this run (Mastra: scorers: {})


async def test_a_name_no_scorer_has_fails_the_call_before_the_run_starts() -> None:
    runtime, agent = judged("never")
    model = agent.model
    async with runtime:
        with pytest.raises(
            InvalidInputError,
            match=r"scorers\['k'\]: no scorer 'relevence' on agent 'judged' "
            r"or its runtime; did you mean 'relevance'\? \(known: 'mine', 'own', 'relevance'\)",
        ):
            await agent.stream("hi", scorers={"k": "relevence"})
        with pytest.raises(
            InvalidInputError, match=r"scorers\['k'\]: unknown option 'smapling'; did you mean 'sampling'"
        ):
            await agent.stream("hi", scorers={"k": {"scorer": "own", "smapling": 0.5}})
        with pytest.raises(InvalidInputError, match=r"scorers\['k'\]\.sampling must be at most 1"):
            await agent.stream("hi", scorers={"k": {"scorer": "own", "sampling": 2}})
        with pytest.raises(
            InvalidInputError, match=r"scorers\['k'\] must be a Scorer, an AgentScorer, a scorer's name"
        ):
            await agent.stream("hi", scorers={"k": 5})
    assert isinstance(model, ScriptedModel) and model.call_count == 0  # nothing ran


def test_a_runs_scorers_are_saved_by_name_and_a_restored_run_leaves_out_an_unknown_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    options = RunOptions.of(
        {"scorers": {"k": AgentScorer(OWN, 0.25), "r": "relevance"}, "returnScorerData": True}
    )
    saved = options.to_json()
    assert saved["scorers"] == {
        "k": {"scorer": "own", "sampling": 0.25},
        "r": {"scorer": "relevance", "sampling": 1.0},
    }
    restored = RunOptions.from_json(saved)
    assert restored.scorers == {"k": ScorerRef("own", 0.25), "r": ScorerRef("relevance", 1.0)}
    assert (
        restored.return_scorer_data is True and RunOptions.from_json(RunOptions().to_json()).scorers is None
    )
    with caplog.at_level(logging.WARNING, logger="runstream.scoring"):
        found = resolve_scorers(
            restored.scorers, {"mine": AgentScorer(OWN)}, {}, agent_id="judged", strict=False
        )
    assert found == {"k": AgentScorer(OWN, 0.25)}  # this runtime registered no 'relevance'
    (warning,) = [r for r in caplog.records if r.name == "runstream.scoring"]
    assert "scorers['r']: no scorer 'relevance' on agent 'judged'" in warning.getMessage()


async def test_return_scorer_data_gives_what_the_scorers_see() -> None:
    agent = Agent(
        "remembering",
        instructions="Answer briefly.",
        model=ScriptedModel.text("Paris.", "Rome."),
        memory=Memory(),
    )
    async with Runstream(agents=[agent], storage=InMemoryStorage()):
        plain = await agent.generate("Capital of France?", memory=MEMORY)
        full = await agent.generate("And of Italy?", memory=MEMORY, return_scorer_data=True)
    assert "scoringData" not in plain
    data = full["scoringData"]
    assert [_said(m) for m in data["input"]["inputMessages"]] == ["And of Italy?"]
    assert [_said(m) for m in data["input"]["rememberedMessages"]] == ["Capital of France?", "Paris."]
    assert data["input"]["systemMessages"] == [{"role": "system", "content": "Answer briefly."}]
    assert data["input"]["taggedSystemMessages"] == {}
    assert [(m["role"], _said(m)) for m in data["output"]] == [("assistant", "Rome.")]


async def test_an_until_idle_streams_scores_are_its_turns_in_turn_order() -> None:
    release = asyncio.Event()

    @tool(background=True)
    async def research(topic: str, ctx: ToolContext) -> dict[str, str]:
        """Research a topic (slow)."""
        await release.wait()
        return {"topic": topic}

    agent = Agent(
        "researcher",
        model=ScriptedModel.turns(
            ToolCall("research", {"topic": "sol"}), Text("Started."), Text("Done: sol.")
        ),
        tools=[research],
        memory=Memory(),
        scorers={"answer": Scorer(id="answer", score=answer)},
    )
    runtime = Runstream(agents=[agent], storage=InMemoryStorage(), background_tasks={"enabled": True})
    async with runtime:
        out = await agent.stream("Research sol", memory=MEMORY, until_idle=True, scorers=["answer"])
        starts: list[str] = []
        async with asyncio.timeout(10):
            async for chunk in out.full_stream:
                if chunk.type == "start":
                    starts.append(chunk.run_id)
                if chunk.type == "finish" and len(starts) == 1:
                    release.set()  # the first turn is over: the task finishes, a continuation follows
        scores = await out.scores
    assert len(starts) == 2 and starts[0] != starts[1]
    assert [(s["runId"], s["reason"]) for s in scores] == [
        (starts[0], "said 'Started.'"),
        (starts[1], "said 'Done: sol.'"),
    ]
