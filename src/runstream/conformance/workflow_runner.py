"""Workflow scenarios of the conformance format (SCENARIOS.md, "workflow").

:func:`build_workflow` turns a WorkflowDef into a :class:`~runstream.workflows.Workflow`:
behaviour steps play their scripted ``behavior`` (the tool behaviour DSL plus the workflow
conditions ``inputData``, ``resumeData``, ``resumed``, ``state``, ``attempt``, ``execution`` and
the ``setState`` / ``bail`` steps), agent steps get a scripted model, nested workflows recurse,
and the flow entries map one to one onto the builder (predicates and mapping sources are passed
as is). :func:`run_workflow_scenario` runs the scenario's runs with their actions (``cancel``,
``resumeStream``) and writes every stream as a section.

Workflows are built with ``validate_outputs=False``: Mastra 1.71 does not check step outputs.
"""

from __future__ import annotations

import asyncio
import copy
import os
import tempfile
from collections.abc import Mapping
from typing import Any

from runstream.agent import Agent
from runstream.conformance.behavior import (
    StreamWriter,
    ToolExecutionLog,
    abortable_sleep,
    contains,
    select_steps,
)
from runstream.errors import InvalidInputError
from runstream.storage import InMemoryStorage, SqliteStorage, Storage
from runstream.testing.scripted import ScriptedError, ScriptedModel
from runstream.workflows import Step, StepContext, Workflow, WorkflowRun, WorkflowRunOutput, agent_step


def build_workflow(
    defn: Mapping[str, Any], log: ToolExecutionLog, *, storage: Storage | None = None
) -> Workflow:
    """The workflow a WorkflowDef declares (also used for ``{"type": "workflow"}`` tools)."""
    steps: dict[str, Step | Workflow] = {}
    for spec in defn.get("steps", []):
        kind = spec.get("type")
        if kind == "workflow":
            steps[spec["id"]] = build_workflow(spec, log, storage=storage)
        elif kind == "agent":
            steps[spec["id"]] = _agent_step(spec)
        else:
            steps[spec["id"]] = _behaviour_step(spec, log)
    workflow = Workflow(
        defn["id"],
        description=defn.get("description", ""),
        input_schema=defn.get("inputSchema"),
        output_schema=defn.get("outputSchema"),
        state_schema=defn.get("stateSchema"),
        retry_config=defn.get("retryConfig"),
        storage=storage,
        validate_outputs=False,
    )
    for entry in defn["flow"]:
        _add_entry(workflow, entry, steps)
    return workflow.commit()


def _add_entry(workflow: Workflow, entry: Mapping[str, Any], steps: Mapping[str, Step | Workflow]) -> None:
    if "then" in entry:
        workflow.then(steps[entry["then"]])
    elif "parallel" in entry:
        workflow.parallel([steps[i] for i in entry["parallel"]])
    elif "branch" in entry:
        workflow.branch([(b["when"], steps[b["then"]]) for b in entry["branch"]])
    elif "dowhile" in entry:
        workflow.dowhile(steps[entry["dowhile"]], entry["while"])
    elif "dountil" in entry:
        workflow.dountil(steps[entry["dountil"]], entry["until"])
    elif "foreach" in entry:
        workflow.foreach(steps[entry["foreach"]], concurrency=entry.get("concurrency", 1))
    elif "map" in entry:
        workflow.map(entry["map"], id=entry.get("id"))
    elif "sleep" in entry:
        workflow.sleep(entry["sleep"], id=entry.get("id"))
    else:
        raise InvalidInputError(f"unknown flow entry {dict(entry)!r}")


def _agent_step(spec: Mapping[str, Any]) -> Step:
    agent = Agent(
        spec["id"],
        name=spec.get("name", spec["id"]),
        description=spec.get("description", ""),
        instructions=spec.get("instructions", ""),
        model=ScriptedModel.from_script(spec["model"]),
    )
    return agent_step(agent, structured_output=spec.get("structuredOutput"), retries=spec.get("retries"))


