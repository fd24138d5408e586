"""The agentic loop: a short driver over the run's nodes.

``run_chunks`` is one async generator, driven by the run's ``RunOutput`` (``run_output``). The
run is a chain of nodes (:class:`Node`): each does its phase, emits its chunks into a list (a
model step as the part source of its provider parts, which the output pulls and has the step
translate; the running tools as a sub-stream) and returns what comes next: another node
(:class:`ModelTurn` → :class:`ModelTurnEnded` → :class:`ToolCalls` or the end of the model's
turn → ...) or how the run ended (:data:`End`: :class:`Finish`, :class:`Suspend` for a human,
:class:`Abort`, :class:`Tripwire`, :class:`Failed`). What a node emitted reaches the consumer
before the next node runs, so a consumer's ``async for`` drives the whole run with no producer
task or queue on the token path (see DESIGN.md, hot-path rules).

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
    AgentChunk,
    DataChunk,
    ErrorChunk,
    ObjectResultChunk,
    StartChunk,
    TripwireChunk,
)
from runstream.models.prompt import AssistantPart
from runstream.processors import ProcessorContext, StepView, TripWire, run_step_processors
from runstream.run._model_step import ModelStep, Turn
from runstream.run._prepare_step import prepared_step
from runstream.run._run_state import (
    Abort,
    CheckVerdict,
    End,
    Failed,
    Finish,
    FinishFields,
    LoopConfig,
    PendingToolStep,
    ResumeAction,
    RunState,
    StepRecord,
    StepResultFields,
    Suspend,
    Tripwire,
)
from runstream.run._sources import Observer, PartSource, SubStream
from runstream.run._step_results import (
    add_feedback,
    add_tool_results,
    default_response_metadata,
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
from runstream.run.output import RunOutput
from runstream.stop_conditions import should_stop
from runstream.structured import NO_OBJECT, StructuredOutput

logger = logging.getLogger("runstream.run")

_GOES_ON = frozenset({"other", "tool-calls"})
"""Reasons a step without calls to run ends with and the loop still goes on after."""


class Run:
    """What the run's nodes share: its configuration, state and turn, and ``out``, the items
    (chunks, and sub-streams or a model step's part source to be pulled to their end) a node
    emitted, in order, for ``run_chunks`` to hand to the output once the node returned."""

    __slots__ = ("cfg", "out", "state", "turn")

    def __init__(self, cfg: LoopConfig, state: RunState) -> None:
        self.cfg = cfg
        self.state = state
        self.turn = Turn.of(cfg, state.run_id)
        self.out: list[AgentChunk | SubStream | PartSource] = []


class Node:
    """A phase of the run: :meth:`run` does its part (emitting into ``run.out``) and returns
    what comes next, another node or how the run ended. A node emits last: whatever must happen
    after the consumers saw its chunks (or after a sub-stream ran out) is the next node's."""

    __slots__ = ()

    async def run(self, run: Run) -> Node | End:
        raise NotImplementedError


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
) -> AsyncIterator[AgentChunk | SubStream | PartSource]:
    """The run's chunks: its nodes run one after the other, each returning the next, and what
    each emitted goes to the consumer (``RunOutput``) before the next runs. A model step comes
    as a :class:`~runstream.run._sources.PartSource` whose provider parts the consumer pulls and
    translates itself until they end, the running tools as a sub-stream: no generator of the
    loop or the step per token, one pull-through chain, no task or queue. ``started``: the new
    run's :func:`start_chunk` is out already (the caller sent it)."""
    if resume is None and not started:  # the first chunk goes out before anything else is set up
        yield start_chunk(cfg, state)
    run = Run(cfg, state)
    node: Node | End = MODEL_TURN
    if resume is not None or cfg.start_chunks or cfg.input_processors:  # else nothing to begin
        node = Begin(resume)
    while isinstance(node, Node):
        node = await node.run(run)
        if run.out:
            out, run.out = run.out, []
            for item in out:
                yield item
    for chunk in _end(cfg, state, node):
        yield chunk


