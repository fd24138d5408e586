"""Sub-agent delegation as Mastra 1.71 does it: the inputs the supervisor's model passes, the
sub-agent's own thread, and the ``delegation`` hooks. The streams are pinned by the recorded
scenarios ``x-pt15``..``x-pt19`` (conformance_extra); these tests check what a stream does not
show (memory, prompts, hook arguments, errors)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from runstream import Agent, tool
from runstream.chunks import AnyChunk
from runstream.delegation import HOOK_ERRORS_KEY, DelegationConfig
from runstream.memory import Memory
from runstream.request_context import RequestContext
from runstream.runtime import Runstream
from runstream.storage import InMemoryStorage
from runstream.testing import ScriptedModel

USAGE = {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2}


def delegate(args: dict[str, Any], to: str = "researcher") -> list[dict[str, Any]]:
    return [
        {"type": "tool-call", "toolCallId": "c1", "toolName": f"agent-{to}", "input": json.dumps(args)},
        {"type": "finish", "finishReason": "tool-calls", "usage": USAGE},
    ]


def say(text: str) -> list[dict[str, Any]]:
    return [
        {"type": "text-start", "id": "t"},
        {"type": "text-delta", "id": "t", "delta": text},
        {"type": "text-end", "id": "t"},
        {"type": "finish", "finishReason": "stop", "usage": USAGE},
    ]


def team(
    args: dict[str, Any], *, sub_memory: bool = False, memory: bool = True, **sub_options: Any
) -> tuple[Agent, Agent, ScriptedModel, ScriptedModel]:
    sub_model = ScriptedModel(calls=[say("Solana is a blockchain.")])
    researcher = Agent(
        "researcher",
        model=sub_model,
        instructions="Research.",
        memory=Memory() if sub_memory else None,
        **sub_options,
    )
    model = ScriptedModel(calls=[delegate(args), say("Done.")])
    supervisor = Agent(
        "supervisor", model=model, instructions="Delegate.", agents={"researcher": researcher}, memory=memory
    )
    return supervisor, researcher, model, sub_model


async def drain(out: Any) -> list[AnyChunk]:
    async with asyncio.timeout(10):
        return [chunk async for chunk in out.full_stream]


def tool_result(chunks: list[AnyChunk]) -> dict[str, Any]:
    (result,) = [c.payload["result"] for c in chunks if c.type == "tool-result"]
    return result  # type: ignore[no-any-return]


async def thread_texts(storage: InMemoryStorage, thread_id: str) -> list[tuple[str, str]]:
    page = await storage.list_messages(thread_id)
    return [
        (m.role, "".join(p.get("text", "") for p in m.content["parts"] if p.get("type") == "text"))
        for m in page.items
    ]


async def test_inputs_thread_and_inherited_memory() -> None:
    """Mastra overwrites the model's threadId/resourceId with the supervisor's: the sub-agent's
    thread is '<thread>-<uuid>' of resource '<resource>-<name>', saved in the supervisor's memory
    (the sub-agent has none); instructions are appended to the sub-agent's own."""
    args = {
        "prompt": "Research solana",
        "threadId": "x",
        "resourceId": "y",
        "instructions": "One line.",
        "maxSteps": 3,
    }
    supervisor, _, _, sub_model = team(args)
    storage = InMemoryStorage()
    async with Runstream(agents=[supervisor], storage=storage):
        out = await supervisor.stream("Tell me", memory={"thread": "sup", "resource": "u1"})
        result = tool_result(await drain(out))
        assert result["subAgentThreadId"].startswith("sup-") and len(result["subAgentThreadId"]) == 40
        assert result["subAgentResourceId"] == "u1-researcher"
        thread = await storage.get_thread(result["subAgentThreadId"])
        assert thread is not None and thread.resource_id == "u1-researcher"
        assert await thread_texts(storage, thread.id) == [
            ("user", "Research solana"),
            ("assistant", "Solana is a blockchain."),
        ]
    assert sub_model.recorded[0].prompt[0] == {"role": "system", "content": "Research.\n\nOne line."}


