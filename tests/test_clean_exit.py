"""Nothing hangs at exit (issue 26): each set-up the docs show, used the short way (no
``async with Runstream(...)``, no ``close()``), run as a script of its own that must exit by
itself, with status 0, within the timeout."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

EXIT_TIMEOUT_S = 60

COMMON = """
import asyncio
from runstream import Agent, ToolContext, tool
from runstream.memory import Memory
from runstream.runtime import Runstream
from runstream.storage import SqliteStorage
from runstream.testing import ScriptedModel, Text, ToolCall
"""

SETUPS = {
    "memory-on-sqlite": """
        agent = Agent("a", model=ScriptedModel.text("hi"), memory=Memory(storage=SqliteStorage("app.db")))

        async def main() -> None:
            out = await agent.stream("x", memory={"thread": "t", "resource": "u"})
            print(await out.text)
    """,
    "storage-alone": """
        from runstream.storage import Thread

        storage = SqliteStorage("app.db")

        async def main() -> None:
            await storage.save_thread(Thread(id="t", resource_id="u"))
            print((await storage.get_thread("t")).resource_id)
    """,
    "runtime-without-async-with": """
        agent = Agent("a", model=ScriptedModel.text("hi"), memory=Memory())
        rs = Runstream(agents=[agent], storage=SqliteStorage("app.db"))

        async def main() -> None:
            out = await agent.stream("x", memory={"thread": "t", "resource": "u"})
            print(await out.text)
    """,
    "task-manager-without-async-with": """
        @tool(background=True)
        async def research(topic: str, ctx: ToolContext) -> dict:
            \"\"\"Research a topic.\"\"\"
            await asyncio.sleep(0.01)
            return {"topic": topic}

        model = ScriptedModel.turns(ToolCall("research", {"topic": "x"}), Text("started"), Text("done"))
        agent = Agent("r", model=model, tools=[research], memory=Memory())
        rs = Runstream(agents=[agent], storage=SqliteStorage("app.db"), background_tasks={"enabled": True})

        async def main() -> None:
            out = await agent.stream("go", memory={"thread": "t", "resource": "u"}, until_idle=True)
            print(await out.text)
            late = await agent.stream("again", memory={"thread": "t", "resource": "u"})
            print(await late.text)  # a task may still run when the script ends
    """,
}


@pytest.mark.parametrize("name", sorted(SETUPS))
def test_the_script_exits_by_itself(name: str, tmp_path: Path) -> None:
    script = tmp_path / f"{name}.py"
    body = textwrap.dedent(SETUPS[name])
    script.write_text(COMMON + body + "\n\nasyncio.run(main())\n")
    try:
        done = subprocess.run(
            [sys.executable, script.name],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=EXIT_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired as exc:  # (the process is killed by subprocess.run)
        pytest.fail(f"{name}: the script did not exit within {EXIT_TIMEOUT_S} s; output: {exc.stdout!r}")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() and "Traceback" not in done.stderr, done.stderr