class Begin(Node):
    """A new run's start (and its input processors), or where a stopped run goes on."""

    __slots__ = ("resume",)

    def __init__(self, resume: ResumeAction | None) -> None:
        self.resume = resume

    async def run(self, run: Run) -> Node | End:
        cfg, state, resume = run.cfg, run.state, self.resume
        if resume is None:  # (its start chunk is out)
            for start_chunk in cfg.start_chunks:
                _open_message_after_signal(state, start_chunk)
                run.out.append(start_chunk)
            return ProcessInput() if cfg.input_processors else MODEL_TURN
        if resume.kind == "continue":  # a durable run from the snapshot after its last step
            run.out.append(wait_for_background(cfg, state))
            return Continued(len(state.waited_task_ids))
        # a resumed run goes on where it stopped: no new start chunk (as in Mastra)
        pending = state.pending
        if pending is None:
            raise RuntimeError("run_chunks resumed without a pending tool step")
        open_new_message(state)  # and, as in Mastra, as a new response message
        run.out.extend(answer_pending(state, pending, resume))
        return ToolCalls(cfg, pending, None, {"messageId": state.message_id})


class ProcessInput(Node):
    """Input processors rewrite the run's new messages, or trip before the model is called."""

    __slots__ = ()

    async def run(self, run: Run) -> Node | End:
        try:
            await _process_input(run.cfg, run.state)
        except TripWire as trip:  # the model is never called
            return Tripwire(trip.payload())
        return MODEL_TURN


class ModelTurn(Node):
    """One model call: the step's provider parts go to the output, which translates them."""

    __slots__ = ()

    async def run(self, run: Run) -> Node | End:
        cfg, state = run.cfg, run.state
        if cfg.abort_signal.aborted:
            # As in Mastra, the step the abort preempted still has a response (no warnings).
            return Abort({"response": default_response_metadata(cfg.model)}, {"warnings": []})
        state.step_number += 1
        if cfg.durable and state.steps:
            open_new_message(state)
        step_cfg, conversation = await prepared_step(cfg, state) if cfg.prepare_step else (cfg, None)
        step = ModelStep(step_cfg, state, run.turn, conversation)
        run.out.append(await step.open())  # its parts are pulled to their end before the next node
        return ModelTurnEnded(step_cfg, step)


MODEL_TURN = ModelTurn()


class ModelTurnEnded(Node):
    """What the finished model step leads to: a tripwire, an error, a retry, the end of the
    model's turn (completion checks), or its tool calls. A plain step (nothing aborted, tripped
    or failed, no step processors or structured output) goes straight on to its next node."""

    __slots__ = ("cfg", "step")

    def __init__(self, cfg: LoopConfig, step: ModelStep) -> None:
        self.cfg = cfg
        self.step = step

    async def run(self, run: Run) -> Node | End:
        cfg, state, step = self.cfg, run.state, self.step
        if (
            cfg.abort_signal.aborted
            or step.tripwire is not None
            or step.error is not None
            or run.turn.step_processors
            or cfg.structured_output is not None
        ):
            return await self._checked(run)
        if step.reasoning:
            state.reasoning.append("".join(step.reasoning))
        content = step.content()
        if content:  # the assistant's response message for this step
            state.messages.append({"role": "assistant", "content": [*content]})
        return _next_node(cfg, state, step, content)

    async def _checked(self, run: Run) -> Node | End:
        """For a step that may end otherwise than by its next node."""
        cfg, state, step = self.cfg, run.state, self.step
        signal = cfg.abort_signal
        if step.eager is not None and (signal.aborted or step.tripwire is not None):
            await step.eager.cancel()
        if signal.aborted:
            # The finish describes the step the abort cut short (its text so far, its response).
            return Abort({"text": step.text, "request": step.request, "response": step.response})
        if step.reasoning:
            state.reasoning.append("".join(step.reasoning))
        content = step.content()
        if step.tripwire is not None:
            return Tripwire(step.tripwire.payload(), _record(state, step, content, "tripwire"))
        if step.error is not None:
            return _failed_step(cfg, run, step, content)
        if run.turn.step_processors:
            rejected = await _review_step(cfg, run, step, content)
            if rejected is not None:
                return rejected
        if content:  # the assistant's response message for this step
            state.messages.append({"role": "assistant", "content": [*content]})
        structured = cfg.structured_output
        if structured is not None and not step.calls and step.text:
            outcome = Structured()
            run.out.append(_structured_object(structured, state, step, outcome))
            return StructuredAnswer(cfg, step, content, outcome)
        return _next_node(cfg, state, step, content)


