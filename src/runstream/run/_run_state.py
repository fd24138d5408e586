"""The run as data: its configuration, its state, its tool calls and their outcomes.

Everything the loop (``runstream.run._loop``) works on lives here, so the modules that only need a
run's types (output, goals, scoring, step results, tasks) do not import the algorithm. A
:class:`RunState` saves and restores itself (:meth:`RunState.to_json` /
:meth:`RunState.from_json`) in the shape ``runstream.run._run_snapshot`` declares, versioned, with
one migration per older version.

The loop's nodes report how the run ended as a value, one of :data:`End`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, NotRequired, TypedDict, TypeVar

from runstream._json import JsonObject, JsonValue
from runstream._messages import ContinuedMessage
from runstream.abort import AbortSignal
from runstream.chunks import (
    AgentChunk,
    Chunk,
    ChunkDecodeError,
    FileChunk,
    SourceChunk,
    ToolCallChunk,
    ToolResultChunk,
    TripwirePayload,
    chunk_from_wire,
    to_jsonable,
)
from runstream.errors import RunstreamError
from runstream.models.base import LanguageModel, ModelSettings, PromptMessage, ToolChoice
from runstream.models.parts import ProviderMetadata
from runstream.models.prompt import ToolApprovalResponsePart, ToolMessage, ToolResultOutput, ToolResultPart
from runstream.run._run_snapshot import (
    STATE_VERSION,
    SavedContinuedMessage,
    SavedOutcome,
    SavedPendingStep,
    SavedRunState,
    SavedToolCall,
    read_snapshot,
)
from runstream.stop_conditions import StopCondition
from runstream.structured import StructuredOutput
from runstream.tools import Tool

if TYPE_CHECKING:
    from runstream.memory import Memory

Status = Literal["running", "success", "failed", "suspended", "aborted", "tripwire"]


ToolDispatcher = Callable[
    ["ToolCall", Tool, "LoopConfig", "RunState", Callable[[AgentChunk], None]],
    Awaitable["ToolOutcome | None"],
]
"""Hook that may take a tool call away from inline execution (background tasks). Returning
``None`` means "run it inline"."""

BackgroundWaiter = Callable[["RunState", list[str], AbortSignal], AsyncIterator[AgentChunk]]
"""Waits for background tasks inside the loop (until they end or the run is aborted); yields
progress chunks and their final results."""


class StepPreparation(TypedDict):
    """What ``prepare_step`` gets: the coming step (``stepNumber`` 0-based), the run so far, and
    what the step would use (``tools`` and ``activeTools`` are tool names)."""

    stepNumber: int
    steps: list[StepRecord]
    messages: list[PromptMessage]
    model: LanguageModel
    tools: list[str]
    toolChoice: ToolChoice | None
    activeTools: list[str]
    system: list[str]
    requestContext: dict[str, object]


PrepareStep = Callable[
    [StepPreparation], Mapping[str, object] | Awaitable[Mapping[str, object] | None] | None
]
"""Mastra's ``prepareStep``: gets the coming step, returns what this step uses instead (or
``None``; its keys are checked, see ``runstream.run._prepare_step``)."""


class ApprovalRequest(TypedDict):
    """What a ``require_tool_approval`` function gets: one tool call and the run's request context."""

    toolName: str
    args: Mapping[str, object]
    requestContext: dict[str, object]


ApprovalPolicy = Callable[[ApprovalRequest], bool | Awaitable[bool]]
"""``require_tool_approval`` as a function: whether the call waits for approval (sync or async)."""

CompletionCheck = Callable[["LoopConfig", "RunState", str], AsyncIterator["AgentChunk | CheckVerdict"]]
"""Runs after a step that ends the model's turn; yields chunks, then one :class:`CheckVerdict`."""


class StepResultFields(TypedDict, total=False):
    """What a step adds to its ``stepResult`` (``reason`` and ``isContinued`` are the payload's
    own: a step's fields come between them)."""

    reason: str
    isContinued: bool
    rawReason: JsonValue
    """The vendor's own finish reason (AI SDK v3)."""
    warnings: list[JsonValue]
    retryReason: str
    """A processor rejected the step: why, its metadata and its id (the retry's step-finish)."""
    retryMetadata: object
    retryProcessorId: str | None
    messageId: str
    """A resumed tool step's: the response message it streams as."""


