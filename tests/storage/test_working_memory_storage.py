"""Working memory on every storage backend (the ``storage`` fixture): a run's
``updateWorkingMemory`` call lands in the resource record or the thread's metadata, and the next
run's system message shows it."""

from __future__ import annotations

import pytest

from runstream import Agent
from runstream.memory import Memory, WorkingMemory
from runstream.storage import Storage
from runstream.testing import ScriptedModel, Text, ToolCall


@pytest.mark.parametrize("scope", ["resource", "thread"])
async def test_a_working_memory_update_is_stored_and_shown_next_run(storage: Storage, scope: str) -> None:
    model = ScriptedModel.turns(
        ToolCall("updateWorkingMemory", {"memory": "# User\n- Name: Ada"}, id="w1"), Text("Hi."), Text("Ada.")
    )
    memory = Memory(storage=storage, working_memory=WorkingMemory(scope=scope))  # type: ignore[arg-type]
    agent = Agent("a", model=model, memory=memory)
    for text in ("I am Ada.", "Who am I?"):
        out = await agent.stream(text, memory={"thread": "t1", "resource": "u1"})
        [chunk async for chunk in out.full_stream]

    if scope == "resource":
        resource = await storage.get_resource("u1")
        assert resource is not None and resource.working_memory == "# User\n- Name: Ada"
    else:
        thread = await storage.get_thread("t1")
        assert thread is not None and thread.metadata["workingMemory"] == "# User\n- Name: Ada"
    shown = model.recorded[2].prompt[0]["content"]
    assert "<working_memory_data>\n# User\n- Name: Ada\n</working_memory_data>" in shown
