"""Mastra's JSON routes beyond what client-js exercises: generate, tools, threads, tasks, runs."""

from __future__ import annotations

import json
import uuid

import httpx2 as httpx

from tests.server.conftest import Live, blocks, chunks_of, parse_block


def test_generate_returns_the_full_output(client: httpx.Client) -> None:
    out = client.post("/api/agents/assistant/generate", json={"messages": "weather in Paris?"}).json()
    assert out["text"] == 'Tool said: {"city": "Paris", "sky": "sunny", "celsius": 21}'
    assert out["finishReason"] == "stop" and out["status"] == "success"
    call = out["toolCalls"][0]
    assert (
        call["type"] == "tool-call" and call["payload"]["toolName"] == "get_weather"
    )  # client-js reads payload
    assert out["toolResults"][0]["payload"]["result"]["sky"] == "sunny"
    assert [m["role"] for m in out["response"]["messages"]] == ["assistant", "tool", "assistant"]
    assert all("request" not in step for step in out["steps"])
    assert out["usage"]["totalTokens"] == 16


def test_generate_stops_for_a_client_tool(client: httpx.Client) -> None:
    tools = {"clientEcho": {"id": "clientEcho", "inputSchema": {"type": "object"}}}
    out = client.post(
        "/api/agents/assistant/generate", json={"messages": "client", "clientTools": tools}
    ).json()
    assert out["finishReason"] == "tool-calls" and out["status"] == "success"
    assert out["toolCalls"][0]["payload"]["toolName"] == "clientEcho"


def test_per_request_options(client: httpx.Client) -> None:
    only_weather = {"messages": "delete it", "activeTools": ["get_weather"]}
    chunks = chunks_of(client.post("/api/agents/assistant/stream", json=only_weather).content)
    error = next(c for c in chunks if c["type"] == "tool-error")  # delete_file is not offered this time
    assert error["payload"]["toolName"] == "delete_file"
    gated = {"messages": "weather?", "requireToolApproval": True}
    chunks = chunks_of(client.post("/api/agents/assistant/stream", json=gated).content)
    assert chunks[-1]["type"] == "tool-call-approval" and chunks[-1]["payload"]["toolName"] == "get_weather"


def test_tools(client: httpx.Client) -> None:
    details = client.get("/api/agents/assistant/tools/delete_file").json()
    assert details["requireApproval"] is True and json.loads(details["inputSchema"])["json"]["required"] == [
        "path"
    ]
    bad = client.post("/api/tools/get_weather/execute", json={"data": {"town": "Oslo"}})
    # Mastra answers 200 with what to fix (client-js hands it back as the result, no HTTP error).
    assert bad.status_code == 200 and bad.json()["error"] is True
    assert "Tool input validation failed" in bad.json()["message"]
    assert "city" in json.dumps(bad.json()["validationErrors"])
    run = client.post("/api/agents/assistant/tools/get_weather/execute", json={"data": {"city": "Rome"}})
    assert run.json()["city"] == "Rome"
    for missing in ("/api/tools/nope", "/api/agents/assistant/tools/nope"):  # Mastra's 404 body
        assert client.get(missing).json() == {"error": "Tool not found"}


def test_thread_routes(client: httpx.Client) -> None:
    resource = f"r-{uuid.uuid4().hex[:6]}"
    made = client.post("/api/memory/threads?agentId=assistant", json={"resourceId": resource, "title": "a"})
    thread = made.json()
    assert thread["resourceId"] == resource and thread["title"] == "a" and thread["createdAt"].endswith("Z")
    assert "metadata" not in thread  # Mastra omits it for a thread created without
    assert "metadata" not in client.get(f"/api/memory/threads/{thread['id']}").json()
    tagged = client.post(
        "/api/memory/threads", json={"resourceId": resource, "title": "m", "metadata": {"k": 1}}
    )
    assert tagged.json()["metadata"] == {"k": 1}
    client.delete(f"/api/memory/threads/{tagged.json()['id']}")
    again = client.post("/api/memory/threads", json={"resourceId": resource, "threadId": thread["id"]})
    assert again.status_code == 409
    for title in ("b", "c"):
        client.post("/api/memory/threads", json={"resourceId": resource, "title": title})
    page = client.get(
        "/api/memory/threads",
        params={
            "resourceId": resource,
            "perPage": 2,
            "orderBy[field]": "createdAt",
            "orderBy[direction]": "ASC",
        },
    ).json()
    assert [t["title"] for t in page["threads"]] == ["a", "b"] and page["total"] == 3 and page["hasMore"]
    moved = client.patch(f"/api/memory/threads/{thread['id']}", json={"resourceId": "someone-else"})
    assert moved.status_code == 400
    assert client.get("/api/memory/threads").status_code == 400  # which resource?
    assert client.get("/api/memory/status", params={"agentId": "plain"}).json() == {"result": False}


