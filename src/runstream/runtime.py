"""``Runstream``: the container that gives agents their storage and background task manager."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Annotated, Any, Literal

from pydantic import with_config
from typing_extensions import TypedDict

from runstream._config_mapping import CONFIG, checked, one_of, read_typed_dict
from runstream.agent import Agent
from runstream.agent._durable_api import RecoveredRuns
from runstream.agent._services import DurableRunner, RuntimeServices, Toolset
from runstream.api_routes import ApiRoute, check_api_routes
from runstream.background_scoring import ScoringRunner
from runstream.errors import ConfigurationError, NotFoundError
from runstream.observability.store import SpanStore
from runstream.scoring import Scorer
from runstream.storage import InMemoryStorage, Storage
from runstream.tasks.config import BackgroundTaskConfig
from runstream.tasks.coordination import TaskManager
from runstream.tasks.manager import BackgroundTaskManager
from runstream.tools import Tool
from runstream.vector.base import VectorStore
from runstream.workflows import Workflow


class AgentNotFoundError(NotFoundError, KeyError):
    """:meth:`Runstream.get_agent` of an id no registered agent has (also the ``KeyError`` it was)."""

    def __str__(self) -> str:  # KeyError's would quote the message as if it were the key
        return str(self.args[0]) if self.args else ""


class Runstream:
    """Agents and workflows plus the services they share.

    ``storage`` holds memory, task records and workflow run snapshots (``SqliteStorage("runstream.db")`` for a file;
    in-memory when omitted). ``background_tasks={"enabled": True, ...}`` creates the task
    manager; without it every tool runs in the foreground.
    """

    def __init__(
        self,
        *,
        agents: Iterable[Agent] = (),
        workflows: Iterable[Workflow] = (),
        storage: Storage | None = None,
        background_tasks: BackgroundTaskConfig | Mapping[str, Any] | bool | None = None,
        task_manager: TaskManager | None = None,
        durable_runs: DurableRunner | None = None,
        recovery: Mapping[str, Any] | None = None,
        vectors: Mapping[str, VectorStore] | None = None,
        observability: SpanStore | None = None,
        api_routes: Iterable[ApiRoute] = (),
        scorers: Iterable[Scorer] = (),
        scoring: ScoringRunner | None = None,
    ) -> None:
        self.storage: Storage = storage if storage is not None else InMemoryStorage()
        self.vectors: dict[str, VectorStore] = dict(vectors or {})
        """Vector stores by name (Mastra's ``vectors``): the server's ``/api/vector/:name``
        routes reach these, and only these; closed with the runtime."""
        self.observability = observability
        """``observability=SpanStore(path)`` keeps the runs' spans (fed at start from the
        OpenTelemetry SDK's provider, installed if there is none) for ``/api/observability``."""
        self._span_processor: Any = None
        self._log_keeper: Any = None
        self.api_routes: list[ApiRoute] = check_api_routes(list(api_routes))
        """The app's own HTTP routes (Mastra's ``server.apiRoutes``), made by
        :func:`runstream.api_routes.register_api_route`; ``runstream serve`` serves them."""
        self.scorers: dict[str, Scorer] = {}
        """Registered scorers by id (Mastra's ``scorers``): Studio lists them and scores a stored
        trace with one (``POST /api/observability/traces/score``)."""
        for scorer in scorers:
            if scorer.id in self.scorers:
                raise ConfigurationError(f"a scorer with id {scorer.id!r} is already registered")
            self.scorers[scorer.id] = scorer
        self.scoring = scoring if scoring is not None else ScoringRunner()
        """Where scorers run off the caller's path (trace scoring, agents' ``scorers``): bounded
        concurrency and queue (``ScoringRunner(concurrency=4, max_pending=256)``); closed first."""
        config = BackgroundTaskConfig.coerce(background_tasks)
        if task_manager is None and config is not None and config.mode == "producer":
            raise ConfigurationError(
                'background_tasks mode "producer" runs no tasks, so it needs workers sharing its storage: '
                "pass task_manager=TemporalTaskManager(storage, config, ...) (runstream.tasks.temporal), "
                "whose tools run on `runstream worker` processes"
            )
        if task_manager is None and config is not None:
            task_manager = BackgroundTaskManager(self.storage, config)
        self.task_manager = task_manager
        """``task_manager=`` takes a ready manager, e.g. a ``TemporalTaskManager`` for scale-out."""
        self.durable_runs = durable_runs
        """``durable_runs=`` runs every agent run durably elsewhere, e.g.
        ``runstream.durable.TemporalRuns(redis_url)`` (see docs/scale-out.md)."""
        self.recover_durable_agents = read_recovery(recovery)
        """Mastra's ``recovery: {durableAgents: "auto"}``: at start, each durable agent's
        interrupted runs are recovered in the background (``Agent.recover_active_runs``)."""
        self.recoveries: list[asyncio.Task[RecoveredRuns]] = []
        """The start's recoveries, one per durable agent (await them to know how they went)."""
        self.agents: dict[str, Agent] = {}
        self.workflows: dict[str, Workflow] = {}
        self._started = False
        self._start_lock = asyncio.Lock()
        for agent in agents:
            self.add_agent(agent)
        if durable_runs is not None:
            durable_runs.bind(self.agents, self.storage, task_manager)
        for workflow in workflows:
            self.add_workflow(workflow)

    def add_agent(self, agent: Agent) -> Agent:
        if agent.id in self.agents:
            raise ConfigurationError(f"an agent with id {agent.id!r} is already registered")
        self.agents[agent.id] = agent
        agent.bind(
            RuntimeServices(
                self.storage,
                self.task_manager,
                self.start,
                self.durable_runs,
                scoring=lambda: self.scoring,
                span_store=lambda: self.observability,
                scorers=lambda: self.scorers,
            )
        )
        return agent

    def add_workflow(self, workflow: Workflow) -> Workflow:
        """Register a committed workflow; it keeps its runs in this runtime's storage unless it
        was built with its own."""
        if workflow.id in self.workflows:
            raise ConfigurationError(f"a workflow with id {workflow.id!r} is already registered")
        if not workflow.committed:
            raise ConfigurationError(f"workflow {workflow.id!r} is not committed: call .commit() first")
        self.workflows[workflow.id] = workflow
        workflow.use_storage(self.storage)
        return workflow

    def get_agent(self, agent_id: str) -> Agent:
        try:
            return self.agents[agent_id]
        except KeyError:
            raise AgentNotFoundError(
                f"no agent {agent_id!r}; known: {', '.join(self.agents) or 'none'}"
            ) from None

    async def start(self) -> None:
        """Initialise storage and start the task manager (recovering tasks of a previous process)."""
        if self._started:
            return
        async with self._start_lock:
            if self._started:
                return
            await self.storage.init()
            if self.observability is not None and not self.observability.fed:
                from runstream.observability.processor import install_span_store

                self._span_processor = install_span_store(self.observability)
            if self.observability is not None:
                from runstream.observability.logs import LogKeeper

                self._log_keeper = LogKeeper(self.observability)
            await self._start_toolsets()
            if self.task_manager is not None:
                await self.task_manager.start()
            if self.durable_runs is not None:
                await self.durable_runs.start()
            self._started = True
            if self.recover_durable_agents:
                self.recoveries = [
                    asyncio.create_task(agent.recover_active_runs())
                    for agent in self.agents.values()
                    if agent.durable
                ]

    def _toolsets(self) -> list[tuple[Agent, Toolset]]:
        return [(agent, toolset) for agent in self.agents.values() for toolset in agent.toolsets]

    async def _start_toolsets(self) -> None:
        """Start the agents' toolsets before the task manager, whose recovered tasks may call
        their tools; their tools stay registered with the manager as they change."""
        manager = self.task_manager
        for agent, toolset in self._toolsets():
            if manager is not None:

                def register(tools: Mapping[str, Tool], agent_id: str = agent.id) -> None:
                    for tool in tools.values():
                        manager.register_tool(agent_id, tool)

                toolset.on_tools_changed(register)
            await toolset.start()

    async def close(self) -> None:
        await self.scoring.close()  # before the stores its jobs write to
        for recovery in self.recoveries:
            recovery.cancel()
        await asyncio.gather(*self.recoveries, return_exceptions=True)
        self.recoveries = []
        for _agent, toolset in self._toolsets():
            await toolset.close()
        if self.durable_runs is not None:
            await self.durable_runs.close()
        if self.task_manager is not None:
            await self.task_manager.shutdown()
        for agent in self.agents.values():  # thread titles still being made go to storage first
            if agent.memory is not None:
                await agent.memory.wait_for_titles()
                await agent.memory.close()  # messages waiting to be embedded, then its own vector store
        for vector in self.vectors.values():
            await vector.close()
        await self.storage.close()
        if self._log_keeper is not None:
            await asyncio.to_thread(self._log_keeper.stop)
            self._log_keeper = None
        if self._span_processor is not None:  # flush what the runs left (off the loop)
            await asyncio.to_thread(self._span_processor.shutdown)
            self._span_processor = None
        self._started = False

    async def __aenter__(self) -> Runstream:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()


def read_recovery(recovery: Mapping[str, object] | None) -> bool:
    """Whether ``recovery={"durableAgents": "auto"}`` (Mastra's default ``"off"``)."""
    if recovery is None:
        return False
    return read_typed_dict(_Recovery, recovery, where="recovery").get("durable_agents") == "auto"


@with_config(CONFIG)
class _Recovery(TypedDict, total=False):
    """Mastra's ``recovery`` option of the runtime."""

    durable_agents: Annotated[Literal["auto", "off"] | None, checked(one_of("auto", "off"))]
