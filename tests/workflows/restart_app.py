"""A workflow with an approval step, run as a separate process by ``test_suspend_resume``.

``python -m tests.workflows.restart_app start DB`` runs it until it suspends and prints the run
id; ``... resume DB RUN_ID`` (a new process) loads the run from the SQLite file and resumes it.
Each prints the chunks it streamed as JSON lines after the run id / a blank line.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from runstream.chunks import dumps
from runstream.storage import SqliteStorage
from runstream.workflows import Step, StepContext, Workflow


async def approval(ctx: StepContext) -> dict[str, Any]:
    if ctx.resume_data is None:
        await ctx.suspend({"question": f"Approve {ctx.input_data['amount']} EUR?"})
    return {"approved": ctx.resume_data["approved"], "by": ctx.resume_data["by"]}


def build(db: str) -> Workflow:
    return (
        Workflow("expense", storage=SqliteStorage(db))
        .then(Step("prepare", lambda ctx: {"amount": ctx.input_data["amount"] * 2}))
        .then(
            Step(
                "approval",
                approval,
                resume_schema={
                    "type": "object",
                    "properties": {"approved": {"type": "boolean"}, "by": {"type": "string"}},
                    "required": ["approved", "by"],
                },
            )
        )
        .then(Step("book", lambda ctx: {"booked": ctx.input_data["approved"]}))
        .commit()
    )


async def main(command: str, db: str, run_id: str | None) -> None:
    workflow = build(db)
    if command == "start":
        run = await workflow.create_run()
        out = await run.stream(input_data={"amount": 60})
        print(run.run_id)
    else:
        assert run_id is not None
        run = await workflow.get_run(run_id)
        out = await run.resume_stream(resume_data={"approved": True, "by": "ops"})
        print()
    async for chunk in out.full_stream:
        print(dumps(chunk.to_wire()))
    await workflow.storage.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None))