class StructuredAnswer(Node):
    """The final answer's object is made: kept, or the run ends with its error."""

    __slots__ = ("cfg", "content", "outcome", "step")

    def __init__(self, cfg: LoopConfig, step: ModelStep, content: list[AssistantPart], outcome: Structured):
        self.cfg = cfg
        self.step = step
        self.content = content
        self.outcome = outcome

    async def run(self, run: Run) -> Node | End:
        cfg, state, step, content, outcome = self.cfg, run.state, self.step, self.content, self.outcome
        structured = cfg.structured_output
        assert structured is not None
        if outcome.error is not None and structured.structuring_model is not None:  # x-pt27
            trip, record = structuring_tripwire(outcome.error), _record(state, step, content, "tripwire")
            record["tripwire"] = trip
            return Tripwire(trip, record, False)
        if outcome.error is not None:  # errorStrategy strict
            state.error = outcome.error
            logger.error(
                "run %s: structured output failed: %s",
                state.run_id,
                outcome.error,
                extra={"runId": state.run_id},
            )
            run.out.append(ErrorChunk(state.run_id, {"type": "error", "error": outcome.error}))
            return Failed(_record(state, step, content, "error"))
        if outcome.object is not NO_OBJECT:
            state.object = outcome.object
        return _next_node(cfg, state, step, content)


def _next_node(cfg: LoopConfig, state: RunState, step: ModelStep, content: list[AssistantPart]) -> Node:
    """An accepted step's record, then its tool calls or the end of the model's turn."""
    record = _record(state, step, content, step.finish_reason)
    if not step.calls:
        return TurnEnded(cfg, step, record) if cfg.completion_checks else ChecksDone(cfg, step, record, [])
    pending = PendingToolStep(calls=step.calls, step_record=record)
    state.pending = pending
    return ToolCalls(cfg, pending, step, step.step_result)


def _end(cfg: LoopConfig, state: RunState, outcome: End) -> list[AgentChunk]:
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
            chunks: list[AgentChunk] = [TripwireChunk(state.run_id, payload)] if announced else []
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


def _failed_step(cfg: LoopConfig, run: Run, step: ModelStep, content: list[AssistantPart]) -> Node:
    """The model call failed: its error goes out; the tools it did call still run (as in
    Mastra), then the run ends."""
    state = run.state
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
    run.out.append(ErrorChunk(state.run_id, {"type": "error", "error": step.error}))
    return FailedStep(cfg, step, content)


class FailedStep(Node):
    """A failed step's record; the tools it called run before the run ends."""

    __slots__ = ("cfg", "content", "step")

    def __init__(self, cfg: LoopConfig, step: ModelStep, content: list[AssistantPart]) -> None:
        self.cfg = cfg
        self.step = step
        self.content = content

    async def run(self, run: Run) -> Node | End:
        state, step, content = run.state, self.step, self.content
        if content:
            state.messages.append({"role": "assistant", "content": [*content]})
        record = _record(state, step, content, "error")
        if not step.calls:
            return Failed(record, step.step_result)
        pending = PendingToolStep(calls=step.calls, step_record=record)
        state.pending = pending
        run.out.append(run_tool_step(self.cfg, state, pending, step.eager))
        return FailedToolsRan(record, step.step_result)


class FailedToolsRan(Node):
    """A failed step's tools ran: the run ends, unless one waits for a human."""

    __slots__ = ("record", "step_result")

    def __init__(self, record: StepRecord, step_result: StepResultFields) -> None:
        self.record = record
        self.step_result = step_result

    async def run(self, run: Run) -> Node | End:
        if run.state.pending is not None:  # stopped for a human: the error ends nothing yet
            return Suspend()
        return Failed(self.record, self.step_result)


async def _structured_object(
    structured: StructuredOutput, state: RunState, step: ModelStep, outcome: Structured
) -> SubStream:
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


async def _review_step(
    cfg: LoopConfig, run: Run, step: ModelStep, content: list[AssistantPart]
) -> Node | End | None:
    """Step-level output processors: ``None`` when they accept the step, else a retry (its
    ``step-finish`` emitted, then another model turn) or a :class:`Tripwire`."""
    state, turn = run.state, run.turn
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
            return Tripwire(trip.payload(), record)
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
        retry_result: StepResultFields = {
            "reason": "retry",
            "isContinued": True,
            "retryReason": trip.reason,
            "retryMetadata": trip.metadata,
            "retryProcessorId": trip.processor_id,
        }
        chunk = step_finish_chunk(cfg, state, record, "retry", continued=True, step_result=retry_result)
        chunk.payload["processorRetryFeedback"] = feedback
        run.out.append(chunk)
        return MODEL_TURN
    if state.processor_retry_count:  # the step is accepted: its retries are over
        state.processor_retry_count = 0
        _set_retry_count(contexts, 0)
    return None


