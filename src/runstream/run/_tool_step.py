"""The tool step: approvals, the step's tool calls run concurrently, their results.

Tools of one step run concurrently; what they write (``tool-output``, ``data-*``, background
task events) streams live while they run, their results follow in call order once all have
finished. A call may start while the model still streams (:class:`EagerTools`). A step stops for
a human when a call needs approval or a tool suspends; :func:`answer_pending` applies the answer.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Collection, Coroutine
from functools import partial
from itertools import islice
from typing import Any

from runstream import _tracing as tracing
from runstream.abort import AbortError
from runstream.chunks import (
    AgentChunk,
    ToolCallApprovalChunk,
    ToolCallSuspendedChunk,
    ToolCallSuspendedPayload,
    ToolErrorChunk,
    ToolErrorPayload,
    ToolOutputDeniedChunk,
    ToolResultChunk,
    ToolResultPayload,
)
from runstream.errors import StateConflictError
from runstream.models.base import PromptMessage, tool_result_output
from runstream.models.parts import ProviderMetadata
from runstream.models.prompt import ToolApprovalResponsePart, ToolMessage, ToolResultOutput, ToolResultPart
from runstream.run._run_state import (
    LoopConfig,
    PendingToolStep,
    ResumeAction,
    RunState,
    ToolCall,
    ToolOutcome,
)
from runstream.tools import (
    APPROVAL_RESUME_SCHEMA,
    Tool,
    ToolArgs,
    ToolArgumentsError,
    ToolContext,
    ToolExecutionError,
    ToolInputNotJSONError,
    ToolNotFoundError,
    ToolSuspended,
    ToolWriter,
    draft07_schema_json,
    private_error_text,
    resume_schema_json,
)

logger = logging.getLogger("runstream.tools")

TOOL_ABORT_GRACE_S = 1.0
"""How long an aborted run's tools may take to end on their own before they are cancelled."""


class Outbox:
    """What a step's running tools emit, in order (``None``: a call ended), for the step to
    stream. A deque and, only while the step waits on it, one future: lighter than an
    ``asyncio.Queue`` (with its event and getter/putter queues), and made once per tool step."""

    __slots__ = ("_waiter", "items")

    def __init__(self) -> None:
        self.items: deque[AgentChunk | None] = deque()
        self._waiter: asyncio.Future[None] | None = None

    def put(self, item: AgentChunk | None) -> None:
        self.items.append(item)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def get(self) -> AgentChunk | None:
        """The next item, once there is one."""
        while not self.items:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return self.items.popleft()


class EagerTools:
    """Tools started the moment the model's ``tool-call`` part arrives, as Mastra does: they run
    while the model is still streaming (a second call's arguments, more text), and the tool step
    then only collects them. What they emit meanwhile (``tool-output``, ``data-*``,
    ``background-task-started``) is delivered between model parts, in the order it happened.

    Only for agents without approval-gated tools: a step with an approval runs nothing before it
    is answered."""

    __slots__ = ("outbox", "slots", "tasks")

    def __init__(self, limit: int) -> None:
        self.outbox = Outbox()
        self.tasks: dict[str, asyncio.Task[ToolOutcome]] = {}
        self.slots = asyncio.Semaphore(limit)

    def start(self, cfg: LoopConfig, state: RunState, call: ToolCall) -> None:
        self.tasks[call.tool_call_id] = asyncio.create_task(
            _limited(self.slots, execute_call(cfg, state, call, self.outbox.put, None))
        )

    def emitted(self) -> list[AgentChunk]:
        """What the started tools emitted so far (never waits)."""
        items = self.outbox.items
        chunks = [chunk for chunk in items if chunk is not None]
        items.clear()
        return chunks

    async def cancel(self) -> None:
        """Stop tools whose step ended without running its tool calls (abort, tripwire)."""
        for task in self.tasks.values():
            task.cancel()
        await asyncio.gather(*self.tasks.values(), return_exceptions=True)
        self.tasks.clear()


