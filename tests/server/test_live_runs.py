"""Live runs of every kind count together under the caps (issue 25): a direct agent stream or
generate holds a place like a detached run or a workflow run does, from before it starts until
it ends, however it ends (finished, failed, aborted, its client gone), so one tenant cannot
fill the process with direct runs and no slot leaks."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2 as httpx

from runstream import Agent, tool
from runstream.models.base import ModelRequest, ModelStream
from runstream.server import create_app
from runstream.server.resumable import RunRegistry
from runstream.storage import SqliteStorage
from runstream.testing import ScriptedModel
from tests.server.agents import Gates, build_runstream, call_tool, say
from tests.server.conftest import serve
from tests.server.security_kit import by_token


class HoldingModel:
    """``hold <gate>`` calls the ``hold`` tool (which waits for the gate); ``fail`` breaks."""

    provider = "test"
    model_id = "holding"
    specification_version = "v2"

    async def stream(self, request: ModelRequest) -> ModelStream:
        last = request.prompt[-1]
        text = "".join(p.get("text", "") for p in last["content"]) if last["role"] == "user" else ""
        if last["role"] == "tool":
            script: Any = say("released")
        elif text.startswith("hold "):
            script = call_tool("hold", {"gate": text.removeprefix("hold ")})
        elif text == "fail":
            script = {"parts": say("Partial ")[:3], "streamError": {"afterParts": 3, "error": "model broke"}}
        else:
            script = say("hi")
        return await ScriptedModel(calls=[script]).stream(request)


@dataclass
class Server:
    registry: RunRegistry
    gates: Gates
    a: httpx.Client
    b: httpx.Client

    def eventually(self, condition: Callable[[], bool], what: str) -> None:
        """Wait (10 s at most) until ``condition`` holds: slots are released by the server's
        own tasks, just after the response ends."""
        deadline = time.monotonic() + 10
        while not condition():
            assert time.monotonic() < deadline, what
            time.sleep(0.01)


@contextmanager
def holding_server(tmp_path: Path, *, per_resource: int, total: int) -> Iterator[Server]:
    gates = Gates()

    @tool
    async def hold(gate: str) -> str:
        """Wait until the test opens the gate."""
        await asyncio.to_thread(gates.get(gate).wait, 30)
        return gate

    runtime = build_runstream(gates, SqliteStorage(tmp_path / "runs.db"))
    runtime.add_agent(Agent("holder", model=HoldingModel(), tools=[hold]))
    app = create_app(
        runtime, auth=by_token, heartbeat_s=None, max_live_runs=total, max_live_runs_per_resource=per_resource
    )
    with serve(app) as url:
        a = httpx.Client(base_url=url, headers={"Authorization": "Bearer user-a"}, timeout=20)
        b = httpx.Client(base_url=url, headers={"Authorization": "Bearer user-b"}, timeout=20)
        server = Server(app.state.context.registry, gates, a, b)
        try:
            yield server
        finally:
            for topic in list(gates._events):
                gates.open(topic)
            server.eventually(lambda: server.registry.live_runs() == 0, "runs still live at the end")
            a.close()
            b.close()


def run(client: httpx.Client, route: str, text: str, query: str = "") -> httpx.Response:
    return client.post(f"/api/agents/holder/{route}{query}", json={"messages": text})


def test_direct_streams_and_generates_count_with_every_other_run(tmp_path: Path) -> None:
    """Before, only detached runs and workflow runs were counted: a tenant could hold any
    number of direct streams and generates open (each a model call and tools running)."""
    with holding_server(tmp_path, per_resource=2, total=3) as s, ThreadPoolExecutor(4) as pool:
        generate: Future[httpx.Response] = pool.submit(run, s.a, "generate", "hold a-generate")
        with s.a.stream("POST", "/api/agents/holder/stream", json={"messages": "hold a-stream"}) as stream:
            assert stream.status_code == 200
            s.eventually(lambda: s.registry.live_runs_of("user-a") == 2, "A's two runs are not counted")
            for route in ("stream", "generate"):
                refused = run(s.a, route, "hi")
                assert refused.status_code == 429 and refused.headers["retry-after"] == "1", route
            workflow = s.a.post(
                f"/api/workflows/gated/start?runId={uuid.uuid4()}", json={"inputData": {"gate": "w"}}
            )
            assert workflow.status_code == 429  # workflows count with agent runs
            b_stream: Future[httpx.Response] = pool.submit(run, s.b, "stream", "hold b-stream")
            s.eventually(lambda: s.registry.live_runs() == 3, "B's run is not counted")
            assert run(s.b, "generate", "hi").status_code == 429  # B has room, the process has none
            s.gates.open("a-stream")
            assert b'"released"' in stream.read()
        s.eventually(lambda: s.registry.live_runs_of("user-a") == 1, "A's finished stream still counts")
        assert run(s.a, "generate", "hi").status_code == 200  # its place is free again
        s.gates.open("a-generate")
        assert generate.result().status_code == 200
        s.gates.open("b-stream")
        assert b_stream.result().status_code == 200


def test_a_run_frees_its_place_however_it_ends(tmp_path: Path) -> None:
    """One place per resource: each way a run can end must give it back, or the next run is a
    429 (a leak would lock the tenant out)."""
    with holding_server(tmp_path, per_resource=1, total=10) as s:
        free = lambda: s.registry.live_runs_of("user-a") == 0  # noqa: E731

        assert run(s.a, "generate", "hi").status_code == 200  # finished
        assert run(s.a, "generate", "fail").json()["error"]  # failed (generate)
        s.eventually(free, "a failed generate kept its place")
        failed = run(s.a, "stream", "fail")  # failed (stream: error in band)
        assert failed.status_code == 200 and b'"error"' in failed.content
        s.eventually(free, "a failed stream kept its place")

        with s.a.stream("POST", "/api/agents/holder/stream", json={"messages": "hold gone"}) as gone:
            next(gone.iter_raw())  # the run started; the client goes away mid-run
        s.eventually(free, "a disconnected stream kept its place")  # aborted, wound down, freed

        with s.a.stream(
            "POST", "/api/agents/holder/stream?resumable=true", json={"messages": "hold aborted"}
        ) as detached:
            block = next(detached.iter_lines())
            run_id = block.removeprefix("id: ").rpartition(":")[0]
        assert run(s.a, "stream", "hi").status_code == 429  # the detached run holds the place
        assert s.a.post(f"/api/runs/{run_id}/abort").json()["aborted"] is True  # cancelled
        s.eventually(free, "an aborted run kept its place")

        chat = s.a.post(
            "/chat/holder",
            json={"messages": [{"id": "m1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}]},
        )
        assert chat.status_code == 200  # the UI stream and AG-UI routes count too
        s.eventually(free, "a chat stream kept its place")
        agui = {
            "threadId": "t-agui",
            "runId": "r1",
            "messages": [{"id": "u1", "role": "user", "content": "hi"}],
        }
        assert s.a.post("/ag-ui/holder", json=agui).status_code == 200
        s.eventually(free, "an AG-UI stream kept its place")
        assert run(s.a, "generate", "hi").status_code == 200
        assert s.registry.live_runs() == 0