def _set_retry_count(contexts: dict[str, ProcessorContext], count: int) -> None:
    for ctx in contexts.values():
        ctx.retry_count = count


class TurnEnded(Node):
    """A step without tool calls: the completion checks run (their chunks stream as they come)."""

    __slots__ = ("cfg", "record", "step")

    def __init__(self, cfg: LoopConfig, step: ModelStep, record: StepRecord) -> None:
        self.cfg = cfg
        self.step = step
        self.record = record

    async def run(self, run: Run) -> Node | End:
        verdicts: list[CheckVerdict] = []
        run.out.append(_checks(self.cfg, run.state, self.step.text, verdicts))
        return ChecksDone(self.cfg, self.step, self.record, verdicts)


async def _checks(cfg: LoopConfig, state: RunState, text: str, verdicts: list[CheckVerdict]) -> SubStream:
    """The completion checks' chunks; their verdicts go into ``verdicts``."""
    for check in cfg.completion_checks:
        async for item in check(cfg, state, text):
            if isinstance(item, CheckVerdict):
                verdicts.append(item)
            else:
                _open_message_after_signal(state, item)
                yield item


class ChecksDone(Node):
    """The verdicts decide whether the loop goes on; the step's ``step-finish`` says so."""

    __slots__ = ("cfg", "record", "step", "verdicts")

    def __init__(self, cfg: LoopConfig, step: ModelStep, record: StepRecord, verdicts: list[CheckVerdict]):
        self.cfg = cfg
        self.step = step
        self.record = record
        self.verdicts = verdicts

    async def run(self, run: Run) -> Node | End:
        cfg, state, step, verdicts = self.cfg, run.state, self.step, self.verdicts
        chosen = [v for v in verdicts if v.authoritative] or verdicts
        # Like a tool step, a step that ended for an unknown reason goes on (as Mastra does).
        # (so does one that asked for tool calls the provider executed itself: Mastra goes on after
        # every reason but stop, error, length and content-filter)
        wants_more = step.finish_reason in _GOES_ON or any(v.continue_loop for v in chosen)
        cont = wants_more and await _goes_on(cfg, state)
        extra: FinishFields = {}
        for verdict in verdicts:
            extra.update(verdict.payload_extra)
        step_finish = step_finish_chunk(
            cfg, state, self.record, step.finish_reason, continued=cont, step_result=step.step_result
        )
        step_finish.payload.update(extra)  # type: ignore[typeddict-item]
        run.out.append(step_finish)
        if cont:
            return Feedback(self.record, chosen)
        # the final verdicts travel with the finish too (as in Mastra)
        return _wait_after_step(cfg, run, Finish(step.finish_reason, step.step_result, extra))


class Feedback(Node):
    """The checks sent the model back to work: their feedback joins the conversation."""

    __slots__ = ("chosen", "record")

    def __init__(self, record: StepRecord, chosen: list[CheckVerdict]) -> None:
        self.record = record
        self.chosen = chosen

    async def run(self, run: Run) -> Node | End:
        state = run.state
        for verdict in self.chosen:
            state.messages.extend(verdict.feedback)
            add_feedback(state, self.record, verdict.feedback)
            state.message_id = verdict.next_message_id or state.message_id
        return MODEL_TURN


def _wait_after_step(cfg: LoopConfig, run: Run, end: Finish | None) -> Node | End:
    """Durable mode waits for the run's background tasks after a step (then :class:`Waited`);
    ``end``: how the run ends unless a task settled meanwhile (``None``: it goes on)."""
    waited = len(run.state.waited_task_ids)
    if cfg.wait_for_background is not None:  # (durable mode; no generator made otherwise)
        run.out.append(wait_for_background(cfg, run.state))
        return Waited(cfg, waited, end)
    return _after_wait(cfg, run.state, waited, end)