async def run_tool_step(
    cfg: LoopConfig, state: RunState, pending: PendingToolStep, eager: EagerTools | None = None
) -> AsyncGenerator[AgentChunk, None]:
    """Execute the step's tool calls, streaming their output; stop for approvals/suspensions.

    A step that stopped leaves ``state.pending`` set (status ``suspended``); one that ran its
    tools clears it and leaves their result parts in ``pending.results``."""
    to_run: list[ToolCall] = []
    for call in pending.calls:
        if (
            call.tool_call_id in pending.done
            or call.tool_call_id in pending.suspended
            or call.tool_name in cfg.client_tools
        ):
            continue
        tool = cfg.tools.get(call.tool_name)
        if (
            tool is not None
            and call.args_error is None
            and call.tool_call_id not in pending.approved
            and (tool.require_approval or await _policy_requires_approval(cfg, call))
        ):
            # One approval at a time, in call order (as Mastra): the next one is asked for
            # when this one is answered; nothing of the step runs before all are answered.
            pending.awaiting_approval = {call.tool_call_id}
            yield ToolCallApprovalChunk(
                state.run_id,
                {
                    "toolCallId": call.tool_call_id,
                    "toolName": call.tool_name,
                    "args": call.args,
                    "resumeSchema": resume_schema_json(APPROVAL_RESUME_SCHEMA),
                },
            )
            state.status = "suspended"
            state.finish_reason = "suspended"
            return
        to_run.append(call)
    async for chunk in _run_calls(cfg, state, pending, to_run, eager):
        yield chunk
    for chunk in _end_of_calls(cfg, state, pending):
        yield chunk


def finished_tool_step(
    cfg: LoopConfig, state: RunState, pending: PendingToolStep, eager: EagerTools | None
) -> list[AgentChunk] | None:
    """The whole tool step at once, when every call it runs started while the model streamed
    and has ended already (the usual case for a quick tool): what they emitted, then their
    suspensions or results, as :func:`run_tool_step` would stream them, without a generator,
    a wait or an event-loop turn. ``None`` when some call still runs (or never started):
    :func:`run_tool_step` then runs the step."""
    if eager is None or pending.done or pending.suspended:
        return None
    tasks = eager.tasks
    calls = [call for call in pending.calls if call.tool_name not in cfg.client_tools]
    if len(tasks) != len(calls):
        return None
    for call in calls:
        task = tasks.get(call.tool_call_id)
        if task is None or not task.done() or task.cancelled():
            return None
    for call in calls:
        pending.done[call.tool_call_id] = _task_outcome(call, tasks.pop(call.tool_call_id))
    chunks = [with_run_id(chunk, state.run_id) for chunk in eager.emitted()]
    chunks.extend(_end_of_calls(cfg, state, pending))
    return chunks


def _end_of_calls(cfg: LoopConfig, state: RunState, pending: PendingToolStep) -> list[AgentChunk]:
    """Once the step's calls ran: their suspensions (the step stops), else their results."""
    chunks = _suspensions(cfg, state, pending)
    if pending.suspended:
        state.status = "suspended"
        state.finish_reason = "suspended"
        return chunks
    chunks.extend(_results(cfg, state, pending))
    state.pending = None
    return chunks


def _task_outcome(call: ToolCall, task: asyncio.Task[ToolOutcome]) -> ToolOutcome:
    """How a finished (not cancelled) task that ran ``call`` ended."""
    error = task.exception()
    return task.result() if error is None else ToolOutcome(call, "error", error)


