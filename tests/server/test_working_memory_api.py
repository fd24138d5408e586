"""Working memory over HTTP, as Mastra's server: ``GET/POST /api/memory/threads/:id/working-memory``
and ``GET /api/memory/config``, confined to the caller's resource (another resource's thread is a
404); a run's memory options and its thread's title and metadata in the stream body."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx2 as httpx
import pytest
from starlette.requests import Request

from runstream import Agent
from runstream.memory import Memory, WorkingMemory
from runstream.runtime import Runstream
from runstream.server import create_app
from runstream.server.auth import Principal
from runstream.storage import InMemoryStorage
from runstream.testing import ScriptedModel, Text, ToolCall
from tests.server.conftest import chunks_of, serve

PRINCIPALS = {
    "alice": Principal("alice", "alice"),
    "bob": Principal("bob", "bob"),
    "admin": Principal("admin"),
}


async def by_token(request: Request) -> Principal | None:
    return PRINCIPALS.get(request.headers.get("authorization", "").removeprefix("Bearer "))


class Server:
    def __init__(self, url: str, storage: InMemoryStorage, model: ScriptedModel) -> None:
        self.url, self.storage, self.model = url, storage, model

    def client(self, user: str) -> httpx.Client:
        return httpx.Client(
            base_url=f"{self.url}/api", headers={"Authorization": f"Bearer {user}"}, timeout=15
        )


@pytest.fixture
def server() -> Iterator[Server]:
    storage = InMemoryStorage()
    model = ScriptedModel.turns(
        ToolCall("updateWorkingMemory", {"memory": "# Notes\n- Fact: likes tea"}, id="w1"), Text("Noted.")
    )
    notes = Agent(
        "notes", model=model, memory=Memory(working_memory=WorkingMemory(template="# Notes\n- Fact:\n"))
    )
    profile_schema = {"type": "object", "properties": {"name": {"type": "string"}, "tags": {"type": "array"}}}
    profile = Agent(
        "profile",
        model=ScriptedModel.turns(Text("Hi.")),
        memory=Memory(
            working_memory=WorkingMemory(scope="thread", schema=profile_schema), generate_title=True
        ),
    )
    plain = Agent("plain", model=ScriptedModel.turns(Text("Hi.")), memory=Memory())
    amnesiac = Agent("amnesiac", model=ScriptedModel.turns(Text("Hi.")))
    runtime = Runstream(agents=[notes, profile, plain, amnesiac], storage=storage)
    with serve(create_app(runtime, auth=by_token)) as url:
        yield Server(url, storage, model)


def test_a_runs_working_memory_is_read_and_written_over_http(server: Server) -> None:
    alice = server.client("alice")
    body = {
        "messages": [{"role": "user", "content": "I like tea."}],
        "memory": {
            "thread": {"id": "t-alice", "title": "Tea", "metadata": {"topic": "drinks"}},
            "resource": "alice",
        },
    }
    response = alice.post("/agents/notes/stream", json=body)
    assert [c["payload"]["result"] for c in chunks_of(response.content) if c["type"] == "tool-result"] == [
        {"success": True}
    ]
    thread = alice.get("/memory/threads/t-alice").json()
    assert (thread["title"], thread["metadata"]) == ("Tea", {"topic": "drinks"})

    query = {"agentId": "notes", "resourceId": "alice"}
    assert alice.get("/memory/threads/t-alice/working-memory", params=query).json() == {
        "workingMemory": "# Notes\n- Fact: likes tea",
        "source": "resource",
        "workingMemoryTemplate": {"format": "markdown", "content": "# Notes\n- Fact:"},
        "threadExists": True,
    }
    updated = alice.post(
        "/memory/threads/t-alice/working-memory",
        params={"agentId": "notes"},
        json={"workingMemory": "# Notes\n- Fact: tea, green"},
    )
    assert updated.json() == {"success": True}
    assert alice.get("/memory/threads/t-alice/working-memory", params=query).json()["workingMemory"] == (
        "# Notes\n- Fact: tea, green"
    )


def test_another_resources_thread_is_not_found(server: Server) -> None:
    alice, bob = server.client("alice"), server.client("bob")
    alice.post("/memory/threads", json={"threadId": "t-alice", "resourceId": "alice"}).raise_for_status()
    params = {"agentId": "notes"}
    alice.post(
        "/memory/threads/t-alice/working-memory", params=params, json={"workingMemory": "alice's notes"}
    ).raise_for_status()
    # As a thread that does not exist (it was a 404, where a missing thread is a 200: issue 25's
    # property test found it); nothing of alice's thread is read.
    foreign = bob.get("/memory/threads/t-alice/working-memory", params=params)
    missing = bob.get("/memory/threads/t-nobody/working-memory", params=params)
    assert foreign.status_code == missing.status_code == 200
    assert foreign.json() == missing.json() and foreign.json()["threadExists"] is False
    sneaky = bob.post(
        "/memory/threads/t-alice/working-memory", params=params, json={"workingMemory": "pwned"}
    )
    assert sneaky.status_code == 404
    as_alice = bob.get("/memory/threads/t-alice/working-memory", params={**params, "resourceId": "alice"})
    assert as_alice.status_code == 403
    admin = server.client("admin")
    wrong = admin.post(
        "/memory/threads/t-alice/working-memory",
        params=params,
        json={"workingMemory": "x", "resourceId": "bob"},
    )
    assert wrong.status_code == 404


def test_bad_working_memory_requests_are_clear_errors(server: Server) -> None:
    alice = server.client("alice")
    alice.post("/memory/threads", json={"threadId": "t1", "resourceId": "alice"}).raise_for_status()
    post = alice.post
    url = "/memory/threads/t1/working-memory"
    assert (
        post(
            "/memory/threads/none/working-memory", params={"agentId": "notes"}, json={"workingMemory": "x"}
        ).status_code
        == 404
    )
    assert (
        post(url, params={"agentId": "amnesiac"}, json={"workingMemory": "x"}).json()["error"]
        == "Memory is not initialized"
    )
    no_wm = post(url, params={"agentId": "plain"}, json={"workingMemory": "x"})
    assert no_wm.status_code == 400 and "not enabled" in no_wm.json()["error"]
    assert post(url, params={"agentId": "notes"}, json={"workingMemory": {"a": 1}}).status_code == 400
    assert post(url, params={"agentId": "notes"}, json={"workingMemory": "x" * 1_000_001}).status_code in (
        400,
        413,
    )
    assert post(url, params={"agentId": "nope"}, json={"workingMemory": "x"}).status_code == 404
    bad_config = post(
        url, params={"agentId": "plain"}, json={"workingMemory": "x", "memoryConfig": {"readonly": True}}
    )
    assert bad_config.status_code == 400 and "readonly" in bad_config.json()["error"]
    enabled_here = post(
        url,
        params={"agentId": "plain"},
        json={
            "workingMemory": "# by config",
            "memoryConfig": {"workingMemory": {"enabled": True, "scope": "thread"}},
        },
    )
    assert enabled_here.json() == {"success": True}
    thread = alice.get("/memory/threads/t1").json()
    assert thread["metadata"] == {"workingMemory": "# by config"}


def test_thread_scoped_schema_memory_and_the_config_route(server: Server) -> None:
    alice = server.client("alice")
    config = alice.get("/memory/config", params={"agentId": "profile"}).json()["config"]
    assert config["workingMemory"]["enabled"] is True and config["workingMemory"]["scope"] == "thread"
    assert config["workingMemory"]["schema"]["properties"]["name"] == {"type": "string"}
    assert config["generateTitle"] is True
    notes = alice.get("/memory/config", params={"agentId": "notes"}).json()["config"]
    assert notes["workingMemory"] == {"enabled": True, "scope": "resource", "template": "# Notes\n- Fact:\n"}
    assert alice.get("/memory/config", params={"agentId": "amnesiac"}).json() == {"config": None}

    fresh = alice.get("/memory/threads/t9/working-memory", params={"agentId": "profile"}).json()
    assert fresh == {
        "workingMemory": None,
        "source": "thread",
        "workingMemoryTemplate": {
            "format": "json",
            "content": json.dumps({"name": "", "tags": []}, separators=(",", ":")),
        },
        "threadExists": False,
    }
    alice.post("/memory/threads", json={"threadId": "t9", "resourceId": "alice"}).raise_for_status()
    stored = '{"name":"Alice"}'
    alice.post(
        "/memory/threads/t9/working-memory", params={"agentId": "profile"}, json={"workingMemory": stored}
    )
    got = alice.get("/memory/threads/t9/working-memory", params={"agentId": "profile"}).json()
    assert (got["workingMemory"], got["source"], got["threadExists"]) == (stored, "thread", True)


def test_memory_options_in_the_stream_body_are_checked_and_applied(server: Server) -> None:
    alice = server.client("alice")
    memory = {"thread": "t-ro", "resource": "alice", "options": {"readOnly": True}}
    run = alice.post(
        "/agents/plain/stream", json={"messages": [{"role": "user", "content": "hi"}], "memory": memory}
    )
    assert run.status_code == 200 and chunks_of(run.content)[-1]["type"] == "finish"
    stored = alice.get("/memory/threads/t-ro/messages").json()
    assert stored["total"] == 0  # read-only: the thread is created (as in Mastra), no message is saved
    for options, word in (
        ({"semanticRecall": True}, "semanticRecall"),
        ({"lastMessages": 10**9}, "lastMessages"),
        ({"generateTitle": {"model": "openai/gpt-4.1"}}, "generateTitle"),
        ({"workingMemory": {"enabled": True, "schema": {"type": "nope"}}}, "schema"),
    ):
        refused = alice.post(
            "/agents/plain/stream",
            json={"messages": [{"role": "user", "content": "hi"}], "memory": {**memory, "options": options}},
        )
        assert refused.status_code == 400 and word in refused.json()["error"], options
    too_long = {"thread": {"id": "t2", "title": "x" * 1001}, "resource": "alice"}
    assert alice.post("/agents/plain/stream", json={"messages": [], "memory": too_long}).status_code == 400
