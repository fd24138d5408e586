"""Bad data: a failed step or run with Mastra's validation message, never a crash."""

from __future__ import annotations

from typing import Any

import pytest

from runstream.workflows import Schema, Step, StepContext, Workflow
from tests.workflows.helpers import collect, events, returning

STRICT = {
    "type": "object",
    "properties": {"b": {"type": "string"}, "c": {"type": "integer"}},
    "required": ["b", "c"],
    "additionalProperties": False,
}


async def run_chunks(workflow: Workflow, input_data: Any, **options: Any) -> list[dict[str, Any]]:
    run = await workflow.create_run()
    return await collect(await run.stream(input_data=input_data, **options))


async def test_a_step_input_that_fails_its_schema_fails_the_step() -> None:
    wf = Workflow("v").then(returning("a", {"a": 1})).then(returning("b", {}, input_schema=STRICT)).commit()
    chunks = await run_chunks(wf, {})

    result = events(chunks, "workflow-step-result")[-1]
    assert result["status"] == "failed"
    assert result["error"] == {
        "message": "Step input validation failed: \n"
        "- b: Invalid input: expected string, received undefined\n"
        "- c: Invalid input: expected number, received undefined\n"
        '- : Unrecognized key: "a"',
        "name": "Error",
    }
    assert chunks[-1]["payload"]["workflowStatus"] == "failed"


async def test_a_step_output_that_fails_its_schema_fails_the_step_unless_disabled() -> None:
    out_schema = {"type": "object", "properties": {"n": {"type": "number"}}, "required": ["n"]}
    checked = Workflow("o").then(returning("a", {"n": "seven"}, output_schema=out_schema)).commit()
    unchecked = (
        Workflow("o2", validate_outputs=False)
        .then(returning("a", {"n": "x"}, output_schema=out_schema))
        .commit()
    )

    failed = events(await run_chunks(checked, {}), "workflow-step-result")[0]
    assert failed["error"]["message"] == (
        "Step output validation failed: \n- n: Invalid input: expected number, received string"
    )
    assert events(await run_chunks(unchecked, {}), "workflow-step-result")[0]["status"] == "success"


async def test_invalid_workflow_input_or_initial_state_ends_the_stream_failed() -> None:
    wf = (
        Workflow(
            "w",
            input_schema={"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
            state_schema={"type": "object", "properties": {"k": {"type": "number"}}},
        )
        .then(returning("s", {}))
        .commit()
    )

    bad_input = await run_chunks(wf, {"a": 5})
    bad_state = await run_chunks(wf, {"a": "x"}, initial_state={"k": "no"})

    assert [c["type"] for c in bad_input] == ["workflow-start", "workflow-finish"]
    assert bad_input[-1]["payload"]["metadata"]["errorMessage"] == (
        "Invalid input data: \n- a: Invalid input: expected string, received number"
    )
    assert bad_state[-1]["payload"]["metadata"]["errorMessage"] == (
        "Invalid initial data: \n- k: Invalid input: expected number, received string"
    )


async def test_suspend_payload_and_set_state_are_validated() -> None:
    async def ask(ctx: StepContext) -> None:
        await ctx.suspend({"q": 5})

    async def store(ctx: StepContext) -> dict[str, Any]:
        await ctx.set_state({"k": "text"})
        return {}

    number_k = {"type": "object", "properties": {"k": {"type": "number"}}}
    wf = (
        Workflow("s", state_schema=number_k)
        .parallel(
            [
                Step("ask", ask, suspend_schema={"type": "object", "properties": {"q": {"type": "string"}}}),
                Step("store", store, state_schema=number_k),
            ]
        )
        .commit()
    )
    errors = {
        r["id"]: r["error"]["message"] for r in events(await run_chunks(wf, {}), "workflow-step-result")
    }

    assert errors == {
        "ask": "Step suspend data validation failed: \n- q: Invalid input: expected string, received number",
        "store": "Step state data validation failed: \n- k: Invalid input: expected number, received string",
    }


@pytest.mark.parametrize(
    ("schema", "value", "issue"),
    [
        (
            {"type": "object", "properties": {"a": {"type": "integer"}}},
            {"a": 1.5},
            ("a", "Invalid input: expected int, received number"),
        ),
        (
            {"type": "array", "items": {"type": "string"}},
            ["x", 3],
            ("1", "Invalid input: expected string, received number"),
        ),
        ({"type": "string", "enum": ["p", "q"]}, "z", ("", 'Invalid option: expected one of "p"|"q"')),
        ({"type": "string", "minLength": 3}, "ab", ("", "Too small: expected string to have >=3 characters")),
        ({"type": "number", "maximum": 2}, 3, ("", "Too big: expected number to be <=2")),
        ({"type": "object"}, [1], ("", "Invalid input: expected object, received array")),
        ({"anyOf": [{"type": "string"}, {"type": "number"}]}, True, ("", "Invalid input")),
        (
            {"type": "object", "additionalProperties": False},
            {"x": 1, "y": 2},
            ("", 'Unrecognized keys: "x", "y"'),
        ),
    ],
)
def test_json_schema_issues_use_zod_wording(
    schema: dict[str, Any], value: Any, issue: tuple[str, str]
) -> None:
    coerced = Schema.coerce(schema)
    assert coerced is not None
    assert coerced.issues(value) == [issue]


def test_keywords_zod_ignores_are_ignored() -> None:
    coerced = Schema.coerce({"type": "array", "minItems": 2})
    assert coerced is not None and coerced.issues([1]) == []