async def test_own_memory_without_supervisor_thread() -> None:
    supervisor, researcher, _, _ = team({"prompt": "Research solana"}, sub_memory=True, memory=False)
    storage = InMemoryStorage()
    async with Runstream(agents=[supervisor], storage=storage):
        result = tool_result(await drain(await supervisor.stream("Tell me")))
        assert (
            researcher.memory is not None and researcher.memory.storage is storage
        )  # bound with its supervisor
        assert len(result["subAgentThreadId"]) == 36 and len(result["subAgentResourceId"]) == 36
        assert await thread_texts(storage, result["subAgentThreadId"]) == [
            ("user", "Research solana"),
            ("assistant", "Solana is a blockchain."),
        ]


async def test_max_steps_capped_by_default_options_and_validated() -> None:
    seen: list[dict[str, Any]] = []
    supervisor, _, _, _ = team(
        {"prompt": "go", "maxSteps": "9"}, memory=False, default_options={"maxSteps": 4}
    )
    calls: list[Any] = []
    original = supervisor.agents["researcher"].stream

    async def spy(*args: Any, **options: Any) -> Any:
        calls.append(options.get("max_steps"))
        return await original(*args, **options)

    supervisor.agents["researcher"].stream = spy  # type: ignore[method-assign]
    out = await supervisor.stream("x", delegation={"onDelegationStart": seen.append})
    await drain(out)
    assert seen[0]["params"] == {"maxSteps": 9} and calls == [4]

    bad, _, _, _ = team({"prompt": "go", "maxSteps": 2}, memory=False)
    chunks = await drain(await bad.stream("x"))
    assert "maxSteps" in json.dumps(tool_result(chunks))  # the model is told why, as for any tool input

    odd, _, _, _ = team({"prompt": "go", "maxSteps": "two"}, memory=False)
    chunks = await drain(await odd.stream("x"))
    (error,) = [c for c in chunks if c.type == "tool-error"]
    assert "maxSteps must be a whole number" in str(error.payload["error"])


async def test_start_hook_context_and_rejection() -> None:
    seen: list[dict[str, Any]] = []

    def start(context: dict[str, Any]) -> dict[str, Any]:
        seen.append(context)
        context["requestContext"].set("added", True)
        return {"proceed": False, "rejectionReason": "closed"}

    supervisor, _, _, sub_model = team({"prompt": "Research solana"}, memory=False)
    parent_context = RequestContext(user="ada")
    chunks = await drain(
        await supervisor.stream(
            "x", request_context=parent_context, delegation={"on_delegation_start": start}
        )
    )
    assert tool_result(chunks)["text"] == "[Delegation Rejected] closed"
    assert sub_model.call_count == 0
    (context,) = seen
    assert {
        k: context[k]
        for k in ("primitiveId", "primitiveType", "prompt", "iteration", "parentAgentId", "toolCallId")
    } == {
        "primitiveId": "researcher",
        "primitiveType": "agent",
        "prompt": "Research solana",
        "iteration": 1,
        "parentAgentId": "supervisor",
        "toolCallId": "c1",
    }
    assert context["requestContext"]["user"] == "ada" and "added" not in parent_context


async def test_complete_hook_result_text_feedback_and_bail() -> None:
    seen: list[dict[str, Any]] = []

    async def complete(context: dict[str, Any]) -> dict[str, Any]:
        seen.append(context)
        context["bail"]()
        return {"resultText": "checked", "feedback": "Good delegation."}

    supervisor, _, model, _ = team({"prompt": "Research solana"})
    storage = InMemoryStorage()
    async with Runstream(agents=[supervisor], storage=storage):
        out = await supervisor.stream(
            "x",
            memory={"thread": "sup", "resource": "u1"},
            delegation=DelegationConfig(on_delegation_complete=complete),
        )
        chunks = await drain(out)
        assert tool_result(chunks)["text"] == "checked"
        assert model.call_count == 1  # bail: no step after the delegation
        assert ("assistant", "Good delegation.") in await thread_texts(storage, "sup")
    (context,) = seen
    assert context["success"] is True and context["result"]["text"] == "Solana is a blockchain."
    assert context["result"]["finishReason"] == "stop" and context["duration"] >= 0


