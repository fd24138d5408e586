"""The ``background-task-*`` chunks of a task's life, built from its stored record.

Every task manager publishes these, so a stream shows the same chunks whichever manager runs
the task (in-process or on Temporal).
"""

from __future__ import annotations

from typing import Any

from runstream.chunks import (
    AnyChunk,
    BackgroundTaskCancelledChunk,
    BackgroundTaskCompletedChunk,
    BackgroundTaskFailedChunk,
    BackgroundTaskOutputChunk,
    BackgroundTaskResumedChunk,
    BackgroundTaskRunningChunk,
    BackgroundTaskSuspendedChunk,
)
from runstream.storage import TaskRecord


def base_payload(record: TaskRecord) -> dict[str, Any]:
    """The fields every task chunk carries."""
    return {
        "taskId": record.id,
        "toolName": record.tool_name,
        "toolCallId": record.tool_call_id,
        "runId": record.run_id,
        "agentId": record.agent_id,
    }


def running_payload(record: TaskRecord) -> Any:
    return {**base_payload(record), "startedAt": record.started_at, "args": record.args}


def running_chunk(record: TaskRecord) -> BackgroundTaskRunningChunk:
    """``background-task-running``: the task took a slot (or is running, in a snapshot)."""
    return BackgroundTaskRunningChunk(record.run_id, running_payload(record))


def resumed_chunk(record: TaskRecord) -> BackgroundTaskResumedChunk:
    return BackgroundTaskResumedChunk(record.run_id, running_payload(record))


def output_chunk(record: TaskRecord, chunk: AnyChunk) -> BackgroundTaskOutputChunk:
    """``background-task-output``: one chunk the tool wrote, wrapped."""
    payload: Any = {**base_payload(record), "payload": chunk.to_wire()}
    return BackgroundTaskOutputChunk(record.run_id, payload)


def lifecycle_chunk(record: TaskRecord) -> AnyChunk:
    """The event announcing a stored settled state (``timed_out`` is published as failed)."""
    payload: Any = base_payload(record)
    if record.status == "completed":
        payload.update(result=record.result, completedAt=record.completed_at)
        return BackgroundTaskCompletedChunk(record.run_id, payload)
    if record.status == "suspended":
        payload.update(
            args=record.args, suspendPayload=record.suspend_payload, suspendedAt=record.suspended_at
        )
        return BackgroundTaskSuspendedChunk(record.run_id, payload)
    payload["completedAt"] = record.completed_at
    if record.status == "cancelled":
        return BackgroundTaskCancelledChunk(record.run_id, payload)
    payload["error"] = dict(record.error or {"message": "Unknown error"})
    return BackgroundTaskFailedChunk(record.run_id, payload)