async def _run_calls(
    cfg: LoopConfig,
    state: RunState,
    pending: PendingToolStep,
    to_run: list[ToolCall],
    eager: EagerTools | None,
) -> AsyncIterator[AgentChunk]:
    """Run the calls concurrently (collecting those the model step started), streaming what
    they write; each call's outcome lands in ``pending.done``."""
    run_id = state.run_id
    outbox = eager.outbox if eager is not None else Outbox()
    emit = outbox.put
    slots = (
        eager.slots
        if eager is not None
        else asyncio.Semaphore(tool_call_limit(cfg, to_run, pending.approved))
    )

    async def run_one(call: ToolCall) -> None:
        try:
            resume_data = pending.resume_data.get(call.tool_call_id)
            outcome = await _limited(slots, execute_call(cfg, state, call, emit, resume_data))
        except Exception as exc:  # a bug below: the call still gets an outcome, the run goes on
            logger.error("tool call %s failed outside its tool", call.tool_call_id, exc_info=exc)
            outcome = ToolOutcome(call, "error", exc)
        finally:
            emit(None)
        pending.done[call.tool_call_id] = outcome

    def collect(call: ToolCall, task: asyncio.Task[ToolOutcome]) -> None:
        """The outcome of a call that started while the model streamed."""
        if not task.cancelled():
            pending.done[call.tool_call_id] = _task_outcome(call, task)
        emit(None)

    tasks: list[asyncio.Task[Any]] = []
    for call in to_run:
        started = eager.tasks.pop(call.tool_call_id, None) if eager is not None else None
        if started is None:
            tasks.append(asyncio.create_task(run_one(call)))
        elif started.done():  # it ended while the model streamed: nothing to wait for
            collect(call, started)
        else:
            started.add_done_callback(partial(collect, call))
            tasks.append(started)
    remaining = len(to_run)

    hard_stop: list[asyncio.TimerHandle] = []

    def stop_tools(_reason: object) -> None:
        """An abort gives the step's tools a moment to end on their own (they see their abort
        signal), then cancels those that are still running: the run always ends."""
        cancel_all = partial(_cancel_all, tasks)
        hard_stop.append(asyncio.get_running_loop().call_later(TOOL_ABORT_GRACE_S, cancel_all))

    stop_listening = cfg.abort_signal.add_listener(stop_tools)
    try:
        while remaining:
            item = await outbox.get()
            if item is None:
                remaining -= 1
            else:
                yield with_run_id(item, run_id)
    finally:
        stop_listening()
        for handle in hard_stop:
            handle.cancel()
        _cancel_all(tasks)
    if cfg.abort_signal.aborted:  # a tool cancelled at the abort reports as aborted
        for call in to_run:
            if call.tool_call_id not in pending.done:
                pending.done[call.tool_call_id] = ToolOutcome(
                    call, "error", AbortError("Tool execution aborted")
                )


async def _policy_requires_approval(cfg: LoopConfig, call: ToolCall) -> bool:
    """The run's approval policy function, asked about one call."""
    if cfg.approval_policy is None:
        return False
    verdict = cfg.approval_policy(
        {"toolName": call.tool_name, "args": call.args, "requestContext": cfg.request_context}
    )
    if inspect.isawaitable(verdict):
        verdict = await verdict
    return bool(verdict)


def tool_call_limit(cfg: LoopConfig, calls: list[ToolCall], approved: Collection[str] = ()) -> int:
    """How many of a step's calls run at once: ``cfg.tool_call_concurrency``, or one at a time
    when a tool that may need approval or suspend is offered (or, with the ``called``
    strategy, called), or when an approval policy made one of the calls wait, as Mastra does."""
    if cfg.approval_policy is not None and any(call.tool_call_id in approved for call in calls):
        return 1
    if cfg.tool_call_strategy == "called":
        tools = [cfg.tools[call.tool_name] for call in calls if call.tool_name in cfg.tools]
    else:
        tools = list(cfg.tools.values())
    if any(tool.require_approval or tool.suspend_schema is not None for tool in tools):
        return 1
    return cfg.tool_call_concurrency


async def _limited(slots: asyncio.Semaphore, work: Coroutine[Any, Any, ToolOutcome]) -> ToolOutcome:
    try:
        async with slots:
            return await work
    finally:
        work.close()  # a call cancelled while it queued never started: no "never awaited" warning


def _suspensions(cfg: LoopConfig, state: RunState, pending: PendingToolStep) -> list[AgentChunk]:
    """Calls whose tool suspended move from ``done`` to ``suspended``; their chunks."""
    chunks: list[AgentChunk] = []
    for call in pending.calls:
        outcome = pending.done.get(call.tool_call_id)
        if outcome is None or call.tool_call_id in pending.suspended or outcome.kind != "suspended":
            continue
        tool = cfg.tools.get(call.tool_name)
        pending.suspended[call.tool_call_id] = outcome.value
        if outcome.run_id is not None:
            pending.suspended_run_ids[call.tool_call_id] = outcome.run_id
        del pending.done[call.tool_call_id]
        state.suspend_payload = outcome.value
        payload: ToolCallSuspendedPayload = {
            "toolCallId": call.tool_call_id,
            "toolName": call.tool_name,
            "suspendPayload": outcome.value,
            "args": call.args,
        }
        schema = outcome.resume_schema or (tool.resume_schema if tool is not None else None)
        if schema is not None:
            payload["resumeSchema"] = draft07_schema_json(schema)
        chunks.append(ToolCallSuspendedChunk(state.run_id, payload))
    return chunks


