"""Runs that stopped for a human (an approval, a suspended tool), kept in storage.

A run that ends at ``tool-call-approval`` or ``tool-call-suspended`` is saved as a JSON snapshot
(the run's own versioned state, see :meth:`RunState.to_json`, plus the options that can be restored), so
``approve_tool_call`` / ``decline_tool_call`` / ``resume_stream`` work after a restart and from
any process that shares the storage. Options that are code (processors, model settings, abort
signals) come from the agent's defaults when a run is restored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from runstream._run_state import RunState
from runstream.memory import MemoryScope

NAMESPACE = "agent-runs"
DURABLE_NAMESPACE = "durable-runs"
"""Durable agents' runs in progress (a snapshot after every step)."""


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


def snapshot(agent_id: str, state: RunState, options: dict[str, Any]) -> dict[str, Any]:
    """The run as JSON: its state (:meth:`RunState.to_json`, versioned), whose agent it is, and
    ``options``, the restorable run options (already JSON)."""
    return {**state.to_json(), "agentId": agent_id, "options": options}


def restore(data: dict[str, Any]) -> RunState:
    """The :class:`RunState` of a snapshot, ready to be continued (its messages are already in
    memory). Raises :class:`~runstream._run_state.UnsupportedRunStateError` for a snapshot of a
    state version this code does not read."""
    state = RunState.from_json(data)
    state.saved = True
    return state
