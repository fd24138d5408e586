"""Anthropic thinking across a tool step and across processes, on the wire.

A run with extended thinking calls a tool: the follow-up request sends the thinking block with
its signature and the redacted thinking block with its data back, as Mastra 1.71 does
(tests/vendor_kit/golden/anthropic-thinking-tool.requests.json). The thread is saved; a second
process (a fresh interpreter on the same SQLite file) continues it and sends the same blocks again
in its first request, so no vendor state is lost between days.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from runstream import Runstream
from runstream.agent import Agent
from runstream.memory import Memory
from runstream.models.anthropic import AnthropicModel
from runstream.storage.sqlite import SqliteStorage
from runstream.tools import Tool, ToolContext

from .loopback import LoopbackServer, Reply, fixture

SIGNATURE = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"
REDACTED = "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIw"


def weather_tool() -> Tool:
    async def execute(args: dict[str, Any], ctx: ToolContext) -> Any:
        return {"forecast": "sunny", **args}

    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "additionalProperties": True}
    return Tool("get_weather", execute, description="Weather", input_schema=schema)


def build(url: str, db: str) -> tuple[Agent, Runstream]:
    model = AnthropicModel("claude-sonnet-4-5", api_key="sk-ant-test", base_url=url)
    agent = Agent("agent", instructions="Be brief.", model=model, tools=[weather_tool()], memory=Memory())
    return agent, Runstream(agents=[agent], storage=SqliteStorage(db))


def assistant_blocks(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [block for m in body["messages"] if m["role"] == "assistant" for block in m["content"]]


ROOT = str(Path(__file__).resolve().parents[2])
SECOND_PROCESS = """
import asyncio, sys
sys.path.insert(0, sys.argv[3])
from tests.providers.test_anthropic_thread import build

async def main() -> None:
    agent, rs = build(sys.argv[1], sys.argv[2])
    async with rs:
        out = await agent.stream("And tomorrow?", memory={"thread": "t1", "resource": "u1"})
        async for _ in out.full_stream:
            pass

asyncio.run(main())
"""


async def test_thinking_goes_back_after_a_tool_step_and_from_memory(
    loopback: LoopbackServer, tmp_path: Path
) -> None:
    text = Reply(fixture("anthropic_refusal.sse"))  # any text reply ends the run
    loopback.queue(Reply(fixture("anthropic_thinking_tools.sse")), text)
    db = str(tmp_path / "threads.db")
    agent, rs = build(loopback.url(), db)
    async with rs:
        out = await agent.stream("Weather in SF and NY?", memory={"thread": "t1", "resource": "u1"})
        async for _ in out.full_stream:
            pass
    follow_up = loopback.requests[1].body
    expected = [
        {"type": "thinking", "thinking": "Two cities, so two tool calls.", "signature": SIGNATURE},
        {"type": "redacted_thinking", "data": REDACTED},
        {"type": "text", "text": "Checking both."},
        {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"city": "San Francisco"}},
        {"type": "tool_use", "id": "toolu_02", "name": "get_weather", "input": {"city": "New York"}},
    ]
    assert assistant_blocks(follow_up) == expected
    results = follow_up["messages"][-1]["content"]
    assert [r["tool_use_id"] for r in results] == ["toolu_01", "toolu_02"]

    root = ROOT
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", SECOND_PROCESS, loopback.url(), db, root, stderr=asyncio.subprocess.PIPE
    )
    _, stderr = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, stderr.decode()[-2000:]
    later = loopback.requests[2].body
    assert assistant_blocks(later)[: len(expected)] == expected
    assert json.dumps(later["messages"][-1]) == json.dumps(
        {"role": "user", "content": [{"type": "text", "text": "And tomorrow?"}]}
    )