def _results(cfg: LoopConfig, state: RunState, pending: PendingToolStep) -> list[AgentChunk]:
    """The step's tool errors then results (each in call order, as in Mastra); the tool
    message joins the conversation and ``pending.results`` gets its parts."""
    run_id = state.run_id
    tool_parts: list[ToolResultPart] = []
    errors: list[AgentChunk] = []
    results: list[AgentChunk] = []
    for call in pending.calls:
        outcome = pending.done.get(call.tool_call_id)
        if outcome is None:  # a client tool: its result comes with the client's next request
            continue
        if outcome.kind == "result":
            payload: ToolResultPayload = {
                "args": call.args,
                "toolCallId": call.tool_call_id,
                "toolName": call.tool_name,
                "result": outcome.value,
            }
            metadata = outcome.provider_metadata or call.chunk_metadata  # (as Mastra's)
            if metadata:
                payload["providerMetadata"] = metadata
            result_chunk = ToolResultChunk(run_id, payload)
            state.tool_results.append(result_chunk)
            if cfg.wait_for_background is None or not _is_placeholder(outcome):
                results.append(result_chunk)  # in durable mode the real result follows once the task ends
        elif outcome.kind == "error":
            error, call_id, name = outcome.value, call.tool_call_id, call.tool_name
            error_payload: ToolErrorPayload = (
                {"error": error, "toolCallId": call_id, "toolName": name}
                if call.args_unreadable  # (no arguments to show)
                else {"error": error, "args": call.args, "toolCallId": call_id, "toolName": name}
            )
            if outcome.provider_metadata:  # e.g. the failed background task it ran as
                error_payload["providerMetadata"] = outcome.provider_metadata
            errors.append(ToolErrorChunk(run_id, error_payload))
            hidden = private_error_text(outcome.value, call.tool_name)
            if hidden is not None:  # the model sees the text; memory keeps this
                state.hidden_tool_errors[call.tool_call_id] = hidden
        part: ToolResultPart = {
            "type": "tool-result",
            "toolCallId": call.tool_call_id,
            "toolName": call.tool_name,
            "output": tool_output_for_model(outcome),
            "input": call.sent_args,
        }
        if outcome.provider_metadata:
            _link_call(state, call.tool_call_id, outcome.provider_metadata)
        # the result carries its call's provider metadata too (as Mastra's message list does)
        options = {**(call.provider_metadata or {}), **(outcome.provider_metadata or {})}
        if options:
            part["providerOptions"] = options
        tool_parts.append(part)
    if tool_parts:
        state.messages.append({"role": "tool", "content": [*tool_parts]})
    # The step's content gains its tool results once its step-finish is out (as in Mastra).
    pending.results = [
        {
            "type": p["type"],
            "toolCallId": p["toolCallId"],
            "toolName": p["toolName"],
            "output": p["output"],
            "input": p["input"],
        }
        for p in tool_parts
    ]
    return [*errors, *results]


