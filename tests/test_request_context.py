"""Mastra's ``requestContext``: per-request values that reach an agent's dynamic instructions,
model and tools, its tools' ``ctx.request_context``, and that client-js sends in the body."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx2 as httpx
import pytest

from runstream import Agent, ToolContext, tool
from runstream.agent.run_options import RequestPolicy
from runstream.chunks import AnyChunk
from runstream.memory import Memory
from runstream.request_context import RequestContext
from runstream.runtime import Runstream
from runstream.server import create_app
from runstream.server.auth import open_access
from runstream.storage import InMemoryStorage
from runstream.testing import ScriptedModel

USAGE = {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2}


def calls(*tool_calls: tuple[str, str, str]) -> list[dict[str, Any]]:
    return [
        *(
            {"type": "tool-call", "toolCallId": cid, "toolName": name, "input": args}
            for cid, name, args in tool_calls
        ),
        {"type": "finish", "finishReason": "tool-calls", "usage": USAGE},
    ]


def system_prompt(model: ScriptedModel, call: int = 0) -> str:
    return "".join(str(m["content"]) for m in model.recorded[call].prompt if m["role"] == "system")


async def drain(out: Any) -> list[AnyChunk]:
    async with asyncio.timeout(10):
        return [chunk async for chunk in out.full_stream]


def test_request_context_speaks_mastras_method_names() -> None:
    context = RequestContext({"tenant": "acme"})
    context.set("user", "ada")
    assert context.has("user") and context.get("tenant") == "acme"
    assert context.delete("user") and not context.delete("user")
    context.set("db", object())
    assert context.to_json() == {"tenant": "acme"}
    assert RequestContext.coerce(context) is context
    with pytest.raises(TypeError, match="request_context must be a mapping"):
        RequestContext.coerce(["tenant"])  # type: ignore[arg-type]


async def test_instructions_model_and_tools_resolve_per_request() -> None:
    basic = ScriptedModel.text("basic answer")
    premium = ScriptedModel.text("premium answer")

    @tool
    def refund(order: str) -> str:
        """Refund an order."""
        return order

    async def instructions(rc: RequestContext) -> str:
        return f"You help {rc.get('user', 'someone')} of {rc['tenant']}."

    agent = Agent(
        "support",
        model=lambda rc: premium if rc.get("tier") == "pro" else basic,
        instructions=instructions,
        tools=lambda rc: [refund] if rc.get("tier") == "pro" else [],
    )
    out = await agent.stream("hi", request_context={"tenant": "acme", "user": "ada", "tier": "pro"})
    await drain(out)
    assert out.state.text == "premium answer" and basic.call_count == 0
    assert system_prompt(premium) == "You help ada of acme."
    assert premium.recorded[0].tools == ["refund"]

    out = await agent.stream("hi", request_context=RequestContext(tenant="globex"))
    await drain(out)
    assert out.state.text == "basic answer"
    assert system_prompt(basic) == "You help someone of globex."
    assert basic.recorded[0].tools == []
    assert await agent.get_instructions({"tenant": "x"}) == "You help someone of x."
    assert await agent.get_model({"tier": "pro"}) is premium
    assert list(await agent.get_tools({"tier": "pro"})) == ["refund"]


async def test_a_dynamic_value_of_the_wrong_kind_is_a_clear_error() -> None:
    agent = Agent("a", model=lambda rc: "gpt-4o", instructions=lambda rc: 42)  # type: ignore[arg-type,return-value]
    with pytest.raises(TypeError, match="agent 'a': the model function returned str, not a model"):
        await agent.stream("hi")
    with pytest.raises(TypeError, match="agent 'a': instructions must be a string, got int"):
        await agent.get_instructions()


async def test_a_suspended_run_restored_from_storage_keeps_the_json_request_context() -> None:
    seen: list[str] = []

    @tool(require_approval=True)
    def delete_account(user: str) -> str:
        """Delete an account."""
        return user

    def instructions(rc: RequestContext) -> str:
        seen.append(str(rc.get("tenant")))
        return f"Tenant {rc.get('tenant')}."

    storage = InMemoryStorage()

    def build() -> tuple[Runstream, Agent, ScriptedModel]:
        model = ScriptedModel(calls=[calls(("c1", "delete_account", '{"user":"ada"}'))])
        agent = Agent("a", model=model, instructions=instructions, tools=[delete_account], memory=Memory())
        return Runstream(agents=[agent], storage=storage), agent, model

    _, first, _ = build()
    out = await first.stream("delete ada", request_context={"tenant": "acme", "db": object()})
    await drain(out)
    assert out.state.status == "suspended"
    _, restarted, model = build()  # a new process: the run comes back from storage
    resumed = await restarted.approve_tool_call(run_id=out.state.run_id)
    await drain(resumed)
    assert seen == ["acme", "acme"]
    assert system_prompt(model) == "Tenant acme."


async def test_the_http_body_request_context_reaches_the_agent() -> None:
    model = ScriptedModel.text("hello")
    agent = Agent("support", model=model, instructions=lambda rc: f"Tenant {rc.get('tenant', 'none')}.")
    agent.request_policy = RequestPolicy(request_context={"tenant"})  # a request may set it
    app = create_app(Runstream(agents=[agent]), auth=open_access)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        ok = await client.post(
            "/api/agents/support/generate", json={"messages": "hi", "requestContext": {"tenant": "acme"}}
        )
        bad = await client.post(
            "/api/agents/support/generate", json={"messages": "hi", "requestContext": ["acme"]}
        )
        details = await client.get("/api/agents/support")
    assert ok.status_code == 200, ok.text
    assert system_prompt(model) == "Tenant acme."
    assert bad.status_code == 400 and "'requestContext' must be an object" in bad.text
    assert details.json()["instructions"] == "Tenant none."


async def test_tools_background_tasks_and_sub_agents_see_the_request_context() -> None:
    seen: dict[str, Any] = {}

    @tool
    def whoami(ctx: ToolContext) -> str:
        """Who is asking."""
        seen["foreground"] = ctx.request_context.get("user")
        return str(ctx.request_context.get("user"))

    @tool(background={"enabled": True})
    async def report(ctx: ToolContext) -> str:
        """A slow report."""
        seen["background"] = ctx.request_context.get("user")
        return "report"

    helper = Agent("helper", model=ScriptedModel.text("ok"), instructions=lambda rc: f"Helping {rc['user']}.")
    model = ScriptedModel(
        calls=[
            calls(("c1", "whoami", "{}"), ("c2", "report", "{}"), ("c3", "agent-helper", '{"prompt":"hi"}')),
            [
                {"type": "text-start", "id": "t"},
                {"type": "text-delta", "id": "t", "delta": "done"},
                {"type": "text-end", "id": "t"},
                {"type": "finish", "finishReason": "stop", "usage": USAGE},
            ],
        ]
    )
    agent = Agent("a", model=model, tools=[whoami, report], agents=[helper], memory=Memory())
    runtime = Runstream(agents=[agent], background_tasks={"enabled": True})
    async with runtime:
        await drain(
            await agent.stream("go", memory={"thread": "t", "resource": "u"}, request_context={"user": "ada"})
        )
        assert runtime.task_manager is not None
        (task,) = (await runtime.task_manager.list_tasks()).items
        await runtime.task_manager.wait_for(task.id)
    assert seen == {"foreground": "ada", "background": "ada"}
    helper_model = helper.model
    assert isinstance(helper_model, ScriptedModel) and system_prompt(helper_model) == "Helping ada."
