"""The agentic loop: model steps, tool execution, stop conditions, and the chunks they make.

``agent_loop`` is one async generator: it pulls provider parts from the model and yields chunks,
so a consumer's ``async for`` drives the whole run with no producer task or queue on the token
path (see DESIGN.md, hot-path rules). Tools of one step run concurrently; their writer output is
streamed live while they run, their results follow in call order once all have finished.

A run that needs a human (a tool awaiting approval, a tool that suspended) ends its stream after
the ``tool-call-approval`` / ``tool-call-suspended`` chunk and leaves a :class:`PendingToolStep`
in the :class:`RunState`; ``agent_loop(..., resume=...)`` continues it.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal

from runstream import tracing
from runstream.abort import AbortError, AbortSignal
from runstream.chunks import (
    AbortChunk,
    AnyChunk,
    ErrorChunk,
    FileChunk,
    ObjectChunk,
    ObjectResultChunk,
    RawChunk,
    ReasoningDeltaChunk,
    ReasoningEndChunk,
    ReasoningStartChunk,
    ResponseMetadataChunk,
    SourceChunk,
    StartChunk,
    StepStartChunk,
    TextDeltaChunk,
    TextEndChunk,
    TextStartChunk,
    ToolCallApprovalChunk,
    ToolCallChunk,
    ToolCallDeltaChunk,
    ToolCallInputStreamingEndChunk,
    ToolCallInputStreamingStartChunk,
    ToolCallSuspendedChunk,
    ToolErrorChunk,
    ToolOutputDeniedChunk,
    ToolResultChunk,
    TripwireChunk,
    iso_datetime,
    now_utc,
)
from runstream.memory import ContinuedMessage
from runstream.models.base import (
    LanguageModel,
    ModelCallError,
    ModelRequest,
    ModelSettings,
    PromptMessage,
    tool_result_output,
)
from runstream.processors import (
    ProcessorContext,
    StepView,
    TripWire,
    run_step_processors,
    run_stream_processors,
)
from runstream.step_results import (
    add_feedback,
    add_tool_results,
    finish_chunk,
    normalize_usage,
    step_finish_chunk,
    step_record,
)
from runstream.structured import StructuredOutput, partial_object
from runstream.tools import (
    APPROVAL_RESUME_SCHEMA,
    Tool,
    ToolArgumentsError,
    ToolContext,
    ToolInputNotJSONError,
    ToolNotFoundError,
    ToolSuspended,
    ToolWriter,
    resume_schema_json,
)

Status = Literal["running", "success", "failed", "suspended", "aborted", "tripwire"]

ToolDispatcher = Callable[
    ["ToolCall", Tool, "LoopConfig", "RunState", Callable[[AnyChunk], None]], Awaitable["ToolOutcome | None"]
]
"""Hook that may take a tool call away from inline execution (background tasks). Returning
``None`` means "run it inline"."""


@dataclass(slots=True)
class CheckVerdict:
    """What a completion check (task-completion scorers, a goal judge) decided about a final step."""

    continue_loop: bool
    feedback: list[PromptMessage] = field(default_factory=list)
    """Messages the model sees in the next step when the loop continues."""
    authoritative: bool = False
    """An authoritative verdict (the goal judge) overrides the others."""
    payload_extra: dict[str, Any] = field(default_factory=dict)
    """Extra fields for the step-finish payload."""
    next_message_id: str | None = None
    """The response message id the next iteration streams under (Mastra starts a new response
    message after an is-task-complete feedback message)."""


BackgroundWaiter = Callable[["RunState", list[str], AbortSignal], AsyncIterator[AnyChunk]]
"""Waits for background tasks inside the loop (until they end or the run is aborted); yields
progress chunks and their final results."""

CompletionCheck = Callable[["LoopConfig", "RunState", str], AsyncIterator["AnyChunk | CheckVerdict"]]
"""Runs after a step that ends the model's turn; yields chunks, then one :class:`CheckVerdict`."""


@dataclass(slots=True)
class LoopConfig:
    """Everything about a run that does not change while it runs."""

    agent_id: str
    model: LanguageModel
    tools: dict[str, Tool]
    agent_name: str = ""
    system: list[PromptMessage] = field(default_factory=list)
    max_steps: int = 5
    tool_choice: dict[str, Any] | None = None
    include_raw_chunks: bool = False
    structured_output: StructuredOutput | None = None
    output_processors: list[Any] = field(default_factory=list)
    input_processors: list[Any] = field(default_factory=list)
    max_processor_retries: int = 0
    model_settings: ModelSettings = field(default_factory=ModelSettings)
    abort_signal: AbortSignal = field(default_factory=AbortSignal)
    context: list[PromptMessage] = field(default_factory=list)
    """Extra messages for the model that are not part of the conversation (not saved)."""
    thread_id: str | None = None
    resource_id: str | None = None
    dispatch_tool: ToolDispatcher | None = None
    tool_schemas: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Input schemas offered to the model instead of a tool's own (e.g. with ``_background``)."""
    completion_checks: list[CompletionCheck] = field(default_factory=list)
    after_input: list[PromptMessage] = field(default_factory=list)
    """Messages shown to the model right after the run's input (state signals), not saved."""
    start_chunks: list[AnyChunk] = field(default_factory=list)
    """Chunks streamed right after ``start`` (e.g. the current-objective signal)."""
    on_step_end: Callable[[RunState], Awaitable[None]] | None = None
    """Called after each finished step (durable agents save a snapshot there)."""
    wait_for_background: BackgroundWaiter | None = None
    """Durable mode: after a step that dispatched background tasks, wait for them in the loop
    (this yields progress and the real results) instead of leaving placeholders."""
    tool_call_concurrency: int = 10
    durable: bool = False
    """A durable agent's run: Mastra's durable loop reports its steps in a shape of its own
    (see ``step_results``), and each step streams as a message of its own."""
    client_tools: frozenset[str] = frozenset()
    """Tools (in ``tools``) that the client executes: a step that calls one ends the run."""


