"""Workflows over HTTP: discovery, runs that suspend and resume, cancel, observe, listings, and
the 4xx answers given before anything runs."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2 as httpx

from runstream.runtime import Runstream
from runstream.server import create_app
from runstream.server.auth import Principal, open_access
from runstream.server.run_ids import run_key
from runstream.storage import SqliteStorage, Storage
from tests.server.agents import Gates, build_workflows
from tests.server.conftest import Live, serve
from tests.server.test_auth_and_isolation import by_token

W = "/api/workflows/approval"


def records(raw: bytes) -> list[dict[str, Any]]:
    """The chunks of a complete workflow stream: JSON records, each ended by ``\\x1e``."""
    assert raw.endswith(b"\x1e")
    return [json.loads(record) for record in raw.split(b"\x1e")[:-1]]


def live_records(response: httpx.Response) -> Iterator[dict[str, Any]]:
    buffer = b""
    for data in response.iter_raw():
        buffer += data
        while b"\x1e" in buffer:
            record, buffer = buffer.split(b"\x1e", 1)
            yield json.loads(record)


def kinds(chunks: list[dict[str, Any]]) -> list[str]:
    return [c["type"] for c in chunks]


def start_suspended(client: httpx.Client, topic: str = "tides", **create: Any) -> str:
    run_id: str = client.post(f"{W}/create-run", json=create).json()["runId"]
    response = client.post(f"{W}/stream?runId={run_id}", json={"inputData": {"topic": topic}})
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    assert records(response.content)[-1]["payload"]["workflowStatus"] == "suspended"
    return run_id


def test_discovery(client: httpx.Client) -> None:
    listed = client.get("/api/workflows").json()
    assert sorted(listed) == ["approval", "gated"]
    info = listed["approval"]
    assert info["name"] == "approval" and info["description"] == "Draft, review, publish"
    assert json.loads(info["inputSchema"]) == {
        "json": json.loads(info["steps"]["draft"]["inputSchema"])["json"]
    }
    assert json.loads(info["steps"]["review"]["resumeSchema"])["json"]["required"] == ["approved"]
    assert [e["step"]["id"] for e in info["stepGraph"]] == ["draft", "review", "publish"]
    assert info["allSteps"].keys() == info["steps"].keys()
    partial = client.get("/api/workflows?partial=true").json()["approval"]
    assert "inputSchema" not in partial and "inputSchema" not in partial["steps"]["draft"]
    assert client.get(W).json() == info
    missing = client.get("/api/workflows/nope")
    assert missing.status_code == 404 and missing.json() == {"error": "Workflow not found"}


def test_stream_suspend_resume(client: httpx.Client) -> None:
    run_id = start_suspended(client, resourceId="user-7")
    details = client.get(f"{W}/runs/{run_id}").json()
    assert details["status"] == "suspended" and details["resourceId"] == "user-7"
    assert details["payload"] == {"topic": "tides"} and list(details["steps"]) == ["draft", "review"]
    assert details["createdAt"].endswith("Z") and details["createdAt"] <= details["updatedAt"]
    listed = client.get(f"{W}/runs?status=suspended&resourceId=user-7").json()
    assert listed["total"] == 1 and listed["runs"][0]["runId"] == run_id
    assert listed["runs"][0]["snapshot"]["suspendedPaths"] == {"review": [1]}
    # As Mastra's snapshot: the entry running when it was saved, the steps started so far.
    assert listed["runs"][0]["snapshot"]["activePaths"] == [1]
    assert listed["runs"][0]["snapshot"]["stepExecutionPath"] == ["draft", "review"]
    assert client.get("/api/workflows/run-counts").json()["approval"]["suspended"] >= 1

    resumed = client.post(f"{W}/resume-stream?runId={run_id}", json={"resumeData": {"approved": True}})
    chunks = records(resumed.content)
    assert kinds(chunks) == [
        "workflow-start",
        "workflow-step-start",
        "workflow-step-result",
        "workflow-step-start",
        "workflow-step-result",
        "workflow-finish",
    ]
    assert all(c["runId"] == run_id for c in chunks)
    assert chunks[1]["payload"]["resumePayload"] == {"approved": True}
    assert chunks[-1]["payload"]["finalWorkflowResult"] == {"published": True, "text": "A post about tides"}
    done = client.get(f"{W}/runs/{run_id}?fields=result").json()
    assert done["status"] == "success" and done["result"]["published"] is True and "steps" not in done
    assert client.get(f"{W}/runs?status=suspended&resourceId=user-7").json()["total"] == 0
    finished = client.get(f"{W}/runs?resourceId=user-7").json()["runs"]
    (snapshot,) = [r["snapshot"] for r in finished if r["runId"] == run_id]
    assert snapshot["activePaths"] == [2] and snapshot["stepExecutionPath"] == ["draft", "review", "publish"]


def test_json_variants(client: httpx.Client) -> None:
    started = client.post(f"{W}/start-async", json={"inputData": {"topic": "moss"}}).json()
    assert started["status"] == "suspended" and started["suspended"] == [["review"]]
    assert started["suspendPayload"] == {"review": {"draft": "A post about moss", "question": "Publish it?"}}
    run_id = next(
        r["runId"]
        for r in client.get(f"{W}/runs").json()["runs"]
        if r["snapshot"]["context"]["input"] == {"topic": "moss"}
    )
    answer = client.post(
        f"{W}/resume-async?runId={run_id}", json={"step": "review", "resumeData": {"approved": False}}
    )
    assert answer.json() == {
        "status": "success",
        "steps": answer.json()["steps"],
        "input": {"topic": "moss"},
        "result": {"published": False, "note": ""},
    }
    other = client.post(f"{W}/create-run", json={}).json()["runId"]
    assert client.post(f"{W}/start?runId={other}", json={"inputData": {"topic": "x"}}).json() == {
        "message": "Workflow run started"
    }


def test_mistakes_are_4xx_before_anything_runs(client: httpx.Client) -> None:
    def error(response: httpx.Response, status: int) -> str:
        assert response.status_code == status, response.text
        return str(response.json()["error"])

    assert error(client.post(f"{W}/stream", json={}), 400) == "runId required to stream workflow"
    ghost = f"ghost-{uuid.uuid4().hex[:6]}"
    bad = client.post(f"{W}/stream?runId={ghost}", json={"inputData": {"topic": 3}})
    assert "topic: Invalid input: expected string, received number" in error(bad, 400)
    assert error(client.get(f"{W}/runs/{ghost}"), 404) == "Workflow run not found"  # nothing was stored
    per_step = client.post(f"{W}/stream?runId={ghost}", json={"inputData": {"topic": "a"}, "perStep": True})
    assert "perStep" in error(per_step, 400)

    run_id = start_suspended(client)
    again = client.post(f"{W}/stream?runId={run_id}", json={"inputData": {"topic": "tides"}})
    assert "already started" in error(again, 409)
    wrong_data = client.post(f"{W}/resume-stream?runId={run_id}", json={"resumeData": {"approved": "yes"}})
    assert "approved: Invalid input: expected boolean" in error(wrong_data, 400)
    wrong_step = client.post(f"{W}/resume-stream?runId={run_id}", json={"step": "draft", "resumeData": {}})
    assert 'step "draft" was not suspended' in error(wrong_step, 400)
    index = client.post(f"{W}/resume?runId={run_id}", json={"resumeData": {}, "forEachIndex": -1})
    assert "forEachIndex" in error(index, 400)
    assert (
        error(client.post(f"{W}/resume?runId={ghost}", json={"resumeData": {}}), 404)
        == "Workflow run not found"
    )
    assert "status" in error(client.get(f"{W}/runs?status=lost"), 400)
    pending = client.post(f"{W}/create-run", json={}).json()["runId"]
    assert "not suspended" in error(client.post(f"{W}/resume?runId={pending}", json={"resumeData": {}}), 409)
    assert client.get(f"{W}/runs/{run_id}").json()["status"] == "suspended"  # still resumable
    taken = client.post(f"/api/workflows/gated/create-run?runId={run_id}", json={})
    assert "taken by another workflow" in error(taken, 409)
    assert "taken" in error(client.post(f"/api/workflows/gated/stream?runId={run_id}", json={}), 409)


def test_cancel_a_running_run_while_observing(live: Live, client: httpx.Client) -> None:
    gate = f"gate-{uuid.uuid4().hex[:6]}"
    run_id = client.post("/api/workflows/gated/create-run", json={}).json()["runId"]
    started = client.post(f"/api/workflows/gated/start?runId={run_id}", json={"inputData": {"gate": gate}})
    assert started.status_code == 200
    seen: list[dict[str, Any]] = []
    with client.stream("POST", f"/api/workflows/gated/observe?runId={run_id}") as response:
        for chunk in live_records(response):
            seen.append(chunk)
            if chunk["type"] == "workflow-step-start":
                assert client.get(f"/api/workflows/gated/runs/{run_id}").json()["status"] == "running"
                cancelled = client.post(f"/api/workflows/gated/runs/{run_id}/cancel")
                assert cancelled.json() == {"message": "Workflow run cancelled"}
                live.gates.open(gate)
    assert kinds(seen) == [
        "workflow-start",
        "workflow-step-start",
        "workflow-step-result",
        "workflow-canceled",
        "workflow-finish",
    ]
    assert seen[-1]["payload"]["workflowStatus"] == "canceled"
    assert client.get(f"/api/workflows/gated/runs/{run_id}").json()["status"] == "canceled"
    tail = client.post(f"/api/workflows/gated/observe?runId={run_id}&offset=3").content
    assert kinds(records(tail)) == ["workflow-canceled", "workflow-finish"]
    unknown = client.post(f"/api/workflows/gated/observe?runId=nope-{gate}")
    assert unknown.status_code == 404


def test_delete_run(client: httpx.Client) -> None:
    run_id = start_suspended(client)
    assert client.delete(f"{W}/runs/{run_id}").json() == {"message": "Workflow run deleted"}
    assert client.get(f"{W}/runs/{run_id}").status_code == 404
    assert client.post(f"{W}/runs/{run_id}/cancel").status_code == 404


def test_runs_belong_to_their_resource(backend_store: Storage, app_factory: Callable[..., str]) -> None:
    url = app_factory(auth=by_token, storage=backend_store)

    def user(name: str) -> httpx.Client:
        return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {name}"}, timeout=20)

    with user("alice") as alice, user("bob") as bob, user("admin") as admin:
        run_id = start_suspended(alice)
        assert alice.get(f"{W}/runs/{run_id}").json()["resourceId"] == "alice"
        assert bob.get(f"{W}/runs/{run_id}").status_code == 404
        assert (
            bob.post(f"{W}/resume?runId={run_id}", json={"resumeData": {"approved": True}}).status_code == 404
        )
        assert bob.post(f"{W}/runs/{run_id}/cancel").status_code == 404
        assert bob.post(f"{W}/observe?runId={run_id}").status_code == 404
        assert bob.get(f"{W}/runs").json() == {"runs": [], "total": 0}
        assert bob.get(f"{W}/runs?resourceId=alice").status_code == 403
        assert bob.post(f"{W}/create-run", json={"resourceId": "alice"}).status_code == 403
        # An unconfined caller (an operator) sees the id alice's run is stored under: run ids
        # are per tenant (server/run_ids.py), and this one names it among every tenant's.
        stored = run_key(Principal("alice", "alice"), run_id)
        assert [r["runId"] for r in admin.get(f"{W}/runs").json()["runs"]] == [stored]
        assert admin.get(f"{W}/runs/{stored}").json()["resourceId"] == "alice"
        assert (
            alice.post(f"{W}/resume-async?runId={run_id}", json={"resumeData": {"approved": True}}).json()[
                "status"
            ]
            == "success"
        )


def test_pages(app_factory: Callable[..., str]) -> None:
    with httpx.Client(base_url=app_factory(), timeout=20) as client:
        ids = [client.post(f"{W}/create-run", json={}).json()["runId"] for _ in range(3)]
        first = client.get(f"{W}/runs?page=0&perPage=2").json()
        second = client.get(f"{W}/runs?page=1&perPage=2").json()
        assert first["total"] == second["total"] == 3
        assert [r["runId"] for r in first["runs"] + second["runs"]] == ids[::-1]  # newest first
        assert client.get(f"{W}/runs?offset=2&limit=2").json()["runs"] == second["runs"]
        assert {r["snapshot"]["status"] for r in first["runs"]} == {"pending"}


def test_a_suspended_run_resumes_in_a_new_process(tmp_path: Path) -> None:
    def server() -> Any:
        runtime = Runstream(
            workflows=build_workflows(Gates()), storage=SqliteStorage(str(tmp_path / "wf.db"))
        )
        return serve(create_app(runtime, auth=open_access))

    with server() as url, httpx.Client(base_url=url, timeout=20) as first:
        run_id = start_suspended(first, resourceId="r-1")
    with server() as url, httpx.Client(base_url=url, timeout=20) as second:
        assert second.get(f"{W}/runs/{run_id}").json()["status"] == "suspended"
        resumed = second.post(f"{W}/resume-stream?runId={run_id}", json={"resumeData": {"approved": True}})
        assert records(resumed.content)[-1]["payload"]["workflowStatus"] == "success"
        listed = second.get(f"{W}/runs?resourceId=r-1").json()["runs"]
        assert [(r["runId"], r["snapshot"]["status"]) for r in listed] == [(run_id, "success")]
