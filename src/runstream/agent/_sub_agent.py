"""A sub-agent offered to its supervisor as the tool ``agent-<name>``, as Mastra 1.71 runs it.

The supervisor's model passes ``{prompt, threadId?, resourceId?, instructions?, maxSteps?}``.
As in Mastra (recorded: ``x-pt15``..``x-pt19``):

- ``threadId``/``resourceId`` are the supervisor run's own (Mastra overwrites what the model
  passes): the sub-agent's thread is ``<threadId>-<uuid>`` of resource ``<resourceId>-<name>``
  (fresh ids when the supervisor runs without a thread);
- ``instructions`` are appended to the sub-agent's own (``"<own>\\n\\n<given>"``); ``maxSteps``
  (at least 3) is capped by the sub-agent's ``default_options`` ``maxSteps``;
- the prompt and the sub-agent's answer are saved on that thread in the sub-agent's memory, or
  in the supervisor's when the sub-agent has none (Mastra's inherited memory);
- the run's ``delegation`` hooks (:mod:`runstream.delegation`) may refuse or change the call and
  replace the result the supervisor sees.
"""

from __future__ import annotations

import copy
import json
import logging
import time
import uuid
import weakref
from collections.abc import Callable, Mapping
from typing import Any, NotRequired, TypedDict

from runstream._json import JsonObject
from runstream.agent.run_options import normalize_messages
from runstream.chunks import AnyChunk, TextDeltaChunk
from runstream.delegation import (
    DelegationComplete,
    DelegationOrigin,
    DelegationParams,
    DelegationResult,
    DelegationRun,
    DelegationStart,
    DelegationStartResult,
)
from runstream.errors import InvalidInputError, RunstreamError
from runstream.memory import Memory, MemoryScope
from runstream.models.base import PromptMessage
from runstream.models.prompt import TextOutput
from runstream.request_context import RequestContext
from runstream.run._run_state import LoopConfig
from runstream.tools import Tool, ToolArgs, ToolContext

logger = logging.getLogger(__name__)

_PROMPT: JsonObject = {"type": "string", "description": "The prompt to send to the agent"}
_OPTIONS: JsonObject = {
    "threadId": {
        "type": ["string", "null"],
        "description": "Thread ID for conversation continuity for memory messages",
    },
    "resourceId": {
        "type": ["string", "null"],
        "description": "Resource/user identifier for memory messages",
    },
    "instructions": {
        "type": ["string", "null"],
        "description": "Additional instructions to append to the agent instructions. Only provide if "
        "you have specific guidance beyond what the agent already knows. Leave empty in most cases.",
    },
    "maxSteps": {
        "anyOf": [{"type": "integer", "minimum": 3}, {"type": "string"}, {"type": "null"}],
        "description": "Maximum number of execution steps for the sub-agent (integer, minimum 3)",
    },
}
"""The sub-agent tool's arguments besides ``prompt``."""
INPUT_SCHEMA: JsonObject = {
    "type": "object",
    "properties": {"prompt": _PROMPT, **_OPTIONS},
    "required": ["prompt"],
}
"""What the model is offered (other keys are let through and ignored, as zod strips them)."""
REFS_SCHEMA: JsonObject = {
    **INPUT_SCHEMA,
    "properties": {
        "prompt": _PROMPT,
        "contextFromRefs": {
            "type": ["array", "null"],
            "items": {
                "anyOf": [
                    {"type": "string", "minLength": 1},
                    {
                        "type": "object",
                        "properties": {
                            "ref": {"type": "string", "minLength": 1},
                            "as": {"type": ["string", "null"]},
                            "note": {"type": ["string", "null"]},
                        },
                        "required": ["ref"],
                    },
                ]
            },
            "description": "Reference IDs from the [ref: ...] lines of earlier agent results in this task. "
            "The full text of each referenced result is inserted before your prompt exactly as it was "
            "produced, so you do not need to restate it.",
        },
        **_OPTIONS,
    },
}
"""Offered with ``delegation.enableResultReferences``."""
_SUB_AGENT_TOOLS: weakref.WeakSet[Tool] = weakref.WeakSet()


class AgentToolError(RunstreamError):
    """An agent called as a tool ended in an error."""

    name = "Error"


class SubAgentResult(TypedDict):
    """What a sub-agent tool returns (Mastra's agent-tool result)."""

    text: str
    subAgentThreadId: str
    subAgentResourceId: str
    subAgentToolResults: NotRequired[list[Any]]
    ref: NotRequired[str]


