"""The agentic loop: a short driver over typed step outcomes.

``run_chunks`` is one async generator, driven by the run's ``RunOutput`` (``run_output``): each
model step is handed over as the part source of its provider parts, which the output pulls and
has the step translate, so a consumer's ``async for`` drives the whole run with no producer
task or queue on the token path (see DESIGN.md, hot-path rules). After each
model step the loop decides what comes next and gets it as a value (:data:`StepOutcome`):
:class:`Continue` with another step, :class:`Finish`, :class:`Suspend` for a human,
:class:`Abort`, :class:`Tripwire` or :class:`Failed`; the tool step lives in ``tool_step``.

A run that needs a human (a tool awaiting approval, a tool that suspended) ends its stream after
the ``tool-call-approval`` / ``tool-call-suspended`` chunk and leaves a
:class:`~runstream.run._run_state.PendingToolStep` in the :class:`~runstream.run._run_state.RunState`;
``run_output(..., resume=...)`` continues it.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

from runstream._ids import new_id
from runstream.abort import AbortController
from runstream.chunks import (
    AbortChunk,
    AnyChunk,
    Chunk,
    ErrorChunk,
    ObjectResultChunk,
    StartChunk,
    TripwireChunk,
)
from runstream.models.prompt import AssistantPart
from runstream.processors import ProcessorContext, StepView, TripWire, run_step_processors
from runstream.run._model_step import ModelStep, Turn, default_response_metadata
from runstream.run._prepare_step import prepared_step
from runstream.run._run_state import (
    Abort,
    CheckVerdict,
    Continue,
    Failed,
    Finish,
    LoopConfig,
    PendingToolStep,
    ResumeAction,
    RunState,
    StepOutcome,
    Suspend,
    Tripwire,
)
from runstream.run._step_results import (
    add_feedback,
    add_tool_results,
    finish_chunk,
    step_finish_chunk,
    step_record,
)
from runstream.run._structuring import Structured, structure, structuring_tripwire
from runstream.run._tool_step import (
    answer_pending,
    calls_client_tools,
    finished_tool_step,
    run_tool_step,
    wait_for_background,
)
from runstream.run.output import Observer, PartSource, RunOutput, SubStream
from runstream.stop_conditions import should_stop
from runstream.structured import NO_OBJECT, StructuredOutput

logger = logging.getLogger("runstream.run")

_GOES_ON = frozenset({"other", "tool-calls"})
"""Reasons a step without calls to run ends with and the loop still goes on after."""

Phase = AsyncIterator[AnyChunk | StepOutcome]
"""A part of the run: it yields chunks, then how it ended (its last item)."""

CONTINUE = Continue()


def run_output(
    cfg: LoopConfig,
    state: RunState,
    resume: ResumeAction | None,
    controller: AbortController,
    *,
    observers: Sequence[Observer] = (),
    on_close: Callable[[], Awaitable[None]] | None = None,
) -> RunOutput:
    """The run, driven by its :class:`~runstream.run.output.RunOutput` (every run's one driver: it
    pulls each model step's provider parts and has the step translate them, then goes on here);
    ``observers`` see each chunk before the consumers do (callbacks, title events, a durable
    run's log). A new run's start chunk waits in the output, so the first read does not enter
    the loop (when nothing observes it)."""
    first = start_chunk(cfg, state) if resume is None and not observers else None
    source = run_chunks(cfg, state, resume, started=first is not None)
    return RunOutput(source, state, controller, on_close=on_close, first=first, observers=observers)


def start_chunk(cfg: LoopConfig, state: RunState) -> StartChunk:
    """A new run's first chunk (a resumed run has none, as in Mastra)."""
    return StartChunk(state.run_id, {"id": cfg.agent_id, "messageId": state.message_id})


async def run_chunks(
    cfg: LoopConfig, state: RunState, resume: ResumeAction | None = None, *, started: bool = False
) -> AsyncIterator[AnyChunk | SubStream | PartSource]:
    """The run's chunks; each model step comes as a :class:`~runstream.run.output.PartSource` whose
    provider parts the consumer (``RunOutput``) pulls and translates itself until they end, then
    goes on here: no generator of the loop or the step per token (async generators have no
    ``yield from``). One pull-through chain, no task or queue. ``started``: the new run's
    :func:`start_chunk` is out already (the caller sent it)."""
    if resume is None and not started:  # the first chunk goes out before anything else is set up
        yield start_chunk(cfg, state)
    outcome: StepOutcome = CONTINUE
    if resume is not None or cfg.start_chunks or cfg.input_processors:  # else nothing to begin
        async for item in _begin(cfg, state, resume):
            if isinstance(item, Chunk):
                yield item
            else:
                outcome = item
    turn = Turn.of(cfg, state.run_id)
    while isinstance(outcome, Continue):
        if cfg.abort_signal.aborted:
            # As in Mastra, the step the abort preempted still has a response (no warnings).
            outcome = Abort({"response": default_response_metadata(cfg.model)}, {"warnings": []})
            break
        state.step_number += 1
        if cfg.durable and state.steps:
            open_new_message(state)
        step_cfg, conversation = await prepared_step(cfg, state) if cfg.prepare_step else (cfg, None)
        step = ModelStep(step_cfg, state, turn, conversation)
        yield await step.open()  # its parts are pulled to their end before this generator goes on
        async for item in _after_model_step(step_cfg, state, turn, step):
            if isinstance(item, Chunk):
                yield item
            else:
                outcome = item
    for chunk in _end(cfg, state, outcome):
        yield chunk


async def _begin(cfg: LoopConfig, state: RunState, resume: ResumeAction | None) -> Phase:
    """A new run's start (and its input processors), or where a stopped run goes on."""
    if resume is None:  # (its start chunk is out)
        for start_chunk in cfg.start_chunks:
            _open_message_after_signal(state, start_chunk)
            yield start_chunk
        if cfg.input_processors:
            try:
                await _process_input(cfg, state)
            except TripWire as trip:  # the model is never called
                yield Tripwire(trip.payload())
    elif resume.kind == "continue":  # a durable run from the snapshot after its last step
        waited = len(state.waited_task_ids)
        async for waited_chunk in wait_for_background(cfg, state):
            yield waited_chunk
        if state.ends_after_step is not None and not _task_settled(cfg, state, waited):
            yield Finish(state.ends_after_step)  # that step ended the run
    else:  # a resumed run goes on where it stopped: no new start chunk (as in Mastra)
        pending = state.pending
        if pending is None:
            raise RuntimeError("run_chunks resumed without a pending tool step")
        open_new_message(state)  # and, as in Mastra, as a new response message
        for denied in answer_pending(state, pending, resume):
            yield denied
        async for item in _tool_step(cfg, state, pending, None, {"messageId": state.message_id}):
            yield item


def _end(cfg: LoopConfig, state: RunState, outcome: StepOutcome) -> list[AnyChunk]:
    """The chunks that end the run the way ``outcome`` says (none for a suspension)."""
    match outcome:
        case Finish(reason, step_result, payload_extra):
            state.status = "success"
            finish = finish_chunk(cfg, state, reason, step_result=step_result)
            finish.payload.update(payload_extra)  # type: ignore[typeddict-item]
            return [finish]
        case Abort(current, step_result):
            state.status = "aborted"
            state.finish_reason = "aborted"
            aborted = AbortChunk(state.run_id, {})
            return [aborted, finish_chunk(cfg, state, "aborted", step_result=step_result, current=current)]
        case Tripwire(payload, record, announced):
            state.tripwire = payload
            state.status = "tripwire" if announced else "success"
            chunks: list[AnyChunk] = [TripwireChunk(state.run_id, payload)] if announced else []
            if record is not None:
                chunks.append(step_finish_chunk(cfg, state, record, "tripwire", continued=False))
            return [*chunks, finish_chunk(cfg, state, "tripwire")]
        case Failed(record, step_result):
            state.status = "failed"
            return [
                step_finish_chunk(cfg, state, record, "error", continued=False, step_result=step_result),
                finish_chunk(cfg, state, "error", step_result=step_result),
            ]
        case _:  # Suspend: the stream ends at the approval / suspension chunk
            return []


def _after_model_step(cfg: LoopConfig, state: RunState, turn: Turn, step: ModelStep) -> Phase:
    """What the finished model step leads to: a tripwire, an error, a retry, the end of the
    model's turn (completion checks), or its tool calls. A plain step (nothing aborted, tripped
    or failed, no step processors or structured output) goes straight on to its next phase,
    without a generator of its own around it."""
    if (
        cfg.abort_signal.aborted
        or step.tripwire is not None
        or step.error is not None
        or turn.step_processors
        or cfg.structured_output is not None
    ):
        return _checked_model_step(cfg, state, turn, step)
    if step.reasoning:
        state.reasoning.append("".join(step.reasoning))
    content = step.content()
    if content:  # the assistant's response message for this step
        state.messages.append({"role": "assistant", "content": [*content]})
    return _next_phase(cfg, state, step, content)


async def _checked_model_step(cfg: LoopConfig, state: RunState, turn: Turn, step: ModelStep) -> Phase:
    """:func:`_after_model_step` for a step that may end otherwise than by its next phase."""
    signal = cfg.abort_signal
    if step.eager is not None and (signal.aborted or step.tripwire is not None):
        await step.eager.cancel()
    text = step.text
    if signal.aborted:
        # The finish describes the step the abort cut short (its text so far, its response).
        yield Abort({"text": text, "request": step.request, "response": step.response})
        return
    if step.reasoning:
        state.reasoning.append("".join(step.reasoning))
    content = step.content()
    if step.tripwire is not None:
        yield Tripwire(step.tripwire.payload(), _record(state, step, content, "tripwire"))
        return
    if step.error is not None:
        async for item in _failed_step(cfg, state, step, content):
            yield item
        return
    if turn.step_processors:
        rejected = False
        async for item in _review_step(cfg, state, turn, step, content):
            rejected = True
            yield item
        if rejected:
            return
    if content:  # the assistant's response message for this step
        state.messages.append({"role": "assistant", "content": [*content]})
    structured = cfg.structured_output
    if structured is not None and not step.calls and text:
        outcome = Structured()
        async for chunk in _structured_object(structured, state, step, outcome):
            yield chunk
        if outcome.error is not None and structured.structuring_model is not None:  # x-pt27
            trip, record = structuring_tripwire(outcome.error), _record(state, step, content, "tripwire")
            record["tripwire"] = trip
            yield Tripwire(trip, record, False)
            return
        if outcome.error is not None:  # errorStrategy strict
            state.error = outcome.error
            logger.error(
                "run %s: structured output failed: %s",
                state.run_id,
                outcome.error,
                extra={"runId": state.run_id},
            )
            yield ErrorChunk(state.run_id, {"type": "error", "error": outcome.error})
            yield Failed(_record(state, step, content, "error"))
            return
        if outcome.object is not NO_OBJECT:
            state.object = outcome.object
    async for item in _next_phase(cfg, state, step, content):
        yield item


def _next_phase(cfg: LoopConfig, state: RunState, step: ModelStep, content: list[AssistantPart]) -> Phase:
    """An accepted step's record, then its tool calls or the end of the model's turn."""
    record = _record(state, step, content, step.finish_reason)
    if not step.calls:
        return _model_turn_ended(cfg, state, step, record)
    pending = PendingToolStep(calls=step.calls, step_record=record)
    state.pending = pending
    return _tool_step(cfg, state, pending, step, step.step_result)


async def _structured_object(
    structured: StructuredOutput, state: RunState, step: ModelStep, outcome: Structured
) -> AsyncIterator[AnyChunk]:
    """The final answer's object: parsed from it, or made by a separate structuring model."""
    if structured.structuring_model is not None:
        async for chunk in structure(
            structured, step.text, "".join(step.reasoning), step.cfg.abort_signal, outcome
        ):
            yield chunk
        return
    try:
        outcome.object = structured.parse_final(step.text)
    except ValueError as exc:
        if structured.error_strategy == "strict":
            outcome.error = exc
            return
        outcome.object = structured.recover(exc)
        if outcome.object is not NO_OBJECT:  # Mastra marks a fallback value (x-pt11)
            yield ObjectResultChunk(state.run_id, outcome.object, metadata={"fallback": True})
        return
    yield ObjectResultChunk(state.run_id, outcome.object)


def _record(state: RunState, step: ModelStep, content: list[AssistantPart], reason: str) -> Any:
    return step_record(
        state, step.text, content, step.usage, reason, step.request, step.response, step.warnings,
        provider_metadata=step.provider_metadata,
    )  # fmt: skip


async def _failed_step(
    cfg: LoopConfig, state: RunState, step: ModelStep, content: list[AssistantPart]
) -> Phase:
    """The model call failed: the tools it did call still run (as in Mastra), then the run ends."""
    assert step.error is not None
    state.error = step.error
    logger.error(
        "run %s: the model call failed (%s/%s): %s: %s",
        state.run_id,
        cfg.model.provider,
        cfg.model.model_id,
        type(step.error).__name__,
        step.error,
        extra={"runId": state.run_id},
    )
    yield ErrorChunk(state.run_id, {"type": "error", "error": step.error})
    if content:
        state.messages.append({"role": "assistant", "content": [*content]})
    record = _record(state, step, content, "error")
    if step.calls:
        pending = PendingToolStep(calls=step.calls, step_record=record)
        state.pending = pending
        async for chunk in run_tool_step(cfg, state, pending, step.eager):
            yield chunk
        if state.pending is not None:  # stopped for a human: the error ends nothing yet
            yield Suspend()
            return
    yield Failed(record, step.step_result)


async def _review_step(
    cfg: LoopConfig, state: RunState, turn: Turn, step: ModelStep, content: list[AssistantPart]
) -> Phase:
    """Step-level output processors; yields nothing when they accept the step, else a retry
    (its ``step-finish``, then :class:`Continue`) or a :class:`Tripwire`."""
    contexts = turn.processor_contexts
    view = StepView(
        text=step.text,
        tool_calls=[{"toolCallId": c.tool_call_id} for c in step.calls],
        finish_reason=step.finish_reason,
        step_number=state.step_number,
    )
    try:
        await run_step_processors(turn.step_processors, view, contexts)
    except TripWire as trip:
        if step.eager is not None:
            await step.eager.cancel()
        record = step_record(
            state, step.text, content, step.usage, "retry", step.request, step.response, step.warnings,
            rejected=True,
        )  # fmt: skip
        record["tripwire"] = trip.payload()
        if not (trip.retry and state.processor_retry_count < cfg.max_processor_retries):
            yield Tripwire(trip.payload(), record)
            return
        state.processor_retry_count += 1
        logger.info(
            "run %s: processor %s asked for a retry (%d/%d): %s",
            state.run_id,
            trip.processor_id,
            state.processor_retry_count,
            cfg.max_processor_retries,
            trip.reason,
            extra={"runId": state.run_id},
        )
        _set_retry_count(contexts, state.processor_retry_count)
        feedback = (
            "[Processor Feedback] Your previous response was not accepted: "
            f"{trip.reason}. Please try again with the feedback in mind."
        )
        turn.retry_feedback.append({"role": "system", "content": feedback})
        retry_result = {
            "reason": "retry",
            "isContinued": True,
            "retryReason": trip.reason,
            "retryMetadata": trip.metadata,
            "retryProcessorId": trip.processor_id,
        }
        chunk = step_finish_chunk(cfg, state, record, "retry", continued=True, step_result=retry_result)
        chunk.payload["processorRetryFeedback"] = feedback
        yield chunk
        yield CONTINUE
        return
    if state.processor_retry_count:  # the step is accepted: its retries are over
        state.processor_retry_count = 0
        _set_retry_count(contexts, 0)


def _set_retry_count(contexts: dict[str, ProcessorContext], count: int) -> None:
    for ctx in contexts.values():
        ctx.retry_count = count


async def _model_turn_ended(cfg: LoopConfig, state: RunState, step: ModelStep, record: Any) -> Phase:
    """A step without tool calls: the completion checks decide whether the loop goes on."""
    verdicts: list[CheckVerdict] = []
    for check in cfg.completion_checks:
        async for item in check(cfg, state, step.text):
            if isinstance(item, CheckVerdict):
                verdicts.append(item)
            else:
                _open_message_after_signal(state, item)
                yield item
    chosen = [v for v in verdicts if v.authoritative] or verdicts
    # Like a tool step, a step that ended for an unknown reason goes on (as Mastra does).
    # (so does one that asked for tool calls the provider executed itself: Mastra goes on after
    # every reason but stop, error, length and content-filter)
    wants_more = step.finish_reason in _GOES_ON or any(v.continue_loop for v in chosen)
    cont = wants_more and await _goes_on(cfg, state)
    extra: dict[str, Any] = {}
    for verdict in verdicts:
        extra.update(verdict.payload_extra)
    step_finish = step_finish_chunk(
        cfg, state, record, step.finish_reason, continued=cont, step_result=step.step_result
    )
    step_finish.payload.update(extra)  # type: ignore[typeddict-item]
    yield step_finish
    if cont:
        for verdict in chosen:
            state.messages.extend(verdict.feedback)
            add_feedback(state, record, verdict.feedback)
            state.message_id = verdict.next_message_id or state.message_id
        yield CONTINUE
        return
    waited = len(state.waited_task_ids)
    if cfg.wait_for_background is not None:  # (durable mode; no generator made otherwise)
        async for chunk in wait_for_background(cfg, state):
            yield chunk
    if cfg.abort_signal.aborted:
        yield Abort()
    elif _task_settled(cfg, state, waited):
        yield CONTINUE
    else:  # the final verdicts travel with the finish too (as in Mastra)
        yield Finish(step.finish_reason, step.step_result, extra)


async def _tool_step(
    cfg: LoopConfig,
    state: RunState,
    pending: PendingToolStep,
    step: ModelStep | None,
    step_result: dict[str, Any],
) -> Phase:
    """Run the step's tools (or the rest of them, for a resumed run) and end the step."""
    eager = step.eager if step is not None else None
    finished = finished_tool_step(cfg, state, pending, eager)
    if finished is None:
        async for chunk in run_tool_step(cfg, state, pending, eager):
            yield chunk
    else:
        for chunk in finished:
            yield chunk
    if cfg.abort_signal.aborted:
        yield Abort()
        return
    if state.status != "running" or state.pending is not None:  # waiting for a human
        yield Suspend()
        return
    record = pending.step_record
    reason = record["finishReason"]
    cont = not calls_client_tools(cfg, pending) and await _goes_on(cfg, state)
    yield step_finish_chunk(
        cfg, state, record, reason, continued=cont, step_result=step_result, tool_results=pending.results
    )
    add_tool_results(state, record, pending.results)
    if step is None:  # a resumed step: as in Mastra, it goes on without saving or waiting
        yield CONTINUE if cont else Finish(reason)
        return
    state.ends_after_step = None if cont else reason
    if cfg.on_step_end is not None:
        await cfg.on_step_end(state)
    waited = len(state.waited_task_ids)
    if cfg.wait_for_background is not None:  # (durable mode; no generator made otherwise)
        async for chunk in wait_for_background(cfg, state):
            yield chunk
    if cfg.abort_signal.aborted:
        yield Abort()
    elif cont or _task_settled(cfg, state, waited):
        yield CONTINUE
    else:
        yield Finish(reason, step_result)


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


def _task_settled(cfg: LoopConfig, state: RunState, waited_before: int) -> bool:
    """Durable mode: a background task settled while the loop waited after the step, so the
    model gets another step to see its result (as Mastra's durable loop, ``x-pt03``)."""
    return len(state.waited_task_ids) > waited_before and _should_continue(cfg, state)


async def _goes_on(cfg: LoopConfig, state: RunState) -> bool:
    """Whether another step may follow this one: steps left, not aborted, no stop condition met."""
    if not _should_continue(cfg, state):
        return False
    return not (cfg.stop_when and await should_stop(cfg.stop_when, list(state.steps)))


def _should_continue(cfg: LoopConfig, state: RunState) -> bool:
    return state.step_number < cfg.max_steps and not cfg.abort_signal.aborted


def _open_message_after_signal(state: RunState, chunk: AnyChunk) -> None:
    """A signal (``data-signal``) joins the conversation as a message of its own, so the
    response goes on in a new message, as in Mastra."""
    if chunk.type == "data-signal":
        open_new_message(state)


def open_new_message(state: RunState) -> None:
    """The response goes on in a new message (a new id from here on)."""
    if not state.message_segments:
        state.message_segments.append((state.message_id, state.input_count))
    state.message_id = new_id()
    state.message_segments.append((state.message_id, len(state.messages)))
