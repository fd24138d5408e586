"""What a :class:`~runstream.Runstream` shares with the agents it holds.

An agent is configuration; running it needs the runtime's storage and background task manager.
The runtime hands those over as this small value (:meth:`Agent.bind`), so the agent never holds
the runtime itself and the two modules do not import each other.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from runstream.background_scoring import ScoringRunner
from runstream.observability.store import SpanStore
from runstream.scoring import Scorer
from runstream.storage import Storage
from runstream.tasks.coordination import TaskManager
from runstream.tools import Tool

if TYPE_CHECKING:
    from runstream.abort import AbortController
    from runstream.agent.run_options import RunOptions
    from runstream.run._run_state import ResumeAction, RunState
    from runstream.run.output import RunOutput


@dataclass(frozen=True, slots=True)
class RuntimeServices:
    storage: Storage
    task_manager: TaskManager | None
    start: Callable[[], Awaitable[None]]
    """Initialises the storage and starts the task manager (idempotent)."""
    durable_runs: DurableRunner | None = None
    """Where the agents' runs run when they are durable on an engine (``runstream.durable``)."""
    scoring: Callable[[], ScoringRunner] | None = None
    """The runtime's scoring runner (agents' ``scorers`` run there)."""
    span_store: Callable[[], SpanStore | None] | None = None
    """The runtime's span store, if any (agents' scores are kept there)."""
    scorers: Callable[[], Mapping[str, Scorer]] | None = None
    """The runtime's registered scorers by id (a run's ``scorers`` may name them)."""


class DurableRunner(Protocol):
    """Runs every agent run of a runtime elsewhere, durably (e.g. ``runstream.durable.TemporalRuns``).

    The agent builds a run's first state (memory loaded) and hands it over; the returned output
    streams the run's chunks as they are produced wherever it runs."""

    run_worker: bool
    """Whether this process also runs the runs (``runstream worker`` sets it)."""

    def bind(self, agents: Mapping[str, Any], storage: Storage, task_manager: TaskManager | None) -> None: ...

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def start_run(
        self, agent_id: str, state: RunState, options: RunOptions, controller: AbortController
    ) -> RunOutput:
        """A run (or, asked by ``runstream.agent._idle_stream.durable_flow``, an until-idle stream
        whose first turn it is, driven where the runs run)."""
        ...

    async def flow_owner(self, run_id: str) -> tuple[str, str | None] | None:
        """``(agent id, resource id)`` of the until-idle stream ``run_id`` (``None``: no such)."""
        ...

    def read_flow(self, run_id: str, after: int) -> AsyncIterator[tuple[int, str]]:
        """``(seq, wire JSON)`` of that stream's chunks after ``after``, live, until it ends."""
        ...

    async def continue_run(
        self, agent_id: str, state: RunState, action: ResumeAction, options: RunOptions
    ) -> RunOutput: ...


class Toolset(Protocol):
    """Tools that come and go while an agent lives (an MCP client is one): started with the
    runtime (or the first run), closed with the runtime, read per run."""

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    def tools(self) -> Mapping[str, Tool]: ...

    def on_tools_changed(self, listener: Callable[[dict[str, Tool]], None]) -> None: ...
