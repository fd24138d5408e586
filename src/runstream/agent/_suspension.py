"""Runs that stopped for a human (an approval, a suspended tool), and durable runs in progress.

A run that ends at ``tool-call-approval`` or ``tool-call-suspended`` is saved as a JSON snapshot
(the run's own versioned state, see :meth:`RunState.to_json`, plus its options'
:meth:`RunOptions.to_json`), so ``approve_tool_call`` / ``decline_tool_call`` / ``resume_stream``
work after a restart and from any process that shares the storage. Options that are code
(processors, model settings, abort signals) come from the agent's defaults when a run is restored.
:class:`SuspendedRuns` is one agent's table of them: in memory while the process lives, in
storage for the others. A durable agent's run saves the same snapshot after every step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from runstream._clock import iso_now
from runstream.agent.run_options import RunOptions
from runstream.errors import NotFoundError, StateConflictError
from runstream.memory import MemoryScope
from runstream.run._run_state import LoopConfig, ResumeAction, RunState
from runstream.storage import Storage

NAMESPACE = "agent-runs"
DURABLE_NAMESPACE = "durable-runs"
"""Durable agents' runs in progress (a snapshot after every step)."""


class RunNotFoundError(NotFoundError):
    """No suspended run with that id (it finished, or it never stopped for a human)."""


@dataclass(slots=True, frozen=True)
class SuspendedRun:
    """What a suspended run waits for, and whose it is."""

    run_id: str
    agent_id: str
    thread_id: str | None
    resource_id: str | None
    awaiting_approval: list[str]
    suspended: dict[str, Any]
    """tool call id -> suspend payload"""


@dataclass(slots=True)
class Stopped:
    """A run that waits for a human: its state and options, and its loop configuration while
    the process that ran it lives (``None`` once restored from storage)."""

    cfg: LoopConfig | None
    state: RunState
    options: RunOptions


def describe(agent_id: str, state: RunState, scope: MemoryScope | None) -> SuspendedRun:
    pending = state.pending
    return SuspendedRun(
        run_id=state.run_id,
        agent_id=agent_id,
        thread_id=scope.thread_id if scope else None,
        resource_id=scope.resource_id if scope else None,
        awaiting_approval=sorted(pending.awaiting_approval) if pending else [],
        suspended=dict(pending.suspended) if pending else {},
    )


def snapshot(agent_id: str, state: RunState, options: RunOptions) -> dict[str, Any]:
    """The run as JSON: its state (:meth:`RunState.to_json`, versioned), whose agent it is, and
    its options (:meth:`RunOptions.to_json`, versioned)."""
    return {**state.to_json(), "agentId": agent_id, "options": options.to_json()}


def restore(data: dict[str, Any]) -> tuple[RunState, RunOptions]:
    """The :class:`RunState` and :class:`RunOptions` of a snapshot, ready to be continued (its
    messages are already in memory). Raises :class:`~runstream.run._run_state.UnsupportedRunStateError`
    for a snapshot of a version this code does not read."""
    state = RunState.from_json(data)
    state.saved = True
    return state, RunOptions.from_json(data.get("options") or {})


class SuspendedRuns:
    """One agent's runs that wait for a human, found by run id (see the module docstring)."""

    def __init__(self, agent_id: str) -> None:
        self.agent_id = agent_id
        self._live: dict[str, Stopped] = {}

    async def remember(self, stopped: Stopped, storage: Storage | None) -> None:
        self._live[stopped.state.run_id] = stopped
        if storage is not None:
            data = snapshot(self.agent_id, stopped.state, stopped.options)
            data["suspendedAt"] = iso_now()
            await storage.save_snapshot(NAMESPACE, stopped.state.run_id, data)

    async def find(self, run_id: str, storage: Storage | None) -> Stopped | None:
        if run_id in self._live:
            return self._live[run_id]
        data = await storage.load_snapshot(NAMESPACE, run_id) if storage is not None else None
        if data is None or data.get("agentId") != self.agent_id:
            return None
        state, options = restore(data)
        return Stopped(None, state, options)

    async def take(self, run_id: str, action: ResumeAction, storage: Storage | None) -> Stopped:
        """The run ``action`` answers, no longer waiting; a run that waits for nothing (or not
        for that tool call) is an error and stays as it was."""
        found = await self.find(run_id, storage)
        if found is None:
            raise RunNotFoundError(f"no suspended run {run_id!r} on agent {self.agent_id!r}")
        pending = found.state.pending
        if pending is None:
            self._live.pop(run_id, None)
            raise RunNotFoundError(f"run {run_id!r} is not waiting for anything")
        waiting = pending.awaiting_approval if action.kind != "resume" else set(pending.suspended)
        if action.tool_call_id is not None and action.tool_call_id not in waiting:
            what = "waiting for approval" if action.kind != "resume" else "suspended"
            raise StateConflictError(f"tool call {action.tool_call_id!r} of run {run_id!r} is not {what}")
        self._live.pop(run_id, None)
        return found

    async def listing(self, storage: Storage | None) -> list[dict[str, Any]]:
        """The stored snapshots (plus ``suspendedAt``) of the agent's waiting runs."""
        if storage is None:
            return []
        found = []
        for run_id in await storage.list_snapshots(NAMESPACE):
            data = await storage.load_snapshot(NAMESPACE, run_id)
            if data is not None and data.get("agentId") == self.agent_id:
                found.append(data)
        return found


class DurableRuns:
    """One agent's durable runs: a snapshot after every step, deleted when the run ends, so a
    run cut off by a restart can go on from its last finished step."""

    def __init__(self, agent_id: str) -> None:
        self.agent_id = agent_id
        self.live: set[str] = set()
        """Durable runs streaming in this process (not to be resumed from a snapshot)."""
        self.created: dict[str, str] = {}
        """When each live run was first saved (its snapshots' ``createdAt``)."""

    async def save(self, storage: Storage, options: RunOptions, state: RunState) -> None:
        data = snapshot(self.agent_id, state, options)
        now = iso_now()  # for listActiveRuns' date filters and its updatedAt
        data["createdAt"] = self.created.setdefault(state.run_id, now)
        data["savedAt"] = now
        await storage.save_snapshot(DURABLE_NAMESPACE, state.run_id, data)

    def finished(self, run_id: str) -> None:
        self.live.discard(run_id)
        self.created.pop(run_id, None)

    async def unfinished(self, storage: Storage | None) -> list[str]:
        if storage is None:
            return []
        ids = []
        for run_id in await storage.list_snapshots(DURABLE_NAMESPACE):
            data = await storage.load_snapshot(DURABLE_NAMESPACE, run_id)
            if data is not None and data.get("agentId") == self.agent_id and run_id not in self.live:
                ids.append(run_id)
        return ids

    async def load(self, run_id: str, storage: Storage | None) -> tuple[RunState, RunOptions]:
        data = await storage.load_snapshot(DURABLE_NAMESPACE, run_id) if storage else None
        if data is None or data.get("agentId") != self.agent_id or run_id in self.live:
            raise RunNotFoundError(f"no interrupted durable run {run_id!r} on agent {self.agent_id!r}")
        state, options = restore(data)
        state.status = "running"
        state.saved = False
        created = data.get("createdAt")
        if isinstance(created, str):
            self.created.setdefault(run_id, created)
        return state, options
