"""Runs that stopped for a human (an approval, a suspended tool), kept in storage.

A run that ends at ``tool-call-approval`` or ``tool-call-suspended`` is saved as a JSON snapshot
(its messages, steps, usage and the pending tool step, plus the options that can be restored), so
``approve_tool_call`` / ``decline_tool_call`` / ``resume_stream`` work after a restart and from
any process that shares the storage. Options that are code (processors, model settings, abort
signals) come from the agent's defaults when a run is restored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from runstream.chunks import chunk_from_wire, to_jsonable
from runstream.loop import PendingToolStep, RunState, ToolCall, ToolOutcome
from runstream.memory import MemoryScope

NAMESPACE = "agent-runs"
DURABLE_NAMESPACE = "durable-runs"
"""Durable agents' runs in progress (a snapshot after every step)."""


@dataclass(slots=True, frozen=True)
class SuspendedRun:
    """What a suspended run waits for, and whose it is."""

    run_id: str
    agent_id: str
    thread_id: str | None
    resource_id: str | None
    awaiting_approval: list[str]
    suspended: dict[str, Any]
    """tool call id -> suspend payload"""


def describe(agent_id: str, state: RunState, scope: MemoryScope | None) -> SuspendedRun:
    pending = state.pending
    return SuspendedRun(
        run_id=state.run_id,
        agent_id=agent_id,
        thread_id=scope.thread_id if scope else None,
        resource_id=scope.resource_id if scope else None,
        awaiting_approval=sorted(pending.awaiting_approval) if pending else [],
        suspended=dict(pending.suspended) if pending else {},
    )


def snapshot(agent_id: str, state: RunState, options: dict[str, Any]) -> dict[str, Any]:
    """The run as JSON (``options``: the restorable run options, already JSON)."""
    pending = state.pending
    data: dict[str, Any] = to_jsonable(
        {
            "agentId": agent_id,
            "options": options,
            "runId": state.run_id,
            "messageId": state.message_id,
            "messages": state.messages,
            "inputCount": state.input_count,
            "historyCount": state.history_count,
            "steps": state.steps,
            "usage": state.usage,
            "stepNumber": state.step_number,
            "processorRetryCount": state.processor_retry_count,
            "backgroundTaskIds": state.background_task_ids,
            "waitedTaskIds": sorted(state.waited_task_ids),
            "reasoning": state.reasoning,
            "toolCalls": [c.to_wire() for c in state.tool_calls],
            "toolResults": [c.to_wire() for c in state.tool_results],
            "suspendPayload": state.suspend_payload,
            "pending": None
            if pending is None
            else {
                "calls": [
                    {
                        "toolCallId": c.tool_call_id,
                        "toolName": c.tool_name,
                        "args": c.args,
                        "argsError": c.args_error,
                        "providerMetadata": c.provider_metadata,
                    }
                    for c in pending.calls
                ],
                "awaitingApproval": sorted(pending.awaiting_approval),
                "suspended": pending.suspended,
                "done": {
                    call_id: {
                        "kind": o.kind,
                        "value": o.value,
                        "providerMetadata": o.provider_metadata,
                        "modelOutput": o.model_output,
                    }
                    for call_id, o in pending.done.items()
                },
                "stepRecord": pending.step_record,
            },
        }
    )
    return data


class RestoredError(Exception):
    """A tool error restored from a snapshot (its message and name survive)."""

    def __init__(self, message: str, name: str) -> None:
        super().__init__(message)
        self.name = name


def restore(data: dict[str, Any]) -> RunState:
    """The :class:`RunState` of a snapshot (status ``suspended``, ready to be continued)."""
    state = RunState(
        run_id=data["runId"],
        message_id=data["messageId"],
        messages=data["messages"],
        input_count=data["inputCount"],
        history_count=data["historyCount"],
        steps=data["steps"],
        usage=data["usage"],
        status="suspended",
        step_number=data["stepNumber"],
        processor_retry_count=data["processorRetryCount"],
        background_task_ids=data["backgroundTaskIds"],
        waited_task_ids=set(data.get("waitedTaskIds", [])),
        reasoning=data["reasoning"],
        tool_calls=[chunk_from_wire(c) for c in data["toolCalls"]],
        tool_results=[chunk_from_wire(c) for c in data["toolResults"]],
        suspend_payload=data["suspendPayload"],
        saved=True,
    )
    pending = data.get("pending")
    if pending is not None:
        calls = {
            c["toolCallId"]: ToolCall(
                c["toolCallId"], c["toolName"], c["args"], c["argsError"], c["providerMetadata"]
            )
            for c in pending["calls"]
        }
        state.pending = PendingToolStep(
            calls=list(calls.values()),
            awaiting_approval=set(pending["awaitingApproval"]),
            suspended=pending["suspended"],
            done={
                call_id: ToolOutcome(
                    calls[call_id],
                    o["kind"],
                    _restore_value(o["kind"], o["value"]),
                    provider_metadata=o["providerMetadata"],
                    model_output=o["modelOutput"],
                )
                for call_id, o in pending["done"].items()
            },
            step_record=pending["stepRecord"],
        )
    return state


def _restore_value(kind: str, value: Any) -> Any:
    if kind == "error" and isinstance(value, dict) and "message" in value:
        return RestoredError(str(value["message"]), str(value.get("name", "Error")))
    return value
