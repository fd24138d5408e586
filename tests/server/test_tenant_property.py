"""Two tenants, random interleavings (issue 25): a stateful property test of isolation.

Hypothesis drives a server with two confined callers, A and B (the security kit's, on SQLite
and on PostgreSQL), through random sequences of what a tenant does — make threads, run agents
(stream, generate, until-idle, resumable), stop for approval and approve or decline, start
and resume workflow runs — interleaved with attacks: one tenant names the other's thread, run,
tool call, background task or workflow run on every route that takes one. After every attack:

- the answer is exactly the answer to the same request with an id that does not exist (status
  and body, the ids masked), where a missing id is refused too; where a missing id would create
  something (a thread that ``send-message`` would start), the answer is a 404 all the same;
- the owner's view of the object (what it reads of it) is unchanged;
- no request of the run is a 5xx, and a tenant's lists never hold the other's objects.

Bounded and reproducible: ``derandomize=True`` (the same examples on every run, CI included),
``MAX_EXAMPLES`` examples of at most ``STEPS`` steps.

Run ids are per tenant: an attack that starts a run under the other tenant's run id (``stream``,
``generate``, ``?resumable=true``, a workflow's ``create-run`` and ``start``) must answer as with
an unused id and name the run by the id the attacker chose; the id is then the attacker's own
too, and no later attack of that tenant names it.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    precondition,
    rule,
    run_state_machine_as_test,
)

from tests.server.conftest import BACKENDS
from tests.server.security_kit import Secured, secured_server

MAX_EXAMPLES = 10
NO_CALL = "call-none"
"""The tool call id an attack names when its target has no call waiting."""
STEPS = 25
TENANTS = ("a", "b")
AGENT = "/api/agents/assistant"
WORKFLOW = "/api/workflows/approval"


@dataclass
class Owned:
    """What one tenant has made: its ids, by kind."""

    threads: list[str] = field(default_factory=list)
    approvals: list[tuple[str, str]] = field(default_factory=list)
    """(run id, tool call id) of runs waiting for this tenant's approval."""
    runs: list[str] = field(default_factory=list)
    replayed: list[str] = field(default_factory=list)
    """Runs kept in the replay log (until-idle, resumable)."""
    tasks: list[str] = field(default_factory=list)
    workflow_runs: list[str] = field(default_factory=list)
    """Suspended workflow runs."""


@dataclass(frozen=True)
class Probe:
    """One attack: ``method`` on ``path`` with ``body``, ``{id}`` (and ``{call}``) filled in.
    ``like_missing``: the answer must equal the one for an id that does not exist (else: a 404,
    since a missing id would make something)."""

    kind: str
    method: str
    path: str
    body: dict[str, Any] | None = None
    like_missing: bool = True
    claims: bool = False
    """The attacker starts (or makes) a run of its own under the victim's id: the answer must be
    the one for an unused id, the id the attacker chose in it (run ids are per tenant)."""


