"""Goals and task-completion scoring: every decision path of the judge, the budget guard."""

from __future__ import annotations

import json
from typing import Any

import pytest

from runstream import Agent
from runstream.chunks import AnyChunk
from runstream.goals import GoalConfig, JudgeInput
from runstream.memory import Memory
from runstream.runtime import Runstream
from runstream.scoring import ScoreInput, Scorer, TaskCompletion
from runstream.storage import InMemoryStorage
from runstream.testing import ScriptedModel

USAGE = {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2}
MEMORY = {"thread": "t1", "resource": "u1"}


def say(text: str) -> list[dict[str, Any]]:
    return [
        {"type": "text-start", "id": "a"},
        {"type": "text-delta", "id": "a", "delta": text},
        {"type": "text-end", "id": "a"},
        {"type": "finish", "finishReason": "stop", "usage": USAGE},
    ]


def verdict(decision: str, reason: str) -> list[dict[str, Any]]:
    return say(json.dumps({"decision": decision, "reason": reason}))


async def run(agent: Agent, message: str = "Write a haiku") -> list[AnyChunk]:
    out = await agent.stream(message, memory=MEMORY)
    return [chunk async for chunk in out.full_stream]


def goal_agent(model: ScriptedModel, judge: Any, max_runs: int = 3, **goal: Any) -> tuple[Runstream, Agent]:
    agent = Agent(
        "poet",
        instructions="Write haiku.",
        model=model,
        memory=Memory(),
        goal=GoalConfig(judge=judge, max_runs=max_runs, **goal),
    )
    return Runstream(agents=[agent], storage=InMemoryStorage()), agent


def goals(chunks: list[AnyChunk]) -> list[dict[str, Any]]:
    return [c.payload for c in chunks if c.type == "goal"]


async def test_continue_then_done() -> None:
    judge = ScriptedModel(calls=[verdict("continue", "Add a title."), verdict("done", "Titled haiku.")])
    model = ScriptedModel(calls=[say("pond / frog / splash"), say("Title: Pond\npond / frog / splash")])
    runtime, agent = goal_agent(model, judge)
    async with runtime:
        await agent.set_objective("Write a haiku with a title", thread_id="t1")
        chunks = await run(agent)
        record = await agent.get_objective(thread_id="t1")
    finals = [g for g in goals(chunks) if not g.get("pending")]
    assert [(g["iteration"], g["status"], g["shouldContinue"]) for g in finals] == [
        (1, "active", True),
        (2, "done", False),
    ]
    assert finals[1]["passed"] and finals[1]["results"][0]["scorerId"] == "goal-scorer"
    pending = [g for g in goals(chunks) if g.get("pending")]
    assert pending[1]["activity"] == [{"type": "reason", "message": "Add a title."}]
    signals = [c for c in chunks if c.type == "data-signal"]
    assert signals[0].data["tagName"] == "current-objective"
    assert signals[1].data["contents"].startswith("[Goal attempt 1/3] The goal is not yet complete.")
    # The model saw the objective and then the judge's feedback.
    second_prompt = json.dumps(model.recorded[1].prompt)
    assert "current-objective" in second_prompt and "Judge feedback: Add a title." in second_prompt
    assert record is not None and record.status == "done" and record.runs_used == 2
    # Each signal joins the conversation as a message, so the response goes on in a new
    # message: a new id after every signal, one UI message per answer.
    ids = [
        c.payload["messageId"] for c in chunks if c.type in ("start", "step-start", "step-finish", "finish")
    ]
    assert len(set(ids)) == 4 and ids[1] != ids[0] and ids[2] == ids[3] and ids[4] == ids[5]
    finish = chunks[-1].payload
    ui = finish["response"]["uiMessages"]
    assert [m["id"] for m in ui] == [ids[1], ids[3]]
    assert all(m["metadata"]["mastra"] == {"responseBoundary": True} for m in ui)
    roles = [m["role"] for m in finish["messages"]["all"]]
    assert roles == ["user", "user", "assistant", "user", "assistant"]  # input, objective, ..., reminder
    assert [m["role"] for m in finish["messages"]["nonUser"]] == ["assistant", "assistant"]


