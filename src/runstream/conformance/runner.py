"""Run one conformance scenario (shared/conformance format) and write its chunk stream as JSONL.

The scenario is interpreted generally (SCENARIOS.md): scripted models, declarative tools,
sub-agents, processors, runs and timed actions. Every chunk of every stream goes to ``out`` as
one line of wire JSON; a ``{"type": "$stream", ...}`` marker precedes each stream after the first.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import warnings
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TextIO

from runstream._json import JsonValue
from runstream.abort import AbortController
from runstream.agent import Agent
from runstream.chunks import AnyChunk
from runstream.conformance.behavior import RuleProcessor, StreamWriter, ToolExecutionLog, build_tool, contains
from runstream.conformance.temporal import temporal_task_manager
from runstream.conformance.workflow_runner import build_workflow, run_workflow_scenario
from runstream.errors import RunstreamError
from runstream.goals import DEFAULT_MAX_RUNS, GoalConfig
from runstream.memory import Memory, memory_options
from runstream.run.output import RunOutput
from runstream.runtime import Runstream
from runstream.scoring import ScoreInput, Scorer, TaskCompletion
from runstream.stop_conditions import StopCondition, has_tool_call, step_count_is
from runstream.storage import InMemoryStorage, SqliteStorage, Storage, TaskFilter
from runstream.tasks.config import BackgroundTaskConfig
from runstream.testing.embedders import HashEmbedder
from runstream.testing.scripted import ScriptedModel

RESUME_WAIT_MS = 30_000
"""How long a ``resumeTask`` action waits for its task to suspend (a Temporal attempt runs elsewhere)."""


def _as_async(fn: Callable[[], None]) -> Callable[[], Awaitable[None]]:
    async def call() -> None:
        fn()

    return call


class UnsupportedScenario(RunstreamError):
    """The scenario uses a feature this build does not implement yet."""


@dataclass
class _Action:
    spec: Mapping[str, Any]
    fired: bool = False
    chunk: AnyChunk | None = None
    """The chunk that triggered it."""


def _runs(scenario: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    if "runs" in scenario:
        return list(scenario["runs"])
    return [scenario["run"]] if "run" in scenario else []


def build_runtime(scenario: Mapping[str, Any], agent: Agent, tmp_dir: str) -> Runstream:
    """The Mastra container of the scenario: storage and background task manager."""
    mastra = scenario.get("mastra", {})
    kind = mastra.get("storage", "in-memory")
    storage: Storage
    if kind == "libsql":
        storage = SqliteStorage(os.path.join(tmp_dir, "runstream.db"))
    elif kind in ("in-memory", "none"):
        storage = InMemoryStorage()
    else:
        raise UnsupportedScenario(f"storage {kind!r} is not supported")
    background = BackgroundTaskConfig.coerce(mastra.get("backgroundTasks"))
    manager = temporal_task_manager(storage, background)  # RUNSTREAM_CONFORMANCE_TEMPORAL
    return Runstream(agents=[agent], storage=storage, background_tasks=background, task_manager=manager)


def build_agent(scenario: Mapping[str, Any], log: ToolExecutionLog) -> Agent:
    spec = scenario["agent"]
    tools = []
    sub_agents = []
    for tool_spec in scenario.get("tools", []):
        kind = tool_spec.get("type")
        if kind == "agent":
            sub_agents.append(
                Agent(
                    tool_spec["name"],
                    name=tool_spec.get("agentName"),
                    description=tool_spec.get("description", ""),
                    instructions=tool_spec.get("instructions", ""),
                    model=ScriptedModel.from_script(tool_spec["model"]),
                    tools=[build_tool(sub_tool, log) for sub_tool in tool_spec.get("tools", [])],
                    memory={"lastMessages": 50} if tool_spec.get("memory") else None,
                    default_options=tool_spec.get("defaultOptions"),
                )
            )
        elif kind == "workflow":
            tools.append(build_workflow(tool_spec["workflow"], log).as_tool(name=tool_spec["name"]))
        else:
            tools.append(build_tool(tool_spec, log))
    return Agent(
        spec["id"],
        name=spec.get("name"),
        description=spec.get("description", ""),
        instructions=spec.get("instructions", ""),
        model=ScriptedModel.from_script(scenario["model"]),
        tools=tools,
        agents=sub_agents,
        max_steps=spec.get("maxSteps", 5),
        tool_choice=spec.get("toolChoice"),
        structured_output=spec.get("structuredOutput"),
        output_processors=[RuleProcessor(p) for p in spec.get("outputProcessors", [])],
        memory=_memory(spec.get("memory")),
        background_tasks=spec.get("backgroundTasks"),
        goal=_goal_config(spec.get("goal")),
        is_task_complete=_task_completion(spec.get("isTaskComplete")),
        durable=bool(spec.get("durable", False)),
    )


def _memory(spec: Any) -> Any:
    """The agent's memory; with ``semanticRecall``, on the deterministic ``HashEmbedder`` (the
    reference runner's copy embeds with the same vectors) and the default vector store."""
    if not isinstance(spec, Mapping) or not spec.get("semanticRecall"):
        return spec
    options = dict(spec)
    dimension = options.pop("embedderDimension", 256)
    return Memory(embedder=HashEmbedder(dimension)).with_options(memory_options(options, where="memory"))