@dataclass(slots=True)
class ToolCall:
    tool_call_id: str
    tool_name: str
    args: dict[str, Any]
    """The arguments the tool gets."""
    args_error: str | None = None
    args_unreadable: bool = False
    """The model's argument text was not JSON at all: the call has no arguments to show."""
    provider_metadata: dict[str, Any] | None = None
    model_input: dict[str, Any] | None = None
    """The arguments as the model sent them, when they differ from ``args`` (e.g. with a
    ``_background`` override); the conversation keeps these."""

    @property
    def sent_args(self) -> dict[str, Any]:
        return self.args if self.model_input is None else self.model_input


@dataclass(slots=True)
class ToolOutcome:
    """How one tool call ended."""

    call: ToolCall
    kind: Literal["result", "error", "suspended", "denied"]
    value: Any = None
    provider_metadata: dict[str, Any] | None = None
    """Extra tool-result metadata (the background-task link)."""
    model_output: dict[str, Any] | None = None
    """What the model sees instead of ``value`` (e.g. a background placeholder)."""
    resume_schema: dict[str, Any] | None = None
    """For a suspension: the schema of the data that resumes it (if the call gave one)."""


@dataclass(slots=True)
class PendingToolStep:
    """A step whose tools wait for a human: approvals or a suspended tool."""

    calls: list[ToolCall]
    awaiting_approval: set[str]
    suspended: dict[str, Any]
    """tool call id -> suspend payload"""
    done: dict[str, ToolOutcome]
    step_record: dict[str, Any]


@dataclass(slots=True)
class ResumeAction:
    """How to continue a run that stopped for a human."""

    kind: Literal["approve", "decline", "resume", "continue"]
    """``continue``: a durable run restored after a restart goes on from its last finished step."""
    tool_call_id: str | None = None
    data: Any = None
    reason: str | None = None


@dataclass
class RunState:
    """The mutable state of one run, shared by the loop and its :class:`RunOutput`."""

    run_id: str
    message_id: str
    messages: list[PromptMessage]
    """The conversation in model-prompt form: input (history + new user) then responses."""
    input_count: int
    steps: list[dict[str, Any]] = field(default_factory=list)
    usage: dict[str, Any] = field(default_factory=dict)
    finish_reason: str | None = None
    status: Status = "running"
    error: BaseException | None = None
    tripwire: dict[str, Any] | None = None
    object: Any = None
    tool_calls: list[AnyChunk] = field(default_factory=list)
    tool_results: list[AnyChunk] = field(default_factory=list)
    sources: list[AnyChunk] = field(default_factory=list)
    files: list[AnyChunk] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    pending: PendingToolStep | None = None
    processor_retry_count: int = 0
    suspend_payload: Any = None
    step_number: int = 0
    history_count: int = 0
    """How many of ``messages`` came from memory (the rest of the input is new)."""
    background_task_ids: list[str] = field(default_factory=list)
    tasks_pending: Callable[[list[str]], bool] | None = None
    """Reports whether any of the run's background tasks still runs (``backgroundTaskPending``)."""
    saved: bool = False
    """Set when the run's messages have been handed to memory."""
    check_counts: dict[str, int] = field(default_factory=dict)
    """Evaluations so far per completion check (their ``iteration``)."""
    span: Any = None
    """The run's tracing span (parent of its step and tool spans)."""
    waited_task_ids: set[str] = field(default_factory=set)
    """Durable mode: background tasks whose results the loop already waited for."""
    message_segments: list[tuple[str, int]] = field(default_factory=list)
    """The response messages when signals split the response: (id, the index in ``messages``
    its content starts at), the first one included. Empty when the run is one message."""
    continued: ContinuedMessage | None = None
    """For a run without new input: the thread's last stored message, an assistant one, which
    the run's response is appended to (see ``runstream.memory``)."""

    @property
    def background_task_pending(self) -> bool:
        return (
            bool(self.background_task_ids)
            and self.tasks_pending is not None
            and self.tasks_pending(self.background_task_ids)
        )

    @property
    def new_input_messages(self) -> list[PromptMessage]:
        return self.messages[self.history_count : self.input_count]

    @property
    def text(self) -> str:
        """The final step's text (Mastra's ``text`` aggregate)."""
        return str(self.steps[-1]["text"]) if self.steps else ""

    @property
    def response_messages(self) -> list[PromptMessage]:
        return self.messages[self.input_count :]


def _now_ms() -> int:
    return int(time.time() * 1000)


def tool_output_for_model(outcome: ToolOutcome) -> dict[str, Any]:
    """The ``output`` of a tool-result prompt part."""
    if outcome.model_output is not None:
        return outcome.model_output
    # A declined call is not a failure: the model reads the reason as the result (as in Mastra).
    return tool_result_output(outcome.value, is_error=outcome.kind == "error")


