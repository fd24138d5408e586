"""Options on a resume (Mastra's ``resumeStream(data, options)``, ``approveToolCall({runId,
...options})``, ``declineToolCall``) and their non-streaming variants (``resumeGenerate``,
``approveToolCallGenerate``, ``declineToolCallGenerate``). The streams are pinned by the
recorded scenarios ``x-pt24``..``x-pt26``."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from runstream import Agent, ToolContext, tool
from runstream._config_mapping import ConfigKeyError
from runstream.chunks import AnyChunk
from runstream.runtime import Runstream
from runstream.storage import SqliteStorage
from runstream.testing import ScriptedModel

USAGE = {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2}


@tool(require_approval=True)
async def delete_file(path: str) -> dict[str, str]:
    """Delete a file."""
    return {"deleted": path}


@tool
async def confirm(amount: int, ctx: ToolContext) -> dict[str, Any]:
    """Pay after confirmation."""
    if ctx.resume_data is None:
        await ctx.suspend({"question": f"Pay {amount}?"})
    return {"paid": amount, "confirmed": ctx.resume_data}


def call(name: str, args: str) -> list[dict[str, Any]]:
    return [
        {"type": "tool-call", "toolCallId": "c1", "toolName": name, "input": args},
        {"type": "finish", "finishReason": "tool-calls", "usage": USAGE},
    ]


def say(text: str) -> list[dict[str, Any]]:
    return [
        {"type": "text-start", "id": "t"},
        {"type": "text-delta", "id": "t", "delta": text},
        {"type": "text-end", "id": "t"},
        {"type": "finish", "finishReason": "stop", "usage": USAGE},
    ]


async def drain(out: Any) -> list[AnyChunk]:
    async with asyncio.timeout(10):
        return [chunk async for chunk in out.full_stream]


def agent(*tools: Any, answer: str = "Done.") -> tuple[Agent, ScriptedModel]:
    name = tools[0].name
    args = '{"path": "/tmp/x"}' if name == "delete_file" else '{"amount": 30}'
    model = ScriptedModel(calls=[call(name, args), say(answer)])
    return Agent("a", model=model, tools=list(tools)), model


async def test_approve_with_max_steps_stops_before_the_answer() -> None:
    first, model = agent(delete_file)
    chunks = await drain(await first.stream("Delete /tmp/x"))
    run_id = chunks[0].run_id
    resumed = await drain(await first.approve_tool_call(run_id=run_id, maxSteps=1))  # Mastra's name
    assert [c.type for c in resumed] == ["tool-result", "step-finish", "finish"]
    assert model.call_count == 1


async def test_resume_options_apply_to_a_run_restored_from_storage(tmp_path: Path) -> None:
    """Another process (a new agent over the same database) resumes with its own options."""
    first, _ = agent(confirm, answer='{"paid": true}')
    async with Runstream(agents=[first], storage=SqliteStorage(tmp_path / "runs.db")):
        run_id = (await drain(await first.stream("Pay")))[0].run_id
    second = Agent("a", model=ScriptedModel(calls=[say('{"paid": true}')]), tools=[confirm])
    finished: list[dict[str, Any]] = []
    async with Runstream(agents=[second], storage=SqliteStorage(tmp_path / "runs.db")):
        out = await second.resume_stream(
            {"yes": True},
            run_id=run_id,
            structured_output={"type": "object", "properties": {"paid": {"type": "boolean"}}},
            on_finish=finished.append,
        )
        chunks = await drain(out)
    assert [c.object for c in chunks if c.type == "object-result"] == [{"paid": True}]  # type: ignore[attr-defined]
    assert finished and finished[0]["object"] == {"paid": True}


async def test_generate_variants_return_the_full_output() -> None:
    approving, _ = agent(delete_file)
    run_id = (await approving.generate("Delete /tmp/x"))["runId"]
    approved = await approving.approve_tool_call_generate(run_id=run_id)
    assert approved["text"] == "Done." and approved["finishReason"] == "stop"

    declining, model = agent(delete_file, answer="Not deleted.")
    run_id = (await declining.generate("Delete /tmp/x"))["runId"]
    declined = await declining.decline_tool_call_generate(run_id=run_id, reason="keep it")
    assert declined["text"] == "Not deleted."
    assert "keep it" in str(model.recorded[1].prompt)

    resuming, _ = agent(confirm, answer="Paid.")
    run_id = (await resuming.generate("Pay"))["runId"]
    resumed = await resuming.resume_generate({"yes": True}, run_id=run_id, max_steps=3)
    assert resumed["text"] == "Paid."
    assert resumed["toolResults"][0]["result"] == {"paid": 30, "confirmed": {"yes": True}}


async def test_bad_resume_options_are_errors_and_keep_the_run() -> None:
    approving, _ = agent(delete_file)
    run_id = (await drain(await approving.stream("Delete /tmp/x")))[0].run_id
    with pytest.raises(ConfigKeyError, match="'maxStep'; did you mean 'maxSteps'"):
        await approving.approve_tool_call(run_id=run_id, maxStep=1)
    with pytest.raises(ConfigKeyError, match="unknown option 'runId'"):
        await approving.approve_tool_call(run_id=run_id, runId="other")
    assert [c.type for c in await drain(await approving.approve_tool_call(run_id=run_id))][-1] == "finish"
