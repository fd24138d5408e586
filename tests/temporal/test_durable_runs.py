"""Durable agent runs on Temporal across real processes: the API servers (uvicorn, in this
process) start runs and stream them; the runs' steps (model calls and tools) run in
``runstream worker durable_app:runtime`` processes; Temporal (the dev server of the session
fixture), PostgreSQL and Redis are shared.

Proven here: a worker killed (-9) mid-turn, its step finished by another worker, and a client
that reconnects to another API server getting every chunk exactly once; an approval answered
after every process restarted; an until-idle durable run whose background task completes and
brings its continuation turn."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx2 as httpx
import pytest
from durable_app import build_agent, build_poet, runtime
from starlette.applications import Starlette
from temporal_cluster import Cluster
from temporalio.client import WorkflowExecutionStatus
from test_temporal_cluster import cluster, postgres_problem

from runstream.agent import RunNotFoundError
from runstream.agent._idle_stream import FlowRequest, durable_flow
from runstream.chunks import AnyChunk
from runstream.durable import TemporalRuns
from runstream.errors import StateConflictError
from runstream.output import RunOutput
from runstream.run._run_state import ResumeAction
from runstream.runtime import Runstream
from runstream.server import create_app
from runstream.server.auth import open_access
from runstream.server.redis_replay import RedisReplayLog
from runstream.storage import TaskFilter
from runstream.tasks.temporal import TemporalTaskManager
from tests.conftest import REDIS_URL
from tests.server.conftest import serve

WORKER = "durable_app:runtime"
MEMORY = {"thread": "t1", "resource": "u1"}
TIMEOUT = httpx.Timeout(60.0)

Event = tuple[str | None, str]


def api_server(cluster: Cluster) -> Starlette:
    """An API process: the same Runstream, no worker; resumable streams in the shared Redis."""
    prefix = cluster.env["TEMPORAL_TEST_PREFIX"]
    return create_app(
        runtime(), auth=open_access, replay_log=RedisReplayLog(REDIS_URL, prefix=f"{prefix}:replay")
    )


async def events(response: httpx.Response, stop_at: str | None = None) -> AsyncIterator[Event]:
    """``(id, data)`` of each SSE event as it arrives, through ``[DONE]`` (or ``stop_at``)."""
    buffer = b""
    async for raw in response.aiter_raw():
        buffer += raw
        while b"\n\n" in buffer:
            block, buffer = buffer.split(b"\n\n", 1)
            event_id = data = None
            for line in block.decode().split("\n"):
                if line.startswith("id: "):
                    event_id = line[4:]
                elif line.startswith("data: "):
                    data = line[6:]
            if data is None:
                continue
            yield event_id, data
            if data == "[DONE]" or (stop_at is not None and json.loads(data)["type"] == stop_at):
                return


async def read_all(client: httpx.AsyncClient, method: str, url: str, **kwargs: Any) -> list[Event]:
    async with client.stream(method, url, **kwargs) as response:
        assert response.status_code == 200, await response.aread()
        return [event async for event in events(response)]


def kinds(stream: list[Event]) -> list[str]:
    return [json.loads(data)["type"] for _, data in stream if data != "[DONE]"]


def text(stream: list[Event]) -> str:
    return "".join(
        json.loads(data)["payload"]["text"]
        for _, data in stream
        if data != "[DONE]" and json.loads(data)["type"] == "text-delta"
    )


async def test_a_killed_workers_step_finishes_on_another_and_a_reconnecting_client_gets_every_chunk_once(
    cluster: Cluster,
) -> None:
    b = await cluster.start_worker(WORKER)
    body = {"messages": "lookup sol", "memory": MEMORY}
    with serve(api_server(cluster)) as url_a, serve(api_server(cluster)) as url_b:
        a = httpx.AsyncClient(base_url=url_a, timeout=TIMEOUT)
        async with a, a.stream("POST", "/api/agents/durable/stream?resumable=true", json=body) as response:
            before = [event async for event in events(response, stop_at="tool-call")]
        # The client is gone; B runs the tool, and dies mid-turn.
        started = await b.expect(lambda line: line.get("tool") == "lookup")
        assert started["pid"] == b.pid
        await b.kill()
        c = await cluster.start_worker(WORKER)
        await c.expect(lambda line: line.get("tool") == "lookup")  # the step again, on C
        await cluster.open_gate("lookup-sol")
        last_id = before[-1][0]
        assert last_id is not None
        run_id = last_id.rpartition(":")[0]
        async with httpx.AsyncClient(base_url=url_b, timeout=TIMEOUT) as other:
            after = await read_all(
                other,
                "POST",
                "/api/agents/durable/stream?resumable=true",
                json=body,
                headers={"Last-Event-ID": last_id},
            )
            everything = await read_all(other, "GET", f"/api/runs/{run_id}/stream")
            observed = await read_all(
                other, "POST", "/api/agents/durable/observe", json={"runId": run_id, "offset": 3}
            )
    assert after[-1] == (None, "[DONE]")
    ids = [event_id for event_id, _ in before + after[:-1]]
    assert ids == [f"{run_id}:{n}" for n in range(1, len(ids) + 1)]  # in order, none twice, none missing
    assert before + after == everything
    assert [data for _, data in observed] == [data for _, data in everything[3:]]  # client-js's observe
    seen = kinds(everything)
    for once in ("start", "tool-call", "tool-result", "finish"):
        assert seen.count(once) == 1, (once, seen)
    assert seen[0] == "start" and seen[-1] == "finish" and seen.count("step-finish") == 2
    assert text(everything) == 'lookup sol gave {"fact": "sol is bright", "topic": "sol"} as you asked'
    assert await cluster.tool_results() == [
        {"type": "json", "value": {"topic": "sol", "fact": "sol is bright"}}
    ]  # the turn in memory, its tool result once


async def test_a_pending_approval_is_answered_after_every_process_restarted(cluster: Cluster) -> None:
    b = await cluster.start_worker(WORKER)
    with serve(api_server(cluster)) as url:
        async with httpx.AsyncClient(base_url=url, timeout=TIMEOUT) as client:
            first = await read_all(
                client, "POST", "/api/agents/durable/stream", json={"messages": "wire 5", "memory": MEMORY}
            )
    assert "tool-call-approval" in kinds(first) and "tool-result" not in kinds(first)
    run_id = json.loads(first[0][1])["runId"]
    call_id = next(
        json.loads(d)["payload"]["toolCallId"]
        for _, d in first[:-1]
        if json.loads(d)["type"] == "tool-call-approval"
    )
    assert await b.stop() == 0  # every process goes: the API server above, then the worker
    c = await cluster.start_worker(WORKER)
    with serve(api_server(cluster)) as url:
        async with httpx.AsyncClient(base_url=url, timeout=TIMEOUT) as client:
            listed = (await client.get("/api/agents/durable/suspended-runs")).json()
            assert [r["runId"] for r in listed["runs"]] == [run_id]
            approved = await read_all(
                client,
                "POST",
                "/api/agents/durable/approve-tool-call",
                json={"runId": run_id, "toolCallId": call_id},
            )
            again = await client.post(
                "/api/agents/durable/approve-tool-call", json={"runId": run_id, "toolCallId": call_id}
            )
            assert again.status_code == 404  # answered: nothing waits any more
    seen = kinds(approved)
    assert "start" not in seen and seen.count("tool-result") == 1 and seen[-1] == "finish"
    assert text(approved) == 'wire 5 gave {"sent": 5} as you asked'
    ran = await c.expect(lambda line: line.get("tool") == "wire")
    assert ran["amount"] == 5 and not [line for line in b.lines if line.get("tool") == "wire"]
    assert await cluster.tool_results() == [{"type": "json", "value": {"sent": 5}}]


async def test_an_until_idle_durable_run_gets_its_background_tasks_continuation_turn(
    cluster: Cluster,
) -> None:
    """The first turn (a workflow) starts a background task (a workflow of its own) and ends;
    the task completes, and the stream in the API process gets a continuation turn, which runs
    as a workflow on the worker too."""
    worker = await cluster.start_worker(WORKER)
    body = {"messages": "research tides", "memory": MEMORY}
    stream: list[Event] = []
    with serve(api_server(cluster)) as url:
        client = httpx.AsyncClient(base_url=url, timeout=TIMEOUT)
        async with (
            client,
            client.stream("POST", "/api/agents/durable/stream-until-idle", json=body) as response,
        ):
            assert response.status_code == 200
            async for event in events(response):
                stream.append(event)
                if kinds(stream) and kinds(stream)[-1] == "finish" and kinds(stream).count("finish") == 1:
                    await cluster.open_gate("research-tides")  # the first turn is over
    seen = kinds(stream)
    assert seen.count("start") == 2 and seen.count("finish") == 2, seen
    first_finish, second_start = seen.index("finish"), len(seen) - 1 - seen[::-1].index("start")
    assert first_finish < seen.index("background-task-completed") < second_start
    assert text(stream).endswith("All the research is in.")
    assert await cluster.tool_results() == [
        {"type": "json", "value": {"topic": "tides", "summary": "tides is fast"}}
    ]  # the task's result, written into the first turn's message, once
    started = await worker.expect(lambda line: line.get("tool") == "research")
    assert started["topic"] == "tides" and started["pid"] == worker.pid


async def test_an_approval_continued_until_idle_is_merged_by_a_durable_flow(cluster: Cluster) -> None:
    """``approve_tool_call(until_idle=True)`` on a durable run: the approved call starts a
    background task; the flow ``runstream-idle-<runId>`` on the worker follows the continuation
    and the task and runs the continuation turn, so another API process reads the whole stream
    from the flow's log."""
    worker = await cluster.start_worker(WORKER)
    memory = {"thread": "survey", "resource": "u1"}
    async with runtime() as rt, runtime() as elsewhere:
        agent = rt.get_agent("durable")
        asked = await agent.stream("survey dunes", memory=memory)
        assert [c.type async for c in asked.full_stream][-1] == "tool-call-approval"
        approved = await agent.approve_tool_call(run_id=asked.run_id, until_idle=True)
        seen: list[AnyChunk] = []
        async with asyncio.timeout(60):
            async for chunk in approved.full_stream:
                seen.append(chunk)
                if chunk.type == "finish" and [c.type for c in seen].count("finish") == 1:
                    await cluster.open_gate("survey-dunes")  # the continuation is over
        types = [c.type for c in seen]
        assert types.count("finish") == 2, types  # the approved turn's, the continuation turn's
        assert types.index("finish") < types.index("background-task-completed") < types.index("start")
        assert "".join(c.payload["text"] for c in seen if c.type == "text-delta").endswith(
            "All the research is in."
        )
        approved_turn = seen[: types.index("finish")]  # the aggregates describe it (as in-process)
        assert await approved.text == "".join(
            c.payload["text"] for c in approved_turn if c.type == "text-delta"
        )
        assert (await approved.text).startswith("survey dunes gave ")
        here, runs = rt.durable_runs, elsewhere.durable_runs
        assert isinstance(here, TemporalRuns) and isinstance(runs, TemporalRuns)
        assert await here.client.get_workflow_handle(f"runstream-idle-{asked.run_id}").result() == "ended"
        logged = [json.loads(data)["type"] async for _, data in runs.read_flow(asked.run_id, 0)]
        assert logged == types
    started = await worker.expect(lambda line: line.get("tool") == "survey")
    assert started["pid"] == worker.pid