def agent_tool(sub: Any, name: str, parent: Any | None) -> Tool:
    """The tool ``agent-<name>`` running ``sub`` (an ``Agent``) for ``parent`` (its supervisor).
    (Agents are ``Any`` here: ``runstream.agent.agent`` imports this module, not the reverse.)"""

    async def execute(args: ToolArgs, ctx: ToolContext) -> SubAgentResult:
        return await _delegate(sub, name, parent, args, ctx)

    made = Tool(
        f"agent-{name}",
        execute,
        description=sub.description or f"Agent: {sub.name}",
        input_schema=INPUT_SCHEMA,
        to_model_output=_text_only,
    )
    _SUB_AGENT_TOOLS.add(made)
    return made


def offer_result_references(cfg: LoopConfig) -> None:
    """The run's sub-agent tools take ``contextFromRefs`` (``delegation.enableResultReferences``)."""
    for name, tool in cfg.tools.items():
        if tool in _SUB_AGENT_TOOLS:
            cfg.tool_schemas.setdefault(name, REFS_SCHEMA)


def with_full_results(tools: dict[str, Tool]) -> dict[str, Tool]:
    """``tools`` with the sub-agent tools showing the model their whole result (Mastra's
    ``delegation.includeSubAgentToolResultsInModelContext``)."""
    full = dict(tools)
    for name, tool in tools.items():
        if tool.to_model_output is _text_only:
            full[name] = copy.copy(tool)
            full[name].to_model_output = None
            _SUB_AGENT_TOOLS.add(full[name])
    return full


def _text_only(output: object) -> TextOutput:
    """The supervisor's model sees the sub-agent's text, not its ids and tool results (Mastra's
    default, without ``includeSubAgentToolResultsInModelContext``)."""
    if not isinstance(output, Mapping):
        return {"type": "text", "value": str(output)}
    ref = f"\n\n[ref: {output['ref']}]" if output.get("ref") else ""
    return {"type": "text", "value": f"{output.get('text', '')}{ref}"}


def _max_steps(value: Any) -> int | None:
    if value is None or value == "":
        return None
    try:
        steps = int(value)
    except (TypeError, ValueError):
        raise InvalidInputError(f"maxSteps must be a whole number, got {value!r}") from None
    if steps < 3:
        raise InvalidInputError(f"maxSteps must be at least 3, got {steps}")
    return steps


def _default_max_steps(sub: Any) -> int | None:
    defaults = sub.default_options
    if isinstance(defaults, Mapping):
        value = defaults.get("maxSteps", defaults.get("max_steps"))
        return int(value) if isinstance(value, int) else None
    return None