class Waited(Node):
    """After the wait for background tasks: another step if one settled meanwhile (or the run
    goes on anyway), else ``end``."""

    __slots__ = ("cfg", "end", "waited")

    def __init__(self, cfg: LoopConfig, waited: int, end: Finish | None) -> None:
        self.cfg = cfg
        self.waited = waited
        self.end = end

    async def run(self, run: Run) -> Node | End:
        return _after_wait(self.cfg, run.state, self.waited, self.end)


def _after_wait(cfg: LoopConfig, state: RunState, waited: int, end: Finish | None) -> Node | End:
    if cfg.abort_signal.aborted:
        return Abort()
    if end is None or _task_settled(cfg, state, waited):
        return MODEL_TURN
    return end


class Continued(Node):
    """A durable run continued from the snapshot after its last step, once its background
    tasks were waited for: that step ended the run, unless a task settled meanwhile."""

    __slots__ = ("waited",)

    def __init__(self, waited: int) -> None:
        self.waited = waited

    async def run(self, run: Run) -> Node | End:
        ends = run.state.ends_after_step
        if ends is not None and not _task_settled(run.cfg, run.state, self.waited):
            return Finish(ends)
        return MODEL_TURN


class ToolCalls(Node):
    """Run the step's tools (or the rest of them, for a resumed run): what they emit streams live."""

    __slots__ = ("cfg", "pending", "step", "step_result")

    def __init__(
        self, cfg: LoopConfig, pending: PendingToolStep, step: ModelStep | None, step_result: StepResultFields
    ) -> None:
        self.cfg = cfg
        self.pending = pending
        self.step = step
        self.step_result = step_result

    async def run(self, run: Run) -> Node | End:
        eager = self.step.eager if self.step is not None else None
        finished = finished_tool_step(self.cfg, run.state, self.pending, eager)
        if finished is None:
            run.out.append(run_tool_step(self.cfg, run.state, self.pending, eager))
        else:
            run.out.extend(finished)
        return ToolsRan(self)


class ToolsRan(Node):
    """The step's tools ran: the step ends (``step-finish``), unless the run was aborted or
    waits for a human."""

    __slots__ = ("calls",)

    def __init__(self, calls: ToolCalls) -> None:
        self.calls = calls

    async def run(self, run: Run) -> Node | End:
        calls, state = self.calls, run.state
        cfg, pending = calls.cfg, calls.pending
        if cfg.abort_signal.aborted:
            return Abort()
        if state.status != "running" or state.pending is not None:  # waiting for a human
            return Suspend()
        record = pending.step_record
        cont = not calls_client_tools(cfg, pending) and await _goes_on(cfg, state)
        run.out.append(
            step_finish_chunk(
                cfg, state, record, record["finishReason"], continued=cont, step_result=calls.step_result,
                tool_results=pending.results,
            )
        )  # fmt: skip
        return ToolStepEnded(calls, cont)


class ToolStepEnded(Node):
    """After the tool step's ``step-finish``: its results join the record; the run goes on,
    waits for background tasks (durable mode) or ends."""

    __slots__ = ("calls", "cont")

    def __init__(self, calls: ToolCalls, cont: bool) -> None:
        self.calls = calls
        self.cont = cont

    async def run(self, run: Run) -> Node | End:
        calls, state, cont = self.calls, run.state, self.cont
        cfg, record = calls.cfg, calls.pending.step_record
        reason = record["finishReason"]
        add_tool_results(state, record, calls.pending.results)
        if calls.step is None:  # a resumed step: as in Mastra, it goes on without saving or waiting
            return MODEL_TURN if cont else Finish(reason)
        state.ends_after_step = None if cont else reason
        if cfg.on_step_end is not None:
            await cfg.on_step_end(state)
        return _wait_after_step(cfg, run, None if cont else Finish(reason, calls.step_result))


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


def _open_message_after_signal(state: RunState, chunk: AgentChunk) -> None:
    """A signal (``data-signal``) joins the conversation as a message of its own, so the
    response goes on in a new message, as in Mastra."""
    if isinstance(chunk, DataChunk) and chunk.name == "signal":
        open_new_message(state)


def open_new_message(state: RunState) -> None:
    """The response goes on in a new message (a new id from here on)."""
    if not state.message_segments:
        state.message_segments.append((state.message_id, state.input_count))
    state.message_id = new_id()
    state.message_segments.append((state.message_id, len(state.messages)))