class ProcessDied(BaseException):
    """Stands for the API process dying where it is raised (nothing after it runs)."""


async def test_an_api_process_lost_between_starting_a_continuations_flow_and_answering_leaves_no_run_flow_less(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``approve_tool_call(until_idle=True)``: the API process starts the flow (with the
    answer), then dies before it hands the run the answer. The flow hands it: the approved call
    runs, its background task completes and the continuation turn follows, all in the flow's
    stream that another API process reads."""
    worker = await cluster.start_worker(WORKER)
    memory = {"thread": "lost-answer", "resource": "u1"}
    async with runtime() as rt, runtime() as elsewhere:
        agent = rt.get_agent("durable")
        asked = await agent.stream("survey reefs", memory=memory)
        assert [c.type async for c in asked.full_stream][-1] == "tool-call-approval"
        here, runs = rt.durable_runs, elsewhere.durable_runs
        assert isinstance(here, TemporalRuns) and isinstance(runs, TemporalRuns)

        async def died(run_id: str, answer: object) -> None:
            raise ProcessDied

        monkeypatch.setattr(here, "hand_answer", died)
        with pytest.raises(ProcessDied):
            await agent.approve_tool_call(run_id=asked.run_id, until_idle=True)
        seen: list[str] = []
        async with asyncio.timeout(90):
            async for _, data in runs.read_flow(asked.run_id, 0):
                seen.append(json.loads(data)["type"])
                if seen[-1] == "finish" and seen.count("finish") == 1:
                    await cluster.open_gate("survey-reefs")  # the approved turn is over
        assert seen.count("finish") == 2 and seen.count("tool-result") == 1, seen
        assert seen.index("finish") < seen.index("background-task-completed") < seen.index("start")
        flow = runs.client.get_workflow_handle(f"runstream-idle-{asked.run_id}")
        assert await flow.result() == "ended"
    started = await worker.expect(lambda line: line.get("tool") == "survey")
    assert started["topic"] == "reefs"


async def test_an_answer_the_run_does_not_wait_for_is_refused_and_its_flow_dropped(cluster: Cluster) -> None:
    """An until-idle continuation whose answer the run's workflow refuses (its validator: a
    call it does not wait for): refused as before, and the flow started for it ends (its
    stream ended, at most with an ``error``), so a later flow of the run can start."""
    await cluster.start_worker(WORKER)
    async with runtime() as rt:
        agent = rt.get_agent("durable")
        asked = await agent.stream("wire 3", memory={"thread": "refused", "resource": "u1"})
        assert [c.type async for c in asked.full_stream][-1] == "tool-call-approval"
        runs = rt.durable_runs
        assert isinstance(runs, TemporalRuns)
        found = await agent._stopped.find(asked.run_id, agent._run_storage())
        assert found is not None
        token = durable_flow.set(FlowRequest(True))
        try:
            with pytest.raises(StateConflictError, match="not waiting for approval"):
                await runs.continue_run(
                    "durable", found.state, ResumeAction("approve", "nope"), found.options
                )
        finally:
            durable_flow.reset(token)
        flow = runs.client.get_workflow_handle(f"runstream-idle-{asked.run_id}")
        assert (await flow.describe()).status != WorkflowExecutionStatus.RUNNING
        ended = [json.loads(data)["type"] async for _, data in runs.read_flow(asked.run_id, 0)]
        assert ended in ([], ["error", "finish"])
        approved = await agent.approve_tool_call(run_id=asked.run_id, until_idle=True)
        chunks = [c async for c in approved.full_stream]
        assert chunks[-1].type == "finish" and [c.type for c in chunks].count("error") == 0
        said = "".join(c.payload["text"] for c in chunks if c.type == "text-delta")
        assert said == 'wire 3 gave {"sent": 3} as you asked'


__all__ = ["cluster", "postgres_problem"]  # the fixtures


async def test_a_durable_run_streams_the_chunks_of_an_in_process_run(cluster: Cluster) -> None:
    """The same agent, in-process and durable: the same chunks (types, text, tool payloads),
    for a run with a tool and for one stopped for an approval and approved."""
    await cluster.start_worker(WORKER)
    local = Runstream(agents=[build_agent()], background_tasks={"enabled": True})
    durable = runtime()
    async with local, durable:
        streams: dict[str, list[list[AnyChunk]]] = {}
        aggregates: dict[str, list[tuple[Any, ...]]] = {}
        for name, rt in (("local", local), ("durable", durable)):
            await cluster.open_gate("lookup-sol")
            agent = rt.get_agent("durable")
            looked = await agent.stream("lookup sol", memory={"thread": f"look-{name}", "resource": "u1"})
            asked = await agent.stream("wire 7", memory={"thread": f"wire-{name}", "resource": "u1"})
            runs = [[c async for c in looked.full_stream], [c async for c in asked.full_stream]]
            aggregates[name] = [await totals(looked), await totals(asked)]  # (before the approval)
            call_id = next(c.payload["toolCallId"] for c in runs[1] if c.type == "tool-call-approval")
            approved = await agent.approve_tool_call(run_id=asked.run_id, tool_call_id=call_id)
            runs.append([c async for c in approved.full_stream])
            assert await approved.text == 'wire 7 gave {"sent": 7} as you asked'  # the aggregates too
            streams[name] = runs
            aggregates[name].append(await totals(approved))
    for local_run, durable_run in zip(streams["local"], streams["durable"], strict=True):
        assert [c.type for c in durable_run] == [c.type for c in local_run]
        assert comparable(durable_run) == comparable(local_run)
    assert aggregates["durable"] == aggregates["local"]


async def totals(out: RunOutput) -> tuple[Any, ...]:
    """A run's aggregates that must match between two runs of one script."""
    calls = [(c.payload["toolName"], c.payload["args"]) for c in await out.tool_calls]
    return await out.text, await out.finish_reason, await out.usage, calls