class FinishFields(TypedDict, total=False):
    """What completion checks add to the ``step-finish`` and ``finish`` payloads."""

    isTaskCompleteCheckFailed: bool


class CutStep(TypedDict, total=False):
    """The step an abort cut short, as its ``finish`` reports it."""

    text: str
    request: JsonObject
    response: dict[str, object]


class StepToolCall(TypedDict):
    """A tool call as a step's ``toolCalls`` lists it."""

    toolCallId: str
    toolName: str
    args: JsonObject
    providerExecuted: NotRequired[bool]
    providerMetadata: NotRequired[ProviderMetadata]


@dataclass(slots=True)
class CheckVerdict:
    """What a completion check (task-completion scorers, a goal judge) decided about a final step."""

    continue_loop: bool
    feedback: list[PromptMessage] = field(default_factory=list)
    """Messages the model sees in the next step when the loop continues."""
    authoritative: bool = False
    """An authoritative verdict (the goal judge) overrides the others."""
    payload_extra: FinishFields = field(default_factory=lambda: FinishFields())
    """Extra fields for the step-finish payload."""
    next_message_id: str | None = None
    """The response message id the next iteration streams under (Mastra starts a new response
    message after an is-task-complete feedback message)."""


@dataclass(slots=True)
class LoopConfig:
    """Everything about a run that does not change while it runs."""

    agent_id: str
    model: LanguageModel
    tools: dict[str, Tool]
    agent_name: str = ""
    system: list[PromptMessage] = field(default_factory=list)
    max_steps: int = 5
    tool_choice: ToolChoice | None = None
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
    memory: Memory | None = None
    """The run's memory, with the call's memory options applied (``Memory.with_options``)."""
    dispatch_tool: ToolDispatcher | None = None
    tool_schemas: dict[str, JsonObject] = field(default_factory=dict)
    """Input schemas offered to the model instead of a tool's own (e.g. with ``_background``)."""
    completion_checks: list[CompletionCheck] = field(default_factory=list)
    after_input: list[PromptMessage] = field(default_factory=list)
    """Messages shown to the model right after the run's input (state signals), not saved."""
    start_chunks: list[AgentChunk] = field(default_factory=list)
    """Chunks streamed right after ``start`` (e.g. the current-objective signal)."""
    on_step_end: Callable[[RunState], Awaitable[None]] | None = None
    """Called after each finished step (durable agents save a snapshot there)."""
    wait_for_background: BackgroundWaiter | None = None
    """Durable mode: after a step that dispatched background tasks, wait for them in the loop
    (this yields progress and the real results) instead of leaving placeholders."""
    tool_call_concurrency: int = 10
    """How many of a step's tool calls run at once (Mastra's ``toolCallConcurrency``)."""
    tool_call_strategy: Literal["available", "called"] = "available"
    """Whether a tool that may need approval or suspend forces one call at a time when it is
    offered (``available``) or only when it is called (``called``)."""
    request_context: dict[str, object] = field(default_factory=dict)
    """The run's :class:`~runstream.request_context.RequestContext` (tools get it)."""
    stop_when: list[StopCondition] = field(default_factory=list)
    """Conditions that end the run after a step (``runstream.stop_conditions``)."""
    prepare_step: PrepareStep | None = None
    """Changes each step before the model is called (``runstream.run._prepare_step``)."""
    approval_policy: ApprovalPolicy | None = None
    """Decides per call whether it waits for approval (Mastra's ``requireToolApproval`` as a
    function): gets ``{"toolName", "args", "requestContext"}``."""
    durable: bool = False
    """A durable agent's run: Mastra's durable loop reports its steps in a shape of its own
    (see ``step_results``), and each step streams as a message of its own."""
    client_tools: frozenset[str] = frozenset()
    """Tools (in ``tools``) that the client executes: a step that calls one ends the run."""
    tasks_pending: Callable[[list[str]], bool] | None = None
    """Reports whether any of the given background tasks still runs (``backgroundTaskPending``)."""
    delegation: Any = None
    """The run's :class:`~runstream.delegation.DelegationRun` (its sub-agent tools read it)."""


