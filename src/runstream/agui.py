"""AG-UI: a run's chunks as AG-UI events, and AG-UI input as a run's messages and client tools.

Uses the official ``ag-ui-protocol`` package (the ``agui`` extra). The HTTP endpoint is in
:mod:`runstream.server.agui_api`; this module is the mapping, usable from any web framework:

* ``RUN_STARTED`` … ``RUN_FINISHED`` wrap the whole request, continuation turns of an until-idle
  stream included (each turn is announced by a ``CUSTOM`` ``runstream.turn`` event); a failed
  run ends with ``RUN_ERROR``, an aborted one with a ``cancelled`` outcome.
* model steps are ``STEP_STARTED`` / ``STEP_FINISHED``; text and reasoning stream as
  ``TEXT_MESSAGE_*`` and ``REASONING_*``; tool calls as ``TOOL_CALL_START/ARGS/END`` and their
  outcomes as ``TOOL_CALL_RESULT``. Calls of the client's tools (``RunAgentInput.tools``) are
  left for the client: ``RUN_FINISHED`` names them in ``pendingToolCallIds``.
* state: the client's ``state`` is echoed as the first ``STATE_SNAPSHOT``. A tool updates it with
  ``ctx.writer.custom({"type": "data-state", "data": s})`` (the whole new state): that becomes a
  ``STATE_DELTA`` (a JSON Patch, RFC 6902, from the state the client has) when the patch is
  smaller than ``s``, else a snapshot; the first state of a run without client state is always a
  snapshot. ``{"type": "data-state-delta", "data": [ops]}`` sends a patch as it is (checked
  against the state the client has; a patch that does not apply ends the run with ``RUN_ERROR``).
* background tasks, tool output and other data chunks are ``CUSTOM`` events named after the
  chunk type, with its wire JSON as value.
"""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Callable
from typing import Any

import jsonpatch
import jsonpointer
from pydantic import ValidationError

try:
    import ag_ui  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError("runstream.agui needs the 'agui' extra: pip install 'runstream[agui]'") from exc

from ag_ui.core import (
    AssistantMessage,
    BaseEvent,
    CustomEvent,
    DeveloperMessage,
    ReasoningEndEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedEvent,
    RunStartedEvent,
    StateDeltaEvent,
    StateSnapshotEvent,
    StepFinishedEvent,
    StepStartedEvent,
    SystemMessage,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
    ToolMessage,
    UserMessage,
)
from ag_ui.core.events import RunFinishedCancelledOutcome, RunFinishedSuccessOutcome

from runstream.agent import client_tool
from runstream.chunks import (
    AbortChunk,
    AnyChunk,
    DataChunk,
    ErrorChunk,
    ReasoningDeltaChunk,
    ReasoningEndChunk,
    ReasoningStartChunk,
    StartChunk,
    StepFinishChunk,
    StepStartChunk,
    TextDeltaChunk,
    TextEndChunk,
    TextStartChunk,
    ToolCallChunk,
    ToolCallDeltaChunk,
    ToolCallInputStreamingEndChunk,
    ToolCallInputStreamingStartChunk,
    ToolErrorChunk,
    ToolResultChunk,
    dumps,
)
from runstream.models.base import PromptMessage
from runstream.models.prompt import AssistantPart, JsonOutput, TextOutput
from runstream.models.prompt import SystemMessage as SystemPromptMessage
from runstream.models.prompt import ToolResultPart as ToolResultPromptPart
from runstream.tools import Tool

STATE_CHUNK = "data-state"
STATE_DELTA_CHUNK = "data-state-delta"
TURN_EVENT = "runstream.turn"