async def test_a_durable_until_idle_streams_aggregates_are_the_in_process_ones(cluster: Cluster) -> None:
    """The aggregates of an until-idle stream describe its first turn (as in-process): a durable
    flow's output takes them from the first turn's final state once the flow's stream ends
    (they were empty: nothing filled the output's state)."""
    await cluster.start_worker(WORKER)
    local = Runstream(agents=[build_agent()], background_tasks={"enabled": True})
    durable = runtime()
    aggregates: dict[str, tuple[Any, ...]] = {}
    async with local, durable:
        for name, rt in (("local", local), ("durable", durable)):
            out = await rt.get_agent("durable").stream(
                f"research {name}", memory={"thread": f"idle-{name}", "resource": "u1"}, until_idle=True
            )
            seen: list[AnyChunk] = []
            async with asyncio.timeout(60):
                async for chunk in out.full_stream:
                    seen.append(chunk)
                    if chunk.type == "finish" and [c.type for c in seen].count("finish") == 1:
                        await cluster.open_gate(f"research-{name}")  # the first turn is over
            first_turn = seen[: [c.type for c in seen].index("finish") + 1]
            text, reason, usage, calls = await totals(out)
            assert text == "".join(c.payload["text"] for c in first_turn if c.type == "text-delta")
            assert text.startswith(f"research {name} gave ") and calls == [("research", {"topic": name})]
            assert reason == first_turn[-1].payload["stepResult"]["reason"] == "stop"
            assert usage["totalTokens"] > 0
            aggregates[name] = (text.replace(name, "X").split("Task ID")[0], reason, usage, len(calls))
    assert aggregates["durable"] == aggregates["local"]