async def agent_loop(
    cfg: LoopConfig, state: RunState, resume: ResumeAction | None = None
) -> AsyncIterator[AnyChunk]:
    """Run the agent until it stops; yields every chunk of the run."""
    run_id = state.run_id
    signal = cfg.abort_signal
    if resume is None:
        yield StartChunk(run_id, {"id": cfg.agent_id, "messageId": state.message_id})
        for start_chunk in cfg.start_chunks:
            _open_message_after_signal(state, start_chunk)
            yield start_chunk
        if cfg.input_processors:
            try:
                await _process_input(cfg, state)
            except TripWire as trip:  # the model is never called
                state.tripwire = trip.payload()
                state.status = "tripwire"
                yield TripwireChunk(run_id, trip.payload())  # type: ignore[arg-type]
                yield finish_chunk(cfg, state, "tripwire")
                return
    elif resume.kind == "continue":
        async for waited_chunk in _wait_for_background(cfg, state):
            yield waited_chunk
    else:  # a resumed run goes on where it stopped: no new start chunk (as in Mastra)
        pending = state.pending
        if pending is None:
            raise RuntimeError("agent_loop resumed without a pending tool step")
        _open_new_message(state)  # and, as in Mastra, as a new response message
        async for resumed_chunk in _finish_pending_step(cfg, state, pending, resume):
            yield resumed_chunk
        if state.status != "running":
            return
    processors = cfg.output_processors
    proc_ctx = {p.id: ProcessorContext(processor_id=p.id, run_id=run_id) for p in processors}
    stream_processors = [p for p in processors if hasattr(p, "process_output_stream")]
    step_processors = [p for p in processors if hasattr(p, "process_output_step")]
    structured = cfg.structured_output
    retry_feedback: list[PromptMessage] = []
    eager_allowed = not any(tool.require_approval for tool in cfg.tools.values())

    while state.status == "running":
        if signal.aborted:
            yield _abort_chunk(state)
            # As in Mastra, the step the abort preempted still has a response (no warnings).
            preempted = {"response": default_response_metadata(cfg.model)}
            yield finish_chunk(cfg, state, "aborted", step_result={"warnings": []}, current=preempted)
            return
        state.step_number += 1
        if cfg.durable and state.steps:
            _open_new_message(state)
        step_started = _now_ms()
        tools_offered = [] if (cfg.tool_choice or {}).get("type") == "none" else list(cfg.tools.values())
        request = ModelRequest(
            prompt=[
                *cfg.system,
                *retry_feedback,
                *cfg.context,
                *state.messages[: state.input_count],
                *cfg.after_input,
                *state.messages[state.input_count :],
            ],
            tools=[t.spec(cfg.tool_schemas.get(t.name)) for t in tools_offered],
            tool_choice=(cfg.tool_choice or {"type": "auto"}) if cfg.tools else cfg.tool_choice,
            response_format=structured.response_format() if structured else None,
            include_raw_chunks=cfg.include_raw_chunks,
            settings=cfg.model_settings,
            abort_signal=signal,
        )
        step_text: list[str] = []
        block_starts: list[tuple[str, int]] = []  # each text/reasoning block: kind, first delta
        reasoning_text: list[str] = []
        content: list[dict[str, Any]] = []
        calls: list[ToolCall] = []
        step_usage: dict[str, Any] = {}
        step_result: dict[str, Any] = {}
        response_meta: dict[str, Any] = {}
        finish_reason = "unknown"
        step_error: BaseException | None = None
        tripwire: TripWire | None = None
        last_object: Any = None
        request_info: dict[str, Any] = {}
        step_started_emitted = False
        warnings: list[Any] = []
        streaming_tool_names: dict[str, str] = {}
        streamed_args: dict[str, list[str]] = {}  # tool input text streamed before each tool-call
        step_files: list[dict[str, Any]] = []
        eager: _EagerTools | None = None  # made at the step's first tool call
        step_span = tracing.start_child(
            state.span,
            "runstream.model.step",
            {
                "gen_ai.system": cfg.model.provider,
                "gen_ai.request.model": cfg.model.model_id,
                "runstream.step": state.step_number,
            },
        )
        try:
            model_stream = await cfg.model.stream(request)
            request_info = model_stream.request
            parts = model_stream.parts
        except Exception as exc:  # the request itself failed
            step_error = exc
            parts = None
        if parts is None:
            yield _step_start(cfg, state, {}, [], step_started)
            step_result["warnings"] = []
            step_started_emitted = True
        else:
            try:
                async for part in parts:
                    if eager is not None and eager.tasks:
                        for emitted in eager.emitted():
                            yield _with_run_id(emitted, run_id)
                    kind = part["type"]
                    chunk: AnyChunk | None
                    if kind == "text-delta":
                        delta = part["delta"]
                        if not delta:  # as Mastra: an empty delta is not streamed
                            continue
                        step_text.append(delta)
                        chunk = TextDeltaChunk(run_id, {"id": part["id"], "text": delta})
                    elif kind == "stream-start":
                        warnings = part.get("warnings") or []
                        if not step_started_emitted:
                            step_started_emitted = True
                            yield _step_start(cfg, state, request_info, warnings, step_started)
                        continue
                    elif kind == "reasoning-delta":
                        reasoning_text.append(part["delta"])
                        chunk = ReasoningDeltaChunk(
                            run_id, _with_pm({"id": part["id"], "text": part["delta"]}, part)
                        )
                    elif kind == "text-start":
                        block_starts.append(("text", len(step_text)))
                        chunk = TextStartChunk(run_id, _with_pm({"id": part["id"]}, part))
                    elif kind == "text-end":
                        chunk = TextEndChunk(run_id, _with_pm({"type": "text-end", "id": part["id"]}, part))
                    elif kind == "reasoning-start":
                        block_starts.append(("reasoning", len(reasoning_text)))
                        chunk = ReasoningStartChunk(run_id, _with_pm({"id": part["id"]}, part))
                    elif kind == "reasoning-end":
                        chunk = ReasoningEndChunk(run_id, _with_pm({"id": part["id"]}, part))
                    elif kind == "tool-input-start":
                        streaming_tool_names[part["id"]] = part["toolName"]
                        chunk = ToolCallInputStreamingStartChunk(
                            run_id, _with_pm({"toolCallId": part["id"], "toolName": part["toolName"]}, part)
                        )
                    elif kind == "tool-input-delta":
                        streamed_args.setdefault(part["id"], []).append(part["delta"])
                        chunk = ToolCallDeltaChunk(
                            run_id,
                            {
                                "argsTextDelta": part["delta"],
                                "toolCallId": part["id"],
                                "toolName": streaming_tool_names.get(part["id"], ""),
                            },
                        )
                    elif kind == "tool-input-end":
                        chunk = ToolCallInputStreamingEndChunk(run_id, {"toolCallId": part["id"]})
                    elif kind == "tool-call":
                        call = _parse_tool_call(part, "".join(streamed_args.get(part["toolCallId"], ())))
                        calls.append(call)
                        payload: dict[str, Any] = {
                            "toolCallId": call.tool_call_id,
                            "toolName": call.tool_name,
                        }
                        if not call.args_unreadable:
                            payload["args"] = dict(call.args)
                        if call.provider_metadata:
                            payload["providerMetadata"] = call.provider_metadata
                        chunk = ToolCallChunk(run_id, payload)  # type: ignore[arg-type]
                        state.tool_calls.append(chunk)
                        if eager_allowed and call.tool_name not in cfg.client_tools:
                            eager = eager or _EagerTools()
                            eager.start(cfg, state, call)  # a client tool runs on the client
                    elif kind == "source":
                        chunk = SourceChunk(run_id, _source_payload(part))
                        state.sources.append(chunk)
                    elif kind == "file":
                        chunk = FileChunk(run_id, _file_payload(part))
                        state.files.append(chunk)
                        step_files.append(_file_content(chunk.payload))
                    elif kind == "raw":
                        if not cfg.include_raw_chunks:
                            continue
                        chunk = RawChunk(run_id, part.get("rawValue"))
                    elif kind == "response-metadata":
                        response_meta = {k: v for k, v in part.items() if k != "type"}
                        if cfg.wait_for_background is None:
                            continue
                        metadata_payload: Any = {"type": "response-metadata", **response_meta}
                        chunk = ResponseMetadataChunk(run_id, metadata_payload)
                    elif kind == "finish":
                        reason = part.get("finishReason", "unknown")
                        if isinstance(reason, dict):  # AI SDK v3
                            step_result["rawReason"] = reason.get("raw")
                            reason = reason.get("unified", "unknown")
                        # Mastra reports an unknown reason as "other" (and keeps looping on it).
                        finish_reason = "other" if reason == "unknown" else str(reason)
                        step_usage = normalize_usage(part.get("usage"))
                        continue
                    elif kind == "error":
                        step_error = _as_exception(part.get("error"))
                        break
                    else:
                        continue
                    if not step_started_emitted:
                        step_started_emitted = True
                        yield _step_start(cfg, state, request_info, warnings, step_started)
                    if structured is not None and kind == "text-delta":
                        partial = partial_object("".join(step_text))
                        if partial is not None and partial != last_object:
                            last_object = partial
                            yield ObjectChunk(run_id, partial)
                    if stream_processors:
                        processed = await run_stream_processors(stream_processors, chunk, proc_ctx)
                        if kind == "text-delta":  # the step's text is what the processors let through
                            step_text.pop()
                            if processed is not None:
                                step_text.append(processed.payload["text"])
                        if processed is None:
                            continue
                        chunk = processed
                    yield chunk
                    if signal.aborted:
                        break
            except TripWire as trip:
                tripwire = trip
            except AbortError:
                pass
            except Exception as exc:  # the part stream failed mid-way
                if not signal.aborted:
                    step_error = exc
            finally:
                aclose = getattr(parts, "aclose", None)
                if aclose is not None:
                    await aclose()
            if not step_started_emitted:
                step_started_emitted = True
                yield _step_start(cfg, state, request_info, warnings, step_started)
        if finish_reason == "error" and step_error is None and tripwire is None and not signal.aborted:
            step_error = ModelCallError(
                'Agent stream finished with finishReason "error" but no error payload was provided',
                name="Error",
            )
        tracing.end_step_span(step_span, step_usage, "error" if step_error else finish_reason, step_error)
        response_meta = response_meta or default_response_metadata(cfg.model)

        if eager is not None and (signal.aborted or tripwire is not None):
            await eager.cancel()
        if signal.aborted:
            yield _abort_chunk(state)
            # The finish describes the step the abort cut short (its text so far, its response).
            cut_short = {"text": "".join(step_text), "request": request_info, "response": response_meta}
            yield finish_chunk(cfg, state, "aborted", current=cut_short)
            return

        text = "".join(step_text)
        if reasoning_text:
            state.reasoning.append("".join(reasoning_text))
        content.extend(_content_blocks(block_starts, step_text, reasoning_text))
        content.extend(step_files)  # files the model generated are part of its message
        for call in calls:
            content.append(
                {
                    "type": "tool-call",
                    "toolCallId": call.tool_call_id,
                    "toolName": call.tool_name,
                    "input": call.sent_args,
                }
            )

        if tripwire is not None:
            state.tripwire = tripwire.payload()
            yield TripwireChunk(run_id, tripwire.payload())  # type: ignore[arg-type]
            state.status = "tripwire"
            record = step_record(
                state, text, content, step_usage, "tripwire", request_info, response_meta, warnings
            )
            yield step_finish_chunk(cfg, state, record, "tripwire", continued=False)
            yield finish_chunk(cfg, state, "tripwire")
            return

        if step_error is not None:
            state.error = step_error
            yield ErrorChunk(run_id, {"type": "error", "error": step_error})  # type: ignore[typeddict-unknown-key]
            if content:
                state.messages.append({"role": "assistant", "content": list(content)})
            record = step_record(
                state, text, content, step_usage, "error", request_info, response_meta, warnings
            )
            if calls:  # the tools the model did call still run (as in Mastra); the run then ends
                pending = PendingToolStep(
                    calls=calls, awaiting_approval=set(), suspended={}, done={}, step_record=record
                )
                state.pending = pending
                async for chunk in _run_tool_step(cfg, state, pending, eager):
                    yield chunk
                if state.pending is not None:  # stopped for a human: the error ends nothing yet
                    return
            state.status = "failed"
            yield step_finish_chunk(cfg, state, record, "error", continued=False, step_result=step_result)
            yield finish_chunk(cfg, state, "error", step_result=step_result)
            return

        # Step-level processors (may ask for a retry with feedback).
        if step_processors:
            try:
                await run_step_processors(
                    step_processors,
                    StepView(
                        text=text,
                        tool_calls=[{"toolCallId": c.tool_call_id} for c in calls],
                        finish_reason=finish_reason,
                        step_number=state.step_number,
                    ),
                    proc_ctx,
                )
            except TripWire as trip:
                if eager is not None:
                    await eager.cancel()
                record = step_record(
                    state,
                    text,
                    content,
                    step_usage,
                    "retry",
                    request_info,
                    response_meta,
                    warnings,
                    rejected=True,
                )
                record["tripwire"] = trip.payload()
                if trip.retry and state.processor_retry_count < cfg.max_processor_retries:
                    state.processor_retry_count += 1
                    for ctx in proc_ctx.values():
                        ctx.retry_count = state.processor_retry_count
                    feedback = (
                        "[Processor Feedback] Your previous response was not accepted: "
                        f"{trip.reason}. Please try again with the feedback in mind."
                    )
                    retry_feedback.append({"role": "system", "content": feedback})
                    retry_result = {
                        "reason": "retry",
                        "isContinued": True,
                        "retryReason": trip.reason,
                        "retryMetadata": trip.metadata,
                        "retryProcessorId": trip.processor_id,
                    }
                    chunk = step_finish_chunk(
                        cfg, state, record, "retry", continued=True, step_result=retry_result
                    )
                    chunk.payload["processorRetryFeedback"] = feedback  # type: ignore[typeddict-unknown-key]
                    yield chunk
                    continue
                state.tripwire = trip.payload()
                state.status = "tripwire"
                yield TripwireChunk(run_id, trip.payload())  # type: ignore[arg-type]
                yield step_finish_chunk(cfg, state, record, "tripwire", continued=False)
                yield finish_chunk(cfg, state, "tripwire")
                return

            if state.processor_retry_count:  # the step is accepted: its retries are over
                state.processor_retry_count = 0
                for ctx in proc_ctx.values():
                    ctx.retry_count = 0

        # The assistant's response message for this step.
        assistant_content = list(content)
        if assistant_content:
            state.messages.append({"role": "assistant", "content": assistant_content})

        if structured is not None and not calls and text:
            try:
                obj = structured.parse_final(text)
            except ValueError as exc:
                state.error = exc
                state.status = "failed"
                yield ErrorChunk(run_id, {"type": "error", "error": exc})  # type: ignore[typeddict-unknown-key]
                record = step_record(
                    state, text, content, step_usage, "error", request_info, response_meta, warnings
                )
                yield step_finish_chunk(cfg, state, record, "error", continued=False)
                yield finish_chunk(cfg, state, "error")
                return
            state.object = obj
            yield ObjectResultChunk(run_id, obj)

        record = step_record(
            state, text, content, step_usage, finish_reason, request_info, response_meta, warnings
        )
        if not calls:
            verdicts: list[CheckVerdict] = []
            for check in cfg.completion_checks:
                async for item in check(cfg, state, text):
                    if isinstance(item, CheckVerdict):
                        verdicts.append(item)
                    else:
                        _open_message_after_signal(state, item)
                        yield item
            chosen = [v for v in verdicts if v.authoritative] or verdicts
            # Like a tool step, a step that ended for an unknown reason goes on (as Mastra does).
            wants_more = finish_reason == "other" or any(v.continue_loop for v in chosen)
            cont = wants_more and _should_continue(cfg, state)
            step_finish = step_finish_chunk(
                cfg, state, record, finish_reason, continued=cont, step_result=step_result
            )
            for verdict in verdicts:
                step_finish.payload.update(verdict.payload_extra)  # type: ignore[typeddict-item]
            yield step_finish
            if cont:
                for verdict in chosen:
                    state.messages.extend(verdict.feedback)
                    add_feedback(record, verdict.feedback)
                    state.message_id = verdict.next_message_id or state.message_id
                continue
            state.status = "success"
            finish = finish_chunk(cfg, state, finish_reason, step_result=step_result)
            for verdict in verdicts:  # the final verdicts travel with the finish too (as in Mastra)
                finish.payload.update(verdict.payload_extra)  # type: ignore[typeddict-item]
            yield finish
            return

        pending = PendingToolStep(
            calls=calls, awaiting_approval=set(), suspended={}, done={}, step_record=record
        )
        record["finishReason"] = finish_reason
        state.pending = pending
        async for chunk in _run_tool_step(cfg, state, pending, eager):
            yield chunk
        if signal.aborted:
            yield _abort_chunk(state)
            yield finish_chunk(cfg, state, "aborted")
            return
        if state.status != "running":
            return
        if state.pending is not None:  # waiting for a human
            return
        cont = _should_continue(cfg, state) and not _calls_client_tools(cfg, pending)
        yield step_finish_chunk(cfg, state, record, finish_reason, continued=cont, step_result=step_result)
        add_tool_results(state, record)
        if cfg.on_step_end is not None:
            await cfg.on_step_end(state)
        async for chunk in _wait_for_background(cfg, state):
            yield chunk
        if signal.aborted:
            yield _abort_chunk(state)
            yield finish_chunk(cfg, state, "aborted")
            return
        if not cont:
            state.status = "success"
            yield finish_chunk(cfg, state, finish_reason, step_result=step_result)
            return


