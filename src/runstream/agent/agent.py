"""``Agent``: configuration plus ``stream()`` / ``generate()`` and the human-in-the-loop calls: a
run's ``LoopConfig`` from its ``RunOptions`` and its ``RunOutput``; runs that stop for a human kept by
run id (``_suspension.py``) for ``approve_tool_call`` ...; until-idle streams (``_idle_stream.py``).
"""

from __future__ import annotations

import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any, Unpack

from runstream import _tracing as tracing
from runstream._config_mapping import camel
from runstream._ids import new_id
from runstream._messages import ContinuedMessage
from runstream.abort import AbortController, AbortSignal
from runstream.agent import _durable_api as durable_api
from runstream.agent._idle_stream import IdleStreams, UntilIdle, check_idle_options
from runstream.agent._plain_runs import PlainRuns
from runstream.agent._resolving import is_function, is_model, resolve_instructions, resolve_model
from runstream.agent._scorers import RunScoring
from runstream.agent._sub_agent import agent_tool, offer_result_references, with_full_results
from runstream.agent._suspension import (
    DURABLE_NAMESPACE,
    NAMESPACE,
    DurableRuns,
    RunNotFoundError,
    Stopped,
    SuspendedRun,
    SuspendedRuns,
    describe,
)
from runstream.agent.run_options import (
    DEFAULT_POLICY,
    MessagesInput,
    RequestPolicy,
    RunOptions,
    StreamOptions,
    ToolsInput,
    by_name,
    normalize_messages,
    read_default_options,
)
from runstream.chunks import AnyChunk
from runstream.errors import ConfigurationError, ConfigurationTypeError
from runstream.goals import GoalConfig, Goals, GoalStatus, Objective, attach_goal
from runstream.memory import Memory, MemoryInput, MemoryScope, run_memory
from runstream.models.base import LanguageModel, ModelSettings, PromptMessage
from runstream.models.fallback import FallbackModel, ModelChoice
from runstream.models.registry import as_model, ready_model
from runstream.request_context import Dynamic, RequestContext, resolve
from runstream.run._callbacks import CallbackObserver
from runstream.run._loop import run_output
from runstream.run._prepare_step import normalize_tool_choice
from runstream.run._run_scores import scoring_data
from runstream.run._run_state import LoopConfig, ResumeAction, RunState
from runstream.run._sources import Observer
from runstream.run._step_results import model_label, run_metadata
from runstream.run.output import FullOutput, RunOutput, full_output
from runstream.scoring import AgentScorer, Scorer, TaskCompletion
from runstream.storage import Storage
from runstream.structured import StructuredOutput
from runstream.tasks.policy import system_prompt_section, tool_schema_with_override, warn_without_manager
from runstream.tasks.settling import save_input_early
from runstream.tools import OffersTool, Tool

if TYPE_CHECKING:
    from runstream.agent._services import RuntimeServices, Toolset
    from runstream.tasks.coordination import TaskManager
    from runstream.tasks.policy import AgentBackgroundConfig