class StepRecord(TypedDict):
    """One finished model step, in the shape Mastra's step payloads report it."""

    text: str
    content: list[Mapping[str, Any]]
    """The message parts as Mastra's step content reports them (see ``_step_results``)."""
    usage: JsonObject
    finishReason: str
    warnings: list[Any]
    request: JsonObject
    response: dict[str, object]
    """The model's response metadata (``id``, ``timestamp``, ``modelId`` ... as it sent them)."""
    toolCalls: list[StepToolCall]
    responseMessages: list[PromptMessage]
    tripwire: NotRequired[TripwirePayload]
    providerMetadata: NotRequired[ProviderMetadata]
    """The finish part's provider metadata (response id, service tier, vendor usage ...)."""


class PublicStep(TypedDict):
    """A step as the ``step-finish`` / ``finish`` payloads list it (their ``output.steps``)."""

    content: list[Mapping[str, Any]]
    usage: JsonObject
    warnings: list[Any]
    request: JsonObject
    response: Mapping[str, object]
    """The step's response metadata with its ``headers`` and ``messages``."""
    providerMetadata: NotRequired[ProviderMetadata]
    finishReason: NotRequired[str]
    tripwire: NotRequired[TripwirePayload]


@dataclass(slots=True)
class ToolCall:
    tool_call_id: str
    tool_name: str
    args: JsonObject
    """The arguments the tool gets."""
    args_error: str | None = None
    args_unreadable: bool = False
    """The model's argument text was not JSON at all: the call has no arguments to show."""
    provider_metadata: ProviderMetadata | None = None
    model_input: JsonObject | None = None
    """The arguments as the model sent them, when they differ from ``args`` (e.g. with a
    ``_background`` override); the conversation keeps these."""
    provider_executed: bool = False
    """The provider ran the tool (a web search, code execution ...): the loop does not."""
    chunk_metadata: ProviderMetadata | None = None
    """The provider metadata its ``tool-call`` chunk showed (its result's chunk shows it too)."""

    @property
    def sent_args(self) -> JsonObject:
        return self.args if self.model_input is None else self.model_input

    def to_json(self) -> SavedToolCall:
        """The call as saved (not ``provider_executed`` nor ``chunk_metadata``: a pending step's
        calls are the loop's own, and their chunks were streamed already)."""
        return {
            "toolCallId": self.tool_call_id,
            "toolName": self.tool_name,
            "args": self.args,
            "argsError": self.args_error,
            "argsUnreadable": self.args_unreadable,
            "providerMetadata": self.provider_metadata,
            "modelInput": self.model_input,
        }

    @classmethod
    def from_json(cls, data: SavedToolCall) -> ToolCall:
        return cls(
            data["toolCallId"],
            data["toolName"],
            data["args"],
            data["argsError"],
            data["argsUnreadable"],
            data["providerMetadata"],
            data["modelInput"],
        )


class RestoredError(RunstreamError):
    """A tool error restored from a saved run (its message and name survive)."""

    def __init__(self, message: str, name: str) -> None:
        super().__init__(message)
        self.name = name


@dataclass(slots=True)
class ToolOutcome:
    """How one tool call ended."""

    call: ToolCall
    kind: Literal["result", "error", "suspended", "denied"]
    value: Any = None
    provider_metadata: ProviderMetadata | None = None
    """Extra tool-result metadata (the background-task link)."""
    model_output: ToolResultOutput | None = None
    """What the model sees instead of ``value`` (e.g. a background placeholder)."""
    resume_schema: JsonObject | None = None
    """For a suspension: the schema of the data that resumes it (if the call gave one)."""
    run_id: str | None = None
    """For a suspension: the delegated run it waits on (``ToolContext.suspend(run_id=)``)."""

    def to_json(self) -> SavedOutcome:
        """The outcome as saved (not ``run_id``: a delegated run is saved by its step, in
        ``suspendedRunIds``)."""
        return {
            "kind": self.kind,
            "value": self.value,
            "providerMetadata": self.provider_metadata,
            "modelOutput": self.model_output,
            "resumeSchema": self.resume_schema,
        }

    @classmethod
    def from_json(cls, call: ToolCall, data: SavedOutcome) -> ToolOutcome:
        value = data["value"]
        if data["kind"] == "error" and isinstance(value, dict) and "message" in value:
            value = RestoredError(str(value["message"]), str(value.get("name", "Error")))
        return cls(
            call,
            data["kind"],
            value,
            provider_metadata=data["providerMetadata"],
            model_output=data["modelOutput"],
            resume_schema=data["resumeSchema"],
        )