def prompt_messages(run_input: RunAgentInput, *, only_new: bool = False) -> list[PromptMessage]:
    """The AG-UI conversation as prompt messages (tool results name their calls' tools).

    ``only_new``: just what follows the last assistant message (the rest is in memory).
    """
    names = {
        call.id: call.function.name
        for message in run_input.messages
        if isinstance(message, AssistantMessage)
        for call in message.tool_calls or []
    }
    messages = list(run_input.messages)
    if only_new:
        last = max((i for i, m in enumerate(messages) if isinstance(m, AssistantMessage)), default=-1)
        messages = messages[last + 1 :]
    out: list[PromptMessage] = []
    for message in messages:
        if isinstance(message, SystemMessage | DeveloperMessage):
            out.append({"role": "system", "content": message.content})
        elif isinstance(message, UserMessage):
            out.append({"role": "user", "content": [{"type": "text", "text": _text(message.content)}]})
        elif isinstance(message, AssistantMessage):
            parts: list[AssistantPart] = []
            if message.content:
                parts.append({"type": "text", "text": message.content})
            for call in message.tool_calls or []:
                parts.append(
                    {
                        "type": "tool-call",
                        "toolCallId": call.id,
                        "toolName": call.function.name,
                        "input": _arguments(call.function.arguments),
                    }
                )
            if parts:
                out.append({"role": "assistant", "content": parts})
        elif isinstance(message, ToolMessage):
            out.append({"role": "tool", "content": [_tool_result(message, names)]})
    return out


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(getattr(part, "text", "") or "" for part in content)


def _arguments(text: str) -> Any:
    try:
        return json.loads(text) if text else {}
    except ValueError:
        return {}


def _tool_result(message: ToolMessage, names: dict[str, str]) -> ToolResultPromptPart:
    text = _text(message.content)
    if message.error:
        output: TextOutput | JsonOutput = {"type": "error-text", "value": message.error}
    else:
        try:
            output = {"type": "json", "value": json.loads(text)}
        except ValueError:
            output = {"type": "text", "value": text}
    return {
        "type": "tool-result",
        "toolCallId": message.tool_call_id,
        "toolName": names.get(message.tool_call_id, "unknown"),
        "output": output,
    }


def client_tools(run_input: RunAgentInput) -> list[Tool]:
    """The client's tools (frontend actions): the model sees them, the client runs them."""
    return [
        client_tool(t.name, description=t.description, input_schema=t.parameters or None)
        for t in run_input.tools or []
    ]


def context_messages(run_input: RunAgentInput) -> list[SystemPromptMessage]:
    """The client's context entries and state, as system messages for the model."""
    context: list[SystemPromptMessage] = [
        {"role": "system", "content": f"{entry.description}: {entry.value}"}
        for entry in run_input.context or []
    ]
    if run_input.state not in (None, {}):
        context.append({"role": "system", "content": f"Current application state: {dumps(run_input.state)}"})
    return context


