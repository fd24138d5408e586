"""``run.cancel()`` and the opt-in ``run.watch()`` stream."""

from __future__ import annotations

import asyncio
from typing import Any

from runstream.abort import AbortError
from runstream.workflows import RunNotSuspendedError, Step, StepContext, Workflow
from tests.workflows.helpers import collect, echo, events, returning, types


def waiting_step(started: asyncio.Event) -> Step:
    """A step that runs until the run's abort signal fires."""

    async def execute(ctx: StepContext) -> Any:
        started.set()
        await ctx.abort_signal.wait()
        raise AbortError("Step execution aborted")

    return Step("wait", execute)


async def test_cancel_aborts_the_running_step_and_ends_with_workflow_canceled() -> None:
    started = asyncio.Event()
    wf = (
        Workflow("job")
        .then(returning("quick", {"n": 1}))
        .then(waiting_step(started))
        .then(echo("never"))
        .commit()
    )
    run = await wf.create_run()
    out = await run.stream(input_data={})
    await started.wait()
    await run.cancel()
    chunks = await collect(out)

    assert types(chunks)[-3:] == ["workflow-step-result", "workflow-canceled", "workflow-finish"]
    assert events(chunks, "workflow-step-result")[-1]["error"]["message"] == "Step execution aborted"
    assert chunks[-1]["payload"]["workflowStatus"] == "canceled"
    assert run.status == "canceled"


async def test_a_canceled_suspended_run_can_no_longer_be_resumed() -> None:
    async def ask(ctx: StepContext) -> Any:
        await ctx.suspend({"q": 1})

    run = await Workflow("ask").then(Step("ask", ask)).commit().create_run()
    await run.start(input_data={})
    await run.cancel()

    assert run.status == "canceled"
    try:
        await run.resume(resume_data={})
    except RunNotSuspendedError as exc:
        assert str(exc) == "This workflow run was not suspended"
    else:
        raise AssertionError("resume of a canceled run must fail")


async def test_watch_reports_the_run_state_after_every_change() -> None:
    wf = Workflow("w").then(returning("a", {"a": 1})).then(returning("b", {"b": 2})).commit()
    run = await wf.create_run()
    watched = run.watch()
    out = await run.stream(input_data={"x": 1})
    states = [chunk.payload["workflowState"] async for chunk in watched]
    await out.consume()

    assert all(isinstance(s, dict) for s in states)
    assert [(s["status"], {k: v["status"] for k, v in s["steps"].items()}) for s in states] == [
        ("running", {"a": "running"}),
        ("running", {"a": "success"}),
        ("running", {"a": "success", "b": "running"}),
        ("running", {"a": "success", "b": "success"}),
        ("success", {"a": "success", "b": "success"}),
    ]
    assert states[-1]["result"] == {"b": 2}
    assert states[0]["payload"] == {"x": 1}


async def test_watch_stays_open_across_a_suspension_and_its_resume() -> None:
    async def ask(ctx: StepContext) -> Any:
        if ctx.resume_data is None:
            await ctx.suspend({"q": 1})
        return ctx.resume_data

    run = await Workflow("ask").then(Step("ask", ask)).commit().create_run()
    watched = run.watch()
    await run.start(input_data={})
    await run.resume(resume_data={"yes": True})
    statuses = [chunk.payload["workflowState"]["status"] async for chunk in watched]

    assert "suspended" in statuses
    assert statuses[-1] == "success"