async def test_hook_errors_warn_or_throw() -> None:
    def broken(_: dict[str, Any]) -> None:
        raise RuntimeError("hook broke")

    supervisor, _, _, _ = team({"prompt": "Research solana"}, memory=False)
    request_context = RequestContext()
    chunks = await drain(
        await supervisor.stream(
            "x", request_context=request_context, delegation={"onDelegationStart": broken}
        )
    )
    assert tool_result(chunks)["text"] == "Solana is a blockchain."  # warn: the delegation goes on
    (recorded,) = request_context[HOOK_ERRORS_KEY]
    assert recorded["hook"] == "onDelegationStart" and recorded["message"] == "hook broke"

    strict, _, _, strict_sub = team({"prompt": "Research solana"}, memory=False)
    chunks = await drain(
        await strict.stream("x", delegation={"onDelegationStart": broken, "hookErrorStrategy": "throw"})
    )
    assert [str(c.payload["error"]) for c in chunks if c.type == "tool-error"] == ["hook broke"]
    assert strict_sub.call_count == 0


async def test_message_filter_chooses_the_context() -> None:
    supervisor, _, _, sub_model = team({"prompt": "Research solana"}, memory=False)
    await drain(await supervisor.stream("secret question", delegation={"messageFilter": lambda _: []}))
    prompt_texts = json.dumps(sub_model.recorded[0].prompt)
    assert "secret question" not in prompt_texts and "Research solana" in prompt_texts


@pytest.mark.parametrize(
    ("delegation", "error"),
    [
        (
            {"onDelegationStart": lambda _: {"modifiedMaxSteps": "3"}},
            "onDelegationStart returned modifiedMaxSteps: Input should be a valid integer",
        ),
        (
            {"onDelegationComplete": lambda _: {"resultText": 42}},
            "onDelegationComplete returned resultText: Input should be a valid string",
        ),
        ({"onDelegationStart": lambda _: "go"}, "onDelegationStart must return a mapping or None, not str"),
        ({"messageFilter": lambda _: 7}, "messageFilter must return a list of messages, not int"),
    ],
)
async def test_a_hook_answer_of_the_wrong_shape_fails_the_delegation_clearly(
    delegation: dict[str, Any], error: str
) -> None:
    """What a hook returns is checked against its TypedDict (no coercion): the delegation's tool
    call fails with the hook's name and the key at fault; the supervisor's run goes on."""
    supervisor, _, model, _ = team({"prompt": "Research solana"}, memory=False)
    chunks = await drain(await supervisor.stream("x", delegation=delegation))
    assert [str(c.payload["error"]) for c in chunks if c.type == "tool-error"] == [error]
    assert model.call_count == 2  # the supervisor's model saw the failed call and answered


async def test_a_hook_answer_keeps_the_keys_it_knows() -> None:
    """Keys a hook's answer has besides Mastra's are left out; ``None`` values mean no change."""
    seen: list[str] = []

    def start(context: Any) -> dict[str, object]:
        seen.append(context["prompt"])
        return {"modifiedPrompt": "[PRIORITY] " + context["prompt"], "modifiedMaxSteps": None, "mine": 1}

    supervisor, _, _, sub_model = team({"prompt": "Research solana"}, memory=False)
    chunks = await drain(await supervisor.stream("x", delegation={"on_delegation_start": start}))
    assert seen == ["Research solana"]
    assert tool_result(chunks)["text"] == "Solana is a blockchain."
    assert "[PRIORITY] Research solana" in json.dumps(sub_model.recorded[0].prompt)


def test_unknown_delegation_key_is_an_error() -> None:
    with pytest.raises(ValueError, match="'onDelegationStrat'; did you mean 'onDelegationStart'"):
        DelegationConfig.coerce({"onDelegationStrat": print})
    with pytest.raises(TypeError, match="enableResultReferences must be true or false"):
        DelegationConfig.coerce({"enableResultReferences": "yes"})


PAID: list[int] = []


@tool(require_approval=True)
async def pay(amount: int) -> dict[str, Any]:
    """Pay an invoice (needs approval)."""
    PAID.append(amount)
    return {"paid": amount}