class EventMapper:
    """Turns one request's chunks into AG-UI events (``start``, then ``map`` per chunk, then
    ``finish``, which closes whatever the chunks left open)."""

    def __init__(self, run_input: RunAgentInput, client_tool_names: frozenset[str] = frozenset()) -> None:
        self.input = run_input
        self._client_tools = client_tool_names
        self._text: dict[str, str] = {}
        """Open text blocks: chunk id → AG-UI message id."""
        self._reasoning: dict[str, str] = {}
        self._streamed_calls: set[str] = set()
        self._pending_client_calls: list[str] = []
        self._steps = 0
        self._turns = 0
        self._failed = False
        self._aborted = False
        self._state: Any = copy.deepcopy(run_input.state)
        """The state the client has (``None``: unknown, so the next state is a snapshot)."""

    def start(self) -> list[BaseEvent]:
        events: list[BaseEvent] = [RunStartedEvent(thread_id=self.input.thread_id, run_id=self.input.run_id)]
        if self.input.state is not None:
            events.append(StateSnapshotEvent(snapshot=self.input.state))
        return events

    def map(self, chunk: AnyChunk) -> list[BaseEvent]:
        if self._failed:
            return []
        handler = _HANDLERS.get(chunk.type)
        if handler is not None:
            return handler(self, chunk)
        if chunk.type.startswith(("background-task-", "data-", "tool-output")) or chunk.type in (
            "tool-call-approval",
            "tool-call-suspended",
            "goal",
            "is-task-complete",
        ):
            return [CustomEvent(name=chunk.type, value=json.loads(dumps(chunk.to_wire())))]
        return []

    def finish(self) -> list[BaseEvent]:
        if self._failed:
            return []
        events = self._close_blocks()
        if self._aborted:
            outcome: Any = RunFinishedCancelledOutcome()
        else:
            outcome = RunFinishedSuccessOutcome(pending_tool_call_ids=self._pending_client_calls or None)
        events.append(
            RunFinishedEvent(thread_id=self.input.thread_id, run_id=self.input.run_id, outcome=outcome)
        )
        return events

    def _close_blocks(self) -> list[BaseEvent]:
        events: list[BaseEvent] = [TextMessageEndEvent(message_id=m) for m in self._text.values()]
        for message_id in self._reasoning.values():
            events += [
                ReasoningMessageEndEvent(message_id=message_id),
                ReasoningEndEvent(message_id=message_id),
            ]
        self._text.clear()
        self._reasoning.clear()
        return events

    # -- per chunk type ------------------------------------------------------------------------------
    def _on_start(self, chunk: StartChunk) -> list[BaseEvent]:
        self._turns += 1
        return [CustomEvent(name=TURN_EVENT, value={"turn": self._turns, "runId": chunk.run_id})]

    def _on_step_start(self, chunk: StepStartChunk) -> list[BaseEvent]:
        self._steps += 1
        return [StepStartedEvent(step_name=f"step-{self._steps}")]

    def _on_step_finish(self, chunk: StepFinishChunk) -> list[BaseEvent]:
        return [*self._close_blocks(), StepFinishedEvent(step_name=f"step-{self._steps}")]

    def _on_text_start(self, chunk: TextStartChunk | TextDeltaChunk) -> list[BaseEvent]:
        message_id = self._text[chunk.payload["id"]] = str(uuid.uuid4())
        return [TextMessageStartEvent(message_id=message_id, role="assistant")]

    def _on_text_delta(self, chunk: TextDeltaChunk) -> list[BaseEvent]:
        events: list[BaseEvent] = []
        if chunk.payload["id"] not in self._text:
            events = self._on_text_start(chunk)
        text = chunk.payload["text"]
        if text:
            events.append(TextMessageContentEvent(message_id=self._text[chunk.payload["id"]], delta=text))
        return events

    def _on_text_end(self, chunk: TextEndChunk) -> list[BaseEvent]:
        message_id = self._text.pop(chunk.payload["id"], None)
        return [TextMessageEndEvent(message_id=message_id)] if message_id else []

    def _on_reasoning_start(self, chunk: ReasoningStartChunk | ReasoningDeltaChunk) -> list[BaseEvent]:
        message_id = self._reasoning[chunk.payload["id"]] = str(uuid.uuid4())
        return [
            ReasoningStartEvent(message_id=message_id),
            ReasoningMessageStartEvent(message_id=message_id, role="reasoning"),
        ]

    def _on_reasoning_delta(self, chunk: ReasoningDeltaChunk) -> list[BaseEvent]:
        events: list[BaseEvent] = []
        if chunk.payload["id"] not in self._reasoning:
            events = self._on_reasoning_start(chunk)
        text = chunk.payload.get("text") or ""
        if text:
            message_id = self._reasoning[chunk.payload["id"]]
            events.append(ReasoningMessageContentEvent(message_id=message_id, delta=text))
        return events

    def _on_reasoning_end(self, chunk: ReasoningEndChunk) -> list[BaseEvent]:
        message_id = self._reasoning.pop(chunk.payload["id"], None)
        if message_id is None:
            return []
        return [ReasoningMessageEndEvent(message_id=message_id), ReasoningEndEvent(message_id=message_id)]

    def _on_input_start(self, chunk: ToolCallInputStreamingStartChunk) -> list[BaseEvent]:
        call_id = chunk.payload["toolCallId"]
        self._streamed_calls.add(call_id)
        return [ToolCallStartEvent(tool_call_id=call_id, tool_call_name=chunk.payload["toolName"])]

    def _on_input_delta(self, chunk: ToolCallDeltaChunk) -> list[BaseEvent]:
        delta = chunk.payload["argsTextDelta"]
        return [ToolCallArgsEvent(tool_call_id=chunk.payload["toolCallId"], delta=delta)] if delta else []

    def _on_input_end(self, chunk: ToolCallInputStreamingEndChunk) -> list[BaseEvent]:
        return [ToolCallEndEvent(tool_call_id=chunk.payload["toolCallId"])]

    def _on_tool_call(self, chunk: ToolCallChunk) -> list[BaseEvent]:
        call_id, name = chunk.payload["toolCallId"], chunk.payload["toolName"]
        if name in self._client_tools:
            self._pending_client_calls.append(call_id)
        if call_id in self._streamed_calls:
            return []
        return [
            ToolCallStartEvent(tool_call_id=call_id, tool_call_name=name),
            ToolCallArgsEvent(tool_call_id=call_id, delta=dumps(chunk.payload.get("args") or {})),
            ToolCallEndEvent(tool_call_id=call_id),
        ]

    def _on_tool_result(self, chunk: ToolResultChunk) -> list[BaseEvent]:
        result = chunk.payload["result"]
        content = result if isinstance(result, str) else dumps(result)
        return [
            ToolCallResultEvent(
                message_id=str(uuid.uuid4()),
                tool_call_id=chunk.payload["toolCallId"],
                content=content,
                role="tool",
            )
        ]

    def _on_tool_error(self, chunk: ToolErrorChunk) -> list[BaseEvent]:
        error = chunk.payload.get("error")
        message = error.get("message") if isinstance(error, dict) else str(error)
        return [
            ToolCallResultEvent(
                message_id=str(uuid.uuid4()),
                tool_call_id=chunk.payload["toolCallId"],
                content=f"Error: {message}",
                role="tool",
            )
        ]

    def _on_error(self, chunk: ErrorChunk) -> list[BaseEvent]:
        error = chunk.payload.get("error")
        message = error.get("message") if isinstance(error, dict) else str(error)
        self._failed = True
        return [*self._close_blocks(), RunErrorEvent(message=message or "the run failed", code="RUN_FAILED")]

    def _on_state(self, chunk: DataChunk) -> list[BaseEvent]:
        data = chunk.data if isinstance(chunk, DataChunk) else chunk.payload
        new = copy.deepcopy(data) if data is not None else {}
        previous, self._state = self._state, new
        if previous is None:
            return [StateSnapshotEvent(snapshot=new)]
        patch = jsonpatch.make_patch(previous, new).patch
        if not patch:
            return []
        if len(dumps(patch)) < len(dumps(new)):
            return [StateDeltaEvent.model_validate({"delta": patch})]
        return [StateSnapshotEvent(snapshot=new)]

    def _on_state_delta(self, chunk: DataChunk) -> list[BaseEvent]:
        ops = chunk.data if isinstance(chunk, DataChunk) else chunk.payload
        try:
            event = StateDeltaEvent.model_validate({"delta": ops})
            self._state = jsonpatch.apply_patch(self._state if self._state is not None else {}, ops)
        except (ValidationError, jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as exc:
            self._failed = True
            message = f"a {STATE_DELTA_CHUNK} chunk is not a JSON Patch of the client's state: {exc}"
            return [*self._close_blocks(), RunErrorEvent(message=message, code="INVALID_STATE_DELTA")]
        return [event]

    def _on_abort(self, chunk: AbortChunk) -> list[BaseEvent]:
        self._aborted = True
        return []


_HANDLERS: dict[str, Callable[[EventMapper, Any], list[BaseEvent]]] = {
    # (each handler takes the chunk class its key names)
    "start": EventMapper._on_start,
    "step-start": EventMapper._on_step_start,
    "step-finish": EventMapper._on_step_finish,
    "text-start": EventMapper._on_text_start,
    "text-delta": EventMapper._on_text_delta,
    "text-end": EventMapper._on_text_end,
    "reasoning-start": EventMapper._on_reasoning_start,
    "reasoning-delta": EventMapper._on_reasoning_delta,
    "reasoning-end": EventMapper._on_reasoning_end,
    "tool-call-input-streaming-start": EventMapper._on_input_start,
    "tool-call-delta": EventMapper._on_input_delta,
    "tool-call-input-streaming-end": EventMapper._on_input_end,
    "tool-call": EventMapper._on_tool_call,
    "tool-result": EventMapper._on_tool_result,
    "tool-error": EventMapper._on_tool_error,
    "error": EventMapper._on_error,
    "abort": EventMapper._on_abort,
    STATE_CHUNK: EventMapper._on_state,
    STATE_DELTA_CHUNK: EventMapper._on_state_delta,
}