async def _wait_for_background(cfg: LoopConfig, state: RunState) -> AsyncIterator[AnyChunk]:
    """Durable mode: wait for the tasks the run dispatched and has not waited for yet."""
    dispatched = [t for t in state.background_task_ids if t not in state.waited_task_ids]
    if cfg.wait_for_background is None or not dispatched:
        return
    async for chunk in cfg.wait_for_background(state, dispatched, cfg.abort_signal):
        yield chunk
    if cfg.abort_signal.aborted:
        return
    state.waited_task_ids.update(dispatched)
    if cfg.on_step_end is not None:
        await cfg.on_step_end(state)


async def _process_input(cfg: LoopConfig, state: RunState) -> None:
    """Let input processors rewrite the run's new messages (or trip before the model is called)."""
    new = state.messages[state.history_count : state.input_count]
    for processor in cfg.input_processors:
        ctx = ProcessorContext(processor_id=processor.id, run_id=state.run_id)
        processed = await processor.process_input(list(new), ctx)
        if processed is not None:
            new = list(processed)
    state.messages[state.history_count : state.input_count] = new
    state.input_count = state.history_count + len(new)


def _step_start(
    cfg: LoopConfig, state: RunState, request: dict[str, Any], warnings: list[Any], started: int
) -> StepStartChunk:
    payload: dict[str, Any] = {
        "request": request,
        "warnings": warnings,
        "messageId": state.message_id,
        "startedAt": started,
    }
    if cfg.durable:
        payload["stepId"] = DURABLE_STEP_ID
    return StepStartChunk(state.run_id, payload)  # type: ignore[arg-type]