def _goal_config(spec: Mapping[str, Any] | None) -> GoalConfig | None:
    if spec is None:
        return None
    return GoalConfig(
        judge=ScriptedModel.from_script(spec["judge"]), max_runs=spec.get("maxRuns", DEFAULT_MAX_RUNS)
    )


def _task_completion(spec: Mapping[str, Any] | None) -> TaskCompletion | None:
    """Scorers that pass when the answer contains a string (the scenario format's scorer)."""
    if spec is None:
        return None

    def scorer(definition: Mapping[str, Any]) -> Scorer:
        needle = definition["passIfOutputContains"]

        def score(data: ScoreInput) -> tuple[float, str]:
            if needle in data.text:
                return 1.0, definition.get("passReason", "")
            return 0.0, definition.get("failReason", "")

        return Scorer(
            definition["id"],
            score,
            name=definition.get("name", ""),
            description=definition.get("description", ""),
        )

    return TaskCompletion(scorers=[scorer(d) for d in spec["scorers"]], strategy=spec.get("strategy", "all"))


def _stop_condition(spec: Mapping[str, Any]) -> StopCondition:
    """``{"stepCountIs": n}`` or ``{"hasToolCall": name}`` (the runner's JSON for stopWhen)."""
    if "stepCountIs" in spec:
        return step_count_is(int(spec["stepCountIs"]))
    if "hasToolCall" in spec:
        return has_tool_call(str(spec["hasToolCall"]))
    raise UnsupportedScenario(f"stop condition {spec!r} is not supported")


def _delegation(spec: Mapping[str, Any]) -> dict[str, object]:
    """The scenario format's declarative hooks: each returns the given result (``"bail"``:
    calls ``bail()``), as the Node runner's extension does."""
    out: dict[str, object] = {k: v for k, v in spec.items() if not k.startswith("onDelegation")}

    def hook(result: JsonValue) -> Callable[[Mapping[str, object]], JsonValue]:
        def call(context: Mapping[str, object]) -> JsonValue:
            bail = context.get("bail")
            if result == "bail" and callable(bail):
                bail()
                return None
            return result

        return call

    for name in ("onDelegationStart", "onDelegationComplete"):
        if name in spec:
            out[name] = hook(spec[name])
    return out


def _stream_options(run: Mapping[str, Any]) -> dict[str, Any]:
    options = dict(run.get("options", {}))
    out: dict[str, Any] = {}
    mapping = {
        "maxSteps": "max_steps",
        "toolChoice": "tool_choice",
        "includeRawChunks": "include_raw_chunks",
        "structuredOutput": "structured_output",
        "maxProcessorRetries": "max_processor_retries",
        "toolCallConcurrency": "tool_call_concurrency",
    }
    structured = options.get("structuredOutput")
    if isinstance(structured, Mapping) and isinstance(structured.get("model"), Mapping):
        # the scenario format's structuring model: a ModelScript
        options["structuredOutput"] = {**structured, "model": ScriptedModel.from_script(structured["model"])}
    if "isTaskComplete" in options:
        out["is_task_complete"] = _task_completion(options.pop("isTaskComplete"))
    for key, value in options.items():
        if key in mapping:
            out[mapping[key]] = value
        elif key == "stopWhen":
            out["stop_when"] = [
                _stop_condition(spec) for spec in (value if isinstance(value, list) else [value])
            ]
        elif key == "delegation":
            out["delegation"] = _delegation(value)
        elif key == "maxIdleMs":
            continue
        elif key == "maxRetries":
            continue  # model-call retries: the scripted model never fails transiently
        else:
            raise UnsupportedScenario(f"run option {key!r} is not supported")
    return out


