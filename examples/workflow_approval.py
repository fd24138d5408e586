"""A workflow with a human approval step: an agent drafts, a person approves, then it posts.

    python examples/workflow_approval.py            # asks on the terminal (approves when not a tty)
    python examples/workflow_approval.py --reject   # the reviewer says no

The agent runs on a ``ScriptedModel`` (no API key). The run suspends at the approval step; its
state is in a SQLite file, so the resume below could just as well happen in another process
(``run = await workflow.get_run(run_id)``).
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path
from typing import Any

from runstream import Agent
from runstream.storage import SqliteStorage
from runstream.testing.scripted import ScriptedModel
from runstream.workflows import Step, StepContext, Workflow, WorkflowRunOutput

DECISION = {
    "type": "object",
    "properties": {"approved": {"type": "boolean"}, "note": {"type": "string"}},
    "required": ["approved"],
}


async def review(ctx: StepContext) -> dict[str, Any]:
    """Suspend until a person decides; the resume data is the decision."""
    if ctx.resume_data is None:
        await ctx.suspend({"draft": ctx.input_data["text"], "question": "Publish this summary?"})
    return {"text": ctx.input_data["text"], **ctx.resume_data}


def publish(ctx: StepContext) -> dict[str, Any]:
    if not ctx.input_data["approved"]:
        return {"published": False, "reason": ctx.input_data.get("note", "rejected")}
    return {"published": True, "url": "https://blog.example/rust-in-one-line"}


def build(storage: SqliteStorage) -> Workflow:
    writer = Agent(
        "writer",
        instructions="Summarize the topic in one sentence.",
        model=ScriptedModel.text("Rust gives you C-level speed without C-level memory bugs.", chunk_size=1),
    )
    return (
        Workflow("approve-post", description="Draft, approve, publish", storage=storage)
        .map({"prompt": {"template": "Summarize: ${inputData.topic}"}}, id="to-prompt")
        .then(writer)
        .then(Step("review", review, resume_schema=DECISION))
        .then(Step("publish", publish))
        .commit()
    )


async def show(out: WorkflowRunOutput) -> None:
    async for chunk in out.full_stream:
        payload = chunk.payload if isinstance(chunk.payload, dict) else {}
        if chunk.type == "workflow-step-output":
            inner = payload["output"]
            if getattr(inner, "type", None) == "text-delta":
                print(inner.payload["text"], end="", flush=True)
            continue
        if chunk.type == "workflow-step-result" and payload.get("id") == "writer":
            print()
        detail = payload.get("id") or payload.get("workflowStatus") or payload.get("workflowId") or ""
        print(f"  [{chunk.type}] {detail} {payload.get('status', '')}".rstrip())
        if chunk.type == "workflow-step-suspended":
            print(f"    waiting for a person: {payload['suspendPayload']['question']}")
        if chunk.type == "workflow-finish" and "finalWorkflowResult" in payload:
            print(f"    result: {payload['finalWorkflowResult']}")


def decide() -> dict[str, Any]:
    if "--reject" in sys.argv:
        return {"approved": False, "note": "too short"}
    if sys.stdin.isatty():
        answer = input("Approve? [Y/n] ").strip().lower()
        return {"approved": answer in ("", "y", "yes")}
    return {"approved": True}


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        storage = SqliteStorage(str(Path(tmp) / "workflows.db"))
        workflow = build(storage)
        run = await workflow.create_run()
        print("== run")
        await show(await run.stream(input_data={"topic": "Rust"}))

        decision = decide()
        print(f"== resume with {decision}")
        stored = await workflow.get_run(run.run_id)  # what a new process would do
        await show(await stored.resume_stream(resume_data=decision))
        await storage.close()


if __name__ == "__main__":
    asyncio.run(main())