def answer_pending(state: RunState, pending: PendingToolStep, resume: ResumeAction) -> list[AgentChunk]:
    """Apply an approval, decline or resume to the stopped step (the tool step then goes on).
    Raises :class:`~runstream.errors.StateConflictError` for a call that does not wait for it."""
    target = resume.tool_call_id
    chunks: list[AgentChunk] = []
    if resume.kind in ("approve", "decline"):
        ids = [target] if target else sorted(pending.awaiting_approval)
        for call_id in ids:
            if call_id not in pending.awaiting_approval:
                raise StateConflictError(f"tool call {call_id!r} is not waiting for approval")
            pending.awaiting_approval.discard(call_id)
            if resume.kind == "decline":
                call = next(c for c in pending.calls if c.tool_call_id == call_id)
                reason = resume.reason or "Tool call was not approved by the user"
                pending.done[call_id] = ToolOutcome(call, "denied", reason)
                chunks.append(
                    ToolOutputDeniedChunk(
                        state.run_id,
                        {
                            "toolCallId": call_id,
                            "toolName": call.tool_name,
                            "args": call.args,
                            "approval": {"id": call_id, "approved": False, "reason": reason},
                        },
                    )
                )
            else:
                pending.done.pop(call_id, None)
                pending.suspended.pop(call_id, None)
                pending.approved.append(call_id)
    else:
        ids = [target] if target else list(pending.suspended)
        for call_id in ids:
            if call_id not in pending.suspended:
                raise StateConflictError(f"tool call {call_id!r} is not suspended")
            pending.suspended.pop(call_id)
            pending.resume_data[call_id] = resume.data
    return chunks


async def wait_for_background(cfg: LoopConfig, state: RunState) -> AsyncGenerator[AgentChunk, None]:
    """Durable mode: wait for the tasks the run dispatched and has not waited for yet (the
    waiter adds those that settled to ``state.waited_task_ids``)."""
    dispatched = [t for t in state.background_task_ids if t not in state.waited_task_ids]
    if cfg.wait_for_background is None or not dispatched:
        return
    async for chunk in cfg.wait_for_background(state, dispatched, cfg.abort_signal):
        yield chunk
    if cfg.abort_signal.aborted:
        return
    if any(task in state.waited_task_ids for task in dispatched) and state.step_number < cfg.max_steps:
        state.ends_after_step = None  # a settled task gives the model another step
    if cfg.on_step_end is not None:
        await cfg.on_step_end(state)


def calls_client_tools(cfg: LoopConfig, pending: PendingToolStep) -> bool:
    """A step that called client tools ends the run (reason ``tool-calls``), as in Mastra: the
    client executes them and sends their results with its next request."""
    return bool(cfg.client_tools) and any(call.tool_name in cfg.client_tools for call in pending.calls)


async def execute_call(
    cfg: LoopConfig, state: RunState, call: ToolCall, emit: Callable[[AgentChunk], None], resume_data: Any
) -> ToolOutcome:
    tool = cfg.tools.get(call.tool_name)
    if tool is None:
        available = f" Available tools: {', '.join(cfg.tools)}" if cfg.tools else ""  # Mastra's words
        return ToolOutcome(
            call,
            "error",
            ToolNotFoundError(
                f'Tool "{call.tool_name}" not found.{available}. '
                "Call tools by their exact name only \u2014 never add prefixes, namespaces, or colons."
            ),
        )
    if call.args_error is not None:
        error_type = ToolInputNotJSONError if call.args_unreadable else ToolArgumentsError
        return ToolOutcome(call, "error", error_type(call.args_error))
    if cfg.dispatch_tool is not None and resume_data is None:
        dispatched = await cfg.dispatch_tool(call, tool, cfg, state, emit)
        if dispatched is not None:
            return dispatched
    try:
        args = tool.validate_args(call.args)
    except ToolArgumentsError as exc:  # the model sees why, as the tool's result, and can retry
        return ToolOutcome(call, "result", exc.as_result())
    ctx = ToolContext(
        tool_call_id=call.tool_call_id,
        tool_name=call.tool_name,
        run_id=state.run_id,
        agent_id=cfg.agent_id,
        agent_name=cfg.agent_name,
        writer=ToolWriter(emit, state.run_id, call.tool_call_id, call.tool_name),
        abort_signal=cfg.abort_signal,
        resume_data=resume_data,
        thread_id=cfg.thread_id,
        resource_id=cfg.resource_id,
        messages=state.messages,
        request_context=cfg.request_context,
        delegation=cfg.delegation,
        suspended_tool_run_id=(
            state.pending.suspended_run_ids.pop(call.tool_call_id, None)
            if resume_data is not None and state.pending is not None
            else None
        ),
    )
    span = tracing.start_tool_span(state.span, tool.name, call.tool_call_id, tool.description, args)
    outcome = await run_tool(tool, args, ctx, call)
    value = outcome.value
    tracing.end_tool_span(
        span, outcome.kind, value.__cause__ if isinstance(value, ToolExecutionError) else value
    )
    return outcome


