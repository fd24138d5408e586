"""The Runstream of the durable-run tests: every agent run is a Temporal workflow
(``TemporalRuns``); its model and tools run in ``runstream worker durable_app:runtime``
processes. Configured by the environment ``temporal_cluster.Cluster`` sets.

The model is a function of the prompt (each worker has its own copy, so a step that moves to
another worker gets the same answer): a user message ``<tool> <arg>`` makes it call that tool,
a tool result makes it answer with the result word by word, and a turn after its own answer
(an until-idle continuation) says the research is in. ``lookup`` and ``research`` wait for the
test's gates; ``wire`` needs approval; ``survey`` too, then runs in the background (gated); ``confirm``
suspends until resumed. ``both <topic>``
calls ``research`` and ``lookup`` in one step. The agent ``poet`` has goals, judged by a model
that wants a title.
"""

from __future__ import annotations

import json
import os
from typing import Any

from redis.asyncio import Redis
from temporal_app import GATE_TIMEOUT_S, HEARTBEAT_TIMEOUT_MS, env, gate_key, say

from runstream import Agent, ToolContext, tool
from runstream.durable import TemporalRuns
from runstream.goals import GoalConfig
from runstream.memory import Memory
from runstream.runtime import Runstream
from runstream.storage import PostgresStorage
from runstream.tasks.config import BackgroundTaskConfig
from runstream.tasks.temporal import TemporalSettings, TemporalTaskManager
from runstream.testing import FunctionModel, ModelCall, Text, ToolCall, Turn

AGENT_ID = "durable"


async def gate(name: str) -> None:
    """Wait until the test opens the gate ``name`` (in 1 s polls: this Redis client gives up on
    a blocking call after 5 s)."""
    client = Redis.from_url(env("RUNSTREAM_TEST_REDIS_URL"))
    try:
        for _ in range(GATE_TIMEOUT_S):
            if await client.blpop([gate_key(env("TEMPORAL_TEST_PREFIX"), name)], timeout=1) is not None:
                return
        raise TimeoutError(f"gate {name} never opened")
    finally:
        await client.aclose()


def respond(call: ModelCall) -> Turn:
    verb, _, arg = call.last_user_text.partition(" ")
    last_user = max(i for i, m in enumerate(call.prompt) if m["role"] == "user")
    after = [m for m in call.prompt[last_user + 1 :] if m["role"] != "system"]
    if not after and verb == "both":  # a background task and a foreground tool in one step
        return [ToolCall("research", {"topic": arg}), ToolCall("lookup", {"topic": arg})]
    if not after:
        return ToolCall(verb, {"amount": int(arg)} if verb == "wire" else {"topic": arg})
    if after[-1]["role"] == "tool":
        output = call.tool_results[-1]["output"]
        return Text(
            f"{verb} {arg} gave {json.dumps(output.get('value'), sort_keys=True)} as you asked", words=True
        )
    return Text("All the research is in.", words=True)


def poet(call: ModelCall) -> Turn:
    """Writes a haiku, titled once the judge asked for a title."""
    asked = any("Judge feedback" in json.dumps(m) for m in call.prompt)
    return Text("Title: Pond\npond / frog / splash" if asked else "pond / frog / splash")


def judge(call: ModelCall) -> Turn:
    """Done once the haiku has a title."""
    titled = "Title:" in json.dumps(call.prompt)
    return Text(json.dumps({"decision": "done" if titled else "continue", "reason": "Add a title."}))


def build_poet() -> Agent:
    """An agent whose threads may have a goal, judged after each of its turns."""
    return Agent(
        "poet",
        instructions="Write haiku.",
        model=FunctionModel(poet),
        memory=Memory(),
        goal=GoalConfig(judge=FunctionModel(judge)),
    )


def build_agent() -> Agent:
    @tool
    async def lookup(topic: str) -> dict[str, Any]:
        """Look a topic up (waits for the test's gate)."""
        say(event="started", tool="lookup", topic=topic)
        await gate(f"lookup-{topic}")
        return {"topic": topic, "fact": f"{topic} is bright"}

    @tool(require_approval=True)
    async def wire(amount: int) -> dict[str, Any]:
        """Wire money (needs a human's approval)."""
        say(event="ran", tool="wire", amount=amount)
        return {"sent": amount}

    @tool(background={"enabled": True, "maxRetries": 1})
    async def research(topic: str, ctx: ToolContext) -> dict[str, Any]:
        """Research a topic in the background (says so in its output, then waits for the
        test's gate)."""
        say(event="started", tool="research", topic=topic)
        await ctx.writer.write({"researching": topic, "pid": os.getpid()})
        await gate(f"research-{topic}")
        return {"topic": topic, "summary": f"{topic} is fast"}

    @tool(require_approval=True, background={"enabled": True, "maxRetries": 1})
    async def survey(topic: str) -> dict[str, Any]:
        """Survey a topic in the background once a human approved (waits for the test's gate)."""
        say(event="started", tool="survey", topic=topic)
        await gate(f"survey-{topic}")
        return {"topic": topic, "summary": f"{topic} is wide"}

    @tool
    async def confirm(topic: str, ctx: ToolContext) -> dict[str, Any]:
        """Ask the user to confirm a topic (suspends until resumed)."""
        if ctx.resume_data is None:
            await ctx.suspend({"question": f"confirm {topic}?"})
        say(event="resumed", tool="confirm", data=ctx.resume_data)
        return {"topic": topic, "answer": ctx.resume_data}

    return Agent(
        AGENT_ID,
        instructions="Help.",
        model=FunctionModel(respond),
        tools=[lookup, wire, research, survey, confirm],
        memory=Memory(),
    )


def runtime(max_history_events: int = 2_000, max_concurrent_runs: int | None = None) -> Runstream:
    storage = PostgresStorage(env("RUNSTREAM_TEST_POSTGRES_URL"), schema=env("TEMPORAL_TEST_SCHEMA"))
    prefix = env("TEMPORAL_TEST_PREFIX")
    manager = TemporalTaskManager(
        storage,
        BackgroundTaskConfig(),
        temporal=TemporalSettings(
            address=env("TEMPORAL_TEST_ADDRESS"),
            task_queue=prefix,
            heartbeat_timeout_ms=HEARTBEAT_TIMEOUT_MS,
            recheck_interval_ms=1000,
            graceful_shutdown_ms=2000,
        ),
        redis_url=env("RUNSTREAM_TEST_REDIS_URL"),
        channel_prefix=prefix,
    )
    runs = TemporalRuns(
        env("RUNSTREAM_TEST_REDIS_URL"),
        heartbeat_timeout_ms=HEARTBEAT_TIMEOUT_MS,
        log_prefix=f"{prefix}:durable",
        max_history_events=max_history_events,
        max_concurrent_runs=max_concurrent_runs,
    )
    return Runstream(
        agents=[build_agent(), build_poet()], storage=storage, task_manager=manager, durable_runs=runs
    )


def capped_runtime() -> Runstream:
    """A worker's runtime with a cluster-wide cap of 2 durable runs at once."""
    return runtime(max_concurrent_runs=2)


def api_app() -> Any:
    """An API process of the fault tests (``runstream serve durable_app:api_app``): open access,
    resumable streams in the shared Redis."""
    from runstream.server import create_app
    from runstream.server.auth import open_access
    from runstream.server.redis_replay import RedisReplayLog

    prefix = env("TEMPORAL_TEST_PREFIX")
    log = RedisReplayLog(env("RUNSTREAM_TEST_REDIS_URL"), prefix=f"{prefix}:replay")
    return create_app(runtime(), auth=open_access, replay_log=log)