def _should_continue(cfg: LoopConfig, state: RunState) -> bool:
    return state.step_number < cfg.max_steps and not cfg.abort_signal.aborted


def _calls_client_tools(cfg: LoopConfig, pending: PendingToolStep) -> bool:
    """A step that called client tools ends the run (reason ``tool-calls``), as in Mastra: the
    client executes them and sends their results with its next request."""
    return any(call.tool_name in cfg.client_tools for call in pending.calls)


async def _finish_pending_step(
    cfg: LoopConfig, state: RunState, pending: PendingToolStep, resume: ResumeAction
) -> AsyncIterator[AnyChunk]:
    """Apply an approval, decline or resume, then run the rest of the stopped step."""
    target = resume.tool_call_id
    if resume.kind in ("approve", "decline"):
        ids = [target] if target else sorted(pending.awaiting_approval)
        for call_id in ids:
            if call_id not in pending.awaiting_approval:
                raise ValueError(f"tool call {call_id!r} is not waiting for approval")
            pending.awaiting_approval.discard(call_id)
            if resume.kind == "decline":
                call = next(c for c in pending.calls if c.tool_call_id == call_id)
                reason = resume.reason or "Tool call was not approved by the user"
                pending.done[call_id] = ToolOutcome(call, "denied", reason)
                yield ToolOutputDeniedChunk(
                    state.run_id,
                    {
                        "toolCallId": call_id,
                        "toolName": call.tool_name,
                        "args": call.args,
                        "approval": {"id": call_id, "approved": False, "reason": reason},
                    },
                )
            else:
                pending.done.pop(call_id, None)
                pending.suspended.pop(call_id, None)
                # Mark approved so the tool step runs it.
                pending.step_record.setdefault("approved", []).append(call_id)
    else:
        ids = [target] if target else list(pending.suspended)
        for call_id in ids:
            if call_id not in pending.suspended:
                raise ValueError(f"tool call {call_id!r} is not suspended")
            pending.suspended.pop(call_id)
            pending.step_record.setdefault("resume_data", {})[call_id] = resume.data
    async for chunk in _run_tool_step(cfg, state, pending):
        yield chunk
    if cfg.abort_signal.aborted:
        yield _abort_chunk(state)
        yield finish_chunk(cfg, state, "aborted")
        return
    if state.status != "running" or state.pending is not None:
        return
    record = pending.step_record
    cont = _should_continue(cfg, state) and not _calls_client_tools(cfg, pending)
    step_result: dict[str, Any] = {"messageId": state.message_id}
    yield step_finish_chunk(
        cfg, state, record, record.get("finishReason", "tool-calls"), continued=cont, step_result=step_result
    )
    add_tool_results(state, record)
    if not cont:
        state.status = "success"
        yield finish_chunk(cfg, state, record.get("finishReason", "tool-calls"))