async def test_budget_exhausted_pauses_the_goal_and_later_runs_skip_it() -> None:
    judge = ScriptedModel(calls=[verdict("continue", "Not yet.")])
    model = ScriptedModel(calls=[say("draft")])
    runtime, agent = goal_agent(model, judge, max_runs=2)
    async with runtime:
        await agent.set_objective("Write a perfect haiku", thread_id="t1")
        chunks = await run(agent)
        final = goals(chunks)[-1]
        assert final["maxRunsReached"] and final["status"] == "paused" and not final["shouldContinue"]
        assert "Ran out of evaluation budget (2 runs)" in final["pausedReason"]
        record = await agent.get_objective(thread_id="t1")
        assert record is not None and record.status == "paused" and record.runs_used == 2
        again = await run(agent, "And now?")
        assert goals(again) == []  # a paused goal is not re-scored
        assert judge.call_count == 2
        # Raising the budget and reactivating resumes it.
        await agent.update_objective_options(thread_id="t1", max_runs=3, status="active")
        resumed = await run(agent, "Try again")
        assert goals(resumed)[-1]["iteration"] == 3


async def test_waiting_keeps_the_goal_active_and_stops_the_loop() -> None:
    judge = ScriptedModel(calls=[verdict("waiting", "Needs the user's pick.")])
    model = ScriptedModel(calls=[say("Which season?")])
    runtime, agent = goal_agent(model, judge)
    async with runtime:
        await agent.set_objective("Write a haiku the user approves", thread_id="t1")
        chunks = await run(agent)
        record = await agent.get_objective(thread_id="t1")
    final = goals(chunks)[-1]
    assert final["waitingForUser"] and final["status"] == "active" and not final["shouldContinue"]
    assert model.call_count == 1 and record is not None and record.status == "active"


async def test_a_failing_judge_pauses_the_goal_with_the_reason() -> None:
    judge = ScriptedModel(calls=[{"throwOnCall": {"message": "judge offline"}}])
    model = ScriptedModel(calls=[say("draft")])
    runtime, agent = goal_agent(model, judge, max_runs=500)
    async with runtime:
        await agent.set_objective("Write a haiku", thread_id="t1")
        chunks = await run(agent)
        record = await agent.get_objective(thread_id="t1")
    final = goals(chunks)[-1]
    assert final["judgeFailed"] and final["status"] == "paused" and "judge offline" in final["reason"]
    assert model.call_count == 1
    assert record is not None and record.runs_used == 1 and record.status == "paused"


@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        ("Looks fine to me.", "- root: Invalid input: expected object, received undefined"),
        ('{"reason": "fine"}', '- decision: Invalid option: expected one of "done"|"continue"|"waiting"'),
        (
            '{"decision": "maybe", "reason": "x"}',
            '- decision: Invalid option: expected one of "done"|"continue"|"waiting"',
        ),
    ],
)
async def test_a_judge_answer_that_breaks_the_schema_pauses_the_goal(answer: str, problem: str) -> None:
    runtime, agent = goal_agent(ScriptedModel(calls=[say("draft")]), ScriptedModel(calls=[say(answer)]))
    async with runtime:
        await agent.set_objective("Write a haiku", thread_id="t1")
        final = goals(await run(agent))[-1]
    assert final["judgeFailed"] and final["status"] == "paused"
    assert final["reason"] == (
        f"Scorer threw an error: Scorer Run Failed: Structured output validation failed: {problem}"
    )


async def test_no_judge_means_nothing_happens() -> None:
    model = ScriptedModel(calls=[say("draft")])
    runtime, agent = goal_agent(model, judge=lambda state: None)
    async with runtime:
        await agent.set_objective("Write a haiku", thread_id="t1")
        chunks = await run(agent)
        record = await agent.get_objective(thread_id="t1")
    assert goals(chunks) == [] and not any(c.type == "data-signal" for c in chunks)
    assert record is not None and record.runs_used == 0