def comparable(chunks: list[AnyChunk]) -> list[Any]:
    """What must match between two runs of one script (not ids, times or the model's request)."""
    kept = ("text", "toolName", "args", "result", "finishReason", "reason", "isContinued")
    out: list[Any] = []
    for chunk in chunks:
        payload = chunk.payload if isinstance(chunk.payload, dict) else {}
        out.append((chunk.type, {key: payload[key] for key in kept if key in payload}))
    return out


async def test_aborting_a_durable_run_mid_tool_ends_it_where_it_runs(cluster: Cluster) -> None:
    """The API process's abort (a client gone, ``POST /runs/:id/abort``) reaches the worker
    running the step: its tool is stopped (``tool-error``) and the run ends with ``abort`` and
    ``finish``, as an in-process run aborted while its tool runs."""
    worker = await cluster.start_worker(WORKER)
    async with runtime() as durable:
        out = await durable.get_agent("durable").stream("lookup never", memory=MEMORY)
        chunks = []
        async with asyncio.timeout(60):
            async for chunk in out.full_stream:
                chunks.append(chunk)
                if chunk.type == "tool-call":
                    await worker.expect(lambda line: line.get("tool") == "lookup")  # it runs
                    with pytest.raises(StateConflictError, match="already running"):
                        await durable.get_agent("durable").stream("lookup twice", run_id=out.run_id)
                    out.abort("the user left")
    assert [c.type for c in chunks[-3:]] == ["tool-error", "abort", "finish"]
    assert chunks[-3].payload["error"]["message"] == "Tool execution aborted"
    assert out.state.status == "aborted" and out.state.finish_reason == "aborted"