@dataclass(slots=True)
class PendingToolStep:
    """A step whose tools run or wait for a human: approvals or a suspended tool."""

    calls: list[ToolCall]
    step_record: StepRecord
    awaiting_approval: set[str] = field(default_factory=set)
    suspended: dict[str, object] = field(default_factory=dict)
    """tool call id -> suspend payload (the tool's own value)"""
    done: dict[str, ToolOutcome] = field(default_factory=dict)
    approved: list[str] = field(default_factory=list)
    """Approved calls (they run when the step goes on)."""
    resume_data: dict[str, object] = field(default_factory=dict)
    """tool call id -> the data a suspended call resumes with (the caller's own value)"""
    suspended_run_ids: dict[str, str] = field(default_factory=dict)
    """tool call id -> the delegated run a suspended call waits on (its resumed execution gets
    it as ``ToolContext.suspended_tool_run_id``)"""
    results: list[ToolResultPart] = field(default_factory=list)
    """The step's tool-result parts once its tools ran; they join the step's content after its
    ``step-finish`` (as in Mastra)."""

    def to_json(self, step_index: int | None) -> SavedPendingStep:
        """The step as saved; ``step_index``: where its record is in the run's steps."""
        return {
            "calls": [call.to_json() for call in self.calls],
            "awaitingApproval": sorted(self.awaiting_approval),
            "suspended": self.suspended,
            "done": {call_id: outcome.to_json() for call_id, outcome in self.done.items()},
            "approved": self.approved,
            "resumeData": self.resume_data,
            "suspendedRunIds": self.suspended_run_ids,
            "stepRecord": self.step_record,
            "stepIndex": step_index,
        }

    @classmethod
    def from_json(cls, data: SavedPendingStep, steps: list[StepRecord]) -> PendingToolStep:
        """A saved step; its record is the run's step at its saved position (the same object, so
        the tool results it gains show in the run's steps), else the saved copy."""
        calls = {c["toolCallId"]: ToolCall.from_json(c) for c in data["calls"]}
        index = data["stepIndex"]
        record = steps[index] if index is not None and 0 <= index < len(steps) else data["stepRecord"]
        return cls(
            calls=list(calls.values()),
            step_record=record,
            awaiting_approval=set(data["awaitingApproval"]),
            suspended=data["suspended"],
            done={
                call_id: ToolOutcome.from_json(calls[call_id], outcome)
                for call_id, outcome in data["done"].items()
            },
            approved=list(data["approved"]),
            resume_data=dict(data["resumeData"]),
            suspended_run_ids=dict(data["suspendedRunIds"]),
            results=[],
        )


@dataclass(slots=True)
class ResumeAction:
    """How to continue a run that stopped for a human."""

    kind: Literal["approve", "decline", "resume", "continue"]
    """``continue``: a durable run restored after a restart goes on from its last finished step."""
    tool_call_id: str | None = None
    data: Any = None
    reason: str | None = None


