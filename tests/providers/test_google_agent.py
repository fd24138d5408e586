"""Gemini through the agent loop and memory: the thought signature of a function call goes back
to Gemini on the next step, and again when the thread is continued from storage later (Gemini 2.5
and 3 refuse a replayed function call turn without it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from runstream import Agent, tool
from runstream.memory import Memory
from runstream.models.google import GoogleModel
from runstream.runtime import Runstream
from runstream.storage import SqliteStorage

from .loopback import LoopbackServer, Reply

pytest.importorskip("google.genai")

KIT = Path(__file__).parents[1] / "vendor_kit" / "fixtures" / "google"


def sse(name: str) -> bytes:
    lines = (KIT / f"{name}.chunks.txt").read_text().splitlines()
    return b"".join(b"data: %s\n\n" % line.encode() for line in lines if line)


def signature(name: str) -> str:
    for line in (KIT / f"{name}.chunks.txt").read_text().splitlines():
        for part in json.loads(line)["candidates"][0]["content"]["parts"]:
            if "functionCall" in part:
                return str(part["thoughtSignature"])
    raise AssertionError(name)


@tool
def weather(city: str) -> dict[str, Any]:
    """Weather of a city."""
    return {"city": city, "sky": "sunny"}


def model_turn(body: dict[str, Any]) -> dict[str, Any]:
    (turn,) = (c for c in body["contents"] if c["role"] == "model")
    return turn


async def test_signature_goes_back_next_step_and_from_memory(
    loopback: LoopbackServer, tmp_path: Path
) -> None:
    loopback.queue(Reply(sse("tool-call.1")), Reply(sse("tool-call.2")), Reply(sse("text")))
    model = GoogleModel("gemini-2.5-flash", api_key="g", base_url=loopback.url("/v1beta"), max_retries=0)
    signed = signature("tool-call.1")
    database = str(tmp_path / "memory.db")
    thread = {"thread": "t1", "resource": "u1"}

    agent = Agent(
        "gemini", instructions="Be brief.", model=model, tools=[weather], memory=Memory(last_messages=20)
    )
    async with Runstream(agents=[agent], storage=SqliteStorage(database)):
        out = await agent.stream("Weather in Paris?", memory=thread, max_steps=5)
        assert await out.text == "It is sunny in Paris."
    assert len(loopback.requests) == 2
    turn = model_turn(loopback.requests[1].body)
    call_id = turn["parts"][1]["functionCall"]["id"]
    assert turn == {
        "role": "model",
        "parts": [
            {"text": "**Checking the weather**\n\nI will call the weather tool.", "thought": True},
            {
                "functionCall": {"id": call_id, "name": "weather", "args": {"city": "Paris"}},
                "thoughtSignature": signed,
            },
        ],
    }

    # later, another process: a new agent and storage on the same database continue the thread
    again = Agent(
        "gemini", instructions="Be brief.", model=model, tools=[weather], memory=Memory(last_messages=20)
    )
    async with Runstream(agents=[again], storage=SqliteStorage(database)):
        out = await again.stream("Thanks!", memory=thread, max_steps=5)
        await out.text
    contents = loopback.requests[2].body["contents"]
    assert [c["role"] for c in contents] == ["user", "model", "user", "model", "user"]
    assert contents[1] == turn  # the signed call turn, as the first run sent it
    assert contents[2]["parts"][0]["functionResponse"]["id"] == call_id