def probes() -> list[Probe]:
    thread, run, task, workflow = "thread", "run", "task", "workflow"
    ids = {"runId": "{id}", "toolCallId": "{call}"}
    return [
        Probe(thread, "GET", "/api/memory/threads/{id}"),
        Probe(thread, "GET", "/api/memory/threads/{id}/messages"),
        Probe(thread, "PATCH", "/api/memory/threads/{id}", {"title": "taken"}),
        Probe(thread, "DELETE", "/api/memory/threads/{id}"),
        Probe(thread, "GET", "/api/memory/threads/{id}/working-memory?agentId=notes"),
        Probe(
            thread, "POST", "/api/memory/threads/{id}/working-memory?agentId=notes", {"workingMemory": "B"}
        ),
        Probe(thread, "POST", "/api/memory/messages/delete", {"messageIds": ["{id}"], "threadId": "{id}"}),
        Probe(thread, "POST", f"{AGENT}/stream", {"messages": "hi", "memory": {"thread": "{id}"}}, False),
        Probe(thread, "POST", f"{AGENT}/generate", {"messages": "hi", "memory": {"thread": "{id}"}}, False),
        Probe(
            thread, "POST", f"{AGENT}/send-message", {"threadId": "{id}", "message": {"contents": "x"}}, False
        ),
        Probe(
            thread,
            "POST",
            f"{AGENT}/queue-message",
            {"threadId": "{id}", "message": {"contents": "x"}},
            False,
        ),
        Probe(thread, "POST", f"{AGENT}/threads/subscribe", {"threadId": "{id}"}, False),
        Probe(thread, "POST", f"{AGENT}/threads/abort", {"threadId": "{id}"}, False),
        Probe(
            thread,
            "POST",
            f"{AGENT}/send-tool-approval",
            {"threadId": "{id}", "toolCallId": "c", "approved": True},
        ),
        Probe(
            thread,
            "POST",
            "/api/memory/save-messages",
            {
                "agentId": "assistant",
                "messages": [{"role": "user", "content": "x", "threadId": "{id}", "resourceId": "{me}"}],
            },
            False,
        ),
        Probe(
            thread,
            "POST",
            "/ag-ui/notes",
            {"threadId": "{id}", "runId": "r1", "messages": [{"id": "u1", "role": "user", "content": "hi"}]},
            False,
        ),
        Probe(run, "POST", f"{AGENT}/approve-tool-call", ids),
        Probe(run, "POST", f"{AGENT}/decline-tool-call", ids),
        Probe(run, "POST", f"{AGENT}/resume-stream", {**ids, "resumeData": {"confirmed": True}}),
        Probe(run, "POST", f"{AGENT}/observe", {"runId": "{id}"}),
        Probe(run, "GET", "/api/runs/{id}/stream"),
        Probe(run, "POST", "/api/runs/{id}/abort"),
        Probe(run, "POST", f"{AGENT}/stream?resumable=true", None),  # Last-Event-ID: see _send
        Probe(run, "POST", f"{AGENT}/stream", {"messages": "hi", "runId": "{id}"}, claims=True),
        Probe(run, "POST", f"{AGENT}/generate", {"messages": "hi", "runId": "{id}"}, claims=True),
        Probe(
            run, "POST", f"{AGENT}/stream?resumable=true", {"messages": "hi", "runId": "{id}"}, claims=True
        ),
        Probe(task, "GET", "/api/background-tasks/{id}"),
        Probe(task, "POST", "/api/background-tasks/{id}/cancel"),
        Probe(task, "POST", "/api/background-tasks/{id}/resume", {"resumeData": {}}),
        Probe(workflow, "GET", WORKFLOW + "/runs/{id}"),
        Probe(workflow, "DELETE", WORKFLOW + "/runs/{id}"),
        Probe(workflow, "POST", WORKFLOW + "/runs/{id}/cancel"),
        Probe(workflow, "POST", WORKFLOW + "/resume?runId={id}", {"resumeData": {"approved": True}}),
        Probe(workflow, "POST", WORKFLOW + "/resume-async?runId={id}", {"resumeData": {"approved": True}}),
        Probe(workflow, "POST", WORKFLOW + "/resume-stream?runId={id}", {"resumeData": {"approved": True}}),
        Probe(workflow, "POST", WORKFLOW + "/resume-no-wait?runId={id}", {"resumeData": {"approved": True}}),
        Probe(workflow, "POST", WORKFLOW + "/observe?runId={id}"),
        Probe(workflow, "POST", WORKFLOW + "/start?runId={id}", {"inputData": {"topic": "x"}}, claims=True),
        Probe(workflow, "POST", WORKFLOW + "/create-run?runId={id}", {}, claims=True),
    ]


PROBES = probes()
TRIED: dict[str, int] = {}
"""Attacks tried per backend (for the figures in docs/security.md)."""
CLAIMED: dict[str, int] = {}
"""Of them, runs started under the other tenant's run id, per backend."""


def _fill(value: Any, ids: dict[str, str]) -> Any:
    if isinstance(value, str):
        for key, text in ids.items():
            value = value.replace("{" + key + "}", text)
        return value
    if isinstance(value, list):
        return [_fill(item, ids) for item in value]
    if isinstance(value, dict):
        return {key: _fill(item, ids) for key, item in value.items()}
    return value