async def _delegate(
    sub: Any, name: str, parent: Any | None, args: ToolArgs, ctx: ToolContext
) -> SubAgentResult:
    run: DelegationRun = ctx.delegation if isinstance(ctx.delegation, DelegationRun) else DelegationRun()
    started_at = time.monotonic()
    prompt = str(args["prompt"])  # (the schema requires a string)
    refs_on = run.config is not None and run.config.enable_result_references
    if refs_on and args.get("contextFromRefs"):  # earlier results, verbatim, before the prompt
        prompt, missing = run.expand(args["contextFromRefs"], prompt)
        if missing:
            logger.warning("delegation to %r names unknown result references: %s", name, missing)
    thread_id = f"{ctx.thread_id}-{uuid.uuid4()}" if ctx.thread_id else str(uuid.uuid4())
    resource_id = f"{ctx.resource_id}-{name}" if ctx.resource_id else str(uuid.uuid4())
    instructions = given if isinstance(given := args.get("instructions"), str) and given else None
    max_steps = _max_steps(args.get("maxSteps"))
    sub_context = RequestContext(ctx.request_context)  # the hooks may add to it, not to the parent's
    base = DelegationOrigin(
        primitiveId=sub.id,
        primitiveType="agent",
        iteration=max(1, sum(1 for m in ctx.messages if m.get("role") == "assistant")),
        runId=ctx.run_id,
        parentAgentId=ctx.agent_id,
        parentAgentName=ctx.agent_name,
        toolCallId=ctx.tool_call_id,
    )
    start = await _start_hook(run, ctx, base, prompt, sub_context, instructions, max_steps)
    cap = _default_max_steps(sub)
    if max_steps is not None and cap is not None and max_steps > cap:
        max_steps = cap
    memory: Memory | None = sub.memory or (parent.memory if parent is not None else None)
    scope = MemoryScope(thread_id, resource_id)
    if start.get("proceed") is False:
        return await _reject(str(start.get("rejectionReason") or ""), ctx, memory, scope, prompt)
    prompt = start.get("modifiedPrompt", prompt)
    instructions = start.get("modifiedInstructions", instructions)
    max_steps = start.get("modifiedMaxSteps", max_steps)
    if instructions:
        own = await sub.get_instructions(sub_context)
        instructions = f"{own}\n\n{instructions}" if own else instructions
    # As before delegation inputs existed here: the sub-agent sees what the user asked the supervisor.
    context: list[PromptMessage] = [m for m in ctx.messages if m["role"] == "user"]
    filtered = await run.filter_messages(
        {**base, "messages": context, "prompt": prompt, "threadId": ctx.thread_id}, ctx.request_context
    )
    if filtered is not None:
        context = normalize_messages(filtered)
    waiting_run = ctx.suspended_tool_run_id if ctx.resume_data is not None else None
    resumed = waiting_run is not None  # the supervisor resumes: the sub-agent's suspended run goes on
    if waiting_run is not None:
        out = await _resume(sub, ctx, waiting_run)
    else:
        out = await sub.stream(
            prompt,
            abort_signal=ctx.abort_signal,
            context=context,
            request_context=sub_context,
            instructions=instructions or None,  # None: the sub-agent's own
            max_steps=max_steps or None,
        )
    state, tool_results, stopped = await _relay(out, ctx)
    if memory is not None:
        await _save(
            memory, scope, None if resumed else prompt, state.stored_response_messages, state.message_id
        )
    if state.status == "suspended":  # the supervisor's call waits with the sub-agent (x-pt23)
        await _suspend(ctx, state, stopped)
    result: SubAgentResult = {
        "text": state.text,
        "subAgentThreadId": thread_id,
        "subAgentResourceId": resource_id,
        "subAgentToolResults": tool_results,
    }
    failed = state.status == "failed"
    outcome = _outcome(base, prompt, run, result, state, started_at)
    done = await run.complete(outcome, ctx.request_context)
    await _feedback(parent, ctx, done)
    if failed:  # the caller's model sees Mastra's words for it
        raise AgentToolError(
            done.get("resultText")
            or f"[Agent:{ctx.agent_name or ctx.agent_id}] - Failed agent tool execution for {sub.id}"
        )
    text = done.get("resultText")
    if text is not None:
        result["text"] = text
    if refs_on and not ctx.is_background_task and result["text"].strip() and state.finish_reason != "error":
        result["ref"] = run.register(name, result["text"])
    return result


def _outcome(
    base: DelegationOrigin,
    prompt: str,
    run: DelegationRun,
    result: SubAgentResult,
    state: Any,
    started_at: float,
) -> DelegationComplete:
    """``onDelegationComplete``'s context: the sub-agent's result, how long it took, and ``bail``."""
    failed = state.status == "failed"
    seen: DelegationResult = {
        "text": result["text"],
        "subAgentThreadId": result["subAgentThreadId"],
        "subAgentResourceId": result["subAgentResourceId"],
        "subAgentToolResults": result.get("subAgentToolResults", []),
        "finishReason": state.finish_reason,
        "usage": state.usage,
    }
    outcome: DelegationComplete = {  # (an optional key, so no **base: mypy wants each key named)
        "primitiveId": base["primitiveId"],
        "primitiveType": base["primitiveType"],
        "iteration": base["iteration"],
        "runId": base["runId"],
        "parentAgentId": base["parentAgentId"],
        "parentAgentName": base["parentAgentName"],
        "toolCallId": base["toolCallId"],
        "prompt": prompt,
        "messages": [],
        "bail": _bail(run),
        "result": seen,
        "duration": round((time.monotonic() - started_at) * 1000),
        "success": not failed and state.finish_reason != "error",
    }
    if failed:
        outcome["error"] = state.error
    return outcome


async def _start_hook(
    run: DelegationRun,
    ctx: ToolContext,
    base: DelegationOrigin,
    prompt: str,
    request_context: RequestContext,
    instructions: str | None,
    max_steps: int | None,
) -> DelegationStartResult:
    """``onDelegationStart`` with Mastra's context; what it returned (``{}``: no change)."""
    params: DelegationParams = {}
    if ctx.thread_id is not None:
        params["threadId"] = ctx.thread_id
    if ctx.resource_id is not None:
        params["resourceId"] = ctx.resource_id
    if instructions is not None:
        params["instructions"] = instructions
    if max_steps is not None:
        params["maxSteps"] = max_steps
    context: DelegationStart = {
        **base,
        "prompt": prompt,
        "requestContext": request_context,
        "params": params,
        "threadId": ctx.thread_id,
        "resourceId": ctx.resource_id,
        "messages": list(ctx.messages),
    }
    return await run.start(context, ctx.request_context)