async def run_tool(tool: Tool, args: ToolArgs, ctx: ToolContext, call: ToolCall) -> ToolOutcome:
    """Execute a tool and classify how it ended (result, error or suspension)."""
    try:
        result = await tool.execute(args, ctx)
    except ToolSuspended:
        pass  # classified below, from the context
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        if not ctx.suspended:
            logger.warning(
                "tool %s (call %s) raised",
                tool.name,
                call.tool_call_id,
                exc_info=exc,
                extra={"runId": ctx.run_id},
            )
            return ToolOutcome(call, "error", ToolExecutionError.wrapping(exc))
    else:
        if not ctx.suspended:
            if tool.to_model_output is not None:  # Mastra's toModelOutput: what the model sees
                seen = dict(tool.to_model_output(result))
                return ToolOutcome(
                    call, "result", result, provider_metadata={"mastra": {"modelOutput": seen}}
                )
            return ToolOutcome(call, "result", result)
    return ToolOutcome(
        call,
        "suspended",
        ctx.suspended_with,
        resume_schema=ctx.suspend_resume_schema,
        run_id=ctx.suspend_run_id,
    )


def tool_output_for_model(outcome: ToolOutcome) -> ToolResultOutput:
    """The ``output`` of a tool-result prompt part."""
    if outcome.model_output is not None:
        return outcome.model_output
    # A declined call is not a failure: the model reads the reason as the result (as in Mastra).
    return tool_result_output(outcome.value, is_error=outcome.kind == "error")


def model_view(messages: list[PromptMessage]) -> list[PromptMessage]:
    """The conversation as the model sees it: a tool result with Mastra's ``modelOutput``
    (a tool's ``to_model_output``) shows that instead of the result, which the run's messages and
    memory keep (as Mastra's message list does)."""
    if not shows_model_output(messages):
        return messages
    return [_with_model_output(m) if m["role"] == "tool" else m for m in messages]


def shows_model_output(messages: list[PromptMessage], start: int = 0) -> bool:
    """Whether a tool result from ``messages[start:]`` on shows the model a ``modelOutput``."""
    # Plain loops, a call only for a part with options (this runs before model calls).
    for message in islice(messages, start, None):
        if message["role"] == "tool":
            for part in message["content"]:
                if isinstance(part, dict) and part.get("providerOptions") and _model_output(part) is not None:
                    return True
    return False


def _model_output(part: Any) -> Any:
    options = part.get("providerOptions") if isinstance(part, dict) else None
    return options.get("mastra", {}).get("modelOutput") if options else None


def _with_model_output(message: ToolMessage) -> ToolMessage:
    parts: list[ToolResultPart | ToolApprovalResponsePart] = []
    for part in message["content"]:
        seen = _model_output(part)
        parts.append({**part, "output": seen} if seen is not None and part["type"] == "tool-result" else part)
    return {**message, "content": parts}


def _link_call(state: RunState, tool_call_id: str, provider_metadata: ProviderMetadata) -> None:
    """Mark the assistant's tool-call part with the same metadata as its result (task link)."""
    for message in reversed(state.messages):
        if message["role"] != "assistant":
            continue
        for part in message["content"]:
            if part.get("type") == "tool-call" and part.get("toolCallId") == tool_call_id:
                part["providerOptions"] = {**(part.get("providerOptions") or {}), **provider_metadata}
                return


def _is_placeholder(outcome: ToolOutcome) -> bool:
    mastra = (outcome.provider_metadata or {}).get("mastra") or {}
    return bool((mastra.get("backgroundTask") or {}).get("status") == "running")


def _cancel_all(tasks: list[asyncio.Task[Any]]) -> None:
    for task in tasks:
        if not task.done():
            task.cancel()


def with_run_id(chunk: AgentChunk, run_id: str) -> AgentChunk:
    """Tools emit chunks without knowing the run; they get its id on the way out."""
    if not chunk.run_id:
        chunk.run_id = run_id
    return chunk