def test_task_routes(live: Live, client: httpx.Client) -> None:
    topic = f"gated-{uuid.uuid4().hex[:6]}"
    body = {"messages": f"research {topic}", "memory": {"thread": f"t-{topic}", "resource": "tasker"}}
    with client.stream(
        "POST", "/api/agents/assistant/stream-until-idle?resumable=true", json=body
    ) as response:
        for block in blocks(response):
            _, data = parse_block(block)
            chunk = json.loads(data or "{}")
            if chunk.get("type") == "background-task-started":
                task_id, run_id = chunk["payload"]["taskId"], chunk["runId"]
                break
    resume = client.post(f"/api/background-tasks/{task_id}/resume", json={"resumeData": {}})
    assert resume.status_code == 409 and "expected 'suspended'" in resume.json()["error"]
    cancelled = client.post(f"/api/background-tasks/{task_id}/cancel").json()
    assert cancelled["status"] == "cancelled"
    live.gates.open(topic)
    listed = client.get("/api/background-tasks", params={"runId": run_id, "status": "cancelled"}).json()
    assert [t["id"] for t in listed["tasks"]] == [task_id]
    assert client.get("/api/background-tasks", params={"status": "bogus"}).status_code == 400
    assert client.get("/api/background-tasks", params={"fromDate": "yesterday"}).status_code == 400
    with client.stream("GET", f"/api/runs/{run_id}/stream") as response:
        kinds = [json.loads(d)["type"] for _, d in map(parse_block, blocks(response)) if d and d != "[DONE]"]
    assert "background-task-cancelled" in kinds and kinds[-1] == "finish"


def test_abort_a_detached_run(live: Live, client: httpx.Client) -> None:
    body = {"messages": "slow please"}
    with client.stream("POST", "/api/agents/assistant/stream?resumable=true", json=body) as response:
        first_id, _ = parse_block(next(blocks(response)))
    assert first_id is not None
    run_id = first_id.rpartition(":")[0]
    assert client.post(f"/api/runs/{run_id}/abort").json() == {"runId": run_id, "aborted": True}
    with client.stream("GET", f"/api/runs/{run_id}/stream") as response:
        kinds = [json.loads(d)["type"] for _, d in map(parse_block, blocks(response)) if d and d != "[DONE]"]
    assert kinds[-2:] == ["abort", "finish"]
    assert client.post(f"/api/runs/{run_id}/abort").json()["aborted"] is False


def test_resume_a_suspended_tool(client: httpx.Client) -> None:
    memory = {"thread": f"t-{uuid.uuid4().hex[:6]}", "resource": "orderer"}
    chunks = chunks_of(
        client.post("/api/agents/assistant/stream", json={"messages": "order tea", "memory": memory}).content
    )
    suspended = chunks[-1]
    assert suspended["type"] == "tool-call-suspended" and suspended["payload"]["suspendPayload"] == {
        "confirm": "Order tea?"
    }
    body = {
        "runId": suspended["runId"],
        "toolCallId": suspended["payload"]["toolCallId"],
        "resumeData": {"confirmed": True},
    }
    resumed = chunks_of(client.post("/api/agents/assistant/resume-stream", json=body).content)
    result = next(c for c in resumed if c["type"] == "tool-result")
    assert result["payload"]["result"] == {"item": "tea", "confirmed": True}
    assert resumed[-1]["type"] == "finish" and all(c["runId"] == suspended["runId"] for c in resumed)
    again = client.post("/api/agents/assistant/resume-stream", json=body)
    assert again.status_code == 404  # the run is no longer waiting