async def test_a_sub_agent_waiting_for_approval_suspends_the_supervisor() -> None:
    """Mastra suspends the supervisor's call with ``{requireToolApproval: ...}``; the supervisor's
    resume (``suspendedToolRunId``) approves the sub-agent's call (``approved: false`` declines)."""
    PAID.clear()
    sub_model = ScriptedModel(
        calls=[
            [
                {"type": "tool-call", "toolCallId": "p1", "toolName": "pay", "input": '{"amount": 30}'},
                {"type": "finish", "finishReason": "tool-calls", "usage": USAGE},
            ],
            say("Paid."),
        ]
    )
    payer = Agent("payer", model=sub_model, tools=[pay])
    model = ScriptedModel(calls=[delegate({"prompt": "Pay 30"}, to="payer"), say("Done.")])
    supervisor = Agent("supervisor", model=model, agents={"payer": payer})
    async with Runstream(agents=[supervisor], storage=InMemoryStorage()):
        first = await drain(await supervisor.stream("Pay the invoice"))
        (suspended,) = [c for c in first if c.type == "tool-call-suspended"]
        assert suspended.payload["toolName"] == "agent-payer"
        assert suspended.payload["suspendPayload"]["requireToolApproval"]["toolName"] == "pay"
        assert PAID == []
        run_id = first[0].run_id
        second = await drain(await supervisor.resume_stream({"approved": True}, run_id=run_id))
        assert PAID == [30]
        assert tool_result(second)["text"] == "Paid."
        assert second[-1].type == "finish"


async def test_include_sub_agent_tool_results_in_model_context() -> None:
    """By default the supervisor's model sees the sub-agent's text; with the option, its whole
    result (ids and tool results), as Mastra."""
    supervisor, _, model, _ = team({"prompt": "Research solana"}, memory=False)
    await drain(await supervisor.stream("x"))
    (default,) = [p["output"] for m in model.recorded[1].prompt if m["role"] == "tool" for p in m["content"]]
    assert default == {"type": "text", "value": "Solana is a blockchain."}

    supervisor, _, model, _ = team({"prompt": "Research solana"}, memory=False)
    await drain(await supervisor.stream("x", delegation={"includeSubAgentToolResultsInModelContext": True}))
    (full,) = [p["output"] for m in model.recorded[1].prompt if m["role"] == "tool" for p in m["content"]]
    assert full["type"] == "json" and full["value"]["text"] == "Solana is a blockchain."
    assert set(full["value"]) == {"text", "subAgentThreadId", "subAgentResourceId", "subAgentToolResults"}


async def test_result_references() -> None:
    """``enableResultReferences`` (recorded ``x-pt28``): a result's ref shows to the supervisor's
    model; ``contextFromRefs`` puts the referenced text before a later prompt, in a block."""
    researcher_model = ScriptedModel(calls=[say("Solana is fast.")])
    writer_model = ScriptedModel(calls=[say("Solana: fast.")])
    researcher = Agent("researcher", model=researcher_model)
    writer = Agent("writer", model=writer_model)
    model = ScriptedModel(
        calls=[
            delegate({"prompt": "Research solana"}),
            delegate({"prompt": "Summarise", "contextFromRefs": ["researcher-1", "nope-9"]}, to="writer"),
            say("Done."),
        ]
    )
    supervisor = Agent("supervisor", model=model, agents={"researcher": researcher, "writer": writer})
    chunks = await drain(await supervisor.stream("x", delegation={"enableResultReferences": True}))
    first, second = [c.payload["result"] for c in chunks if c.type == "tool-result"]
    assert first["ref"] == "researcher-1" and second["ref"] == "writer-1"
    (seen,) = [p["output"] for m in model.recorded[1].prompt if m["role"] == "tool" for p in m["content"]]
    assert seen == {"type": "text", "value": "Solana is fast.\n\n[ref: researcher-1]"}
    asked = writer_model.recorded[0].prompt[-1]["content"][0]["text"]
    assert asked.startswith("The blocks below are results produced by other agents earlier in this task.")
    assert 'ref="researcher-1" from="researcher">\nSolana is fast.\n</delegation_result_' in asked
    assert asked.endswith("\n\nSummarise") and "nope-9" not in asked

    plain, _, _, _ = team({"prompt": "go", "contextFromRefs": ["x-1"]}, memory=False)
    result = tool_result(await drain(await plain.stream("x")))
    assert "ref" not in result  # off by default: no refs, and contextFromRefs is ignored (as zod strips it)
