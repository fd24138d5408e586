"""TaskRecord's Mastra wire shape."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta, timezone

from storage_testkit import at, task


def test_to_wire_uses_mastras_camel_case_shape() -> None:
    record = task(
        "k1",
        status="completed",
        thread_id="t1",
        resource_id="r1",
        result={"answer": 42},
        started_at=at(1.5),
        completed_at=at(2),
        retry_count=1,
        max_retries=2,
        timeout_ms=60_000,
    )

    assert record.to_wire() == {
        "id": "k1",
        "status": "completed",
        "toolName": "research",
        "toolCallId": "call-k1",
        "args": {"query": "k1"},
        "agentId": "agent-1",
        "runId": "run-1",
        "threadId": "t1",
        "resourceId": "r1",
        "result": {"answer": 42},
        "createdAt": "2024-01-01T00:00:00.000Z",
        "startedAt": "2024-01-01T00:00:01.500Z",
        "completedAt": "2024-01-01T00:00:02.000Z",
        "retryCount": 1,
        "maxRetries": 2,
        "timeoutMs": 60_000,
    }


def test_to_wire_includes_error_suspension_and_runstream_extras_when_set() -> None:
    record = task(
        "k1",
        status="suspended",
        error={"message": "boom", "stack": "at x"},
        suspended_at=at(3),
        suspend_payload={"question": "approve?"},
        resume_data=False,
        metadata={"lease": "worker-1"},
    )

    wire = record.to_wire()

    assert wire["error"] == {"message": "boom", "stack": "at x"}
    assert wire["suspendedAt"] == "2024-01-01T00:00:03.000Z"
    assert wire["suspendPayload"] == {"question": "approve?"}
    assert wire["resumeData"] is False
    assert wire["metadata"] == {"lease": "worker-1"}
    assert json.loads(json.dumps(wire)) == wire


def test_to_wire_omits_unset_optional_fields() -> None:
    wire = task("k1").to_wire()

    absent = {"threadId", "resourceId", "result", "error", "startedAt", "suspendedAt", "completedAt"}
    assert absent.isdisjoint(wire)
    assert {"suspendPayload", "resumeData", "metadata"}.isdisjoint(wire)


def test_to_wire_dates_are_utc_milliseconds() -> None:
    local = datetime(2024, 6, 1, 2, 3, 4, 987654, tzinfo=timezone(timedelta(hours=-7)))

    wire = replace(task("k1"), created_at=local).to_wire()

    assert wire["createdAt"] == "2024-06-01T09:03:04.987Z"


def test_to_wire_returns_copies() -> None:
    record = task("k1", result={"rows": [1]})

    wire = record.to_wire()
    wire["args"]["query"] = "changed"
    wire["result"]["rows"].append(2)

    assert record.args == {"query": "k1"} and record.result == {"rows": [1]}


def test_the_typed_shapes_name_every_field_of_a_task_record() -> None:
    """A field added to TaskRecord must reach its row and its wire shape (both written out key
    by key, so a field left out would be silently dropped from storage or from the wire)."""
    from dataclasses import fields

    from runstream.storage import TaskRecord, TaskWire
    from runstream.storage._rows import TaskRow

    names = [field.name for field in fields(TaskRecord)]
    assert list(TaskRow.__annotations__) == names
    camel = {name: name.split("_")[0] + "".join(w.title() for w in name.split("_")[1:]) for name in names}
    assert set(TaskWire.__annotations__) == set(camel.values())