async def test_a_suspended_tool_is_resumed_and_an_approval_declined_and_answered_once(
    cluster: Cluster,
) -> None:
    """Resume and decline reach the waiting workflow as updates; two answers to one wait at the
    same time: one continues the run, the other is refused (409 on the server)."""
    worker = await cluster.start_worker(WORKER)
    async with runtime() as rt:
        agent = rt.get_agent("durable")
        asked = await agent.stream("confirm colour", memory=MEMORY)
        suspended = [c async for c in asked.full_stream]
        assert suspended[-1].type == "tool-call-suspended" and asked.state.status == "suspended"
        resumed = await agent.resume_stream({"pick": "blue"}, run_id=asked.run_id)
        assert (
            await resumed.text
            == 'confirm colour gave {"answer": {"pick": "blue"}, "topic": "colour"} as you asked'
        )
        ran = await worker.expect(lambda line: line.get("tool") == "confirm")
        assert ran["data"] == {"pick": "blue"}

        wired = await agent.stream("wire 9", memory={"thread": "t2", "resource": "u1"})
        await wired.consume()
        answers = await asyncio.gather(
            agent.decline_tool_call(run_id=wired.run_id, reason="too much"),
            agent.approve_tool_call(run_id=wired.run_id),
            return_exceptions=True,
        )
        outputs = [a for a in answers if isinstance(a, RunOutput)]
        refused = [a for a in answers if isinstance(a, BaseException)]
        assert len(outputs) == 1 and len(refused) == 1, answers
        # refused by the workflow (the update validator) or, once the run went on, by the agent
        assert isinstance(refused[0], StateConflictError | RunNotFoundError), refused
        continued = [c.type async for c in outputs[0].full_stream]
        assert continued[-1] == "finish"
        assert ("tool-output-denied" in continued) != ("tool-result" in continued)  # one answer won