class Agent:
    """An LLM agent whose every step streams out as typed chunks."""

    request_policy: RequestPolicy = DEFAULT_POLICY  # what a request may set (runstream.trust)

    def __init__(
        self,
        id: str,
        *,
        model: LanguageModel
        | str
        | Dynamic[LanguageModel]
        | Sequence[ModelChoice | Mapping[str, Any] | LanguageModel],
        instructions: str | Dynamic[str] = "",
        name: str | None = None,
        description: str = "",
        tools: ToolsInput | Dynamic[ToolsInput] = (),
        toolsets: Iterable[Toolset] = (),
        agents: Iterable[Agent] | Mapping[str, Agent] = (),
        workflows: Iterable[OffersTool] | Mapping[str, OffersTool] = (),
        max_steps: int = 5,
        tool_choice: str | Mapping[str, Any] | None = None,
        structured_output: Any = None,
        output_processors: Iterable[Any] = (),
        input_processors: Iterable[Any] = (),
        max_processor_retries: int = 0,
        model_settings: ModelSettings | None = None,
        memory: MemoryInput | Dynamic[MemoryInput] = None,
        background_tasks: AgentBackgroundConfig | Mapping[str, Any] | None = None,
        goal: GoalConfig | None = None,
        is_task_complete: TaskCompletion | Mapping[str, Any] | None = None,
        durable: bool = False,
        max_retries: int = 0,
        default_options: Mapping[str, Any] | Dynamic[Mapping[str, Any]] | None = None,
        scorers: Mapping[str, Scorer | AgentScorer | Mapping[str, object]] | Sequence[Scorer] | None = None,
    ) -> None:
        from runstream.tasks.policy import AgentBackgroundConfig

        self.id = id
        self.name = name or id
        self.description = description
        self.instructions = instructions
        """The instructions, or a function of the request context (see :meth:`get_instructions`)."""
        if max_retries and is_function(model):
            raise ConfigurationError(
                "max_retries needs a model or a model list: a model function can return a FallbackModel"
            )
        chosen: LanguageModel | Dynamic[LanguageModel]
        if is_function(model):
            chosen = model
        elif isinstance(model, str | LanguageModel):
            chosen = as_model(model)  # "openai/gpt-4.1" is checked now, resolved at its first run
            if max_retries:  # Mastra's maxRetries
                chosen = FallbackModel([chosen], max_retries=max_retries)
        elif isinstance(model, Sequence) and not isinstance(model, str):  # Mastra's model list
            chosen = FallbackModel(model, max_retries=max_retries)
        else:
            raise ConfigurationTypeError(
                f"model must be a model string such as 'openai/gpt-4.1' or a LanguageModel, not {model!r}"
            )
        self.model: LanguageModel | Dynamic[LanguageModel] = chosen
        """The model, or a function of the request context (see :meth:`get_model`); a list of
        models (``[{"model": m, "maxRetries": 2}, ...]``) becomes a
        :class:`~runstream.models.fallback.FallbackModel`."""
        self.tools_resolver: Dynamic[ToolsInput] | None = tools if is_function(tools) else None
        """``tools=`` given as a function of the request context: its tools join ``tools``."""
        self.tools: dict[str, Tool] = by_name(tools) if not is_function(tools) else {}
        self.toolsets = list(toolsets)
        """Sources of tools that change while the agent lives (e.g. an MCP client); read per run."""
        self.agents = dict(agents) if isinstance(agents, Mapping) else {sub.id: sub for sub in agents}
        """Sub-agents by name, each offered as the tool ``agent-<name>`` (Mastra's ``agents``)."""
        self.workflows: dict[str, OffersTool] = (
            dict(workflows) if isinstance(workflows, Mapping) else {w.id: w for w in workflows}
        )
        """Workflows by name, each offered as the tool ``workflow-<name>`` (Mastra's ``workflows``)."""
        self._offer_delegates()
        self.max_steps = max_steps
        self.tool_choice = normalize_tool_choice(tool_choice)
        self.structured_output = StructuredOutput.coerce(structured_output)
        self.output_processors = list(output_processors)
        self.input_processors = list(input_processors)
        self.max_processor_retries = max_processor_retries
        self.model_settings = model_settings or ModelSettings()
        self.memory_resolver: Dynamic[MemoryInput] | None = memory if callable(memory) else None
        """``memory=`` given as a function of the request context (Mastra's dynamic memory)."""
        self.memory = None if callable(memory) else Memory.coerce(memory)
        self.background_config = AgentBackgroundConfig.coerce(background_tasks)
        self.goal = goal
        self.durable = durable
        self.is_task_complete = TaskCompletion.coerce(is_task_complete)
        self.scorers: dict[str, AgentScorer] = AgentScorer.coerce_all(scorers)
        """Mastra's ``scorers``: each scores the runs that succeed (its sampling's share of them),
        after they end, in the background (``runstream.agent._scorers``; ``await out.scores``)."""
        self.scoring = RunScoring()
        if isinstance(default_options, Mapping):  # a misspelt option fails here, not at the first call
            read_default_options(default_options)
        self.default_options = default_options
        self.services: RuntimeServices | None = None
        """The storage and task manager of the runtime that holds this agent (see :meth:`bind`)."""
        self._stopped = SuspendedRuns(id)
        self._durable_runs = DurableRuns(id)
        self._run_logs = durable_api.RunLogs()
        """Durable runs' chunks, for ``observe``."""
        self._idle_streams = IdleStreams(id)
        self._plain_runs = PlainRuns()

    def __repr__(self) -> str:
        return f"Agent({self.id!r})"

    def _offer_delegates(self) -> None:
        """Offer each sub-agent as the tool ``agent-<name>`` and each workflow as ``workflow-<name>``."""
        for key, sub in self.agents.items():
            sub_tool = agent_tool(sub, key, self)
            self.tools[sub_tool.name] = sub_tool
        for key, workflow in self.workflows.items():
            workflow_tool = workflow.as_tool(name=key)
            self.tools[workflow_tool.name] = workflow_tool

    def bind(self, services: RuntimeServices) -> None:
        """Give the agent a runtime's storage and task manager (``Runstream`` does this)."""
        self.services = services
        self.scoring.bind(services)
        if self.memory is not None and self.memory.storage is None:
            self.memory.storage = services.storage
        for sub in self.agents.values():  # a sub-agent's memory and tasks live in its supervisor's runtime
            if sub.services is None:
                sub.bind(services)
        if services.task_manager is not None:
            for tool in self.tools.values():
                services.task_manager.register_tool(self.id, tool)
            if self.background_config.concurrency is not None:
                services.task_manager.agent_concurrency[self.id] = self.background_config.concurrency

    async def current_tools(self) -> dict[str, Tool]:
        """The agent's own tools plus its toolsets' current ones (own tools win a name clash)."""
        if not self.toolsets:
            return self.tools
        merged: dict[str, Tool] = {}
        for toolset in self.toolsets:
            await toolset.start()
            merged.update(toolset.tools())
        return {**merged, **self.tools}

    # -- running -----------------------------------------------------------------------------------
    async def stream(
        self,
        messages: MessagesInput | None = None,
        *,
        run_id: str | None = None,
        until_idle: UntilIdle | None = None,
        **options: Unpack[StreamOptions],
    ) -> RunOutput:
        """Start a run; iterate ``out.full_stream`` for its chunks.

        The options (:class:`~runstream.agent.run_options.StreamOptions`) are Mastra's by their Python
        names (docs/porting-from-mastra.md): ``max_steps``, ``tool_choice``, ``structured_output``,
        ``model_settings``, processors, ``abort_signal``, ``context``, ``request_context`` (tools
        read it as ``ctx.request_context``; instructions, model and tools may be functions of
        it), the callbacks ``on_chunk`` ... ``on_abort`` (``runstream.run._callbacks``),
        ``instructions``/``model`` (replace the agent's), ``system`` (added system messages),
        ``active_tools``, ``require_tool_approval`` (``True`` or a function of the call),
        ``tool_call_concurrency`` (``n`` or ``{"limit", "strategy"}``), ``stop_when``
        (``runstream.stop_conditions``), ``prepare_step`` (``runstream.run._prepare_step``),
        ``scorers`` (replace the agent's for this run; by name too) and ``return_scorer_data``. They
        are read once into a frozen :class:`~runstream.agent.run_options.RunOptions`, over the agent's
        ``default_options``; an unknown option is an error naming it.

        ``memory={"thread": ..., "resource": ...}`` loads the thread's history and saves the new
        messages. ``until_idle=True`` (or ``{"max_idle_ms": n, "resume_window_ms": n}``) keeps the
        stream open while the run's background tasks work and adds a continuation turn when they
        finish (see ``runstream.agent.until_idle``). ``client_tools`` (see :func:`client_tool`) are
        offered to the model but executed by the caller: a step that calls one ends the run with
        reason ``tool-calls`` after its ``tool-call`` chunks; send the results in the next run.
        """
        plain = not options and until_idle is None and self.default_options is None
        idle: UntilIdle = False
        if plain:  # (the common call: nothing to read)
            run_options = RunOptions.of(options)
        else:
            run_options, run_id, idle = await self._read_options(options, run_id, until_idle)
        input_messages = normalize_messages(messages)
        if not self._idles(idle, run_options):
            return await self._start_run(input_messages, run_options, run_id, plain=plain)

        async def first_turn() -> RunOutput:
            return await self._start_run(input_messages, run_options, run_id, AbortController())

        return await self._stream_until_idle(run_options, idle, first_turn)

    async def _read_options(
        self, options: Mapping[str, Any], run_id: str | None, until_idle: UntilIdle | None
    ) -> tuple[RunOptions, str | None, UntilIdle]:
        """A call's options over the agent's ``default_options`` (Mastra's ``defaultOptions``: a
        mapping, or a function of the request context returning one), read once."""
        if self.default_options is not None:
            defaults = self.default_options
            if not isinstance(defaults, Mapping):
                defaults = await resolve(defaults, RequestContext.coerce(options.get("request_context")))
            given = read_default_options(defaults)
            run_id = run_id if run_id is not None else given.pop("run_id", None)
            until_idle = until_idle if until_idle is not None else given.pop("until_idle", None)
            given.pop("run_id", None)
            given.pop("until_idle", None)
            # the call's options (in either spelling) over the defaults (by their Python names)
            options = {**{k: v for k, v in given.items() if camel(k) not in options}, **options}
        idle = until_idle if until_idle is not None else False
        check_idle_options(idle)
        run_options = RunOptions.of(options)
        self.scoring.check(self, run_options)
        return run_options, run_id, idle

    def _idles(self, until_idle: UntilIdle, options: RunOptions) -> bool:
        """Whether a stream stays open for its background tasks (it needs a task manager and a
        thread to continue on; otherwise it is a plain stream, as in Mastra)."""
        manager = self.services.task_manager if self.services is not None else None
        return (
            until_idle is not False
            and manager is not None
            and options.memory is not None
            and (self.memory is not None or self.memory_resolver is not None)
        )

    async def stream_until_idle(
        self,
        messages: MessagesInput | None = None,
        *,
        max_idle_ms: float | None = None,
        resume_window_ms: float | None = None,
        max_continuations: int | None = None,
        **options: Unpack[StreamOptions],
    ) -> RunOutput:
        """Deprecated: use ``stream(..., until_idle=True)``."""
        warnings.warn(
            "Agent.stream_until_idle() is deprecated; use Agent.stream(..., until_idle=True)",
            DeprecationWarning,
            stacklevel=2,
        )
        chosen = {
            "max_idle_ms": max_idle_ms,
            "resume_window_ms": resume_window_ms,
            "max_continuations": max_continuations,
        }
        idle = {key: value for key, value in chosen.items() if value is not None}
        return await self.stream(messages, until_idle=idle or True, **options)

    async def _start_run(
        self,
        input_messages: list[PromptMessage],
        options: RunOptions,
        run_id: str | None,
        controller: AbortController | None = None,
        *,
        plain: bool = False,
    ) -> RunOutput:
        """``plain``: called with no options (its configuration may come from a template)."""
        controller = controller or AbortController()
        history: list[PromptMessage] = []
        continued: ContinuedMessage | None = None
        scope = options.memory
        memory = await self._memory_of(options) if scope is not None else None
        if scope is not None and memory is not None:
            if self.services is not None:
                await self.services.start()
            await memory.ensure_thread(scope)
            history = await memory.load_prompt(scope, input_messages)
            if not input_messages:  # e.g. an until-idle continuation
                continued = await memory.continuable_message(scope)
        state = RunState(
            run_id or new_id(),
            new_id(),
            [*history, *input_messages],
            len(history) + len(input_messages),
            history_count=len(history),
            continued=continued,
        )
        durable_runs = self.services.durable_runs if self.services is not None else None
        if durable_runs is not None:  # the run is a workflow elsewhere (runstream.durable)
            return await durable_runs.start_run(self.id, state, options, controller)
        cfg = self._plain_runs.config(self, options, controller.signal) if plain else None
        if cfg is None:
            cfg = await self._configure(options, state, controller, memory)
            if plain:  # the next plain runs copy it (runstream.agent._plain_runs)
                self._plain_runs.keep(self, cfg)
        return self._output(cfg, state, controller, None, options)

    async def _memory_of(self, options: RunOptions) -> Memory | None:
        """The run's memory (``runstream.memory.run_memory``), if it has a thread."""
        if options.memory is None:
            return None
        source = self.memory_resolver or self.memory
        if source is None:
            raise ConfigurationError(f"agent {self.id!r} has no memory: pass Agent(..., memory=Memory(...))")
        storage = self.services.storage if self.services is not None else None
        return await run_memory(source, options.memory, options.request_context, storage)

    async def _configure(
        self, options: RunOptions, state: RunState, controller: AbortController, memory: Memory | None = None
    ) -> LoopConfig:
        """The loop configuration of a run (new or restored) from its options and the agent."""
        if memory is None and options.memory is not None:  # (without a thread, there is none)
            memory = await self._memory_of(options)
        signal = controller.signal
        if options.abort_signal is not None:
            signal = AbortSignal.any(signal, options.abort_signal)
        context = options.request_context
        # with the toolsets' current tools; static tools need no awaiting (the common case)
        tools = (
            self.tools if self.tools_resolver is None and not self.toolsets else await self.get_tools(context)
        )
        if memory is not None:
            tools = {**tools, **memory.tools()}  # updateWorkingMemory
        if options.client_tools or options.active_tools is not None or options.require_tool_approval is True:
            tools = options.call_tools(tools)
        model = options.model or self.model
        model = ready_model(
            model if is_model(model) else await resolve_model(model, context, f"agent {self.id!r}")
        )
        cfg = options.loop_config(self, model=model, tools=tools, signal=signal)
        cfg.memory = memory
        if (
            options.delegation is not None
            and options.delegation.include_sub_agent_tool_results_in_model_context
        ):
            cfg.tools = with_full_results(cfg.tools)
        instructions = options.instructions if options.instructions is not None else self.instructions
        if not isinstance(instructions, str):
            instructions = await resolve_instructions(instructions, context, f"agent {self.id!r}")
        storage = self._run_storage() if self.durable else None
        if storage is not None:  # a durable run is saved after every step (runstream.agent._durable_api)
            cfg.on_step_end = partial(self._durable_runs.save, storage, options)
        services = self.services
        if services is not None and services.task_manager is not None:
            instructions += await self._attach_background(cfg, options, services, services.task_manager)
        elif not options.disable_background_tasks:
            warn_without_manager(self.id, self.tools, self.background_config)
        if options.delegation is not None and options.delegation.enable_result_references:
            offer_result_references(cfg)
        completion = options.is_task_complete or self.is_task_complete
        if completion is not None:
            cfg.completion_checks.append(completion.check)
        system = [instructions] if instructions else []
        if memory is not None and options.memory is not None:  # working memory's instruction
            system += [*options.system, *await memory.system_messages(options.memory)]
        else:
            system += options.system
        cfg.system = [{"role": "system", "content": text} for text in system]
        if options.memory is not None and self.goal is not None:  # restored runs are judged too
            await attach_goal(cfg, state, self.goal, Goals(self._goal_storage()), options.memory.thread_id)
        return cfg

    async def _attach_background(
        self, cfg: LoopConfig, options: RunOptions, services: RuntimeServices, manager: TaskManager
    ) -> str:
        """Wire the task manager into the run; returns text to append to the instructions."""
        if options.disable_background_tasks or self.background_config.disabled:
            return ""
        from runstream.tasks.dispatch import BackgroundDispatcher, wait_in_loop

        await services.start()
        dispatcher = BackgroundDispatcher(manager, self.background_config)
        tools = {name: tool for name, tool in cfg.tools.items() if name not in cfg.client_tools}
        eligible = dispatcher.eligible_tools(tools)
        if not eligible:
            return ""
        if self.tools_resolver is not None:  # so that a recovered task finds its tool
            for name in eligible:
                manager.register_tool(self.id, tools[name])
        cfg.dispatch_tool = dispatcher
        cfg.tool_schemas = {name: tool_schema_with_override(tools[name]) for name in eligible}
        if self.durable:
            wait_timeout = self.background_config.wait_timeout_ms
            if wait_timeout is None:
                wait_timeout = manager.config.wait_timeout_ms
            cfg.wait_for_background = partial(wait_in_loop, manager, wait_timeout_ms=wait_timeout)
        cfg.tasks_pending = lambda ids: any(manager.is_active(task_id) for task_id in ids)
        return system_prompt_section(eligible)

    async def get_instructions(
        self, request_context: RequestContext | Mapping[str, object] | None = None
    ) -> str:
        """The instructions for a request (Mastra's ``getInstructions``)."""
        return await resolve_instructions(
            self.instructions, RequestContext.coerce(request_context), f"agent {self.id!r}"
        )

    async def get_model(
        self, request_context: RequestContext | Mapping[str, object] | None = None
    ) -> LanguageModel:
        """The model for a request (Mastra's ``getModel``)."""
        return await resolve_model(self.model, RequestContext.coerce(request_context), f"agent {self.id!r}")

    async def get_tools(
        self, request_context: RequestContext | Mapping[str, object] | None = None
    ) -> dict[str, Tool]:
        """The tools for a request (Mastra's ``getTools``): ``tools`` plus what ``tools=`` as a
        function returns for this request context."""
        own = await self.current_tools()
        if self.tools_resolver is None:
            return own
        resolved: ToolsInput = await resolve(self.tools_resolver, RequestContext.coerce(request_context))
        return {**by_name(resolved), **own}

    async def get_memory(
        self, request_context: RequestContext | Mapping[str, object] | None = None
    ) -> Memory | None:
        """The memory for a request (Mastra's ``getMemory``): ``memory=``, or what it returns as
        a function of the request context; with the runtime's storage where it has none."""
        source = self.memory_resolver or self.memory
        if source is None:
            return None
        storage = self.services.storage if self.services is not None else None
        return await run_memory(source, MemoryScope("", ""), RequestContext.coerce(request_context), storage)

    def _goal_storage(self) -> Storage:
        storage = self.memory.storage if self.memory is not None else None
        if storage is None and self.services is not None:
            storage = self.services.storage
        if storage is None:
            raise ConfigurationError(
                f"agent {self.id!r} needs storage for goals: give it memory or a Runstream"
            )
        return storage

    # -- goals -----------------------------------------------------------------------------------------
    async def set_objective(
        self, objective: str, *, thread_id: str, max_runs: int | None = None, prompt: str | None = None
    ) -> Objective:
        """Give a thread a goal; the judge checks it after each run on that thread."""
        return await Goals(self._goal_storage()).set(
            objective, thread_id=thread_id, max_runs=max_runs, prompt=prompt
        )

    async def get_objective(self, *, thread_id: str) -> Objective | None:
        return await Goals(self._goal_storage()).get(thread_id)

    async def update_objective_options(
        self,
        *,
        thread_id: str,
        max_runs: int | None = None,
        prompt: str | None = None,
        status: GoalStatus | None = None,
    ) -> Objective | None:
        """Change a goal's options; ``status="active"`` (with a higher ``max_runs``) resumes a paused one."""
        return await Goals(self._goal_storage()).update(
            thread_id, max_runs=max_runs, prompt=prompt, status=status
        )

    async def clear_objective(self, *, thread_id: str) -> bool:
        return await Goals(self._goal_storage()).clear(thread_id)

    async def durable_runs(self) -> list[str]:
        """Ids of this agent's durable runs that did not finish (e.g. cut off by a restart)."""
        return await self._durable_runs.unfinished(self._run_storage())

    async def list_active_runs(
        self, **filters: Unpack[durable_api.ActiveRunFilters]
    ) -> durable_api.ActiveRuns:
        """Mastra's ``listActiveRuns``: this agent's durable runs no one drives in this process,
        filtered and paged (``thread_id``, ``resource_id``, ``from_date``, ``to_date``, ``page``...)."""
        live = self._durable_runs.live
        return await durable_api.list_active_runs(self._run_storage(), self.id, live, **filters)

    async def recover(self, run_id: str, **options: Unpack[durable_api.RecoverOptions]) -> RunOutput:
        """Mastra's ``recover``: a durable run continued from its last step as a stream (with its
        callbacks, ``on_suspended`` and ``abort_signal``: :class:`~runstream.agent._durable_api.RecoverOptions`)."""
        run_options, watcher = durable_api.recover_options(options)
        if watcher is not None:
            self._run_logs.watch(run_id, watcher)
        try:
            return await self.resume_durable_run(run_id, **run_options)
        except BaseException:
            self._run_logs.unwatch(run_id)
            raise

    async def recover_active_runs(
        self, *, run_id: str | None = None, **filters: Unpack[durable_api.ActiveRunFilters]
    ) -> durable_api.RecoveredRuns:
        """Mastra's ``recoverActiveRuns``: recover every matching run (or ``run_id``) and drive
        each to its end here; ``{"recovered", "succeeded", "failed"}``."""
        return await durable_api.recover_active_runs(
            self.recover, self.list_active_runs, run_id=run_id, **filters
        )

    async def observe(
        self, run_id: str, **options: Unpack[durable_api.ObserveOptions]
    ) -> AsyncIterator[AnyChunk]:
        """Mastra's ``observe``: the chunks of a durable run streaming in this process (or
        finished lately), from ``offset``, live until it ends (``idle_timeout_ms``, ``is_alive``)."""
        log = self._run_logs.get(run_id)
        if log is None:
            raise RunNotFoundError(f"no durable run {run_id!r} streams on agent {self.id!r}")
        return durable_api.observe(log, run_id, **options)

    async def resume_durable_run(self, run_id: str, **options: Unpack[StreamOptions]) -> RunOutput:
        """Continue a durable run from its last finished step (waiting for its tasks first);
        ``options`` (``stream()``'s) replace the run's own."""
        state, saved = await self._durable_runs.load(run_id, self._run_storage())
        run_options = saved.replaced(options) if options else saved
        if self.services is not None:
            await self.services.start()
        controller = AbortController()
        cfg = await self._configure(run_options, state, controller)
        return self._output(cfg, state, controller, ResumeAction("continue"), run_options)

    async def _save_turn(self, cfg: LoopConfig, state: RunState, options: RunOptions) -> None:
        """An ended run's turn into its thread (if it has one), then the thread's title."""
        memory = cfg.memory
        if memory is None or cfg.thread_id is None or cfg.resource_id is None:
            return
        state.saved = True
        await memory.save_turn(
            MemoryScope(cfg.thread_id, cfg.resource_id),
            state.new_input_messages,
            state.stored_response_messages,  # (a tool's own exception text stays out)
            state.message_id,
            metadata=run_metadata(cfg, state),
            model=model_label(cfg),
            continued=state.continued,
        )
        if options.memory is not None:
            memory.title_after_turn(options.memory, cfg.model, options.request_context)

    async def _save_input_early(self, cfg: LoopConfig, state: RunState) -> None:
        """A paused run's new input into memory now (:func:`runstream.tasks.settling.save_input_early`)."""
        await save_input_early(cfg.memory, cfg.thread_id, cfg.resource_id, state)

    def _start_span(self, cfg: LoopConfig, state: RunState) -> None:
        """Open the run's agent span (its calls' parent): in-process, and on a durable run's worker."""
        state.span = tracing.start_agent_span(
            self.id,
            self.name,
            state.run_id,
            cfg.thread_id,
            cfg.resource_id,
            description=self.description,
            provider=cfg.model.provider,
            model=cfg.model.model_id,
        )

    def _output(
        self,
        cfg: LoopConfig,
        state: RunState,
        controller: AbortController,
        resume: ResumeAction | None,
        options: RunOptions,
    ) -> RunOutput:
        memory = cfg.memory if cfg.thread_id is not None else None
        if cfg.on_step_end is not None:
            self._durable_runs.live.add(state.run_id)
        self._start_span(cfg, state)

        # a durable run is observable (Mastra's observe): its chunks are logged as they pass
        run_log = self._run_logs.observer(state.run_id) if cfg.on_step_end is not None else None

        async def on_close() -> None:
            if run_log is not None:
                run_log.close()
            tracing.end_agent_span(state.span, state)
            if options.return_scorer_data:
                out.scoring_data = scoring_data(cfg, state)
            self._durable_runs.finished(state.run_id)
            storage = self._run_storage()
            if cfg.on_step_end is not None and storage is not None:
                await storage.delete_snapshot(DURABLE_NAMESPACE, state.run_id)
            if state.status == "suspended":
                await self._save_input_early(cfg, state)
                await self._stopped.remember(Stopped(cfg, state, options), storage)
                return
            if resume is not None and storage is not None:
                await storage.delete_snapshot(NAMESPACE, state.run_id)
            await self._save_turn(cfg, state, options)
            if self.scorers or options.scorers:  # (a run without scorers: nothing more)
                out.scoring = self.scoring.finish(self, cfg, state, options)

        observers: list[Observer] = []
        if memory is not None and options.memory is not None:  # generateTitle's emitEvent
            titles = memory.title_observer(
                options.memory, cfg.model, options.request_context, lambda: state.messages
            )
            if titles is not None:
                observers.append(titles)
        if options.has_callbacks:
            observers.append(CallbackObserver(cfg, state, options.callbacks, partial(full_output, state)))
        if run_log is not None:
            observers.append(run_log)
        out = run_output(cfg, state, resume, controller, observers=observers, on_close=on_close)
        return out  # (named: on_close gives it the run's scoring)

    def _run_storage(self) -> Storage | None:
        if self.memory is not None and self.memory.storage is not None:
            return self.memory.storage
        return self.services.storage if self.services is not None else None

    async def _stream_until_idle(
        self, options: RunOptions, until_idle: UntilIdle, first_turn: Callable[[], Awaitable[RunOutput]]
    ) -> RunOutput:
        manager = self.services.task_manager if self.services is not None else None
        assert manager is not None

        async def next_turn(turn_options: RunOptions) -> RunOutput:
            return await self._start_run([], turn_options, None)

        return await self._idle_streams.open(manager, options, until_idle, first_turn, next_turn)

    async def generate(
        self,
        messages: MessagesInput | None = None,
        *,
        run_id: str | None = None,
        until_idle: UntilIdle | None = None,
        **options: Unpack[StreamOptions],
    ) -> FullOutput:
        """Run to the end and return the full output (``text``, ``usage``, ``steps`` …); the
        options are ``stream()``'s."""
        out = await self.stream(messages, run_id=run_id, until_idle=until_idle, **options)
        return await out.get_full_output()

    # -- human in the loop ---------------------------------------------------------------------------
    async def approve_tool_call(
        self,
        *,
        run_id: str,
        tool_call_id: str | None = None,
        until_idle: UntilIdle = False,
        **options: Unpack[StreamOptions],
    ) -> RunOutput:
        """Approve a tool call the run stopped for; the returned stream continues the run.

        ``until_idle`` (here and on ``decline_tool_call``/``resume_stream``, as Mastra's
        ``resumeStream(..., {untilIdle})``) keeps the stream open for the background tasks the
        continued run starts, with their continuation turns, as ``stream(until_idle=...)``.
        Any other ``stream()`` option replaces the run's own for the continued run (Mastra's
        ``approveToolCall({runId, ...options})``; recorded ``x-pt24``..``x-pt26``)."""
        return await self._continue(run_id, ResumeAction("approve", tool_call_id), until_idle, options)

    async def decline_tool_call(
        self,
        *,
        run_id: str,
        tool_call_id: str | None = None,
        reason: str | None = None,
        until_idle: UntilIdle = False,
        **options: Unpack[StreamOptions],
    ) -> RunOutput:
        """Decline it: the model is told the call was not approved (``tool-output-denied``)."""
        return await self._continue(
            run_id, ResumeAction("decline", tool_call_id, reason=reason), until_idle, options
        )

    async def resume_stream(
        self,
        data: object,
        *,
        run_id: str,
        tool_call_id: str | None = None,
        until_idle: UntilIdle = False,
        **options: Unpack[StreamOptions],
    ) -> RunOutput:
        """Resume a suspended tool with ``data`` (it runs again with ``ctx.resume_data``)."""
        return await self._continue(
            run_id, ResumeAction("resume", tool_call_id, data=data), until_idle, options
        )

    async def resume_generate(self, data: Any, *, run_id: str, **options: Any) -> FullOutput:
        """``resume_stream`` run to the end: the full output (Mastra's ``resumeGenerate``)."""
        return await (await self.resume_stream(data, run_id=run_id, **options)).get_full_output()

    async def approve_tool_call_generate(self, *, run_id: str, **options: Any) -> FullOutput:
        """``approve_tool_call`` run to the end (Mastra's ``approveToolCallGenerate``)."""
        return await (await self.approve_tool_call(run_id=run_id, **options)).get_full_output()

    async def decline_tool_call_generate(self, *, run_id: str, **options: Any) -> FullOutput:
        """``decline_tool_call`` run to the end (Mastra's ``declineToolCallGenerate``)."""
        return await (await self.decline_tool_call(run_id=run_id, **options)).get_full_output()

    async def suspended_runs(self) -> list[dict[str, Any]]:
        """The stored snapshots (see :func:`runstream.agent._suspension.snapshot`, plus ``suspendedAt``)
        of this agent's runs that wait for a human, for listings."""
        return await self._stopped.listing(self._run_storage())

    async def suspended_run(self, run_id: str) -> SuspendedRun | None:
        """What a run that stopped for a human waits for (and its thread and resource)."""
        found = await self._stopped.find(run_id, self._run_storage())
        return describe(self.id, found.state, found.options.memory) if found is not None else None

    async def _continue(
        self,
        run_id: str,
        action: ResumeAction,
        until_idle: UntilIdle = False,
        given: Mapping[str, Any] | None = None,
    ) -> RunOutput:
        check_idle_options(until_idle)  # bad options fail before the run is touched
        if given:
            self.scoring.check(self, RunOptions.of(given, where="resume"))
        stopped = await self._stopped.take(run_id, action, self._run_storage())
        state = stopped.state
        # The resume call's options replace the run's own (its configuration is then rebuilt).
        options = stopped.options.replaced(given) if given else stopped.options

        async def resumed() -> RunOutput:
            durable_runs = self.services.durable_runs if self.services is not None else None
            if durable_runs is not None:
                return await durable_runs.continue_run(self.id, state, action, options)
            controller = AbortController()
            state.status = "running"
            if stopped.cfg is not None and not given:
                cfg = replace(stopped.cfg, abort_signal=controller.signal)
            else:  # restored from storage, or new options: rebuild the configuration
                if self.services is not None:
                    await self.services.start()
                cfg = await self._configure(options, state, controller)
            return self._output(cfg, state, controller, action, options)

        if self._idles(until_idle, options):
            return await self._stream_until_idle(options, until_idle, resumed)
        return await resumed()

    # -- composition -----------------------------------------------------------------------------------
    def as_tool(self, name: str | None = None) -> Tool:
        """This agent as a tool ``agent-<name>`` (default: its id) taking Mastra's delegation
        input ``{"prompt", "threadId"?, "resourceId"?, "instructions"?, "maxSteps"?}``; its
        chunks stream as tool output (see ``runstream.agent._sub_agent``)."""
        return agent_tool(self, name or self.id, None)
