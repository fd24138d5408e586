"""Each composition primitive: the chunks it streams and the data it passes on."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel

from runstream.agent import Agent
from runstream.testing.scripted import ScriptedError, ScriptedModel
from runstream.workflows import ConditionContext, Step, StepContext, Workflow, WorkflowError, step
from tests.workflows.helpers import collect, echo, events, returning, types


async def run_chunks(workflow: Workflow, input_data: Any = None, **options: Any) -> list[dict[str, Any]]:
    run = await workflow.create_run()
    return await collect(await run.stream(input_data=input_data, **options))


async def test_then_feeds_each_output_to_the_next_step() -> None:
    @step()
    async def double(ctx: StepContext) -> dict[str, int]:
        return {"n": ctx.input_data["n"] * 2}

    wf = (
        Workflow("chain")
        .then(double)
        .then(Step("plus-one", lambda ctx: {"n": ctx.input_data["n"] + 1}))
        .commit()
    )
    chunks = await run_chunks(wf, {"n": 5})

    assert types(chunks) == ["workflow-start"] + ["workflow-step-start", "workflow-step-result"] * 2 + [
        "workflow-finish"
    ]
    start, result = events(chunks, "workflow-step-start")[1], events(chunks, "workflow-step-result")[1]
    assert (start["stepName"], start["payload"], start["status"]) == ("plus-one", {"n": 10}, "running")
    assert result["stepCallId"] == start["stepCallId"]
    assert (result["status"], result["output"]) == ("success", {"n": 11})
    finish = chunks[-1]["payload"]
    assert finish["workflowStatus"] == "success"
    assert finish["finalWorkflowResult"] == {"n": 11}
    assert finish["output"]["usage"]["totalTokens"] == 0


async def test_parallel_starts_every_step_then_reports_results_in_completion_order() -> None:
    second_done = asyncio.Event()

    async def slow(ctx: StepContext) -> dict[str, int]:
        await second_done.wait()
        return {"a": 1}

    async def fast(ctx: StepContext) -> dict[str, int]:
        second_done.set()
        return {"b": 2}

    wf = Workflow("par").parallel([Step("slow", slow), Step("fast", fast)]).then(echo("merge")).commit()
    chunks = await run_chunks(wf, {"x": 1})

    kinds = [(c["type"], c["payload"].get("id")) for c in chunks[1:5]]
    assert kinds == [
        ("workflow-step-start", "slow"),
        ("workflow-step-start", "fast"),
        ("workflow-step-result", "fast"),
        ("workflow-step-result", "slow"),
    ]
    assert events(chunks, "workflow-step-start")[2]["payload"] == {"slow": {"a": 1}, "fast": {"b": 2}}


async def test_parallel_fails_when_one_step_fails_after_all_finish() -> None:
    def boom(ctx: StepContext) -> None:
        raise ScriptedError("broken", "BrokenError")

    wf = (
        Workflow("pf")
        .parallel([returning("ok", {"ok": True}), Step("boom", boom)])
        .then(echo("never"))
        .commit()
    )
    chunks = await run_chunks(wf, {})

    failed = [r for r in events(chunks, "workflow-step-result") if r["status"] == "failed"]
    assert failed[0]["error"] == {"message": "broken", "name": "BrokenError"}
    assert "never" not in [s["id"] for s in events(chunks, "workflow-step-start")]
    assert chunks[-1]["payload"]["workflowStatus"] == "failed"
    assert "finalWorkflowResult" not in chunks[-1]["payload"]


async def test_branch_runs_only_the_steps_whose_condition_holds() -> None:
    def is_small(ctx: ConditionContext) -> bool:
        return bool(ctx.input_data["amount"] < 10)

    big = {"op": "gte", "left": {"path": "inputData.amount"}, "right": {"literal": 10}}
    wf = (
        Workflow("route")
        .branch([(is_small, returning("small", {"size": "S"})), (big, returning("large", {"size": "L"}))])
        .then(echo("after"))
        .commit()
    )
    small, large = await run_chunks(wf, {"amount": 3}), await run_chunks(wf, {"amount": 30})

    assert [s["id"] for s in events(small, "workflow-step-start")] == ["small", "after"]
    assert events(small, "workflow-step-start")[1]["payload"] == {"small": {"size": "S"}}
    assert [s["id"] for s in events(large, "workflow-step-start")] == ["large", "after"]


async def test_bail_inside_a_branch_ends_the_run_with_the_bailed_value() -> None:
    def approve(ctx: StepContext) -> None:
        ctx.bail({"decision": "approved"})

    always = {"op": "truthy", "value": {"literal": True}}
    wf = Workflow("bail").branch([(always, Step("approve", approve))]).then(echo("notify")).commit()
    chunks = await run_chunks(wf, {})

    assert events(chunks, "workflow-step-result")[0]["status"] == "bailed"
    assert "notify" not in [s["id"] for s in events(chunks, "workflow-step-start")]
    assert chunks[-1]["payload"]["finalWorkflowResult"] == {"decision": "approved"}


@pytest.mark.parametrize(("kind", "expected_iterations"), [("dowhile", 3), ("dountil", 3)])
async def test_loops_repeat_with_state_and_count_iterations(kind: str, expected_iterations: int) -> None:
    async def poll(ctx: StepContext) -> dict[str, Any]:
        polls = ctx.state["polls"] + 1
        await ctx.set_state({"polls": polls})
        return {"done": polls >= 3}

    condition = {"op": "falsy" if kind == "dowhile" else "truthy", "value": {"path": "inputData.done"}}
    wf = Workflow("loop", state_schema={"type": "object"})
    wf = (wf.dowhile if kind == "dowhile" else wf.dountil)(Step("poll", poll), condition).commit()
    run = await wf.create_run()
    chunks = await collect(await run.stream(input_data={}, initial_state={"polls": 0}))

    starts = events(chunks, "workflow-step-start")
    assert [s["metadata"]["iterationCount"] for s in starts] == list(range(1, expected_iterations + 1))
    assert chunks[-1]["payload"]["finalWorkflowResult"] == {"done": True}


async def test_foreach_runs_items_concurrently_and_keeps_input_order() -> None:
    last_done = asyncio.Event()

    async def handle(ctx: StepContext) -> dict[str, int]:
        if ctx.input_data == 0:
            await last_done.wait()
        if ctx.input_data == 2:
            last_done.set()
        return {"item": ctx.input_data}

    wf = (
        Workflow("each")
        .then(returning("items", [0, 1, 2]))
        .foreach(Step("handle", handle), concurrency=2)
        .commit()
    )
    chunks = await run_chunks(wf, {})

    progress = events(chunks, "workflow-step-progress")
    assert [p["currentIndex"] for p in progress] == [1, 2, 0]
    assert [p["completedCount"] for p in progress] == [1, 2, 3]
    result = events(chunks, "workflow-step-result")[-1]
    assert result["output"] == [{"item": 0}, {"item": 1}, {"item": 2}]
    assert "stepCallId" not in events(chunks, "workflow-step-start")[-1]


async def test_map_builds_its_output_from_sources() -> None:
    wf = (
        Workflow("mapper", state_schema={"type": "object"})
        .then(returning("load", {"order": {"id": "A-1", "total": 3.0}}))
        .map(
            {
                "note": {
                    "template": "Order ${inputData.order.id}: ${inputData.order.total} (${state.currency})"
                },
                "id": {"step": "load", "path": "order.id"},
                "first": {"step": ["missing", "load"], "path": "order.total"},
                "qty": {"initData": True, "path": "qty"},
                "fixed": {"value": [1, None]},
                "computed": {"fn": lambda ctx: ctx.get_init_data()["qty"] * 2},
            },
            id="note",
        )
        .commit()
    )
    run = await wf.create_run()
    chunks = await collect(await run.stream(input_data={"qty": 4}, initial_state={"currency": "EUR"}))

    assert chunks[-1]["payload"]["finalWorkflowResult"] == {
        "note": "Order A-1: 3 (EUR)",
        "id": "A-1",
        "first": 3.0,
        "qty": 4,
        "fixed": [1, None],
        "computed": 8,
    }


async def test_map_ids_default_to_a_per_workflow_ordinal_and_bad_paths_fail_the_step() -> None:
    wf = (
        Workflow("m").then(returning("a", {"s": "text"})).map({"v": {"step": "a", "path": "s.deep"}}).commit()
    )
    chunks = await run_chunks(wf, {})

    failed = events(chunks, "workflow-step-result")[-1]
    assert failed["id"] == "mapping_m_0"
    assert failed["error"] == {"message": "Invalid path s.deep in step a", "name": "Error"}


async def test_sleep_waits_and_passes_its_input_through() -> None:
    wf = Workflow("nap").then(returning("a", {"a": 1})).sleep(1, id="pause").commit()
    chunks = await run_chunks(wf, {})

    assert types(chunks)[-3:] == ["workflow-step-waiting", "workflow-step-result", "workflow-finish"]
    assert events(chunks, "workflow-step-waiting")[0] == {
        "stepName": "pause",
        "id": "pause",
        "payload": {"a": 1},
        "startedAt": events(chunks, "workflow-step-waiting")[0]["startedAt"],
        "status": "waiting",
    }
    assert chunks[-1]["payload"]["finalWorkflowResult"] == {"a": 1}


async def test_nested_workflow_streams_its_steps_with_prefixed_ids() -> None:
    async def spell(ctx: StepContext) -> dict[str, str]:
        await ctx.writer.write({"checked": 1})
        return {"text": ctx.input_data["text"].title()}

    inner = Workflow("review").then(Step("spell", spell)).commit()
    wf = Workflow("publish").then(inner).then(echo("post")).commit()
    chunks = await run_chunks(wf, {"text": "hi there"})

    assert [s["id"] for s in events(chunks, "workflow-step-start")] == ["review", "review.spell", "post"]
    assert events(chunks, "workflow-step-output")[0]["stepName"] == "spell"
    assert chunks[-1]["payload"]["finalWorkflowResult"] == {"text": "Hi There"}


async def test_agent_step_wraps_the_agent_stream_and_sums_its_usage() -> None:
    agent = Agent("writer", model=ScriptedModel.text("Rust is safe."))
    wf = (
        Workflow("summary").map({"prompt": {"template": "Summarize ${inputData.topic}"}}).then(agent).commit()
    )
    chunks = await run_chunks(wf, {"topic": "Rust"})

    wrapped = [o["output"]["type"] for o in events(chunks, "workflow-step-output")]
    assert wrapped[0] == "start" and wrapped[-1] == "finish" and "text-delta" in wrapped
    assert events(chunks, "workflow-step-result")[-1]["output"] == {"text": "Rust is safe."}
    assert chunks[-1]["payload"]["output"]["usage"]["inputTokens"] == 10


async def test_a_retried_step_shows_only_its_last_attempt() -> None:
    attempts: list[int] = []

    def flaky(ctx: StepContext) -> dict[str, bool]:
        attempts.append(ctx.retry_count)
        if ctx.retry_count < 2:
            raise ScriptedError(f"attempt {ctx.retry_count}")
        return {"ok": True}

    wf = Workflow("retry", retry_config={"attempts": 2}).then(Step("flaky", flaky)).commit()
    chunks = await run_chunks(wf, {})

    assert attempts == [0, 1, 2]
    assert types(chunks) == [
        "workflow-start",
        "workflow-step-start",
        "workflow-step-result",
        "workflow-finish",
    ]
    failing = Workflow("fail").then(Step("flaky", flaky, retries=0)).commit()
    attempts.clear()
    failed = await run_chunks(failing, {})
    assert events(failed, "workflow-step-result")[0]["error"]["message"] == "attempt 0"


async def test_pydantic_schemas_give_the_step_model_instances() -> None:
    class Order(BaseModel):
        id: str
        qty: int

    class Total(BaseModel):
        total: float

    seen: list[Any] = []

    @step(input_schema=Order, output_schema=Total)
    async def price(ctx: StepContext) -> Total:
        seen.append(ctx.input_data)
        return Total(total=ctx.input_data.qty * 1.5)

    wf = Workflow("typed", input_schema=Order).then(price).commit()
    chunks = await run_chunks(wf, {"id": "A", "qty": 2})

    assert seen == [Order(id="A", qty=2)]
    assert chunks[-1]["payload"]["finalWorkflowResult"] == {"total": 3.0}


async def test_an_uncommitted_workflow_cannot_run() -> None:
    with pytest.raises(WorkflowError, match="commit"):
        await Workflow("draft").then(echo("a")).create_run()
