"""Run one conformance scenario (shared/conformance format) and write its chunk stream as JSONL.

The scenario is interpreted generally (SCENARIOS.md): scripted models, declarative tools,
sub-agents, processors, runs and timed actions. Every chunk of every stream goes to ``out`` as
one line of wire JSON; a ``{"type": "$stream", ...}`` marker precedes each stream after the first.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TextIO

from runstream.abort import AbortController
from runstream.agent import Agent
from runstream.chunks import AnyChunk, dumps
from runstream.conformance.behavior import RuleProcessor, ToolExecutionLog, build_tool, contains
from runstream.output import RunOutput
from runstream.testing.scripted import ScriptedModel


class UnsupportedScenario(Exception):
    """The scenario uses a feature this build does not implement yet."""


@dataclass
class _Action:
    spec: Mapping[str, Any]
    fired: bool = False


@dataclass
class StreamWriter:
    out: TextIO
    sections: int = 0
    chunk_counts: dict[str, int] = field(default_factory=dict)

    def marker(self, source: str) -> None:
        self.out.write(dumps({"type": "$stream", "index": self.sections, "source": source}) + "\n")

    def begin(self, source: str) -> None:
        if self.sections:
            self.marker(source)
        self.sections += 1

    def chunk(self, chunk: AnyChunk) -> None:
        self.out.write(dumps(chunk.to_wire()) + "\n")


def _check_supported(scenario: Mapping[str, Any]) -> None:
    agent = scenario.get("agent", {})
    missing = []
    if "workflow" in scenario:
        missing.append("workflows")
    if scenario.get("mastra", {}).get("backgroundTasks") or agent.get("backgroundTasks"):
        missing.append("background tasks")
    if "memory" in agent:
        missing.append("memory")
    if "goal" in agent:
        missing.append("goals")
    if "isTaskComplete" in agent or any("isTaskComplete" in r.get("options", {}) for r in _runs(scenario)):
        missing.append("isTaskComplete scorers")
    if agent.get("durable"):
        missing.append("durable agents")
    if missing:
        raise UnsupportedScenario("not implemented yet: " + ", ".join(missing))


def _runs(scenario: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    if "runs" in scenario:
        return list(scenario["runs"])
    return [scenario["run"]] if "run" in scenario else []


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
                )
            )
        elif kind == "workflow":
            raise UnsupportedScenario("not implemented yet: workflows as tools")
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
    )


def _stream_options(run: Mapping[str, Any]) -> dict[str, Any]:
    options = dict(run.get("options", {}))
    out: dict[str, Any] = {}
    mapping = {
        "maxSteps": "max_steps",
        "toolChoice": "tool_choice",
        "includeRawChunks": "include_raw_chunks",
        "structuredOutput": "structured_output",
        "maxProcessorRetries": "max_processor_retries",
    }
    for key, value in options.items():
        if key in mapping:
            out[mapping[key]] = value
        elif key == "maxRetries":
            continue  # model-call retries: the scripted model never fails transiently
        else:
            raise UnsupportedScenario(f"run option {key!r} is not supported")
    return out


class ScenarioRunner:
    def __init__(self, scenario: Mapping[str, Any], out: TextIO) -> None:
        self.scenario = scenario
        self.writer = StreamWriter(out)
        self.log = ToolExecutionLog()
        self.background: set[asyncio.Task[Any]] = set()

    async def run(self) -> None:
        _check_supported(self.scenario)
        agent = build_agent(self.scenario, self.log)
        for run in _runs(self.scenario):
            controller = AbortController()
            out = await agent.stream(
                run.get("messages"), abort_signal=controller.signal, **_stream_options(run)
            )
            actions = [_Action(a) for a in run.get("actions", [])]
            follow_ups = await self._consume(
                out, "run", actions, controller.abort, run.get("abortAfterChunks")
            )
            while follow_ups:
                action = follow_ups.pop(0)
                next_out = await self._follow_up(agent, out, action)
                source = action.spec["do"]
                more = await self._consume(next_out, source, actions, next_out.abort, None)
                follow_ups.extend(more)
                out = next_out
            if run.get("settleMs"):
                await asyncio.sleep(run["settleMs"] / 1000)
        if self.background:
            await asyncio.gather(*self.background, return_exceptions=True)

    async def _consume(
        self,
        out: RunOutput,
        source: str,
        actions: list[_Action],
        abort: Callable[[], None],
        abort_after: int | None,
    ) -> list[_Action]:
        self.writer.begin(source)
        counts: dict[str, int] = {}
        follow_ups: list[_Action] = []
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
                follow = await self._fire(action, chunk, abort)
                if follow:
                    follow_ups.append(action)
            if abort_after is not None and received == abort_after:
                abort()
        for action in actions:
            if not action.fired and action.spec["on"].get("end"):
                action.fired = True
                if await self._fire(action, None, abort):
                    follow_ups.append(action)
        return follow_ups

    async def _fire(self, action: _Action, chunk: AnyChunk | None, abort: Callable[[], None]) -> bool:
        """Carry out an action now (or after its delay); True = it opens a follow-up stream."""
        spec = action.spec
        do = spec["do"]
        if do in ("approveToolCall", "declineToolCall", "resumeStream"):
            payload = chunk.payload if chunk is not None and isinstance(chunk.payload, dict) else {}
            action.spec = {**spec, "_toolCallId": spec.get("toolCallId", payload.get("toolCallId"))}
            return True
        if do == "abort":
            delay = spec.get("delayMs", 0)
            if delay:
                task = asyncio.create_task(self._later(delay, abort))
                self.background.add(task)
            else:
                abort()
            return False
        raise UnsupportedScenario(f"action {do!r} is not supported yet")

    @staticmethod
    async def _later(delay_ms: float, fn: Callable[[], None]) -> None:
        await asyncio.sleep(delay_ms / 1000)
        fn()

    async def _follow_up(self, agent: Agent, out: RunOutput, action: _Action) -> RunOutput:
        spec = action.spec
        call_id = spec.get("_toolCallId")
        if spec.get("delayMs"):
            await asyncio.sleep(spec["delayMs"] / 1000)
        if spec["do"] == "approveToolCall":
            return await agent.approve_tool_call(run_id=out.run_id, tool_call_id=call_id)
        if spec["do"] == "declineToolCall":
            reason = spec.get("options", {}).get("reason")
            return await agent.decline_tool_call(run_id=out.run_id, tool_call_id=call_id, reason=reason)
        return await agent.resume_stream(spec.get("data"), run_id=out.run_id, tool_call_id=call_id)
