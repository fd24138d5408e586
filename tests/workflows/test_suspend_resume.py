"""Suspending a step, resuming it (in-process and from a new process), and resuming wrongly."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from runstream.workflows import RunNotSuspendedError, Step, StepContext, Workflow, WorkflowRunNotFoundError
from tests.workflows.helpers import collect, echo, events, returning, types

REPO = Path(__file__).resolve().parents[2]


def approval_step(step_id: str = "approval") -> Step:
    async def execute(ctx: StepContext) -> dict[str, Any]:
        if ctx.resume_data is None:
            await ctx.writer.write({"waiting": True})
            await ctx.suspend({"question": "ok?"})
        return {"approved": ctx.resume_data["approved"]}

    return Step(
        step_id,
        execute,
        resume_schema={
            "type": "object",
            "properties": {"approved": {"type": "boolean"}},
            "required": ["approved"],
        },
    )


def approval_workflow() -> Workflow:
    return (
        Workflow("expense")
        .then(returning("prepare", {"amount": 5}))
        .then(approval_step())
        .then(echo("book"))
        .commit()
    )


async def test_suspend_ends_the_stream_and_resume_continues_in_a_new_stream() -> None:
    run = await approval_workflow().create_run()
    first = await collect(await run.stream(input_data={}))

    assert types(first)[-2:] == ["workflow-step-suspended", "workflow-finish"]
    suspended = events(first, "workflow-step-suspended")[0]
    assert suspended["suspendPayload"] == {"question": "ok?"}
    assert first[-1]["payload"]["workflowStatus"] == "suspended"
    assert run.status == "suspended"

    second = await collect(await run.resume_stream(resume_data={"approved": True}))
    start = events(second, "workflow-step-start")[0]
    assert types(second)[0] == "workflow-start"
    assert (start["id"], start["resumePayload"], start["payload"]) == (
        "approval",
        {"approved": True},
        {"amount": 5},
    )
    assert start["startedAt"] == suspended["startedAt"]
    assert second[-1]["payload"]["finalWorkflowResult"] == {"approved": True}
    assert run.status == "success"


async def test_resuming_a_run_that_is_not_suspended_fails_clearly() -> None:
    run = await approval_workflow().create_run()
    await run.start(input_data={})
    await run.resume(resume_data={"approved": True})

    chunks = await collect(await run.resume_stream(resume_data={"approved": True}))
    assert types(chunks) == ["workflow-start", "workflow-finish"]
    assert chunks[-1]["payload"]["workflowStatus"] == "failed"
    assert chunks[-1]["payload"]["metadata"]["errorMessage"] == "This workflow run was not suspended"
    with pytest.raises(RunNotSuspendedError, match="not suspended"):
        await run.resume(resume_data={"approved": True})
    assert run.status == "success"


async def test_resume_data_is_validated_against_the_resume_schema() -> None:
    run = await approval_workflow().create_run()
    await run.start(input_data={})

    chunks = await collect(await run.resume_stream(resume_data={"approved": "yes"}))
    assert chunks[-1]["payload"]["metadata"]["errorMessage"] == (
        "Invalid resume data: \n- approved: Invalid input: expected boolean, received string"
    )
    result = await run.resume(resume_data={"approved": False})
    assert (result.status, result.result) == ("success", {"approved": False})


async def test_a_suspended_step_inside_a_nested_workflow_resumes_by_path() -> None:
    inner = Workflow("inner").then(approval_step("ask")).commit()
    wf = Workflow("outer").then(inner).then(echo("done")).commit()
    run = await wf.create_run()
    first = await collect(await run.stream(input_data={}))

    assert [e["id"] for e in events(first, "workflow-step-suspended")] == ["inner.ask", "inner"]
    result = await run.resume(resume_data={"approved": True}, step=["inner", "ask"])
    assert (result.status, result.result) == ("success", {"approved": True})


async def test_with_two_suspended_steps_the_step_must_be_named() -> None:
    wf = Workflow("two").parallel([approval_step("a"), approval_step("b")]).commit()
    run = await wf.create_run()
    await run.start(input_data={})

    chunks = await collect(await run.resume_stream(resume_data={"approved": True}))
    assert "Multiple suspended steps found: [a], [b]" in chunks[-1]["payload"]["metadata"]["errorMessage"]
    partial = await run.resume(resume_data={"approved": True}, step="a")
    assert partial.status == "suspended" and partial.suspended == [["b"]]
    done = await run.resume(resume_data={"approved": False}, step="b")
    assert done.result == {"a": {"approved": True}, "b": {"approved": False}}


async def test_get_run_of_an_unknown_id_raises() -> None:
    with pytest.raises(WorkflowRunNotFoundError):
        await approval_workflow().get_run("no-such-run")


def _app(*args: str) -> list[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "tests.workflows.restart_app", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return proc.stdout.splitlines()


def test_a_suspended_run_is_resumed_by_a_new_process_from_sqlite(tmp_path: Path) -> None:
    db = str(tmp_path / "runs.db")
    run_id, *first = _app("start", db)
    assert json.loads(first[-1])["payload"]["workflowStatus"] == "suspended"

    _, *second = _app("resume", db, run_id)
    chunks = [json.loads(line) for line in second]
    assert {c["runId"] for c in chunks} == {run_id}
    assert events(chunks, "workflow-step-start")[0]["resumePayload"] == {"approved": True, "by": "ops"}
    assert events(chunks, "workflow-step-start")[0]["payload"] == {"amount": 120}
    assert chunks[-1]["payload"]["finalWorkflowResult"] == {"booked": True}


def test_the_approval_example_runs() -> None:
    proc = subprocess.run(
        [sys.executable, "examples/workflow_approval.py"],
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "waiting for a person" in proc.stdout
    assert "'published': True" in proc.stdout


async def test_suspended_foreach_items_resume_one_at_a_time() -> None:
    async def check(ctx: StepContext) -> dict[str, Any]:
        if ctx.resume_data is None:
            await ctx.suspend({"item": ctx.input_data})
        return {"item": ctx.input_data, "ok": ctx.resume_data["ok"]}

    wf = (
        Workflow("each")
        .then(returning("items", [0, 1]))
        .foreach(Step("check", check), concurrency=2)
        .commit()
    )
    run = await wf.create_run()
    first = await run.start(input_data={})
    assert first.status == "suspended" and first.suspend_payload == {"check": {"item": 0}}

    second = await run.resume(resume_data={"ok": True}, foreach_index=1)
    assert second.status == "suspended"
    done = await run.resume(resume_data={"ok": False}, foreach_index=0)
    assert done.result == [{"item": 0, "ok": False}, {"item": 1, "ok": True}]