@dataclass(slots=True)
class RunState:
    """The mutable state of one run, shared by the loop and its :class:`RunOutput`."""

    run_id: str
    message_id: str
    messages: list[PromptMessage]
    """The conversation in model-prompt form: input (history + new user) then responses."""
    input_count: int
    steps: list[StepRecord] = field(default_factory=list)
    usage: JsonObject = field(default_factory=dict)
    """The steps' usage summed (``runstream.run._step_results.add_usage``)."""
    finish_reason: str | None = None
    status: Status = "running"
    error: BaseException | None = None
    tripwire: TripwirePayload | None = None
    object: Any = None
    tool_calls: list[ToolCallChunk] = field(default_factory=list)
    tool_results: list[ToolResultChunk] = field(default_factory=list)
    sources: list[SourceChunk] = field(default_factory=list)
    files: list[FileChunk] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    pending: PendingToolStep | None = None
    processor_retry_count: int = 0
    suspend_payload: Any = None
    step_number: int = 0
    history_count: int = 0
    """How many of ``messages`` came from memory (the rest of the input is new)."""
    background_task_ids: list[str] = field(default_factory=list)
    saved: bool = False
    """Set when the run's messages have been handed to memory."""
    check_counts: dict[str, int] = field(default_factory=dict)
    """Evaluations so far per completion check (their ``iteration``)."""
    span: Any = None
    """The run's tracing span (parent of its step and tool spans)."""
    waited_task_ids: set[str] = field(default_factory=set)
    """Durable mode: background tasks whose results the loop already waited for."""
    ends_after_step: str | None = None
    """Durable mode: the finish reason when the last finished step ended the run (a client tool
    was called, no steps left, a stop condition held), so a run resumed from the snapshot taken
    after that step finishes instead of asking the model again."""
    hidden_tool_errors: dict[str, str] = field(default_factory=dict)
    """Tool call id -> what memory keeps of that call's error instead of the exception's text
    (:func:`runstream.tools.private_error_text`): the model saw the text, storage does not."""
    message_segments: list[tuple[str, int]] = field(default_factory=list)
    """The response messages when signals split the response: (id, the index in ``messages``
    its content starts at), the first one included. Empty when the run is one message."""
    continued: ContinuedMessage | None = None
    """For a run without new input: the thread's last stored message, an assistant one, which
    the run's response is appended to (see ``runstream.memory``)."""
    public_steps: list[PublicStep] = field(default_factory=list, repr=False, compare=False)
    """The public form (``output.steps`` of ``step-finish``/``finish``) of the first steps, as
    last built: later payloads share it instead of copying every earlier step again. A cache,
    not saved (``runstream.run._step_results``)."""

    @property
    def new_input_messages(self) -> list[PromptMessage]:
        return self.messages[self.history_count : self.input_count]

    @property
    def text(self) -> str:
        """The final step's text (Mastra's ``text`` aggregate)."""
        return self.steps[-1]["text"] if self.steps else ""

    @property
    def response_messages(self) -> list[PromptMessage]:
        return self.messages[self.input_count :]

    @property
    def stored_response_messages(self) -> list[PromptMessage]:
        """The response as memory keeps it: a failed tool's result holds what
        :attr:`hidden_tool_errors` says instead of the exception's text (the messages are copied
        only where that changes them)."""
        responses = self.response_messages
        hidden = self.hidden_tool_errors
        if not hidden:
            return responses
        return [
            _with_hidden_errors(message, hidden) if message["role"] == "tool" else message
            for message in responses
        ]

    def to_json(self) -> SavedRunState:
        """The state as JSON (``stateVersion`` :data:`STATE_VERSION`). What is not data is not
        saved: the error object (a saved run has not failed), the tracing span, whether memory
        has the messages (a restored run saves them again) and the public-steps cache."""
        continued, pending = self.continued, self.pending
        saved_continued: SavedContinuedMessage | None = None
        if continued is not None:
            saved_continued = {
                "id": continued.id,
                "parts": continued.parts,
                "metadata": continued.metadata,
                "promptCount": continued.prompt_count,
            }
        saved: SavedRunState = {
            "stateVersion": STATE_VERSION,
            "runId": self.run_id,
            "messageId": self.message_id,
            "messages": self.messages,
            "inputCount": self.input_count,
            "historyCount": self.history_count,
            "steps": self.steps,
            "usage": self.usage,
            "finishReason": self.finish_reason,
            "status": self.status,
            "tripwire": self.tripwire,
            "object": self.object,
            "stepNumber": self.step_number,
            "processorRetryCount": self.processor_retry_count,
            "backgroundTaskIds": self.background_task_ids,
            "waitedTaskIds": sorted(self.waited_task_ids),
            "endsAfterStep": self.ends_after_step,
            "reasoning": self.reasoning,
            "toolCalls": [c.to_wire() for c in self.tool_calls],
            "toolResults": [c.to_wire() for c in self.tool_results],
            "sources": [c.to_wire() for c in self.sources],
            "files": [c.to_wire() for c in self.files],
            "suspendPayload": self.suspend_payload,
            "checkCounts": self.check_counts,
            "messageSegments": self.message_segments,
            "hiddenToolErrors": self.hidden_tool_errors,
            "continued": saved_continued,
            "pending": None if pending is None else pending.to_json(self._step_index(pending.step_record)),
        }
        jsonable: SavedRunState = to_jsonable(saved)
        return jsonable

    def _step_index(self, record: StepRecord) -> int | None:
        """Where ``record`` (the object) is in ``steps``: a pending step's record is saved once."""
        return next((i for i, step in enumerate(self.steps) if step is record), None)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunState:
        """A state saved by :meth:`to_json` (any version up to :data:`STATE_VERSION`)."""
        saved = read_snapshot(data)
        continued, pending = saved["continued"], saved["pending"]
        steps: list[StepRecord] = saved["steps"]
        return cls(
            run_id=saved["runId"],
            message_id=saved["messageId"],
            messages=saved["messages"],
            input_count=saved["inputCount"],
            history_count=saved["historyCount"],
            steps=steps,
            usage=saved["usage"],
            finish_reason=saved["finishReason"],
            status=saved["status"],
            tripwire=saved["tripwire"],
            object=saved["object"],
            step_number=saved["stepNumber"],
            processor_retry_count=saved["processorRetryCount"],
            background_task_ids=saved["backgroundTaskIds"],
            waited_task_ids=set(saved["waitedTaskIds"]),
            ends_after_step=saved["endsAfterStep"],
            reasoning=saved["reasoning"],
            tool_calls=_saved_chunks(ToolCallChunk, saved["toolCalls"]),
            tool_results=_saved_chunks(ToolResultChunk, saved["toolResults"]),
            sources=_saved_chunks(SourceChunk, saved["sources"]),
            files=_saved_chunks(FileChunk, saved["files"]),
            suspend_payload=saved["suspendPayload"],
            check_counts=saved["checkCounts"],
            message_segments=saved["messageSegments"],
            hidden_tool_errors=saved["hiddenToolErrors"],
            continued=None
            if continued is None
            else ContinuedMessage(
                continued["id"], continued["parts"], continued["metadata"], continued["promptCount"]
            ),
            pending=None if pending is None else PendingToolStep.from_json(pending, steps),
        )