async def _relay(out: Any, ctx: ToolContext) -> tuple[Any, list[Any], AnyChunk | None]:
    """Stream the sub-agent's chunks as the tool's output; its state, its tool results and the
    chunk it stopped for a human with (if it did)."""
    results: list[AnyChunk] = []
    stopped: AnyChunk | None = None
    async for chunk in out.full_stream:
        await ctx.writer.write(chunk)
        if chunk.type == "tool-result":
            results.append(chunk)
        elif chunk.type in ("tool-call-suspended", "tool-call-approval"):
            stopped = chunk
    return out.state, [c.payload for c in results], stopped


async def _suspend(ctx: ToolContext, state: Any, stopped: AnyChunk | None) -> None:
    """Suspend the supervisor's call with the sub-agent's suspension, as Mastra: its payload and
    resume schema (an approval as ``{"requireToolApproval": ...}``), and its run id to resume."""
    payload = stopped.payload if stopped is not None and isinstance(stopped.payload, Mapping) else {}
    if stopped is not None and stopped.type == "tool-call-approval":
        await ctx.suspend({"requireToolApproval": dict(payload)}, run_id=state.run_id)
    schema = payload.get("resumeSchema")
    await ctx.suspend(
        state.suspend_payload,
        resume_schema=json.loads(schema) if isinstance(schema, str) else None,
        run_id=state.run_id,
    )


async def _resume(sub: Any, ctx: ToolContext, run_id: str) -> Any:
    """The sub-agent's suspended run, continued with the supervisor's resume data: a tool
    suspension resumes with it; an approval is approved unless the data says ``approved: false``."""
    data = ctx.resume_data
    waiting = await sub.suspended_run(run_id)
    if waiting is not None and waiting.awaiting_approval:
        if isinstance(data, Mapping) and data.get("approved") is False:
            return await sub.decline_tool_call(run_id=run_id)
        return await sub.approve_tool_call(run_id=run_id)
    return await sub.resume_stream(data, run_id=run_id)


async def _reject(
    reason: str, ctx: ToolContext, memory: Memory | None, scope: MemoryScope, prompt: str
) -> SubAgentResult:
    """``onDelegationStart`` said ``proceed: false``: the sub-agent does not run; the rejection
    streams as tool output and is saved on the sub-agent's thread, as in Mastra."""
    text = f"[Delegation Rejected] {reason or 'Delegation rejected by onDelegationStart hook'}"
    await ctx.writer.write(TextDeltaChunk(ctx.run_id, {"id": str(uuid.uuid4()), "text": text}))
    if memory is not None:
        answer = {"role": "assistant", "content": [{"type": "text", "text": text}]}
        await _save(memory, scope, prompt, [answer], str(uuid.uuid4()))
    return {"text": text, "subAgentThreadId": scope.thread_id, "subAgentResourceId": scope.resource_id}


def _bail(run: DelegationRun) -> Callable[[], None]:
    def bail() -> None:
        run.bailed = True

    return bail


async def _save(
    memory: Memory, scope: MemoryScope, prompt: str | None, responses: list[Any], message_id: str
) -> None:
    """The delegation on the sub-agent's thread: its prompt (not on a resume) and the answer."""
    await memory.ensure_thread(scope)
    await memory.save_turn(scope, normalize_messages(prompt), responses, message_id)


async def _feedback(parent: Any | None, ctx: ToolContext, done: Mapping[str, object]) -> None:
    """``onDelegationComplete``'s ``feedback``: an assistant message on the supervisor's thread
    (the model sees it on the next turn, as in Mastra)."""
    feedback = done.get("feedback")
    memory: Memory | None = parent.memory if parent is not None else None
    if not feedback or memory is None or ctx.thread_id is None or ctx.resource_id is None:
        return
    scope = MemoryScope(ctx.thread_id, ctx.resource_id)
    await memory.save_message(
        scope, str(uuid.uuid4()), {"role": "assistant", "content": [{"type": "text", "text": str(feedback)}]}
    )