async def test_a_step_run_again_cancels_the_background_task_its_lost_attempt_started(
    cluster: Cluster,
) -> None:
    """B runs a step that starts a background task and a foreground tool, and dies; C runs the
    step again, which cancels the task B's attempt started and starts its own: one task
    completes, its result reaches the turn in memory, and the run's chunks hold each call once."""
    b = await cluster.start_worker(WORKER)
    async with runtime() as rt:
        manager = rt.task_manager
        assert isinstance(manager, TemporalTaskManager)
        out = await rt.get_agent("durable").stream("both moon", memory=MEMORY)
        await b.expect(lambda line: line.get("tool") == "lookup")
        await b.expect(lambda line: line.get("tool") == "research")
        await b.kill()
        c = await cluster.start_worker(WORKER)
        await c.expect(lambda line: line.get("tool") == "lookup")  # the step again
        for _ in range(2):  # the lost task's retry may take one before it is cancelled
            await cluster.open_gate("research-moon")
        await cluster.open_gate("lookup-moon")
        async with asyncio.timeout(60):
            seen = [chunk.type async for chunk in out.full_stream]
        assert seen.count("tool-call") == 2 and seen.count("tool-result") == 2 and seen[-1] == "finish"
        tasks = (await manager.list_tasks(TaskFilter(run_id=out.run_id))).items
        assert len(tasks) == 2 and [t.status for t in tasks].count("cancelled") == 1, tasks
        (kept,) = [t for t in tasks if t.status != "cancelled"]
        assert (await manager.wait_for(kept.id, timeout_ms=60_000)).status == "completed"
    # The run is over and the task completed: its result is in the saved turn, once.
    assert await cluster.tool_results() == [
        {"type": "json", "value": {"topic": "moon", "summary": "moon is fast"}},
        {"type": "json", "value": {"topic": "moon", "fact": "moon is bright"}},
    ]


async def test_bad_options_fail_the_call_as_in_process(cluster: Cluster) -> None:
    async with runtime() as rt:
        with pytest.raises(ValueError, match="active_tools names no tool: 'nope'"):
            await rt.get_agent("durable").stream("lookup x", active_tools=["nope"])


async def test_a_durable_run_on_a_thread_with_a_goal_is_judged_as_in_process(cluster: Cluster) -> None:
    """The goal's signal, the judge's verdicts and the judged turn's chunks are the same as an
    in-process run's, and the goal is done in storage."""
    await cluster.start_worker(WORKER)
    local = Runstream(agents=[build_poet()])
    durable = runtime()
    streams: dict[str, list[AnyChunk]] = {}
    async with local, durable:
        for name, rt in (("local", local), ("durable", durable)):
            agent = rt.get_agent("poet")
            await agent.set_objective("Write a haiku with a title", thread_id=f"goal-{name}")
            out = await agent.stream("Write a haiku", memory={"thread": f"goal-{name}", "resource": "u1"})
            async with asyncio.timeout(60):
                streams[name] = [chunk async for chunk in out.full_stream]
            record = await agent.get_objective(thread_id=f"goal-{name}")
            assert record is not None and record.status == "done" and record.runs_used == 2
    assert [c.type for c in streams["durable"]] == [c.type for c in streams["local"]]
    assert comparable(streams["durable"]) == comparable(streams["local"])
    verdicts = [
        (c.payload["status"], c.payload["shouldContinue"])
        for c in streams["durable"]
        if c.type == "goal" and not c.payload.get("pending")
    ]
    assert verdicts == [("active", True), ("done", False)]