class ScenarioRunner:
    runtime: Runstream

    def __init__(self, scenario: Mapping[str, Any], out: TextIO) -> None:
        self.scenario = scenario
        self.writer = StreamWriter(out)
        self.log = ToolExecutionLog()
        self.background: set[asyncio.Task[Any]] = set()

    async def run(self) -> None:
        if "workflow" in self.scenario:
            await run_workflow_scenario(self.scenario, self.writer, self.log)
            return
        agent = build_agent(self.scenario, self.log)
        with tempfile.TemporaryDirectory() as tmp_dir:
            runtime = build_runtime(self.scenario, agent, tmp_dir)
            self.runtime = runtime
            try:
                await self._run_all(agent)
            finally:
                await runtime.close()

    async def _start(self, agent: Agent, run: Mapping[str, Any], controller: AbortController) -> RunOutput:
        options = _stream_options(run)
        if run.get("memory"):
            options["memory"] = run["memory"]
        idle = run.get("untilIdle")
        idle_options = {"max_idle_ms": idle["maxIdleMs"]} if isinstance(idle, Mapping) else None
        if run.get("streamUntilIdle"):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                return await agent.stream_until_idle(
                    run.get("messages"),
                    max_idle_ms=idle_options["max_idle_ms"] if idle_options else None,
                    abort_signal=controller.signal,
                    **options,
                )
        if idle:
            options["until_idle"] = idle_options or True
        return await agent.stream(run.get("messages"), abort_signal=controller.signal, **options)

    async def _run_all(self, agent: Agent) -> None:
        goal = self.scenario["agent"].get("goal")
        if goal is not None:
            target = goal.get("thread") or _runs(self.scenario)[0].get("memory") or {}
            await self.runtime.start()
            await agent.set_objective(goal["objective"], thread_id=target["thread"])
        for run in _runs(self.scenario):
            controller = AbortController()
            out = await self._start(agent, run, controller)
            actions = [_Action(a) for a in run.get("actions", [])]
            deferred = await self._consume(out, "run", actions, controller.abort, run.get("abortAfterChunks"))
            if run.get("settleMs"):
                await asyncio.sleep(run["settleMs"] / 1000)
            if isinstance(agent.memory, Memory):  # Mastra embeds before the run ends; runstream after
                await agent.memory.flush_embeddings()
            # After the stream closed (and settled), as the reference runner does: the chunk-triggered
            # approve/decline/resumeStream actions, then the {"end": true} ones, each after its delay.
            for action in deferred + [a for a in actions if a.spec["on"].get("end")]:
                if action.spec.get("delayMs"):
                    await asyncio.sleep(action.spec["delayMs"] / 1000)
                try:
                    await self._after_stream(agent, out, run, action)
                except Exception as exc:  # recorded, not fatal (the reference runner does the same)
                    print(f"action {action.spec['do']} failed: {exc!r}", file=sys.stderr)
        if self.background:
            await asyncio.gather(*self.background, return_exceptions=True)

    async def _after_stream(
        self, agent: Agent, out: RunOutput, run: Mapping[str, Any], action: _Action
    ) -> None:
        do = action.spec["do"]
        if do in ("approveToolCall", "declineToolCall", "resumeStream"):
            follow = await self._follow_up(agent, out, action)
            await self._consume(follow, do, [], follow.abort, None)
            return
        operation = self._task_action(action.spec, action.chunk)
        await self._until_settled(await self._task_id(action.spec, action.chunk))
        if action.spec.get("watchMs") is not None:
            await self._watch(operation, action.spec["watchMs"])
        else:
            await operation()

    async def _consume(
        self,
        out: RunOutput,
        source: str,
        actions: list[_Action],
        abort: Callable[[], None],
        abort_after: int | None,
    ) -> list[_Action]:
        """Write the stream's chunks and fire chunk-triggered actions; returns those that must
        wait until the stream closed (approve/decline/resumeStream)."""
        self.writer.begin(source)
        counts: dict[str, int] = {}
        deferred: list[_Action] = []
        received = 0
        async for chunk in out.full_stream:
            self.writer.chunk(chunk)
            received += 1
            counts[chunk.type] = counts.get(chunk.type, 0) + 1
            for action in actions:
                trigger = action.spec["on"]
                if action.fired or trigger.get("end"):
                    continue
                if trigger.get("type") != chunk.type or counts[chunk.type] != trigger.get("nth", 1):
                    continue
                payload = chunk.payload if isinstance(chunk.payload, dict) else {}
                if "match" in trigger and not contains(payload, trigger["match"]):
                    continue
                action.fired = True
                action.chunk = chunk
                if action.spec["do"] in ("approveToolCall", "declineToolCall", "resumeStream"):
                    deferred.append(action)
                else:
                    await self._fire(action, chunk, abort)
            if abort_after is not None and received == abort_after:
                abort()
        return deferred

    async def _fire(self, action: _Action, chunk: AnyChunk, abort: Callable[[], None]) -> None:
        """Carry out a chunk-triggered action now, or after its delay while the stream goes on."""
        spec = action.spec
        if spec["do"] == "abort":
            operation: Callable[[], Awaitable[None]] = _as_async(abort)
        elif spec["do"] in ("cancelTask", "resumeTask"):
            operation = self._task_action(spec, chunk)
        else:
            raise UnsupportedScenario(f"action {spec['do']!r} is not supported")
        if spec.get("delayMs"):
            task = asyncio.create_task(self._later(spec["delayMs"], operation))
            self.background.add(task)
        else:
            await operation()

    def _task_action(self, spec: Mapping[str, Any], chunk: AnyChunk | None) -> Callable[[], Awaitable[None]]:
        manager = self.runtime.task_manager
        if manager is None:
            raise UnsupportedScenario(f"{spec['do']} needs mastra.backgroundTasks")

        async def operation() -> None:
            task_id = await self._task_id(spec, chunk)
            if spec["do"] == "cancelTask":
                await manager.cancel(task_id)
            else:
                await self._until_settled(task_id)
                await manager.resume(task_id, spec.get("data"))

        return operation

    async def _task_id(self, spec: Mapping[str, Any], chunk: AnyChunk | None) -> str:
        manager = self.runtime.task_manager
        assert manager is not None
        payload = chunk.payload if chunk is not None and isinstance(chunk.payload, dict) else {}
        task_id = payload.get("taskId")
        if spec.get("toolCallId"):
            page = await manager.list_tasks(TaskFilter(tool_call_id=spec["toolCallId"]))
            task_id = page.items[-1].id if page.items else None
        if task_id is None:
            raise RuntimeError(f"{spec['do']}: no task found for {spec}")
        return str(task_id)

    async def _until_settled(self, task_id: str) -> None:
        """A task runs elsewhere on Temporal: its attempt may not have reached its suspension or
        its end yet when the stream ends and ``settleMs`` has passed (in-process it has, as in the
        reference's recording: the settle time outlasts the task), so a task action after the
        stream (``resumeTask``, ``cancelTask`` on ``end``) waits for that, before anything
        watches the task manager's events. Under load, a wall-clock settle alone left a cancel
        landing on a task still running (x-p07-watch-cancel on Temporal)."""
        manager = self.runtime.task_manager
        assert manager is not None
        record = await manager.get_task(task_id)
        if record is not None and record.status in ("pending", "running"):
            await manager.wait_for(task_id, timeout_ms=RESUME_WAIT_MS)

    async def _watch(self, operation: Callable[[], Awaitable[None]], watch_ms: float) -> None:
        """Subscribe to the task manager's stream, act, and record its events as a new section."""
        manager = self.runtime.task_manager
        assert manager is not None
        events: list[AnyChunk] = []
        subscription = manager.subscribe(agent_id=self.scenario["agent"]["id"], include_existing=False)

        async def record() -> None:
            async for event in subscription:
                events.append(event)

        recorder = asyncio.create_task(record())
        await operation()
        await asyncio.sleep(watch_ms / 1000)
        await subscription.close()
        recorder.cancel()
        await asyncio.gather(recorder, return_exceptions=True)
        self.writer.begin("taskManager.stream")
        for event in events:
            self.writer.chunk(event)

    @staticmethod
    async def _later(delay_ms: float, operation: Callable[[], Awaitable[None]]) -> None:
        await asyncio.sleep(delay_ms / 1000)
        await operation()

    async def _follow_up(self, agent: Agent, out: RunOutput, action: _Action) -> RunOutput:
        spec = action.spec
        payload = action.chunk.payload if action.chunk is not None else {}
        call_id = spec.get("toolCallId", payload.get("toolCallId") if isinstance(payload, dict) else None)
        options = spec.get("options", {})
        idle = options.get("untilIdle", False)
        until_idle = {"max_idle_ms": idle["maxIdleMs"]} if isinstance(idle, Mapping) else bool(idle)
        # the resume call's own stream options (x-pt24..x-pt26)
        more = _stream_options(
            {"options": {k: v for k, v in options.items() if k not in ("untilIdle", "reason")}}
        )
        if spec["do"] == "approveToolCall":
            return await agent.approve_tool_call(
                run_id=out.run_id, tool_call_id=call_id, until_idle=until_idle, **more
            )
        if spec["do"] == "declineToolCall":
            return await agent.decline_tool_call(
                run_id=out.run_id,
                tool_call_id=call_id,
                reason=options.get("reason"),
                until_idle=until_idle,
                **more,
            )
        return await agent.resume_stream(
            spec.get("data"), run_id=out.run_id, tool_call_id=call_id, until_idle=until_idle, **more
        )