async def test_no_objective_no_goal_chunks_and_clear_removes_it() -> None:
    judge = ScriptedModel(calls=[verdict("done", "ok")])
    runtime, agent = goal_agent(ScriptedModel(calls=[say("hi")]), judge)
    async with runtime:
        assert goals(await run(agent)) == []
        await agent.set_objective("x", thread_id="t1")
        assert await agent.clear_objective(thread_id="t1")
        assert await agent.get_objective(thread_id="t1") is None
        assert await agent.update_objective_options(thread_id="t1", max_runs=5) is None


async def test_custom_scorer_replaces_the_judge() -> None:
    seen: list[JudgeInput] = []

    async def scorer(data: JudgeInput) -> tuple[str, str]:
        seen.append(data)
        return "done", "looks right"

    runtime, agent = goal_agent(ScriptedModel(calls=[say("pond")]), judge=None, scorer=scorer)
    async with runtime:
        await agent.set_objective("Write about a pond", thread_id="t1")
        chunks = await run(agent, "Go")
    assert goals(chunks)[-1]["status"] == "done"
    assert seen[0].latest_user_message == "Go" and seen[0].latest_assistant_message == "pond"


def test_an_empty_objective_is_rejected() -> None:
    runtime, agent = goal_agent(ScriptedModel(calls=[say("x")]), judge=None)

    async def attempt() -> None:
        async with runtime:
            await agent.set_objective("  ", thread_id="t1")

    import asyncio

    with pytest.raises(ValueError, match="objective"):
        asyncio.run(attempt())


def contains(needle: str) -> Scorer:
    def score(data: ScoreInput) -> tuple[float, str]:
        return (1.0, "has it") if needle in data.text else (0.0, f"missing {needle}")

    return Scorer("needle", score, name="Needle")


async def test_task_completion_retries_until_the_scorer_passes() -> None:
    model = ScriptedModel(calls=[say("no citation"), say("cited [1]")])
    agent = Agent("c", model=model, is_task_complete=TaskCompletion(scorers=[contains("[1]")]))
    out = await agent.stream("Write")
    chunks = [c async for c in out.full_stream]
    checks = [c.payload for c in chunks if c.type == "is-task-complete"]
    assert [(c["iteration"], c["passed"]) for c in checks] == [(1, False), (2, True)]
    step_finishes = [c.payload for c in chunks if c.type == "step-finish"]
    assert step_finishes[0]["stepResult"]["isContinued"] and step_finishes[0]["isTaskCompleteCheckFailed"]
    feedback = model.recorded[1].prompt[-1]["content"][0]["text"]
    assert "NOT COMPLETE" in feedback and "missing [1]" in feedback
    assert "Score: 0 ❌" in feedback  # the score as JavaScript prints it
    # The retry is a new response message (the run's id with the iteration's number), and the
    # checked step's content gains the feedback once its step-finish is out.
    assert step_finishes[1]["messageId"] == f"{chunks[0].payload['messageId']}-2"
    first_step = step_finishes[1]["output"]["steps"][0]["content"]
    assert [p["text"] for p in first_step] == ["no citation", feedback]


async def test_task_completion_stops_at_the_step_limit() -> None:
    model = ScriptedModel(calls=[say("never")])
    agent = Agent("c", model=model, max_steps=2, is_task_complete={"scorers": [contains("[1]")]})
    chunks = [c async for c in (await agent.stream("Write")).full_stream]
    checks = [c.payload for c in chunks if c.type == "is-task-complete"]
    assert len(checks) == 2 and checks[-1]["maxIterationReached"]
    assert chunks[-1].type == "finish" and model.call_count == 2


async def test_any_strategy_passes_on_one_scorer() -> None:
    model = ScriptedModel(calls=[say("has [1] only")])
    completion = TaskCompletion(scorers=[contains("[1]"), contains("[2]")], strategy="any")
    chunks = [
        c async for c in (await Agent("c", model=model, is_task_complete=completion).stream("x")).full_stream
    ]
    assert next(c for c in chunks if c.type == "is-task-complete").payload["passed"]
