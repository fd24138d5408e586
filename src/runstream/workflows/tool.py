"""A workflow as an agent tool (Mastra's ``workflows`` on an agent).

The tool ``workflow-<name>`` takes ``{"inputData", "initialState"?}``, runs the workflow and
writes every chunk of its stream to the tool's writer (so each arrives in the agent's stream
wrapped in a ``tool-output``). It returns ``{"result", "runId"}`` (``{"error", "runId"}`` if
the run failed). If a step suspends, the tool suspends with that step's payload and resume
schema; resuming the agent resumes the same workflow run with the resume data.

``step_output=True`` adds, after each finished step, a ``step-output`` chunk (also inside a
``tool-output``) whose payload is ``{"output": <the step's result payload>, "usage": <tokens
its agent used>}`` — a per-step summary Mastra 1.71 never streams, so it is opt-in.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from runstream._json import JsonObject
from runstream._schema import Schema
from runstream.chunks import AnyChunk, Chunk, StepOutputChunk
from runstream.tools import Tool, ToolArgs, ToolContext
from runstream.workflows.output import USAGE_KEYS, WorkflowResult, mapping_or_empty
from runstream.workflows.run import WorkflowRun
from runstream.workflows.step import Step

JSON_SCHEMA_DRAFT = "http://json-schema.org/draft-07/schema#"


class RunnableWorkflow(Protocol):
    """What the tool needs of a workflow. ``Workflow`` is one; the tool names this, so the
    builder (which offers ``as_tool()``) and this module do not import each other."""

    @property
    def id(self) -> str: ...
    @property
    def description(self) -> str: ...
    @property
    def input_schema(self) -> Schema | None: ...
    @property
    def state_schema(self) -> Schema | None: ...
    @property
    def steps(self) -> dict[str, Step]: ...
    @property
    def nested(self) -> Mapping[str, RunnableWorkflow]: ...

    async def create_run(self, run_id: str | None = None) -> WorkflowRun: ...


def workflow_tool(workflow: RunnableWorkflow, name: str, *, step_output: bool = False) -> Tool:
    suspended_runs: dict[tuple[str, str], WorkflowRun] = {}

    async def execute(args: ToolArgs, ctx: ToolContext) -> Any:
        key = (ctx.run_id, ctx.tool_call_id)
        run = suspended_runs.pop(key, None)
        if run is not None and ctx.resume_data is not None:
            out = await run.resume_stream(resume_data=ctx.resume_data)
        else:
            run = await workflow.create_run()
            out = await run.stream(input_data=args.get("inputData"), initial_state=args.get("initialState"))
        usage = _StepUsage()
        async for chunk in out.full_stream:
            await ctx.writer.write(chunk)
            summary = usage.track(chunk)
            if step_output and summary is not None:
                await ctx.writer.write(summary)
        result = await out.result
        if result.status == "success":
            return {"result": result.result, "runId": run.run_id}
        if result.status == "failed":
            error = result.error
            message = str(error.get("message")) if isinstance(error, Mapping) else str(error)
            return {"error": message or "Workflow execution failed", "runId": run.run_id}
        if result.status == "suspended" and result.suspended:
            suspended_runs[key] = run
            await ctx.suspend(
                result.suspend_payload.get(result.suspended[0][0]),
                resume_schema=_resume_schema(workflow, result),
            )
        return {
            "error": "Workflow should never reach this path, workflow returned no status",
            "runId": run.run_id,
        }

    properties: JsonObject = {
        "inputData": _json(workflow.input_schema) or {"type": "object", "additionalProperties": True}
    }
    if workflow.state_schema is not None:
        properties["initialState"] = _json(workflow.state_schema)
    input_schema: JsonObject = {
        "type": "object",
        "properties": properties,
        "required": ["inputData"],
        "additionalProperties": True,
    }
    tool = Tool(
        f"workflow-{name}",
        execute,
        description=workflow.description or f"Workflow: {name}",
        input_schema=input_schema,
    )
    return tool


def _json(schema: Schema | None) -> JsonObject | None:
    return dict(schema.json_schema) if schema is not None else None


def _resume_schema(workflow: RunnableWorkflow, result: WorkflowResult) -> JsonObject | None:
    """The resume schema of the first suspended step (walking into nested workflows); the tool
    passes it to ``ctx.suspend`` so ``tool-call-suspended`` shows what this call's resume needs."""
    current = workflow
    for step_id in result.suspended[0]:
        if step_id in current.nested:
            current = current.nested[step_id]
            continue
        step = current.steps.get(step_id)
        if step is not None and step.resume_schema is not None:
            return {"$schema": JSON_SCHEMA_DRAFT, **step.resume_schema.json_schema}
        break
    return None


class _StepUsage:
    """Token usage per step name, for ``step-output`` summaries."""

    def __init__(self) -> None:
        self.by_step: dict[str, dict[str, int]] = {}

    def track(self, chunk: AnyChunk) -> AnyChunk | None:
        payload = chunk.payload if isinstance(chunk.payload, Mapping) else {}
        if chunk.type == "workflow-step-output":
            inner = payload.get("output")
            wire = inner.to_wire() if isinstance(inner, Chunk) else inner
            if isinstance(wire, Mapping) and wire.get("type") == "finish":
                body = mapping_or_empty(wire.get("payload"))
                usage = mapping_or_empty(
                    mapping_or_empty(body.get("output")).get("usage") or body.get("usage")
                )
                total = self.by_step.setdefault(str(payload.get("stepName")), dict.fromkeys(USAGE_KEYS, 0))
                for k in USAGE_KEYS:
                    count = usage.get(k) or 0
                    total[k] += int(count) if isinstance(count, int | float | str) else 0
            return None
        if chunk.type != "workflow-step-result":
            return None
        name = str(payload.get("id", "")).rsplit(".", 1)[-1]
        usage = self.by_step.get(name, dict.fromkeys(USAGE_KEYS, 0))
        return StepOutputChunk(chunk.run_id, {"output": dict(payload), "usage": usage}, "WORKFLOW")  # type: ignore[typeddict-unknown-key]
