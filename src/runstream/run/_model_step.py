"""The model step: one model call, its provider stream parts turned into chunks.

:class:`ModelStep` calls the model and is then a :class:`~runstream.run._sources.PartSource`: its
consumer pulls the provider's parts and has the step translate each into chunks (no task, queue
or generator of ours on the token path). When the parts ran out, the step's text, content, tool
calls, usage, error or tripwire are on the object for the loop to decide what comes next.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import AsyncGeneratorType
from typing import Any

from runstream import _tracing as tracing
from runstream._ids import new_id
from runstream._json import JsonObject
from runstream.abort import AbortError
from runstream.chunks import (
    AgentChunk,
    FileChunk,
    ObjectChunk,
    RawChunk,
    ReasoningDeltaChunk,
    ReasoningEndChunk,
    ReasoningPayload,
    ReasoningStartChunk,
    ResponseMetadataChunk,
    SourceChunk,
    StepStartChunk,
    StepStartPayload,
    TextDeltaChunk,
    TextEndChunk,
    TextPayload,
    TextStartChunk,
    ToolCallChunk,
    ToolCallDeltaChunk,
    ToolCallDeltaPayload,
    ToolCallInputStreamingEndChunk,
    ToolCallInputStreamingStartChunk,
    ToolCallPayload,
    ToolInputEndPayload,
    ToolResultChunk,
)
from runstream.models import parts
from runstream.models.base import (
    FunctionToolSpec,
    ModelRequest,
    PromptMessage,
    tool_result_output,
)
from runstream.models.prompt import AssistantPart, FilePart, ToolCallPart, ToolResultOutput, ToolResultPart
from runstream.processors import ProcessorContext, TripWire, run_stream_processors
from runstream.run._part_payloads import file_payload, source_payload, with_metadata
from runstream.run._run_state import LoopConfig, RunState, StepResultFields, ToolCall
from runstream.run._sources import PartSource, SubStream
from runstream.run._step_results import content_blocks, default_response_metadata, empty_end, normalize_usage
from runstream.run._tool_step import EagerTools, model_view, shows_model_output, tool_call_limit, with_run_id
from runstream.structured import StructuredOutput, partial_object

DURABLE_STEP_ID = "durable-llm-execution"
"""The step id of a durable run's model steps, as Mastra's durable workflow names them."""


_NONE: tuple[Any, ...] = ()
_new = object.__new__


@dataclass(slots=True)
class Turn:
    """What the loop keeps across the steps of one stream (not part of the saved run)."""

    processor_contexts: dict[str, ProcessorContext]
    stream_processors: Sequence[Any]
    step_processors: Sequence[Any]
    eager_allowed: bool
    """Tools may start while the model streams (no tool of the agent needs approval)."""
    retry_feedback: list[PromptMessage] = field(default_factory=list)
    """Processor feedback the model sees after a rejected step."""
    plain_messages: int = 0
    """The run's first messages known to hold no tool result the model sees otherwise (Mastra's
    ``modelOutput``): each model call looks only at the messages added since the last."""
    offered: tuple[LoopConfig, list[FunctionToolSpec]] | None = None
    """The tools offered to the model, as last made, and the configuration they were made for
    (a run's configuration does not change while it streams; ``prepare_step`` makes another)."""

    def tool_specs(self, cfg: LoopConfig) -> list[FunctionToolSpec]:
        """The tools the model is offered under ``cfg`` (made once per configuration)."""
        offered = self.offered
        if offered is None or offered[0] is not cfg:
            none = cfg.tool_choice is not None and cfg.tool_choice["type"] == "none"
            specs = [] if none else [t.spec(cfg.tool_schemas.get(t.name)) for t in cfg.tools.values()]
            offered = self.offered = (cfg, specs)
        return list(offered[1])

    @classmethod
    def of(cls, cfg: LoopConfig, run_id: str) -> Turn:
        processors = cfg.output_processors
        eager_allowed = (
            cfg.tool_call_strategy == "available"
            and cfg.approval_policy is None
            and not any(tool.require_approval for tool in cfg.tools.values())
        )
        if not processors:
            return cls({}, _NONE, _NONE, eager_allowed)
        return cls(
            processor_contexts={p.id: ProcessorContext(processor_id=p.id, run_id=run_id) for p in processors},
            stream_processors=[p for p in processors if hasattr(p, "process_output_stream")],
            step_processors=[p for p in processors if hasattr(p, "process_output_step")],
            eager_allowed=eager_allowed,
        )


class ModelStep(PartSource):
    """One model call: :meth:`open` calls the model, and the step is then the part source of
    its chunks; once they ran out, the step's results are on the object (``text``,
    :meth:`content`, ``calls``, ``usage``, ``error``, ``tripwire`` ...)."""

    __slots__ = (
        "add_text",
        "block_ids",
        "block_meta",
        "block_starts",
        "calls",
        "cfg",
        "continues",
        "conversation",
        "eager",
        "error",
        "fast",
        "files",
        "finish_reason",
        "input_metadata",
        "lane",
        "last_object",
        "parts",
        "placed",
        "plain",
        "provider_metadata",
        "reasoning",
        "request",
        "response",
        "run_id",
        "signal",
        "sources_before",
        "span",
        "started",
        "started_emitted",
        "state",
        "step_result",
        "stopped",
        "streamed_args",
        "structured",
        "text_deltas",
        "text_ids",
        "tool_names",
        "tripwire",
        "turn",
        "usage",
        "warnings",
    )

    def __init__(
        self, cfg: LoopConfig, state: RunState, turn: Turn, conversation: list[PromptMessage] | None = None
    ) -> None:
        self.cfg = cfg
        self.conversation = conversation
        """The step's conversation when ``prepare_step`` replaced it (else the run's)."""
        self.state = state
        self.turn = turn
        self.text_deltas: list[str] = []
        self.add_text = self.text_deltas.append  # (bound once: the hot path appends every token)
        self.block_starts: list[tuple[str, int]] = []  # each text/reasoning block: kind, first delta
        self.text_ids: dict[str, str] = {}  # a numbered text block's id -> its fresh id
        self.block_ids: dict[tuple[str, str], int] = {}  # (kind, part id) -> its block's position
        self.block_meta: dict[int, parts.ProviderMetadata] | None = (
            None  # block position -> its provider metadata
        )
        self.placed: list[tuple[int, Any]] = []
        """Tool calls, provider-executed results and files, each with the number of text and
        reasoning blocks started before it (where it goes in the step's content)."""
        self.reasoning: list[str] = []
        self.calls: list[ToolCall] = []
        """The calls the loop executes (not those the provider executed)."""
        self.provider_metadata: Any = None  # the finish part's
        self.usage: JsonObject = {}
        self.step_result: StepResultFields = {}
        self.response: dict[str, object] = {}
        self.request: JsonObject = {}
        self.finish_reason = "unknown"
        self.error: BaseException | None = None
        self.tripwire: TripWire | None = None
        self.last_object: Any = None
        self.started_emitted = False
        self.warnings: list[Any] = []
        self.tool_names: dict[str, str] = {}
        self.input_metadata: dict[
            str, parts.ProviderMetadata
        ] = {}  # a streamed tool input's start's metadata
        self.streamed_args: dict[str, list[str]] = {}  # tool input text streamed before each tool-call
        self.files: list[FilePart] = []
        self.sources_before = len(state.sources)  # the run's sources before this step's
        self.eager: EagerTools | None = None  # made at the step's first tool call
        self.started = int(time.time() * 1000)
        self.run_id = state.run_id
        self.signal = cfg.abort_signal
        self.span: Any = None
        self.structured: StructuredOutput | None = None
        self.plain = False
        """Nothing but the provider's parts makes the step's chunks (see :meth:`translate`)."""
        self.fast = False
        self.stopped = False
        self.continues = False
        self.lane: str | None = None
        """The block of the text delta :meth:`translate` made last, if that was its last chunk."""

    @property
    def text(self) -> str:
        return "".join(self.text_deltas)

    async def open(self) -> ModelStep | SubStream:
        """Call the model: the step itself, a part source whose parts its consumer turns into
        chunks (``step-start`` first); when the request failed, the failed step's chunks."""
        cfg, state = self.cfg, self.state
        request = self._model_request()
        self.span = tracing.start_chat_span(
            state.span, cfg.model.provider, cfg.model.model_id, state.step_number, request
        )
        try:  # the span is current while the request is made (and retried: retries are its events)
            with tracing.made_current(self.span):
                model_stream = await cfg.model.stream(request)
        except Exception as exc:  # the request itself failed
            self.error = exc
            return self._request_failed()
        self.request = model_stream.request
        self.parts = model_stream.parts
        structured = cfg.structured_output
        if structured is not None and structured.structuring_model is not None:
            structured = None  # the structuring model makes the object after the step
        self.structured = structured
        self.plain = structured is None and not self.turn.stream_processors
        return self

    async def _request_failed(self) -> SubStream:
        yield self._step_start()
        self.step_result["warnings"] = []
        self._close(self.span)

    def translate(self, part: parts.StreamPart) -> AgentChunk | SubStream | None:
        """A provider part's chunk. A plain step under way (no structured output or stream
        processors) with no output of eager tools to interleave makes it with a function call,
        text deltas first (``fast``: no eager tool started); any other part is a sub-stream of
        its own (:meth:`_part_chunks`)."""
        if not self.fast and not self._quiet(part):
            self.continues = False
            self.lane = None
            return self._part_chunks(part)
        if part["type"] == "text-delta":
            delta = part["delta"]
            if not delta or "providerMetadata" in part:  # (rare: Mastra's rules in _text_delta)
                self.continues = False
                self.lane = None
                return self._text_delta(part)
            self.add_text(delta)
            block = part["id"]
            if block != self.lane:  # (the usual case, one more delta of the block, last: no jump)
                self.continues = False
                self.lane = block
            else:
                self.continues = True
            # _text_delta's work inline, with the block kept, and TextDeltaChunk(...) made here:
            # the class call runs a Python __init__, a third of this function's cost (one per token)
            chunk = _new(TextDeltaChunk)
            chunk.type = "text-delta"
            chunk.run_id = self.run_id
            chunk.from_ = "AGENT"
            chunk.payload = {"id": block, "text": delta}
            return chunk
        self.continues = False
        self.lane = None
        translate = _TRANSLATORS.get(part["type"])
        return self._part_chunks(part) if translate is None else translate(self, part)

    def _quiet(self, part: parts.StreamPart) -> bool:
        """A plain step, under way (or starting: ``stream-start``), whose eager tools have no
        output waiting."""
        if not self.plain:
            return False
        eager = self.eager
        if eager is not None and eager.outbox.items:
            return False
        return self.started_emitted or part["type"] == "stream-start"

    async def _part_chunks(self, part: parts.StreamPart) -> SubStream:
        """One part, whatever the step is doing: the started tools' output first, the step's
        start, structured output's partial object, the stream processors. A part that fails
        (a processor's tripwire, a malformed part) ends the step there."""
        try:
            eager = self.eager
            if eager is not None and eager.tasks:
                for emitted in eager.emitted():
                    yield with_run_id(emitted, self.run_id)
            kind = part["type"]
            if part["type"] == "stream-start":  # (the step's start: not for the stream processors)
                start = self._stream_start(part)
                if start is not None:
                    yield start
                return
            if kind == "error":
                self.error = _as_exception(part.get("error"))
                self.stopped = True
                return
            translate = _TRANSLATORS.get(kind)
            chunk = None if translate is None else translate(self, part)
            if chunk is None:
                return
            if not self.started_emitted:
                yield self._step_start()
            if self.structured is not None and kind == "text-delta":
                partial = partial_object("".join(self.text_deltas))
                if partial is not None and partial != self.last_object:
                    self.last_object = partial
                    yield ObjectChunk(self.run_id, partial)
            if self.turn.stream_processors:
                chunk = await self._processed(chunk, kind)
            if chunk is not None:
                yield chunk
        except Exception as exc:
            self._failed(exc)

    async def _processed(self, chunk: AgentChunk, kind: str) -> AgentChunk | None:
        processed = await run_stream_processors(
            self.turn.stream_processors, chunk, self.turn.processor_contexts
        )
        if kind == "text-delta":  # the step's text is what the processors let through
            self.text_deltas.pop()
            if isinstance(processed, TextDeltaChunk):  # (a processor may make it another chunk)
                self.text_deltas.append(processed.payload["text"])
        return processed

    def _failed(self, exc: Exception) -> None:
        """The stream failed mid-way (the provider, a processor): the step ends there."""
        self.stopped = True
        if isinstance(exc, TripWire):
            self.tripwire = exc
        elif not isinstance(exc, AbortError) and not self.signal.aborted:
            self.error = exc

    async def end(self, error: Exception | None) -> SubStream:
        await self.aclose()
        if error is not None:
            self._failed(error)
        if not self.started_emitted:
            yield self._step_start()
        self._close(self.span)

    def ran_out(self) -> bool:
        """Settled at once when its start is out and its parts an async generator that ended
        (closing one does nothing): a step's usual end, without :meth:`end`'s sub-stream."""
        parts = self.parts
        if not self.started_emitted or not isinstance(parts, AsyncGeneratorType) or parts.ag_frame:
            return False
        self._close(self.span)
        return True

    def _close(self, span: Any) -> None:
        """Settle the step's reason, error and response metadata once its stream ended."""
        cfg = self.cfg
        if self.error is None and self.tripwire is None and not cfg.abort_signal.aborted:
            if self.finish_reason == "error":
                self.error = empty_end("error", "but no error payload was provided", self.step_result)
            elif self.finish_reason == "other" and not self._produced_output():
                # as Mastra: a step that ends "other" with nothing in it would loop for nothing
                self.error = empty_end("other", "without producing any output", self.step_result)
        reason = "error" if self.error else self.finish_reason
        tracing.end_chat_span(
            span, self.usage, reason, self.error, self.response, (self.text_deltas, self.calls)
        )
        self.response = self.response or default_response_metadata(cfg.model)

    def _produced_output(self) -> bool:
        """Whether the step streamed any content (Mastra's step-content chunk types)."""
        produced = self.text_deltas or self.reasoning or self.calls or self.placed or self.streamed_args
        return bool(produced) or self.last_object is not None or len(self.state.sources) > self.sources_before

    def _model_request(self) -> ModelRequest:
        cfg, state, turn = self.cfg, self.state, self.turn
        structured = cfg.structured_output
        if self.conversation is None:
            messages = conversation = state.messages
            after_input = cfg.after_input
            if after_input:
                conversation = [*messages[: state.input_count], *after_input, *messages[state.input_count :]]
            if shows_model_output(messages, turn.plain_messages) or shows_model_output(after_input):
                conversation = model_view(conversation)
            else:  # looked at once: the messages only grow (and a landing result has no modelOutput)
                turn.plain_messages = len(messages)
        else:
            conversation = model_view(self.conversation)
        prompt = [*cfg.system, *turn.retry_feedback, *cfg.context, *conversation]
        return ModelRequest(
            prompt=structured.prompt(prompt, cfg.model.provider) if structured else prompt,
            tools=turn.tool_specs(cfg),
            tool_choice=(cfg.tool_choice or {"type": "auto"}) if cfg.tools else cfg.tool_choice,
            response_format=structured.response_format(cfg.model.provider) if structured else None,
            include_raw_chunks=cfg.include_raw_chunks,
            settings=cfg.model_settings,
            abort_signal=cfg.abort_signal,
        )

    def _step_start(self) -> StepStartChunk:
        self.started_emitted = True
        self.fast = self.plain and self.eager is None
        payload: StepStartPayload = {
            "request": self.request,
            "warnings": self.warnings,
            "messageId": self.state.message_id,
            "startedAt": self.started,
        }
        if self.cfg.durable:
            payload["stepId"] = DURABLE_STEP_ID
        return StepStartChunk(self.state.run_id, payload)

    def content(self) -> list[AssistantPart]:
        """The step's assistant message content, in the order the model streamed it: text and
        reasoning blocks (with their provider metadata as ``providerOptions``), files, tool
        calls and the results of the tools the provider executed."""
        starts, placed = self.block_starts, self.placed
        if (  # the usual step: at most one text block, then calls
            len(starts) < 2
            and not self.reasoning
            and self.block_meta is None
            and (not starts or starts[0][0] == "text")
            and (not placed or placed[0][0] >= len(starts))
        ):
            joined = "".join(self.text_deltas)
            content: list[AssistantPart] = [{"type": "text", "text": joined}] if joined else []
            content.extend(_placed_part(item) for _, item in placed)
            return content
        blocks = content_blocks(starts, self.text_deltas, self.reasoning, self.block_meta)
        content = []
        index = 0
        for position, block in enumerate(blocks):
            while index < len(placed) and placed[index][0] <= position < len(starts):
                content.append(_placed_part(placed[index][1]))
                index += 1
            if block is not None:
                content.append(block)
        content.extend(_placed_part(item) for _, item in placed[index:])
        return content

    def _block(self, kind: str, part: parts.BlockPart, deltas: list[str]) -> int:
        """A text or reasoning block starts (its ``*-start`` part, or a delta with metadata
        that came without one); its position."""
        position = len(self.block_starts)
        self.block_starts.append((kind, len(deltas)))
        self.block_ids[kind, part["id"]] = position
        return position

    def _block_metadata(self, kind: str, part: parts.BlockPart, deltas: list[str]) -> None:
        """A part's provider metadata becomes its block's (the latest wins, as Mastra folds it)."""
        pm = part.get("providerMetadata")
        if pm:
            position = self.block_ids.get((kind, part["id"]))
            if position is None:
                position = self._block(kind, part, deltas)
            if self.block_meta is None:
                self.block_meta = {}
            self.block_meta[position] = pm

    # -- one translator per provider part type (error is handled inline) ------------------------

    def _text_delta(self, part: parts.TextDeltaPart) -> AgentChunk | None:
        delta = part["delta"]
        pm = part.get("providerMetadata")
        if pm:  # as Mastra: streamed even when empty, and the block's metadata from now on
            self._block_metadata("text", part, self.text_deltas)
        elif not delta:  # as Mastra: an empty delta is not streamed
            return None
        self.text_deltas.append(delta)
        payload: Any = (
            {"id": part["id"], "providerMetadata": pm, "text": delta}
            if pm
            else {"id": part["id"], "text": delta}
        )
        return TextDeltaChunk(self.run_id, payload)

    def _stream_start(self, part: parts.StreamStartPart) -> AgentChunk | None:
        self.warnings = part.get("warnings") or []
        return None if self.started_emitted else self._step_start()

    def _reasoning_delta(self, part: parts.ReasoningDeltaPart) -> AgentChunk:
        self._block_metadata("reasoning", part, self.reasoning)
        self.reasoning.append(part["delta"])
        pm = part.get("providerMetadata")
        payload: Any = (
            {"id": part["id"], "providerMetadata": pm, "text": part["delta"]}
            if pm
            else {"id": part["id"], "text": part["delta"]}
        )
        return ReasoningDeltaChunk(self.state.run_id, payload)

    def _text_start(self, part: parts.TextStartPart) -> AgentChunk:
        block = part["id"]
        if type(block) is str and block.isdigit():  # see _RenumberedStep
            fresh = self.text_ids[block] = new_id()
            part = {**part, "id": fresh}
            self.__class__ = _RenumberedStep
        self._block("text", part, self.text_deltas)
        self._block_metadata("text", part, self.text_deltas)
        payload: TextPayload = {"id": part["id"]}
        return TextStartChunk(self.state.run_id, with_metadata(payload, part))

    def _text_end(self, part: parts.TextEndPart) -> AgentChunk:
        self._block_metadata("text", part, self.text_deltas)
        payload: TextPayload = {"type": "text-end", "id": part["id"]}
        return TextEndChunk(self.state.run_id, with_metadata(payload, part))

    def _reasoning_start(self, part: parts.ReasoningStartPart) -> AgentChunk:
        self._block("reasoning", part, self.reasoning)
        self._block_metadata("reasoning", part, self.reasoning)
        payload: ReasoningPayload = {"id": part["id"]}
        return ReasoningStartChunk(self.state.run_id, with_metadata(payload, part))

    def _reasoning_end(self, part: parts.ReasoningEndPart) -> AgentChunk:
        self._block_metadata("reasoning", part, self.reasoning)
        payload: ReasoningPayload = {"id": part["id"]}
        return ReasoningEndChunk(self.state.run_id, with_metadata(payload, part))

    def _tool_input_start(self, part: parts.ToolInputStartPart) -> AgentChunk:
        self.tool_names[part["id"]] = part["toolName"]
        if part.get("providerMetadata"):
            self.input_metadata[part["id"]] = part["providerMetadata"]
        payload: Any = {"toolCallId": part["id"], "toolName": part["toolName"]}
        for key in ("providerExecuted", "dynamic", "providerMetadata"):
            if part.get(key) is not None:
                payload[key] = part[key]
        return ToolCallInputStreamingStartChunk(self.state.run_id, payload)

    def _tool_input_delta(self, part: parts.ToolInputDeltaPart) -> AgentChunk:
        self.streamed_args.setdefault(part["id"], []).append(part["delta"])
        payload: ToolCallDeltaPayload = {
            "argsTextDelta": part["delta"],
            "toolCallId": part["id"],
            "toolName": self.tool_names.get(part["id"], ""),
        }
        return ToolCallDeltaChunk(self.state.run_id, with_metadata(payload, part))

    def _tool_input_end(self, part: parts.ToolInputEndPart) -> AgentChunk:
        payload: ToolInputEndPayload = {"toolCallId": part["id"]}
        return ToolCallInputStreamingEndChunk(self.state.run_id, with_metadata(payload, part))

    def _tool_call(self, part: parts.ToolCallPart) -> AgentChunk:
        cfg, state = self.cfg, self.state
        call = _parse_tool_call(part, "".join(self.streamed_args.get(part["toolCallId"], ())))
        self.placed.append((len(self.block_starts), call))
        payload: ToolCallPayload = {"toolCallId": call.tool_call_id, "toolName": call.tool_name}
        # As Mastra's: a call whose input streamed (tool-input-start ...) is streamed with the
        # metadata its input's start had; one that came whole keeps its own.
        streamed = call.tool_call_id in self.tool_names
        metadata = self.input_metadata.get(call.tool_call_id) if streamed else call.provider_metadata
        if call.provider_executed:  # the loop does not run it
            # (its input streamed, the chunk shows that text, {} when none came; the step's
            # content and toolCalls have the call's input)
            streamed_input = self.streamed_args.get(call.tool_call_id)
            payload["args"] = _streamed_args(streamed_input) if streamed else dict(call.args)
            payload["providerExecuted"] = True
            if metadata:
                payload["providerMetadata"] = metadata
            chunk = ToolCallChunk(state.run_id, payload)
            state.tool_calls.append(chunk)
            return chunk
        self.calls.append(call)
        if not call.args_unreadable:
            payload["args"] = dict(call.args)
        if metadata:
            payload["providerMetadata"] = call.chunk_metadata = metadata
        chunk = ToolCallChunk(state.run_id, payload)
        state.tool_calls.append(chunk)
        if self.turn.eager_allowed and call.tool_name not in cfg.client_tools:
            self.eager = self.eager or EagerTools(tool_call_limit(cfg, self.calls))
            self.eager.start(cfg, state, call)  # a client tool runs on the client
            self.fast = False  # what the tool emits goes out between the following parts
        return chunk

    def _tool_result(self, part: parts.ToolResultPart) -> AgentChunk:
        """The result of a tool the provider executed (web search, code execution ...)."""
        payload: Any = {
            "toolCallId": part.get("toolCallId", ""),
            "toolName": part.get("toolName", ""),
            "result": part.get("result"),
        }
        for key in ("isError", "providerExecuted", "providerMetadata"):
            if part.get(key) is not None:
                payload[key] = part[key]
        chunk = ToolResultChunk(self.state.run_id, payload)
        self.state.tool_results.append(chunk)
        result: ToolResultPart = {
            "type": "tool-result",
            "toolCallId": payload["toolCallId"],
            "toolName": payload["toolName"],
            "output": _provider_tool_output(payload["result"], bool(part.get("isError"))),
        }
        if part.get("providerMetadata"):
            result["providerOptions"] = part["providerMetadata"]
        self.placed.append((len(self.block_starts), result))
        return chunk

    def _source(self, part: parts.SourcePart) -> AgentChunk:
        chunk = SourceChunk(self.state.run_id, source_payload(part))
        self.state.sources.append(chunk)
        return chunk

    def _file(self, part: parts.FileStreamPart) -> AgentChunk:
        chunk = FileChunk(self.state.run_id, file_payload(part))
        self.state.files.append(chunk)
        file = _file_content(chunk.payload)
        self.files.append(file)
        self.placed.append((len(self.block_starts), file))
        return chunk

    def _raw(self, part: parts.RawPart) -> AgentChunk | None:
        return RawChunk(self.state.run_id, part.get("rawValue")) if self.cfg.include_raw_chunks else None

    def _response_metadata(self, part: parts.ResponseMetadataPart) -> AgentChunk | None:
        self.response = {k: v for k, v in part.items() if k != "type"}
        if self.cfg.wait_for_background is None:
            return None
        payload: Any = {"type": "response-metadata", **self.response}
        return ResponseMetadataChunk(self.state.run_id, payload)

    def _finish(self, part: parts.FinishPart) -> None:
        reason = part.get("finishReason", "unknown")
        raw = None
        while isinstance(reason, dict):  # AI SDK v3: {unified, raw}
            raw = reason.get("raw", raw)
            reason = reason.get("unified", "unknown")
        if raw is not None:  # the vendor's own reason, as Mastra reports it
            self.step_result["rawReason"] = raw
        # Mastra reports an unknown reason as "other" (and keeps looping on it).
        self.finish_reason = "other" if reason == "unknown" or not reason else str(reason)
        self.provider_metadata = part.get("providerMetadata") or None
        self.usage = normalize_usage(part.get("usage"), self.provider_metadata)


class _RenumberedStep(ModelStep):
    """A step whose provider numbers its text blocks per response (``"0"``, ``"1"`` ...: Anthropic,
    Google): as Mastra does, each such block gets a fresh id, so the text of a later step does
    not share an id with an earlier one. The step becomes one of these at its first numbered
    text block, so only such steps pay for the look-up on every part."""

    __slots__ = ()

    def translate(self, part: parts.StreamPart) -> AgentChunk | SubStream | None:
        if part["type"] == "text-delta" or part["type"] == "text-end":
            fresh = self.text_ids.get(part["id"])
            if fresh is not None:
                renumbered = part.copy()
                renumbered["id"] = fresh
                return ModelStep.translate(self, renumbered)
        return ModelStep.translate(self, part)


_TRANSLATORS: dict[str, Callable[[ModelStep, Any], AgentChunk | None]] = {
    # (each translator takes the part class its key names)
    "stream-start": ModelStep._stream_start,
    "text-delta": ModelStep._text_delta,  # (translate makes it inline on the hot path)
    "reasoning-delta": ModelStep._reasoning_delta,
    "text-start": ModelStep._text_start,
    "text-end": ModelStep._text_end,
    "reasoning-start": ModelStep._reasoning_start,
    "reasoning-end": ModelStep._reasoning_end,
    "tool-input-start": ModelStep._tool_input_start,
    "tool-input-delta": ModelStep._tool_input_delta,
    "tool-input-end": ModelStep._tool_input_end,
    "tool-call": ModelStep._tool_call,
    "tool-result": ModelStep._tool_result,
    "source": ModelStep._source,
    "file": ModelStep._file,
    "raw": ModelStep._raw,
    "response-metadata": ModelStep._response_metadata,
    "finish": ModelStep._finish,
}
"""Provider part type -> its translator (``None``: the part streams nothing)."""


def _parse_tool_call(part: parts.ToolCallPart, streamed: str) -> ToolCall:
    """A ``tool-call`` part as a call. As in Mastra, the argument text streamed before it (tool
    input deltas) wins over the part's own input when it is a JSON object."""
    name = str(part.get("toolName", ""))
    call = ToolCall(
        tool_call_id=str(part.get("toolCallId", "")),
        tool_name=name,
        args={},
        provider_metadata=part.get("providerMetadata"),
        provider_executed=bool(part.get("providerExecuted")),
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


def _streamed_args(deltas: list[str] | None) -> JsonObject:
    text = "".join(deltas or ())
    try:
        args = json.loads(text) if text.strip() else {}
    except ValueError:
        return {}
    return args if isinstance(args, dict) else {}


def _placed_part(item: Any) -> AssistantPart:
    """A tool call's message part (other placed items are parts already)."""
    if not isinstance(item, ToolCall):
        return item  # type: ignore[no-any-return]
    part: ToolCallPart = {
        "type": "tool-call",
        "toolCallId": item.tool_call_id,
        "toolName": item.tool_name,
        "input": item.sent_args,
    }
    if item.provider_executed:
        part["providerExecuted"] = True
    if item.provider_metadata:
        part["providerOptions"] = item.provider_metadata
    return part


def _provider_tool_output(result: Any, is_error: bool) -> ToolResultOutput:
    """A provider-executed tool's result as a prompt ``output`` (the AI SDK's rule)."""
    if is_error and isinstance(result, str):
        return {"type": "error-text", "value": result}
    if is_error:
        return {"type": "error-json", "value": result}
    return tool_result_output(result)


def _file_content(payload: Any) -> FilePart:
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