TOOL_ABORT_GRACE_S = 1.0
"""How long an aborted run's tools may take to end on their own before they are cancelled."""


class _EagerTools:
    """Tools started the moment the model's ``tool-call`` part arrives, as Mastra does: they run
    while the model is still streaming (a second call's arguments, more text), and the tool step
    then only collects them. What they emit meanwhile (``tool-output``, ``data-*``,
    ``background-task-started``) is delivered between model parts, in the order it happened.

    Only for agents without approval-gated tools: a step with an approval runs nothing before it
    is answered."""

    __slots__ = ("outbox", "tasks")

    def __init__(self) -> None:
        self.outbox: asyncio.Queue[AnyChunk | None] = asyncio.Queue()
        self.tasks: dict[str, asyncio.Task[ToolOutcome]] = {}

    def start(self, cfg: LoopConfig, state: RunState, call: ToolCall) -> None:
        self.tasks[call.tool_call_id] = asyncio.create_task(
            _execute_call(cfg, state, call, self.outbox.put_nowait, None)
        )

    def emitted(self) -> list[AnyChunk]:
        """What the started tools emitted so far (never waits)."""
        chunks = []
        while not self.outbox.empty():
            chunk = self.outbox.get_nowait()
            if chunk is not None:
                chunks.append(chunk)
        return chunks

    async def cancel(self) -> None:
        """Stop tools whose step ended without running its tool calls (abort, tripwire)."""
        for task in self.tasks.values():
            task.cancel()
        await asyncio.gather(*self.tasks.values(), return_exceptions=True)
        self.tasks.clear()


