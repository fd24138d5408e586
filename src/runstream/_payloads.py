"""The payload of every chunk type, as a ``TypedDict`` whose keys are exactly the wire's.

:mod:`runstream.chunks` re-exports them all; import them from there.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal, NotRequired, TypeAlias

from pydantic import ConfigDict, with_config
from typing_extensions import TypedDict

from runstream._json import JsonObject

_OPEN = ConfigDict(extra="allow", arbitrary_types_allowed=True)

ProviderMetadata: TypeAlias = dict[str, JsonObject]
"""``Record<provider, Record<string, JSON>>``: each vendor's own JSON under its name (the same shape
as ``runstream.models.parts.ProviderMetadata``; this module imports nothing of runstream but the
JSON types)."""

WireChunk: TypeAlias = dict[str, object]
"""A chunk in wire shape (``type``, ``runId``, ``from``, ``payload`` ...) with its values still
Python (a payload ``TypedDict``, a datetime, a tool's own result): what ``dumps`` writes."""


class WireError(TypedDict):
    """An exception on the wire, as Mastra serialises it."""

    message: str
    name: str


@with_config(_OPEN)
class StartPayload(TypedDict, total=False):
    id: str
    messageId: str


@with_config(_OPEN)
class StepStartPayload(TypedDict, total=False):
    messageId: str
    request: JsonObject
    warnings: list[Any]
    startedAt: int
    inputMessages: list[Any]
    stepId: str


@with_config(_OPEN)
class ResponseMetadataPayload(TypedDict, total=False):
    signature: str
    id: str
    modelId: str
    timestamp: datetime


@with_config(_OPEN)
class TextPayload(TypedDict):
    id: str
    type: NotRequired[Literal["text-end"]]
    """(Mastra's ``text-end`` payload repeats its type.)"""
    providerMetadata: NotRequired[ProviderMetadata]


@with_config(_OPEN)
class TextDeltaPayload(TypedDict):
    id: str
    text: str
    providerMetadata: NotRequired[ProviderMetadata]


@with_config(_OPEN)
class ReasoningPayload(TypedDict):
    id: str
    signature: NotRequired[str]
    providerMetadata: NotRequired[ProviderMetadata]


@with_config(_OPEN)
class ReasoningSignaturePayload(TypedDict):
    id: str
    signature: str
    providerMetadata: NotRequired[ProviderMetadata]


@with_config(_OPEN)
class RedactedReasoningPayload(TypedDict):
    id: str
    data: Any
    providerMetadata: NotRequired[ProviderMetadata]


@with_config(_OPEN)
class SourcePayload(TypedDict):
    id: str
    sourceType: Literal["url", "document"]
    title: NotRequired[str]
    mimeType: NotRequired[str]
    filename: NotRequired[str]
    url: NotRequired[str]
    providerMetadata: NotRequired[ProviderMetadata]


@with_config(_OPEN)
class FilePayload(TypedDict):
    data: str | bytes
    mimeType: str
    base64: NotRequired[str]
    filename: NotRequired[str]
    providerMetadata: NotRequired[ProviderMetadata]


@with_config(_OPEN)
class CustomPayload(TypedDict):
    kind: str
    providerMetadata: NotRequired[ProviderMetadata]


@with_config(_OPEN)
class ToolInputStartPayload(TypedDict):
    toolCallId: str
    toolName: str
    providerExecuted: NotRequired[bool]
    dynamic: NotRequired[bool]
    title: NotRequired[str]
    providerMetadata: NotRequired[ProviderMetadata]


@with_config(_OPEN)
class ToolCallDeltaPayload(TypedDict):
    argsTextDelta: str
    toolCallId: str
    toolName: NotRequired[str]
    providerMetadata: NotRequired[ProviderMetadata]


@with_config(_OPEN)
class ToolInputEndPayload(TypedDict):
    toolCallId: str
    providerMetadata: NotRequired[ProviderMetadata]


@with_config(_OPEN)
class ToolCallPayload(TypedDict):
    toolCallId: str
    toolName: str
    args: NotRequired[JsonObject]
    providerExecuted: NotRequired[bool]
    dynamic: NotRequired[bool]
    title: NotRequired[str]
    output: NotRequired[Any]
    providerMetadata: NotRequired[ProviderMetadata]


@with_config(_OPEN)
class ToolResultPayload(TypedDict):
    toolCallId: str
    toolName: str
    result: Any
    args: NotRequired[JsonObject]
    isError: NotRequired[bool]
    providerExecuted: NotRequired[bool]
    dynamic: NotRequired[bool]
    providerMetadata: NotRequired[ProviderMetadata]


@with_config(_OPEN)
class ToolErrorPayload(TypedDict):
    toolCallId: str
    toolName: str
    error: Any
    id: NotRequired[str]
    args: NotRequired[JsonObject]
    providerExecuted: NotRequired[bool]
    providerMetadata: NotRequired[ProviderMetadata]


@with_config(_OPEN)
class ToolOutputPayload(TypedDict):
    output: Any
    toolCallId: str
    toolName: NotRequired[str]


@with_config(_OPEN)
class ToolCallApprovalPayload(TypedDict):
    toolCallId: str
    toolName: str
    args: JsonObject
    resumeSchema: str


@with_config(_OPEN)
class ToolCallSuspendedPayload(TypedDict):
    toolCallId: str
    toolName: str
    suspendPayload: Any
    args: JsonObject
    resumeSchema: NotRequired[str]


@with_config(_OPEN)
class ToolApproval(TypedDict, total=False):
    """A user's answer to an approval request (a denied call's ``approval``)."""

    id: str
    approved: bool
    reason: str | None


@with_config(_OPEN)
class ToolOutputDeniedPayload(TypedDict):
    toolCallId: str
    toolName: str
    args: NotRequired[JsonObject]
    approval: NotRequired[ToolApproval]


@with_config(_OPEN)
class StepResult(TypedDict, total=False):
    reason: str
    rawReason: Any
    warnings: list[Any]
    isContinued: bool
    logprobs: Any


@with_config(_OPEN)
class StepFinishPayload(TypedDict, total=False):
    id: str
    messageId: str
    stepResult: StepResult
    output: Mapping[str, object]
    """``text``, ``toolCalls``, ``usage``, ``steps`` (and ``object``) as Mastra's payload has them."""
    metadata: Mapping[str, object]
    messages: Mapping[str, object]
    """``all``, ``user`` and ``nonUser``: the conversation's prompt messages."""
    totalUsage: Mapping[str, object]
    response: Mapping[str, object]
    providerMetadata: ProviderMetadata
    processorRetryCount: int
    processorRetryFeedback: str
    backgroundTaskPending: bool


FinishPayload = StepFinishPayload


@with_config(_OPEN)
class ErrorPayload(TypedDict):
    error: Any
    type: NotRequired[Literal["error"]]


@with_config(_OPEN)
class TripwirePayload(TypedDict):
    reason: str
    retry: NotRequired[bool]
    metadata: NotRequired[Any]
    processorId: NotRequired[str]


@with_config(_OPEN)
class ScorerResult(TypedDict):
    score: float
    passed: bool
    scorerId: str
    scorerName: str
    duration: NotRequired[float]
    reason: NotRequired[str]
    errored: NotRequired[bool]


@with_config(_OPEN)
class IsTaskCompletePayload(TypedDict):
    iteration: int
    passed: bool
    results: list[ScorerResult]
    duration: float
    timedOut: bool
    maxIterationReached: bool
    suppressFeedback: bool
    reason: NotRequired[str]


@with_config(_OPEN)
class GoalPayload(TypedDict):
    objective: str
    iteration: int
    maxRuns: int
    passed: bool
    status: Literal["active", "paused", "done"]
    results: list[ScorerResult]
    duration: float
    timedOut: bool
    maxRunsReached: bool
    suppressFeedback: bool
    reason: NotRequired[str]
    pausedReason: NotRequired[str]
    waitingForUser: NotRequired[bool]
    judgeFailed: NotRequired[bool]
    shouldContinue: NotRequired[bool]
    pending: NotRequired[bool]
    activity: NotRequired[list[JsonObject]]


@with_config(_OPEN)
class WatchPayload(TypedDict, total=False):
    workflowState: dict[str, Any]
    eventTimestamp: int


@with_config(_OPEN)
class StepOutputPayload(TypedDict):
    output: Any


@with_config(_OPEN)
class TaskStartedPayload(TypedDict):
    taskId: str
    toolName: str
    toolCallId: str


@with_config(_OPEN)
class TaskEventPayload(TypedDict):
    """Shared fields of every background-task lifecycle payload after ``started``."""

    taskId: str
    toolName: str
    toolCallId: str
    runId: str
    agentId: str


class TaskRunningPayload(TaskEventPayload):
    startedAt: datetime
    args: JsonObject


@with_config(_OPEN)
class TaskProgressPayload(TypedDict):
    taskIds: list[str]
    runningCount: int
    elapsedMs: float


class TaskOutputPayload(TaskEventPayload):
    payload: WireChunk


class TaskCompletedPayload(TaskEventPayload):
    result: Any
    completedAt: datetime
    isError: NotRequired[bool]


class TaskFailedPayload(TaskEventPayload):
    error: Mapping[str, object]
    """The stored error (``message``, and ``name`` when its text is public)."""
    completedAt: datetime


class TaskCancelledPayload(TaskEventPayload):
    completedAt: datetime


class TaskSuspendedPayload(TaskEventPayload):
    args: JsonObject
    suspendPayload: NotRequired[Any]
    suspendedAt: NotRequired[datetime]


class TaskResumedPayload(TaskEventPayload):
    startedAt: datetime
    args: JsonObject


class Usage(TypedDict):
    """Token usage (``await out.usage``): the three counts always, the others when the provider
    reports them."""

    inputTokens: int
    outputTokens: int
    totalTokens: int
    reasoningTokens: NotRequired[int]
    cachedInputTokens: NotRequired[int]
    cacheCreationInputTokens: NotRequired[int]


OpenPayload = dict[str, Any]