async def test_a_worker_stopping_gracefully_hands_its_step_to_another(cluster: Cluster) -> None:
    """SIGTERM to B mid-step: B lets the step run for its grace period, then cancels it and
    exits cleanly; the step runs again on C and the run ends once, with every chunk once."""
    b = await cluster.start_worker(WORKER)
    async with runtime() as rt:
        out = await rt.get_agent("durable").stream("lookup stars", memory=MEMORY)
        chunks: list[AnyChunk] = []
        async with asyncio.timeout(90):
            async for chunk in out.full_stream:
                chunks.append(chunk)
                if chunk.type == "tool-call":
                    await b.expect(lambda line: line.get("tool") == "lookup")
                    c = await cluster.start_worker(WORKER)
                    assert await b.stop() == 0  # graceful: the step is cancelled, not lost
                    await c.expect(lambda line: line.get("tool") == "lookup")
                    await cluster.open_gate("lookup-stars")
    seen = [c.type for c in chunks]
    assert seen.count("start") == 1 and seen.count("tool-call") == 1 and seen.count("tool-result") == 1
    assert seen[-1] == "finish" and out.state.status == "success"


async def test_a_run_past_its_history_limit_goes_on_as_a_new_workflow_run(cluster: Cluster) -> None:
    """With ``max_history_events=1`` the run's workflow continues as new at every human answer
    (carrying its state and the answer): a run stopped twice for approvals streams and ends as
    one without, and its workflow's last run was started by a continue-as-new."""
    await cluster.start_worker(WORKER)
    durable = runtime(max_history_events=1)
    async with durable:
        agent = durable.get_agent("durable")
        memory = {"thread": "long", "resource": "u1"}
        streams = []
        for amount in (7, 8):
            asked = await agent.stream(f"wire {amount}", memory=memory)
            first = [chunk async for chunk in asked.full_stream]
            call_id = next(c.payload["toolCallId"] for c in first if c.type == "tool-call-approval")
            approved = await agent.approve_tool_call(run_id=asked.run_id, tool_call_id=call_id)
            streams.append((amount, first, [chunk async for chunk in approved.full_stream]))
            assert await approved.text == f'wire {amount} gave {{"sent": {amount}}} as you asked'
        runs = durable.durable_runs
        assert isinstance(runs, TemporalRuns)
        history = await runs.client.get_workflow_handle(
            TemporalRuns.workflow_id(asked.run_id)
        ).fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes
    assert started.continued_execution_run_id  # the run's last workflow run continued an earlier one
    for _, first, rest in streams:
        assert first[-1].type == "tool-call-approval" and [c.type for c in rest].count("tool-result") == 1
        assert "start" not in [c.type for c in rest] and rest[-1].type == "finish"


async def test_a_cap_of_two_durable_runs_runs_five_two_at_a_time_and_all_finish(cluster: Cluster) -> None:
    """``max_concurrent_runs=2`` on the workers: of five runs started at once, two run their
    tool while three wait their turn (queued in the slots, heartbeating); each run that ends
    lets the next one in, and all five finish. No slot is left held."""
    worker = await cluster.start_worker("durable_app:capped_runtime")
    async with runtime(max_concurrent_runs=2) as rt:
        runs = rt.durable_runs
        assert isinstance(runs, TemporalRuns) and runs.slots is not None
        slots = runs.slots
        agent = rt.get_agent("durable")
        outs = {
            f"cap{n}": await agent.stream(f"lookup cap{n}", memory={"thread": f"cap{n}", "resource": "u1"})
            for n in range(5)
        }
        finished = [asyncio.create_task(out.text) for out in outs.values()]
        started: list[str] = []

        async def next_start() -> None:
            line = await worker.expect(
                lambda line: line.get("tool") == "lookup" and line["topic"] not in started
            )
            started.append(line["topic"])

        async with asyncio.timeout(120):
            await next_start()
            await next_start()
            while len((state := await slots.state()).waiting) < 3:  # noqa: ASYNC110 (the worker's state)
                await asyncio.sleep(0.05)  # the three others queue
            assert sorted(state.holders) == sorted(outs[topic].run_id for topic in started)
            for n in range(5):
                await cluster.open_gate(f"lookup-{started[n]}")
                if len(started) < 5:
                    await next_start()  # the run that ended let the next one in
                    assert len((await slots.state()).holders) <= 2
            texts = await asyncio.gather(*finished)
        assert sorted(started) == sorted(outs)
        assert all(text.endswith("as you asked") for text in texts), texts
        assert (await slots.state()).holders == []