_SavedChunk = TypeVar("_SavedChunk", bound=Chunk[Any])


def _saved_chunks(cls: type[_SavedChunk], saved: list[JsonObject]) -> list[_SavedChunk]:
    """A saved list of one chunk type (:meth:`RunState.to_json` writes no other there)."""
    chunks: list[_SavedChunk] = []
    for wire in saved:
        chunk = chunk_from_wire(wire)
        if not isinstance(chunk, cls):
            raise ChunkDecodeError(f"a saved run's {cls.TYPE} chunks hold a {chunk.type!r} chunk")
        chunks.append(chunk)
    return chunks


def _with_hidden_errors(message: ToolMessage, hidden: dict[str, str]) -> ToolMessage:
    parts: list[ToolResultPart | ToolApprovalResponsePart] = [
        {**part, "output": {"type": "error-text", "value": hidden[part["toolCallId"]]}}
        if part["type"] == "tool-result" and part.get("toolCallId") in hidden
        else part
        for part in message["content"]
    ]
    return {**message, "content": parts}


# -- how a run ended (the last of the loop's nodes returns one) --------------------------------------


@dataclass(slots=True, frozen=True)
class Finish:
    """The run ended well: stream ``finish`` with this reason."""

    reason: str
    step_result: StepResultFields = field(default_factory=lambda: StepResultFields())
    payload_extra: FinishFields = field(default_factory=lambda: FinishFields())
    """Extra fields for the finish payload (completion checks' verdicts)."""


@dataclass(slots=True, frozen=True)
class Suspend:
    """The run waits for a human (an approval or a suspended tool): its stream ends here."""


@dataclass(slots=True, frozen=True)
class Abort:
    """The run was aborted. ``current`` describes the step the abort cut short, if any."""

    current: CutStep | None = None
    step_result: StepResultFields | None = None


@dataclass(slots=True, frozen=True)
class Tripwire:
    """A processor stopped the run; ``record`` is the step it stopped (none before the model)."""

    payload: TripwirePayload
    record: StepRecord | None = None
    announced: bool = True
    """Whether a ``tripwire`` chunk says so (Mastra's structuring pass ends the run with a
    tripwire reason and no chunk; the run's status stays ``success``)."""


@dataclass(slots=True, frozen=True)
class Failed:
    """The step failed; its ``error`` chunk is out, ``step-finish`` and ``finish`` follow."""

    record: StepRecord
    step_result: StepResultFields | None = None


End = Finish | Suspend | Abort | Tripwire | Failed
"""How a run ended (a suspension: it waits for a human)."""