async def _run_tool_step(
    cfg: LoopConfig, state: RunState, pending: PendingToolStep, eager: _EagerTools | None = None
) -> AsyncIterator[AnyChunk]:
    """Execute the step's tool calls, streaming their output; stop for approvals/suspensions."""
    run_id = state.run_id
    approved: list[str] = pending.step_record.get("approved", [])
    resume_data: dict[str, Any] = pending.step_record.get("resume_data", {})
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
            and tool.require_approval
            and call.args_error is None
            and call.tool_call_id not in approved
        ):
            # One approval at a time, in call order (as Mastra): the next one is asked for
            # when this one is answered; nothing of the step runs before all are answered.
            pending.awaiting_approval = {call.tool_call_id}
            yield ToolCallApprovalChunk(
                run_id,
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

    outbox: asyncio.Queue[AnyChunk | None] = eager.outbox if eager is not None else asyncio.Queue()
    emit = outbox.put_nowait

    async def run_one(call: ToolCall) -> None:
        try:
            outcome = await _execute_call(cfg, state, call, emit, resume_data.get(call.tool_call_id))
        except Exception as exc:  # a bug below: the call still gets an outcome, the run goes on
            outcome = ToolOutcome(call, "error", exc)
        finally:
            emit(None)
        pending.done[call.tool_call_id] = outcome

    def collect(call: ToolCall, task: asyncio.Task[ToolOutcome]) -> None:
        """The outcome of a call that started while the model streamed."""
        if not task.cancelled():
            error = task.exception()
            pending.done[call.tool_call_id] = (
                task.result() if error is None else ToolOutcome(call, "error", error)
            )
        emit(None)

    tasks: list[asyncio.Task[Any]] = []
    for call in to_run:
        started = eager.tasks.pop(call.tool_call_id, None) if eager is not None else None
        if started is None:
            tasks.append(asyncio.create_task(run_one(call)))
        else:
            started.add_done_callback(partial(collect, call))
            tasks.append(started)
    remaining = len(tasks)

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
                yield _with_run_id(item, run_id)
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

    for call in pending.calls:
        outcome = pending.done.get(call.tool_call_id)
        if outcome is None or call.tool_call_id in pending.suspended:
            continue
        if outcome.kind == "suspended":
            tool = cfg.tools.get(call.tool_name)
            pending.suspended[call.tool_call_id] = outcome.value
            del pending.done[call.tool_call_id]
            state.suspend_payload = outcome.value
            payload: dict[str, Any] = {
                "toolCallId": call.tool_call_id,
                "toolName": call.tool_name,
                "suspendPayload": outcome.value,
                "args": call.args,
            }
            schema = outcome.resume_schema or (tool.resume_schema if tool is not None else None)
            if schema is not None:
                payload["resumeSchema"] = draft07_schema_json(schema)
            yield ToolCallSuspendedChunk(run_id, payload)  # type: ignore[arg-type]
    if pending.suspended:
        state.status = "suspended"
        state.finish_reason = "suspended"
        return

    tool_parts: list[dict[str, Any]] = []
    # As in Mastra, a step's tool errors come out before its results (each in call order).
    errors: list[AnyChunk] = []
    results: list[AnyChunk] = []
    for call in pending.calls:
        outcome = pending.done.get(call.tool_call_id)
        if outcome is None:  # a client tool: its result comes with the client's next request
            continue
        if outcome.kind == "result":
            payload = {
                "args": call.args,
                "toolCallId": call.tool_call_id,
                "toolName": call.tool_name,
                "result": outcome.value,
            }
            if outcome.provider_metadata:
                payload["providerMetadata"] = outcome.provider_metadata
            result_chunk = ToolResultChunk(run_id, payload)  # type: ignore[arg-type]
            state.tool_results.append(result_chunk)
            if cfg.wait_for_background is None or not _is_placeholder(outcome):
                results.append(result_chunk)  # in durable mode the real result follows once the task ends
        elif outcome.kind == "error":
            error_payload: dict[str, Any] = {"error": outcome.value}
            if not call.args_unreadable:
                error_payload["args"] = call.args
            error_payload.update(toolCallId=call.tool_call_id, toolName=call.tool_name)
            if outcome.provider_metadata:  # e.g. the failed background task it ran as
                error_payload["providerMetadata"] = outcome.provider_metadata
            errors.append(ToolErrorChunk(run_id, error_payload))  # type: ignore[arg-type]
        part: dict[str, Any] = {
            "type": "tool-result",
            "toolCallId": call.tool_call_id,
            "toolName": call.tool_name,
            "output": tool_output_for_model(outcome),
            "input": call.sent_args,
        }
        if outcome.provider_metadata:
            part["providerOptions"] = outcome.provider_metadata
            _link_call(state, call.tool_call_id, outcome.provider_metadata)
        tool_parts.append(part)
    for chunk in (*errors, *results):
        yield chunk
    if tool_parts:
        state.messages.append({"role": "tool", "content": tool_parts})
    # The step's content gains its tool results once its step-finish is out (as in Mastra).
    pending.step_record["pendingResults"] = [
        {
            "type": "tool-result",
            "toolCallId": p["toolCallId"],
            "toolName": p["toolName"],
            "output": p["output"],
            "input": p["input"],
        }
        for p in tool_parts
    ]
    state.pending = None


async def _execute_call(
    cfg: LoopConfig, state: RunState, call: ToolCall, emit: Callable[[AnyChunk], None], resume_data: Any
) -> ToolOutcome:
    tool = cfg.tools.get(call.tool_name)
    if tool is None:
        available = ", ".join(cfg.tools) or "none"
        return ToolOutcome(
            call,
            "error",
            ToolNotFoundError(
                f'Tool "{call.tool_name}" not found. Available tools: {available}. '
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
    )
    span = tracing.start_child(
        state.span,
        "runstream.tool",
        {"runstream.tool.name": tool.name, "runstream.tool.call_id": call.tool_call_id},
    )
    outcome = await run_tool(tool, args, ctx, call)
    tracing.end_span(
        span, outcome.value if outcome.kind == "error" else None, **{"runstream.tool.outcome": outcome.kind}
    )
    return outcome


async def run_tool(tool: Tool, args: dict[str, Any], ctx: ToolContext, call: ToolCall) -> ToolOutcome:
    """Execute a tool and classify how it ended (result, error or suspension)."""
    try:
        result = await tool.execute(args, ctx)
    except ToolSuspended:
        pass  # classified below, from the context
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        if not ctx.suspended:
            return ToolOutcome(call, "error", exc)
    else:
        if not ctx.suspended:
            return ToolOutcome(call, "result", result)
    return ToolOutcome(call, "suspended", ctx.suspended_with, resume_schema=ctx.suspend_resume_schema)


def draft07_schema_json(schema: dict[str, Any]) -> str:
    """A resume schema as Mastra sends it: a JSON Schema draft-07 string naming its ``$schema``."""
    return resume_schema_json({"$schema": "http://json-schema.org/draft-07/schema#", **schema})


DURABLE_STEP_ID = "durable-llm-execution"
"""The step id of a durable run's model steps, as Mastra's durable workflow names them."""


def _open_message_after_signal(state: RunState, chunk: AnyChunk) -> None:
    """A signal (``data-signal``) joins the conversation as a message of its own, so the
    response goes on in a new message, as in Mastra."""
    if chunk.type == "data-signal":
        _open_new_message(state)


def _open_new_message(state: RunState) -> None:
    """The response goes on in a new message (a new id from here on)."""
    if not state.message_segments:
        state.message_segments.append((state.message_id, state.input_count))
    state.message_id = str(uuid.uuid4())
    state.message_segments.append((state.message_id, len(state.messages)))


def default_response_metadata(model: LanguageModel) -> dict[str, Any]:
    """A step's response metadata when the model sent none (or its call failed), as Mastra
    fills it in: a generated id, the time, and the model."""
    return {
        "id": str(uuid.uuid4()),
        "timestamp": iso_datetime(now_utc()),
        "modelId": model.model_id,
        "modelVersion": model.specification_version,
        "modelProvider": model.provider,
    }


def _link_call(state: RunState, tool_call_id: str, provider_metadata: dict[str, Any]) -> None:
    """Mark the assistant's tool-call part with the same metadata as its result (task link)."""
    for message in reversed(state.messages):
        if message["role"] != "assistant":
            continue
        for part in message["content"]:
            if part.get("type") == "tool-call" and part.get("toolCallId") == tool_call_id:
                part["providerOptions"] = provider_metadata
                return


def _is_placeholder(outcome: ToolOutcome) -> bool:
    mastra = (outcome.provider_metadata or {}).get("mastra") or {}
    return bool((mastra.get("backgroundTask") or {}).get("status") == "running")


def _cancel_all(tasks: list[asyncio.Task[Any]]) -> None:
    for task in tasks:
        if not task.done():
            task.cancel()


def _with_run_id(chunk: AnyChunk, run_id: str) -> AnyChunk:
    """Tools emit chunks without knowing the run; they get its id on the way out."""
    if not chunk.run_id:
        chunk.run_id = run_id
    return chunk


def _abort_chunk(state: RunState) -> AnyChunk:
    state.status = "aborted"
    state.finish_reason = "aborted"
    return AbortChunk(state.run_id, {})


def _with_pm(payload: dict[str, Any], part: dict[str, Any]) -> Any:
    pm = part.get("providerMetadata")
    if pm:
        payload["providerMetadata"] = pm
    return payload


def _parse_tool_call(part: dict[str, Any], streamed: str) -> ToolCall:
    """A ``tool-call`` part as a call. As in Mastra, the argument text streamed before it (tool
    input deltas) wins over the part's own input when it is a JSON object."""
    name = str(part.get("toolName", ""))
    call = ToolCall(
        tool_call_id=str(part.get("toolCallId", "")),
        tool_name=name,
        args={},
        provider_metadata=part.get("providerMetadata"),
    )
    raw = part.get("input", "")
    for text in (streamed, raw) if streamed.strip() else (raw,):
        if not isinstance(text, str):
            call.args = text if isinstance(text, dict) else {}
            break
        try:
            call.args = json.loads(text) if text.strip() else {}
        except ValueError:
            continue
        break
    else:
        call.args_unreadable = True
        call.args_error = (
            f'Tool "{name}" received invalid arguments \u2014 the provided JSON could not be parsed. '
            "Please provide valid JSON arguments."
        )
        return call
    if not isinstance(call.args, dict):
        call.args_error = f"Tool call arguments must be a JSON object, got {type(call.args).__name__}"
        call.args = {}
    return call


def _source_payload(part: dict[str, Any]) -> Any:
    payload: dict[str, Any] = {"id": part.get("id", ""), "sourceType": part.get("sourceType", "url")}
    for src, dst in (("title", "title"), ("mediaType", "mimeType"), ("filename", "filename"), ("url", "url")):
        if part.get(src) is not None:
            payload[dst] = part[src]
    return _with_pm(payload, part)


def _file_payload(part: dict[str, Any]) -> Any:
    import base64

    data = part.get("data", "")
    b64 = base64.b64encode(data).decode("ascii") if isinstance(data, bytes | bytearray) else str(data)
    return _with_pm({"data": b64, "base64": b64, "mimeType": part.get("mediaType", "")}, part)


def _content_blocks(
    starts: list[tuple[str, int]], text: list[str], reasoning: list[str]
) -> list[dict[str, Any]]:
    """The step's text and reasoning as Mastra keeps them: one part per block (``*-start`` ...
    ``*-end``), in the order the blocks began; empty blocks are dropped. Deltas that came
    without a start make one block (reasoning first)."""
    blocks = {
        "text": _split(text, [i for k, i in starts if k == "text"]),
        "reasoning": _split(reasoning, [i for k, i in starts if k == "reasoning"]),
    }
    order = [kind for kind, _ in starts]
    for kind in ("reasoning", "text"):
        order.extend([kind] * (len(blocks[kind]) - order.count(kind)))
    taken = {"text": iter(blocks["text"]), "reasoning": iter(blocks["reasoning"])}
    parts = [{"type": kind, "text": next(taken[kind])} for kind in order]
    return [part for part in parts if part["text"]]


def _split(deltas: list[str], starts: list[int]) -> list[str]:
    """``deltas`` joined per block, each block starting at one of ``starts``."""
    if not deltas:
        return [""] * len(starts)
    bounds = [0, *starts[1:]] if starts else [0]
    ends = [*bounds[1:], len(deltas)]
    return ["".join(deltas[start:end]) for start, end in zip(bounds, ends, strict=True)]


def _file_content(payload: Any) -> dict[str, Any]:
    """A generated file as a message part: a data URL, as the AI SDK puts it in a prompt."""
    media_type = payload["mimeType"]
    return {"type": "file", "data": f"data:{media_type};base64,{payload['base64']}", "mediaType": media_type}


def _as_exception(error: Any) -> BaseException:
    if isinstance(error, BaseException):
        return error
    if isinstance(error, dict):
        exc = Exception(str(error.get("message", error)))
        exc.name = str(error.get("name", "Error"))  # type: ignore[attr-defined]
        return exc
    return Exception(str(error))
