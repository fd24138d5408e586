"""Per-request agent options the core has no parameter for, and client-side tools.

``clientTools``, ``activeTools``, ``instructions`` and ``requireToolApproval`` apply to one request
only, so the request runs on a shallow copy of the agent with those changes (it shares the
agent's memory, runtime and suspended-run table, so approvals and resumes still find the run).

A client tool has no server ``execute``: the run must stop after the model calls it, finishing
with reason ``tool-calls``, and client-js runs the tool and posts the result in a new request.
The core has no such stop yet, so a client tool here *suspends*; :func:`client_tool_stream`
hides that suspension and ends the stream the way Mastra does, and :func:`settle_client_run`
turns the suspended run into a finished one (saving its turn to memory). On the follow-up
request, :func:`absorb_tool_results` writes the client's results into the stored assistant
message, as Mastra's memory does, so the history the model sees is complete.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Collection
from functools import partial
from typing import Any

from runstream.agent import Agent
from runstream.chunks import AnyChunk, FinishChunk, StepFinishChunk
from runstream.memory import MemoryScope
from runstream.output import RunOutput
from runstream.server.body import StreamRequest, invalid
from runstream.server.messages import Prompt
from runstream.storage import StoredMessage
from runstream.tools import Tool, ToolContext

CLIENT_TOOL_MARK = {"runstream": "client-tool"}


async def _run_on_client(args: dict[str, Any], ctx: ToolContext) -> None:
    await ctx.suspend(CLIENT_TOOL_MARK)


def client_tool(name: str, spec: dict[str, Any]) -> Tool:
    schema = spec.get("inputSchema") or spec.get("parameters") or {"type": "object", "properties": {}}
    try:
        return Tool(name, _run_on_client, description=str(spec.get("description") or ""), input_schema=schema)
    except (ValueError, TypeError) as exc:
        raise invalid(f"clientTools.{name}: {exc}") from None


def request_agent(agent: Agent, request: StreamRequest) -> Agent:
    """The agent as this request configures it (the agent itself when nothing changes)."""
    if (
        not request.client_tools
        and request.active_tools is None
        and request.instructions is None
        and not request.require_tool_approval
    ):
        return agent
    view = copy.copy(agent)
    tools = dict(agent.tools)
    if request.active_tools is not None:
        tools = {name: tool for name, tool in tools.items() if name in request.active_tools}
    if request.require_tool_approval:
        tools = {name: _with_approval(tool) for name, tool in tools.items()}
    for name, spec in request.client_tools.items():
        tools[name] = client_tool(name, spec)
    view.tools = tools
    if request.instructions is not None:
        view.instructions = request.instructions
    return view


def _with_approval(tool: Tool) -> Tool:
    gated = copy.copy(tool)
    gated.require_approval = True
    return gated


def _stop_payload(message_id: str) -> dict[str, Any]:
    return {
        "messageId": message_id,
        "stepResult": {"reason": "tool-calls", "isContinued": False},
        "output": {"usage": {"inputTokens": 0, "outputTokens": 0, "totalTokens": 0}},
        "metadata": {},
    }


async def client_tool_stream(out: RunOutput, names: Collection[str]) -> AsyncIterator[AnyChunk]:
    """``out``'s chunks, ending with ``finish`` (reason ``tool-calls``) when a client tool was called."""
    stopped: AnyChunk | None = None
    async for chunk in out.full_stream:
        if chunk.type == "tool-call-suspended" and chunk.payload.get("toolName") in names:
            stopped = chunk
            continue
        yield chunk
    if stopped is not None and is_client_stop(out, names):
        payload = _stop_payload(out.message_id)
        yield StepFinishChunk(stopped.run_id, payload)  # type: ignore[arg-type]
        yield FinishChunk(stopped.run_id, payload)  # type: ignore[arg-type]


def is_client_stop(out: RunOutput, names: Collection[str]) -> bool:
    """Whether the run stopped only because it called client tools."""
    pending = out.state.pending
    if out.state.status != "suspended" or pending is None or not pending.suspended:
        return False
    called = {call.tool_call_id: call.tool_name for call in pending.calls}
    return not pending.awaiting_approval and all(called.get(i) in names for i in pending.suspended)


async def settle_client_run(
    agent: Agent, out: RunOutput, scope: MemoryScope | None, names: Collection[str]
) -> None:
    """A run stopped for client tools is over: forget it as suspended and save its turn."""
    if not names or not is_client_stop(out, names):
        return
    state = out.state
    agent._suspended.pop(state.run_id, None)  # see the module docstring: this is an end, not a pause
    state.status = "success"
    state.finish_reason = "tool-calls"
    state.pending = None
    if scope is not None and agent.memory is not None:
        await agent.memory.save_turn(
            scope, state.new_input_messages, state.response_messages, state.message_id
        )


def _results(messages: list[Prompt]) -> dict[str, dict[str, Any]]:
    return {
        str(part.get("toolCallId")): part
        for message in messages
        if message["role"] == "tool"
        for part in message["content"]
        if part.get("type") == "tool-result"
    }


def _apply(message: StoredMessage, results: dict[str, dict[str, Any]]) -> StoredMessage:
    for part in message.content.get("parts", []):
        inv = part.get("toolInvocation") if part.get("type") == "tool-invocation" else None
        result = results.get(str(inv.get("toolCallId"))) if inv else None
        if inv is None or result is None or inv.get("state") != "call":
            continue
        output = result.get("output") or {}
        if output.get("type") in ("error-text", "error-json"):
            inv.update(state="output-error", errorText=output.get("value"))
        else:
            inv.update(state="result", result=output.get("value"))
    return message


async def absorb_tool_results(agent: Agent, scope: MemoryScope, messages: list[Prompt]) -> list[Prompt]:
    """Write tool results for calls stored in the thread into memory; return the other messages."""
    results = _results(messages)
    storage = agent.memory.storage if agent.memory is not None else None
    if not results or storage is None:
        return messages
    absorbed: set[str] = set()
    for stored in reversed((await storage.list_messages(scope.thread_id, last=20)).items):
        if stored.role != "assistant":
            continue
        waiting = {
            str(part["toolInvocation"].get("toolCallId"))
            for part in stored.content.get("parts", [])
            if part.get("type") == "tool-invocation" and part["toolInvocation"].get("state") == "call"
        } & (results.keys() - absorbed)
        if waiting:
            wanted = {call_id: results[call_id] for call_id in waiting}
            await storage.update_message(stored.id, partial(_apply, results=wanted))
            absorbed |= waiting
    out: list[Prompt] = []
    for message in messages:
        if message["role"] == "tool":
            content = [p for p in message["content"] if str(p.get("toolCallId")) not in absorbed]
            if not content:
                continue
            message = {**message, "content": content}
        out.append(message)
    return out