def _behaviour_step(spec: Mapping[str, Any], log: ToolExecutionLog) -> Step:
    step_id = spec["id"]

    async def execute(ctx: StepContext) -> Any:
        key = ("workflow-step", step_id)
        log.attempts[key] += 1
        facts = {
            "inputData": copy.deepcopy(ctx.input_data),
            "resumeData": copy.deepcopy(ctx.resume_data),
            "resumed": ctx.resume_data is not None,
            "state": copy.deepcopy(ctx.state),
            "attempt": ctx.retry_count + 1,
            "execution": log.attempts[key],
        }
        log.executions.append({"step": step_id, **facts})
        for action in select_steps(spec["behavior"], facts):
            if "sleep" in action:
                await abortable_sleep(action["sleep"], ctx.abort_signal, "Step execution aborted")
            elif "write" in action:
                await ctx.writer.write(copy.deepcopy(action["write"]))
            elif "custom" in action:
                await ctx.writer.custom(copy.deepcopy(action["custom"]))
            elif "setState" in action:
                await ctx.set_state(copy.deepcopy(action["setState"]))
            elif "return" in action:
                return copy.deepcopy(action["return"])
            elif "throw" in action:
                raise ScriptedError.from_spec(action["throw"])
            elif "suspend" in action:
                await ctx.suspend(copy.deepcopy(action["suspend"]))
            elif "bail" in action:
                ctx.bail(copy.deepcopy(action["bail"]))
            else:
                raise InvalidInputError(f"unknown behaviour step {action!r}")
        raise InvalidInputError(f"behaviour of step {step_id!r} ended without return, throw, suspend or bail")

    return Step(
        step_id,
        execute,
        description=spec.get("description", step_id),
        input_schema=spec["inputSchema"],
        output_schema=spec["outputSchema"],
        resume_schema=spec.get("resumeSchema"),
        suspend_schema=spec.get("suspendSchema"),
        state_schema=spec.get("stateSchema"),
        retries=spec.get("retries"),
    )


def _storage(scenario: Mapping[str, Any], tmp_dir: str) -> Storage:
    kind = scenario.get("mastra", {}).get("storage", "in-memory")
    if kind == "libsql":
        return SqliteStorage(os.path.join(tmp_dir, "workflows.db"))
    return InMemoryStorage()


async def run_workflow_scenario(
    scenario: Mapping[str, Any], writer: StreamWriter, log: ToolExecutionLog
) -> None:
    """Run every ``run`` of a workflow scenario, writing each stream as a section."""
    runs = scenario["runs"] if "runs" in scenario else [scenario["run"]]
    with tempfile.TemporaryDirectory() as tmp_dir:
        storage = _storage(scenario, tmp_dir)
        workflow = build_workflow(scenario["workflow"], log, storage=storage)
        try:
            for spec in runs:
                run = await workflow.create_run()
                out = await run.stream(
                    input_data=copy.deepcopy(spec.get("inputData")), initial_state=spec.get("initialState")
                )
                actions = list(spec.get("actions", []))
                deferred = await _consume(out, "run", actions, run, writer)
                later = deferred + [a for a in actions if a["on"].get("end")]
                for action in later:
                    if action.get("delayMs"):
                        await asyncio.sleep(action["delayMs"] / 1000)
                    if action["do"] == "resumeStream":
                        resumed = await run.resume_stream(
                            resume_data=copy.deepcopy(action.get("data")), step=action.get("step")
                        )
                        await _consume(resumed, "workflow.resumeStream", [], run, writer)
                    else:
                        await run.cancel()
                await run.wait()
                if spec.get("settleMs"):
                    await asyncio.sleep(spec["settleMs"] / 1000)
        finally:
            await storage.close()


async def _consume(
    out: WorkflowRunOutput,
    source: str,
    actions: list[Mapping[str, Any]],
    run: WorkflowRun,
    writer: StreamWriter,
) -> list[Mapping[str, Any]]:
    """Write the stream; fire ``cancel`` actions at their trigger; return the triggered
    ``resumeStream`` actions (they run after the stream closed)."""
    writer.begin(source)
    counts: dict[str, int] = {}
    deferred: list[Mapping[str, Any]] = []
    pending: list[asyncio.Task[None]] = []
    async for chunk in out.full_stream:
        writer.chunk(chunk)
        counts[chunk.type] = counts.get(chunk.type, 0) + 1
        for action in actions:
            trigger = action["on"]
            if trigger.get("end") or trigger.get("type") != chunk.type:
                continue
            if counts[chunk.type] != trigger.get("nth", 1):
                continue
            payload = chunk.payload if isinstance(chunk.payload, Mapping) else {}
            if "match" in trigger and not contains(payload, trigger["match"]):
                continue
            if action["do"] == "resumeStream":
                deferred.append(action)
            elif action.get("delayMs"):
                pending.append(asyncio.create_task(_later(action["delayMs"], run)))
            else:
                await run.cancel()
    await asyncio.gather(*pending)
    return deferred


async def _later(delay_ms: float, run: WorkflowRun) -> None:
    await asyncio.sleep(delay_ms / 1000)
    await run.cancel()