def test_resume_a_suspended_background_task(client: httpx.Client) -> None:
    memory = {"thread": f"t-{uuid.uuid4().hex[:6]}", "resource": "asker"}
    body = {"messages": "research ask-corals", "memory": memory}
    chunks = chunks_of(client.post("/api/agents/assistant/stream-until-idle", json=body).content)
    suspended = next(c for c in chunks if c["type"] == "background-task-suspended")["payload"]
    assert suspended["suspendPayload"] == {"question": "Which aspect of ask-corals?"}
    resume = {
        "runId": suspended["runId"],
        "toolCallId": suspended["toolCallId"],
        "resumeData": {"focus": "reefs"},
    }
    events = chunks_of(client.post("/api/agents/assistant/resume-stream", json=resume).content)
    assert [e["type"] for e in events] == [
        "background-task-resumed",
        "background-task-output",
        "background-task-completed",
    ]
    assert events[-1]["payload"]["result"] == {
        "topic": "ask-corals",
        "summary": "ask-corals explained",
        "focus": "reefs",
    }
    assert client.get(f"/api/background-tasks/{suspended['taskId']}").json()["status"] == "completed"


def test_suspended_runs(client: httpx.Client) -> None:
    thread = f"t-{uuid.uuid4().hex[:6]}"
    memory = {"thread": thread, "resource": "lister"}
    stopped = {}
    for prompt in ("delete it", "order tea"):
        chunks = chunks_of(
            client.post("/api/agents/assistant/stream", json={"messages": prompt, "memory": memory}).content
        )
        stopped[prompt] = chunks[-1]
    listed = client.get(f"/api/agents/assistant/suspended-runs?threadId={thread}").json()
    assert listed["total"] == 2
    by_run = {run["runId"]: run for run in listed["runs"]}
    approval = by_run[stopped["delete it"]["runId"]]
    assert approval["status"] == "suspended" and approval["threadId"] == thread
    assert approval["resourceId"] == "lister" and approval["suspendedAt"].endswith("Z")
    assert approval["toolCalls"] == [
        {
            "toolCallId": stopped["delete it"]["payload"]["toolCallId"],
            "toolName": "delete_file",
            "args": {"path": "/tmp/report.txt"},
            "requiresApproval": True,
        }
    ]
    order = by_run[stopped["order tea"]["runId"]]["toolCalls"][0]
    assert order["requiresApproval"] is False and order["suspendPayload"] == {"confirm": "Order tea?"}
    newest = client.get(f"/api/agents/assistant/suspended-runs?threadId={thread}&perPage=1").json()
    assert newest["total"] == 2 and [r["runId"] for r in newest["runs"]] == [stopped["order tea"]["runId"]]

    run_id = stopped["delete it"]["runId"]
    client.post("/api/agents/assistant/approve-tool-call", json={"runId": run_id}).raise_for_status()
    left = client.get(f"/api/agents/assistant/suspended-runs?threadId={thread}").json()
    assert [r["runId"] for r in left["runs"]] == [stopped["order tea"]["runId"]]
    assert client.get("/api/agents/assistant/suspended-runs?resourceId=nobody").json() == {
        "runs": [],
        "total": 0,
    }
    assert client.get("/api/agents/assistant/suspended-runs?perPage=0").status_code == 400
    assert client.get("/api/agents/nope/suspended-runs").status_code == 404


def test_a_continuation_takes_stream_options(client: httpx.Client) -> None:
    """client-js sends stream options next to ``runId`` (Mastra's ``approveToolCall({runId,
    ...options})``): they act on the continued run; a bad one is a 400 that leaves the run waiting."""
    body = {"messages": "delete it", "memory": {"thread": f"t-{uuid.uuid4().hex[:6]}", "resource": "tester"}}
    approval = chunks_of(client.post("/api/agents/assistant/stream", json=body).content)[-1]
    assert approval["type"] == "tool-call-approval"
    ids = {"runId": approval["runId"], "toolCallId": approval["payload"]["toolCallId"]}
    assert (
        client.post("/api/agents/assistant/approve-tool-call", json={**ids, "maxSteps": "x"}).status_code
        == 400
    )
    moved = client.post(
        "/api/agents/assistant/approve-tool-call", json={**ids, "memory": {"thread": "other"}}
    )
    assert moved.status_code == 400 and "memory" in moved.text
    approved = chunks_of(
        client.post("/api/agents/assistant/approve-tool-call", json={**ids, "maxSteps": 1}).content
    )
    assert [c["type"] for c in approved] == ["tool-result", "step-finish", "finish"]  # no answer step