class TwoTenants(RuleBasedStateMachine):
    """The state machine; ``server`` is set by the test before it runs."""

    server: Secured
    backend: str

    def __init__(self) -> None:
        super().__init__()
        self.owned = {tenant: Owned() for tenant in TENANTS}
        self.claimed: dict[str, set[str]] = {tenant: set() for tenant in TENANTS}
        """The other tenant's ids a tenant has started runs of its own under."""

    # -- requests ------------------------------------------------------------------------------
    def client(self, tenant: str) -> httpx.Client:
        return self.server.a if tenant == "a" else self.server.b

    def send(self, tenant: str, method: str, path: str, body: Any = None, **headers: str) -> httpx.Response:
        response = self.client(tenant).request(method, path, json=body, headers=headers)
        assert response.status_code < 500, (method, path, body, response.status_code, response.text)
        return response

    def chunks(self, response: httpx.Response) -> list[dict[str, Any]]:
        assert response.status_code == 200, response.text
        return [
            json.loads(line[6:])
            for line in response.text.split("\n")
            if line.startswith("data: ") and line != "data: [DONE]"
        ]

    def settle(self, tenant: str) -> None:
        """Wait until none of ``tenant``'s runs is live (a turn is saved before its run frees
        its place): its objects then change only by requests."""
        registry = self.server.context.registry
        deadline = time.monotonic() + 20
        while registry.live_runs_of(f"user-{tenant}"):
            assert time.monotonic() < deadline, f"{tenant}'s runs never ended"
            time.sleep(0.01)

    # -- what a tenant does ----------------------------------------------------------------------
    @initialize()
    def each_tenant_has_one_of_each(self) -> None:
        """A thread with a run waiting for approval, a background task and a suspended workflow
        run per tenant, so that every attack has a target from the first step."""
        for tenant in TENANTS:
            self.make_thread(tenant)
            owned = self.owned[tenant]
            body = {"messages": "delete it", "memory": {"thread": owned.threads[0]}}
            approval = self.chunks(self.send(tenant, "POST", f"{AGENT}/stream", body))[-1]
            owned.runs.append(approval["runId"])
            owned.approvals.append((approval["runId"], approval["payload"]["toolCallId"]))
            researched = self.chunks(
                self.send(tenant, "POST", f"{AGENT}/stream-until-idle", {"messages": "research eels"})
            )
            owned.runs.append(researched[0]["runId"])
            owned.replayed.append(researched[0]["runId"])
            owned.tasks += [
                c["payload"]["taskId"] for c in researched if c["type"] == "background-task-started"
            ]
            self.start_workflow(tenant)

    @rule(tenant=st.sampled_from(TENANTS))
    def make_thread(self, tenant: str) -> None:
        thread = f"t-{uuid.uuid4().hex[:12]}"
        made = self.send(
            tenant, "POST", "/api/memory/threads", {"threadId": thread, "resourceId": f"user-{tenant}"}
        )
        assert made.status_code == 200, made.text
        self.owned[tenant].threads.append(thread)

    @rule(
        tenant=st.sampled_from(TENANTS),
        text=st.sampled_from(["hi", "delete it", "weather", "research eels", "order"]),
        route=st.sampled_from(["stream", "generate", "stream-until-idle", "stream?resumable=true"]),
        on_thread=st.booleans(),
        data=st.data(),
    )
    def run_agent(self, tenant: str, text: str, route: str, on_thread: bool, data: st.DataObject) -> None:
        owned = self.owned[tenant]
        body: dict[str, Any] = {"messages": text}
        if on_thread and owned.threads:
            body["memory"] = {"thread": data.draw(st.sampled_from(owned.threads))}
        response = self.send(tenant, "POST", f"{AGENT}/{route}", body)
        assert response.status_code in (200, 429), response.text  # (429: the tenant's cap)
        if response.status_code != 200:
            return
        if route == "generate":
            owned.runs.append(response.json()["runId"]) if "runId" in response.json() else None
            return
        chunks = self.chunks(response)
        run_id = chunks[0]["runId"]
        owned.runs.append(run_id)
        if route != "stream":
            owned.replayed.append(run_id)
        for chunk in chunks:
            if chunk["type"] == "tool-call-approval" and route == "stream":
                owned.approvals.append((chunk["runId"], chunk["payload"]["toolCallId"]))
            if chunk["type"] == "background-task-started":
                owned.tasks.append(chunk["payload"]["taskId"])

    @precondition(lambda self: any(self.owned[t].approvals for t in TENANTS))
    @rule(data=st.data(), approve=st.booleans())
    def decide(self, data: st.DataObject, approve: bool) -> None:
        tenant = data.draw(st.sampled_from([t for t in TENANTS if self.owned[t].approvals]))
        run_id, call_id = self.owned[tenant].approvals.pop()
        route = "approve-tool-call" if approve else "decline-tool-call"
        answer = self.send(tenant, "POST", f"{AGENT}/{route}", {"runId": run_id, "toolCallId": call_id})
        assert self.chunks(answer)[-1]["type"] == "finish"  # the owner still may, after any attack

    @rule(tenant=st.sampled_from(TENANTS))
    def start_workflow(self, tenant: str) -> None:
        run_id = str(uuid.uuid4())
        started = self.send(
            tenant, "POST", f"{WORKFLOW}/start-async?runId={run_id}", {"inputData": {"topic": "x"}}
        )
        if started.status_code == 429:
            return
        assert started.json()["status"] == "suspended", started.text
        self.owned[tenant].workflow_runs.append(run_id)

    @precondition(lambda self: any(self.owned[t].workflow_runs for t in TENANTS))
    @rule(data=st.data())
    def resume_workflow(self, data: st.DataObject) -> None:
        tenant = data.draw(st.sampled_from([t for t in TENANTS if self.owned[t].workflow_runs]))
        run_id = self.owned[tenant].workflow_runs.pop()
        resumed = self.send(
            tenant, "POST", f"{WORKFLOW}/resume-async?runId={run_id}", {"resumeData": {"approved": True}}
        )
        assert resumed.json()["status"] == "success", resumed.text  # no attack changed it

    # -- attacks -------------------------------------------------------------------------------
    def targets(self, victim: str, kind: str) -> list[tuple[str, str]]:
        """The victim's ids of ``kind``, but those the attacker has made its own (a claim)."""
        owned, own = self.owned[victim], self.claimed["b" if victim == "a" else "a"]
        if kind == "thread":
            found = [(thread, NO_CALL) for thread in owned.threads]
        elif kind == "run":
            found = owned.approvals + [(run, NO_CALL) for run in owned.runs]
        elif kind == "task":
            found = [(task, NO_CALL) for task in owned.tasks]
        else:
            found = [(run, NO_CALL) for run in owned.workflow_runs]
        return [(target, call) for target, call in found if target not in own]

    def view(self, victim: str, kind: str, target: str) -> Any:
        """What the owner reads of the object (what no attack may change)."""
        self.settle(victim)
        if kind == "thread":
            thread = self.send(victim, "GET", f"/api/memory/threads/{target}").json()
            messages = self.send(victim, "GET", f"/api/memory/threads/{target}/messages").json()
            memory = self.send(victim, "GET", f"/api/memory/threads/{target}/working-memory?agentId=notes")
            return thread, messages, memory.text
        if kind == "run":
            waiting = self.send(victim, "GET", f"{AGENT}/suspended-runs").json()
            observed = self.send(victim, "POST", f"{AGENT}/observe", {"runId": target})
            return waiting, observed.status_code, observed.text
        if kind == "task":
            return self.send(victim, "GET", f"/api/background-tasks/{target}").json()
        return self.send(victim, "GET", f"{WORKFLOW}/runs/{target}").json()

    def attempt(self, attacker: str, probe: Probe, target: str, call: str) -> tuple[int, str]:
        ids = {"id": target, "call": call, "me": f"user-{attacker}"}
        path, body = _fill(probe.path, ids), _fill(probe.body, ids)
        headers = {"Last-Event-ID": f"{target}:0"} if probe.path.endswith("resumable=true") else {}
        response = self.send(attacker, probe.method, path, body, **headers)
        text = response.text.replace(target, "<id>").replace(call, "<call>")
        return response.status_code, text

    @rule(attacker=st.sampled_from(TENANTS), count=st.integers(1, 4), data=st.data())
    def attack(self, attacker: str, count: int, data: st.DataObject) -> None:
        """``count`` attacks by ``attacker`` on the other tenant's objects."""
        victim = "b" if attacker == "a" else "a"
        for _ in range(count):
            probe = data.draw(st.sampled_from([p for p in PROBES if self.targets(victim, p.kind)]))
            target, call = data.draw(st.sampled_from(self.targets(victim, probe.kind)))
            self.attack_once(attacker, victim, probe, target, call)

    def attack_once(self, attacker: str, victim: str, probe: Probe, target: str, call: str) -> None:
        before = self.view(victim, probe.kind, target)
        TRIED[self.backend] = TRIED.get(self.backend, 0) + 1
        if probe.claims:
            CLAIMED[self.backend] = CLAIMED.get(self.backend, 0) + 1
            self.claimed[attacker].add(target)
            self.settle(attacker)  # (so that the tenant's live-run cap answers both alike)
            assert self.claim(attacker, probe, target) == self.claim(attacker, probe, str(uuid.uuid4())), (
                probe
            )
            assert self.view(victim, probe.kind, target) == before, probe
            return
        status, text = self.attempt(attacker, probe, target, call)
        if probe.like_missing:
            missing = (
                str(uuid.uuid4()) if probe.kind in ("workflow", "task") else f"t-{uuid.uuid4().hex[:12]}"
            )
            assert (status, text) == self.attempt(attacker, probe, missing, NO_CALL), probe
        else:
            assert status == 404, (probe, status, text)
        assert self.view(victim, probe.kind, target) == before, probe

    def claim(self, attacker: str, probe: Probe, run_id: str) -> tuple[int, Any]:
        """A run started under ``run_id``, as the attacker sees it: the status, and the chunk
        types with whether each names ``run_id`` (SSE), or the body's keys and whether its
        ``runId`` is ``run_id`` (JSON)."""
        ids = {"id": run_id, "me": f"user-{attacker}"}
        response = self.send(attacker, probe.method, _fill(probe.path, ids), _fill(probe.body, ids))
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            return response.status_code, [
                (c["type"], c.get("runId") == run_id) for c in self.chunks(response)
            ]
        body = response.json()
        return response.status_code, (sorted(body), body.get("runId") == run_id)

    @rule()
    def lists_hold_only_own_objects(self) -> None:
        for tenant in TENANTS:
            other = self.owned["b" if tenant == "a" else "a"]
            threads = self.send(tenant, "GET", f"/api/memory/threads?resourceId=user-{tenant}").json()
            listed = json.dumps(threads)
            assert not any(thread in listed for thread in other.threads)
            tasks = json.dumps(self.send(tenant, "GET", "/api/background-tasks").json())
            assert not any(task in tasks for task in other.tasks)
            runs = json.dumps(self.send(tenant, "GET", f"{WORKFLOW}/runs").json())
            assert not any(run in runs for run in other.workflow_runs if run not in self.claimed[tenant])


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_tenant_reaches_another_in_any_interleaving(backend: str, tmp_path: Path) -> None:
    with secured_server(backend, tmp_path) as server:
        TwoTenants.server, TwoTenants.backend = server, backend
        TRIED[backend] = CLAIMED[backend] = 0
        run_state_machine_as_test(
            TwoTenants,
            settings=settings(
                max_examples=MAX_EXAMPLES,
                stateful_step_count=STEPS,
                derandomize=True,
                phases=[Phase.generate],  # (a shrink would replay against a server that moved on)
                database=None,
                deadline=None,
                suppress_health_check=list(HealthCheck),
            ),
        )
        assert TRIED[backend] > 0 and CLAIMED[backend] > 0
        print(
            f"\n{backend}: {TRIED[backend]} attacks ({CLAIMED[backend]} runs under the other's run id)"
            f" in {MAX_EXAMPLES} examples of up to {STEPS} steps"
        )
