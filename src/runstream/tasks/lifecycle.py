"""The ``background-task-*`` chunks of a task's life, built from its stored record.

Every task manager publishes these, so a stream shows the same chunks whichever manager runs
the task (in-process or on Temporal).
"""

from __future__ import annotations

from datetime import datetime
from typing import cast

from runstream._payloads import TaskCompletedPayload, TaskEventPayload, TaskRunningPayload
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

TaskChunk = (
    BackgroundTaskRunningChunk
    | BackgroundTaskResumedChunk
    | BackgroundTaskOutputChunk
    | BackgroundTaskCompletedChunk
    | BackgroundTaskFailedChunk
    | BackgroundTaskCancelledChunk
    | BackgroundTaskSuspendedChunk
)
"""The chunk of a task's lifecycle event, as the bus carries it."""
SettledChunk = (
    BackgroundTaskCompletedChunk
    | BackgroundTaskFailedChunk
    | BackgroundTaskCancelledChunk
    | BackgroundTaskSuspendedChunk
)
"""The chunk announcing a settled state."""


def base_payload(record: TaskRecord) -> TaskEventPayload:
    """The fields every task chunk carries."""
    return {
        "taskId": record.id,
        "toolName": record.tool_name,
        "toolCallId": record.tool_call_id,
        "runId": record.run_id,
        "agentId": record.agent_id,
    }


def running_payload(record: TaskRecord) -> TaskRunningPayload:
    started_at = cast(datetime, record.started_at)  # (set whenever a task runs)
    return {**base_payload(record), "startedAt": started_at, "args": record.args}


def running_chunk(record: TaskRecord) -> BackgroundTaskRunningChunk:
    """``background-task-running``: the task took a slot (or is running, in a snapshot)."""
    return BackgroundTaskRunningChunk(record.run_id, running_payload(record))


def resumed_chunk(record: TaskRecord) -> BackgroundTaskResumedChunk:
    return BackgroundTaskResumedChunk(record.run_id, running_payload(record))


def output_chunk(record: TaskRecord, chunk: AnyChunk) -> BackgroundTaskOutputChunk:
    """``background-task-output``: one chunk the tool wrote, wrapped."""
    return BackgroundTaskOutputChunk(record.run_id, {**base_payload(record), "payload": chunk.to_wire()})


def lifecycle_chunk(record: TaskRecord) -> SettledChunk:
    """The event announcing a stored settled state (``timed_out`` is published as failed)."""
    base = base_payload(record)
    if record.status == "completed":
        completed: TaskCompletedPayload = {
            "taskId": record.id,
            "toolName": record.tool_name,
            "toolCallId": record.tool_call_id,
            "runId": record.run_id,
            "agentId": record.agent_id,
            "result": record.result,
            "completedAt": cast(datetime, record.completed_at),  # (stored with every terminal status)
        }
        return BackgroundTaskCompletedChunk(record.run_id, completed)
    if record.status == "suspended":
        return BackgroundTaskSuspendedChunk(
            record.run_id,
            {
                **base,
                "args": record.args,
                "suspendPayload": record.suspend_payload,
                "suspendedAt": cast(datetime, record.suspended_at),
            },
        )
    completed_at = cast(datetime, record.completed_at)
    if record.status == "cancelled":
        return BackgroundTaskCancelledChunk(record.run_id, {**base, "completedAt": completed_at})
    error = dict(record.error or {"message": "Unknown error"})
    return BackgroundTaskFailedChunk(record.run_id, {**base, "completedAt": completed_at, "error": error})
