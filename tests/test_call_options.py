"""Per-call instructions, system, model, active_tools and require_tool_approval; sub-agents as a
named map and workflows on an agent (Mastra's ``agents`` and ``workflows``)."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import httpx2 as httpx
import pytest

from runstream import Agent, ToolContext, tool
from runstream.agent.run_options import RequestPolicy
from runstream.chunks import AnyChunk
from runstream.memory import Memory
from runstream.runtime import Runstream
from runstream.server import create_app
from runstream.server.auth import open_access
from runstream.storage import InMemoryStorage
from runstream.testing import ScriptedModel
from runstream.workflows import Step, StepContext, Workflow

USAGE = {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2}


def calls(*tool_calls: tuple[str, str, str]) -> list[dict[str, Any]]:
    return [
        *(
            {"type": "tool-call", "toolCallId": cid, "toolName": name, "input": args}
            for cid, name, args in tool_calls
        ),
        {"type": "finish", "finishReason": "tool-calls", "usage": USAGE},
    ]


def say(text: str) -> list[dict[str, Any]]:
    return [
        {"type": "text-start", "id": "t"},
        {"type": "text-delta", "id": "t", "delta": text},
        {"type": "text-end", "id": "t"},
        {"type": "finish", "finishReason": "stop", "usage": USAGE},
    ]


def systems(model: ScriptedModel, call: int = 0) -> list[str]:
    return [str(m["content"]) for m in model.recorded[call].prompt if m["role"] == "system"]


async def drain(out: Any) -> list[AnyChunk]:
    async with asyncio.timeout(10):
        return [chunk async for chunk in out.full_stream]


@tool
def weather(city: str) -> str:
    """The weather."""
    return f"sunny in {city}"


@tool
def delete_account(user: str) -> str:
    """Delete an account."""
    return f"deleted {user}"


async def test_instructions_system_and_model_per_call() -> None:
    agent_model = ScriptedModel.text("agent model")
    call_model = ScriptedModel.text("call model")
    agent = Agent("a", model=agent_model, instructions="Be brief.")
    out = await agent.stream(
        "hi", instructions=lambda rc: f"Speak {rc['lang']}.", system=["Today is Monday."], model=call_model,
        request_context={"lang": "French"},
    )  # fmt: skip
    await drain(out)
    assert out.state.text == "call model" and agent_model.call_count == 0
    assert systems(call_model) == ["Speak French.", "Today is Monday."]
    await drain(await agent.stream("hi", system="Extra."))
    assert systems(agent_model) == ["Be brief.", "Extra."]


async def test_active_tools_offers_only_the_named_tools() -> None:
    model = ScriptedModel.text("ok")
    agent = Agent("a", model=model, tools=[weather, delete_account])
    await drain(await agent.stream("hi", active_tools=["weather"]))
    assert model.recorded[0].tools == ["weather"]
    with pytest.raises(ValueError, match=r"active_tools names no tool: 'wether'"):
        await agent.stream("hi", active_tools=["wether"])


async def test_require_tool_approval_makes_every_call_wait() -> None:
    model = ScriptedModel(calls=[calls(("c1", "weather", '{"city":"Oslo"}')), say("Sunny.")])
    agent = Agent("a", model=model, tools=[weather])
    out = await agent.stream("weather?", require_tool_approval=True)
    kinds = [c.type for c in await drain(out)]
    assert "tool-call-approval" in kinds and "tool-result" not in kinds
    assert not weather.require_approval  # the agent's tool itself is unchanged
    resumed = await agent.approve_tool_call(run_id=out.run_id)
    assert "tool-result" in [c.type for c in await drain(resumed)]


async def test_call_options_survive_a_restart_of_a_suspended_run() -> None:
    storage = InMemoryStorage()

    def build() -> tuple[Agent, ScriptedModel]:
        model = ScriptedModel(calls=[calls(("c1", "weather", '{"city":"Oslo"}')), say("Sunny.")])
        agent = Agent(
            "a", model=model, instructions="Agent.", tools=[weather, delete_account], memory=Memory()
        )
        Runstream(agents=[agent], storage=storage)
        return agent, model

    first, _ = build()
    out = await first.stream(
        "weather?", instructions="Call.", system="Sys.", active_tools=["weather"], require_tool_approval=True
    )
    await drain(out)
    restarted, model = build()
    await drain(await restarted.approve_tool_call(run_id=out.run_id))
    assert systems(model) == ["Call.", "Sys."] and model.recorded[0].tools == ["weather"]


async def test_sub_agents_by_name_and_workflows_on_an_agent() -> None:
    async def double(ctx: StepContext) -> Any:
        return {"n": ctx.input_data["n"] * 2}

    doubler = (
        Workflow("doubler-v2", input_schema={"type": "object", "properties": {"n": {"type": "number"}}})
        .then(Step("double", double))
        .commit()
    )
    researcher = Agent("researcher-v3", name="Researcher", model=ScriptedModel.text("found it"))
    model = ScriptedModel(
        calls=[
            calls(
                ("c1", "agent-researcher", '{"prompt":"look"}'),
                ("c2", "workflow-doubler", '{"inputData":{"n":21}}'),
            ),
            say("done"),
        ]
    )
    agent = Agent(
        "lead",
        model=model,
        instructions=lambda rc: f"Lead for {rc.get('tenant')}.",
        agents={"researcher": researcher},
        workflows={"doubler": doubler},
    )
    chunks = await drain(await agent.stream("go"))
    results = {c.payload["toolName"]: c.payload["result"] for c in chunks if c.type == "tool-result"}
    assert results["agent-researcher"]["text"] == "found it"
    assert results["workflow-doubler"]["result"] == {"n": 42}

    agent.request_policy = RequestPolicy(request_context={"tenant"})  # a request may set it
    app = create_app(Runstream(agents=[agent]), auth=open_access)
    context = base64.b64encode(json.dumps({"tenant": "acme"}).encode()).decode()
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        details = (await client.get(f"/api/agents/lead?requestContext={context}")).json()
        bad = await client.get("/api/agents/lead?requestContext=not-base64!")
    assert details["instructions"] == "Lead for acme."
    assert details["agents"] == {"researcher": {"id": "researcher-v3", "name": "Researcher"}}
    assert details["workflows"]["doubler"]["name"] == "doubler-v2"
    assert set(details["tools"]) == {"agent-researcher", "workflow-doubler"}
    assert bad.status_code == 400 and "requestContext" in bad.text


async def test_approve_with_until_idle_streams_the_background_work_it_starts() -> None:
    release = asyncio.Event()

    @tool(background={"enabled": True})
    async def research(topic: str) -> str:
        """Research a topic (slow)."""
        await release.wait()
        return f"{topic}: two a day"

    model = ScriptedModel(
        calls=[
            calls(("c1", "delete_account", '{"user":"ada"}')),
            calls(("c2", "research", '{"topic":"tides"}')),
            say("Started."),
            say("Tides: two a day."),
        ]
    )
    agent = Agent(
        "a",
        model=model,
        tools=[tool(require_approval=True, name="delete_account")(_delete), research],
        memory=Memory(),
    )
    memory = {"thread": "t", "resource": "u"}
    async with Runstream(agents=[agent], background_tasks={"enabled": True}):
        out = await agent.stream("delete ada, then research", memory=memory)
        await drain(out)
        resumed = await agent.approve_tool_call(run_id=out.run_id, until_idle=True)
        kinds = []
        async with asyncio.timeout(10):
            async for chunk in resumed.full_stream:
                kinds.append(chunk.type)
                if chunk.type == "finish" and kinds.count("finish") == 1:
                    release.set()
    assert kinds.count("finish") == 2 and "background-task-completed" in kinds
    assert kinds.index("background-task-completed") < kinds.index("start")


def _delete(user: str) -> str:
    """Delete an account."""
    return f"deleted {user}"


def concurrency_probe() -> tuple[Any, dict[str, int]]:
    counts = {"running": 0, "peak": 0}

    async def work(item: str) -> str:
        counts["running"] += 1
        counts["peak"] = max(counts["peak"], counts["running"])
        await asyncio.sleep(0)  # let the other calls start meanwhile (if they may)
        counts["running"] -= 1
        return item

    return tool(name="work", description="Work on an item.")(work), counts


async def test_tool_call_concurrency_caps_a_steps_calls() -> None:
    async def peak(limit: Any, *extra: Any) -> int:
        work, counts = concurrency_probe()
        model = ScriptedModel(
            calls=[calls(*((f"c{i}", "work", f'{{"item":"{i}"}}') for i in range(4))), say("ok")]
        )
        agent = Agent("a", model=model, tools=[work, *extra])
        await drain(await agent.stream("go", tool_call_concurrency=limit))
        return counts["peak"]

    @tool(suspend_schema={"type": "object"})
    async def confirm(ctx: ToolContext) -> str:
        """Ask for confirmation."""
        await ctx.suspend({"q": "ok?"})
        return "never"

    assert await peak(None) == 4
    assert await peak(2) == 2
    assert await peak(None, confirm) == 1  # a suspend-capable tool on offer: one at a time
    assert await peak({"limit": 3, "strategy": "called"}, confirm) == 3  # ... unless it is called
    with pytest.raises(ValueError, match="tool_call_concurrency must be at least 1"):
        await peak(0)
    with pytest.raises(ValueError, match=r"tool_call_concurrency.strategy must be one of"):
        await peak({"limit": 2, "strategy": "some"})


async def test_an_approval_policy_function_decides_per_call() -> None:
    asked: list[dict[str, Any]] = []

    async def policy(call: dict[str, Any]) -> bool:
        asked.append(call)
        return call["toolName"] == "delete_account" and call["args"]["user"] == "root"

    model = ScriptedModel(
        calls=[
            calls(
                ("c1", "weather", '{"city":"Oslo"}'),
                ("c2", "delete_account", '{"user":"ada"}'),
                ("c3", "delete_account", '{"user":"root"}'),
            ),
            say("Done."),
        ]
    )
    agent = Agent("a", model=model, tools=[weather, delete_account])
    out = await agent.stream("go", require_tool_approval=policy, request_context={"tenant": "acme"})
    chunks = await drain(out)
    approvals = [c.payload["toolCallId"] for c in chunks if c.type == "tool-call-approval"]
    assert approvals == ["c3"] and "tool-result" not in [c.type for c in chunks]
    assert asked[0] == {"toolName": "weather", "args": {"city": "Oslo"}, "requestContext": {"tenant": "acme"}}
    resumed = await agent.approve_tool_call(run_id=out.run_id)
    results = [c.payload["toolCallId"] for c in await drain(resumed) if c.type == "tool-result"]
    assert results == ["c1", "c2", "c3"]


async def test_stop_when_ends_the_run_after_the_step_that_meets_a_condition() -> None:
    from runstream.stop_conditions import has_tool_call, step_count_is

    def lookups() -> ScriptedModel:
        return ScriptedModel(calls=[calls((f"c{i}", "weather", '{"city":"Oslo"}')) for i in range(4)])

    async def finish_of(model: ScriptedModel, stop_when: Any) -> tuple[int, Any]:
        out = await Agent("a", model=model, tools=[weather], max_steps=10).stream("go", stop_when=stop_when)
        chunks = await drain(out)
        return model.call_count, [c.payload["stepResult"] for c in chunks if c.type == "step-finish"][-1]

    assert await finish_of(lookups(), has_tool_call("weather")) == (
        1,
        {"reason": "tool-calls", "isContinued": False},
    )
    assert (await finish_of(lookups(), [step_count_is(3)]))[0] == 3

    async def after_two_results(event: dict[str, Any]) -> bool:  # async, and it sees every step
        return len(event["steps"]) == 2 and all(s["toolCalls"] for s in event["steps"])

    assert (await finish_of(lookups(), after_two_results))[0] == 2


async def test_prepare_step_changes_one_step() -> None:
    first = ScriptedModel(calls=[calls(("c1", "weather", '{"city":"Oslo"}'))], model_id="first")
    second = ScriptedModel.text("Sunny in Oslo.")
    seen: list[dict[str, Any]] = []

    async def prepare(step: dict[str, Any]) -> dict[str, Any] | None:
        seen.append({"stepNumber": step["stepNumber"], "tools": step["tools"], "steps": len(step["steps"])})
        if step["stepNumber"] == 0:
            return {"activeTools": ["weather"], "toolChoice": "required", "system": "Use the weather tool."}
        return {
            "model": second,
            "messages": [{"role": "user", "content": [{"type": "text", "text": "Summarise."}]}],
        }

    agent = Agent("a", model=first, instructions="Be brief.", tools=[weather, delete_account])
    out = await agent.stream("weather in Oslo?", prepare_step=prepare)
    await drain(out)
    assert out.state.text == "Sunny in Oslo."
    assert seen == [
        {"stepNumber": 0, "tools": ["weather", "delete_account"], "steps": 0},
        {"stepNumber": 1, "tools": ["weather", "delete_account"], "steps": 1},
    ]
    call = first.recorded[0]
    assert call.tools == ["weather"] and call.tool_choice == {"type": "required"}
    assert [m["content"] for m in call.prompt if m["role"] == "system"] == ["Use the weather tool."]
    later = second.recorded[0].prompt
    assert systems(second) == ["Be brief."] and later[-1]["content"][0]["text"] == "Summarise."
    assert len(later) == 2  # the step's own conversation replaced the run's (not rewritten)
    assert len(out.state.messages) == 4  # user, assistant tool call, tool result, answer


async def test_prepare_step_mistakes_are_named() -> None:
    agent = Agent("a", model=ScriptedModel.text("x"), tools=[weather])
    with pytest.raises(ValueError, match="prepare_step result: unknown option 'tool'"):
        await (await agent.stream("hi", prepare_step=lambda step: {"tool": []})).consume()
    with pytest.raises(ValueError, match="activeTools names no tool: 'wether'"):
        await (await agent.stream("hi", prepare_step=lambda step: {"activeTools": ["wether"]})).consume()


async def test_default_options_apply_under_the_calls_own() -> None:
    finished: list[str] = []
    tool_steps = [calls((f"c{i}", "weather", '{"city":"Oslo"}')) for i in range(3)]
    model = ScriptedModel(calls=[*tool_steps, say("Sunny.")])
    agent = Agent(
        "a",
        model=model,
        tools=[weather, delete_account],
        default_options={
            "activeTools": ["weather"],
            "maxSteps": 1,
            "onFinish": lambda r: finished.append(r["text"]),
        },
    )
    out = await agent.stream("weather?")
    await drain(out)
    assert model.recorded[0].tools == ["weather"] and model.call_count == 1  # maxSteps 1 from the defaults
    assert finished == [""]
    await drain(await agent.stream("again", max_steps=3))  # the call's own option wins
    assert model.call_count == 4

    dynamic = Agent(
        "b",
        model=ScriptedModel.text("x"),
        default_options=lambda rc: {"system": f"Tenant {rc.get('tenant')}."},
    )
    await drain(await dynamic.stream("hi", request_context={"tenant": "acme"}))
    assert systems(dynamic.model) == ["Tenant acme."]  # type: ignore[arg-type]
    with pytest.raises(
        ValueError, match=r"default_options: unknown option 'maxStep'; did you mean 'maxSteps'"
    ):
        Agent("c", model=ScriptedModel.text("x"), default_options={"maxStep": 2})
