"""A goal-driven agent: a judge checks every answer against the thread's objective.

    python examples/goal_agent.py

The writer model (scripted, no API key) first forgets the title; the judge (also scripted) says
"continue" with feedback, the loop goes on, the second answer has a title and the judge says
"done". Set ``OPENAI_API_KEY`` and pass ``--live`` to use ``openai/gpt-4.1-mini`` for both.
"""

from __future__ import annotations

import asyncio
import json
import sys

from runstream import Agent
from runstream.goals import GoalConfig
from runstream.memory import Memory
from runstream.models.base import LanguageModel
from runstream.runtime import Runstream
from runstream.testing import ScriptedModel


def models() -> tuple[LanguageModel | str, LanguageModel | str]:
    if "--live" in sys.argv:
        return "openai/gpt-4.1-mini", "openai/gpt-4.1-mini"
    writer = ScriptedModel.turns(
        "An old silent pond / a frog jumps in / splash of water",
        "Pond\n\nAn old silent pond / a frog jumps in / splash of water",
    )
    judge = ScriptedModel.turns(
        json.dumps({"decision": "continue", "reason": "The haiku has no title: add one."}),
        json.dumps({"decision": "done", "reason": "A titled haiku was delivered."}),
    )
    return writer, judge


async def main() -> None:
    writer, judge = models()
    agent = Agent(
        "poet",
        instructions="You write haiku.",
        model=writer,
        memory=Memory(),
        goal=GoalConfig(judge=judge, max_runs=5),
    )
    async with Runstream(agents=[agent]):
        await agent.set_objective("Write a haiku about a pond, with a title", thread_id="poems")
        out = await agent.stream("Write me a haiku", memory={"thread": "poems", "resource": "me"})
        async for chunk in out.full_stream:
            if chunk.type == "text-delta":
                print(chunk.payload["text"], end="", flush=True)
            elif chunk.type == "goal" and not chunk.payload.get("pending"):
                goal = chunk.payload
                print(
                    f"\n[goal] attempt {goal['iteration']}/{goal['maxRuns']}: {goal['status']} - {goal['reason']}"
                )
        record = await agent.get_objective(thread_id="poems")
        assert record is not None
        print(f"objective: {record.status} after {record.runs_used} judgements")


if __name__ == "__main__":
    asyncio.run(main())
