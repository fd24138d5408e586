"""Declarative tool behaviours and processors of the conformance scenario format (SCENARIOS.md)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TextIO

from runstream.abort import AbortSignal, sleep
from runstream.chunks import AnyChunk, dumps
from runstream.errors import InvalidInputError
from runstream.processors import ProcessorContext, StepView
from runstream.testing.scripted import ScriptedError
from runstream.tools import Tool, ToolContext


def contains(actual: object, expected: object) -> bool:
    """Recursive subset match: dicts by key subset, everything else (arrays too) by equality."""
    if isinstance(expected, Mapping):
        return isinstance(actual, Mapping) and all(
            key in actual and contains(actual[key], value) for key, value in expected.items()
        )
    return bool(actual == expected)


class ExecutionAborted(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.name = "Error"


@dataclass
class ToolExecutionLog:
    """Counts executions per tool call id (the ``attempt`` condition) and records them."""

    attempts: dict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))
    executions: list[dict[str, object]] = field(default_factory=list)


def select_steps(behavior: Any, facts: Mapping[str, object]) -> list[dict[str, Any]]:
    """The steps of a ``behavior``: the list itself, or the first case whose ``when`` holds for
    ``facts`` (a tool's or a workflow step's), else ``default``."""
    if isinstance(behavior, list):
        return behavior
    for case in behavior.get("cases", []):
        when = case.get("when", {})
        if all(_holds(key, value, facts) for key, value in when.items()):
            return list(case["steps"])
    if "default" in behavior:
        return list(behavior["default"])
    raise InvalidInputError(f"no behaviour case matches {dict(facts)!r} and there is no default")


def _holds(key: str, expected: object, facts: Mapping[str, object]) -> bool:
    """Structured facts (a tool's ``args``, a step's data and state) match as subsets; the
    others (``attempt``, ``resumed`` …) by equality."""
    if key in ("args", "inputData", "resumeData", "state"):
        return contains(facts.get(key), expected)
    return bool(facts.get(key) == expected)


async def abortable_sleep(ms: float, signal: AbortSignal | None, message: str) -> None:
    if await sleep(ms / 1000, signal):
        raise ExecutionAborted(message)


def build_tool(spec: Mapping[str, Any], log: ToolExecutionLog) -> Tool:
    """A function tool whose execute plays the scenario's ``behavior``."""
    name = spec["name"]
    behavior = spec["behavior"]

    async def execute(args: dict[str, object], ctx: ToolContext) -> Any:
        key = (name, ctx.tool_call_id)
        log.attempts[key] += 1
        facts = {
            "args": args,
            "toolCallId": ctx.tool_call_id,
            "attempt": log.attempts[key],
            "resumed": ctx.resume_data is not None,
        }
        log.executions.append({"tool": name, **facts, "resumeData": ctx.resume_data})
        for step in select_steps(behavior, facts):
            if "sleep" in step:
                await abortable_sleep(step["sleep"], ctx.abort_signal, "Tool execution aborted")
            elif "write" in step:
                await ctx.writer.write(step["write"])
            elif "custom" in step:
                await ctx.writer.custom(step["custom"])
            elif "return" in step:
                return step["return"]
            elif "throw" in step:
                raise ScriptedError.from_spec(step["throw"])
            elif "suspend" in step:
                await ctx.suspend(step["suspend"])
            else:
                raise InvalidInputError(f"unknown behaviour step {step!r}")
        raise InvalidInputError(f"behaviour of tool {name!r} ended without return, throw or suspend")

    return Tool(
        name,
        execute,
        description=spec.get("description", ""),
        input_schema=spec.get("inputSchema"),
        output_schema=spec.get("outputSchema"),
        suspend_schema=spec.get("suspendSchema"),
        resume_schema=spec.get("resumeSchema"),
        require_approval=bool(spec.get("requireApproval", False)),
        background=spec.get("background"),
    )


class RuleProcessor:
    """An output processor playing the scenario's ``rules``."""

    def __init__(self, spec: Mapping[str, Any]) -> None:
        self.id: str = spec["id"]
        self.name: str = spec.get("name", self.id)
        self.stream_rules = [r for r in spec.get("rules", []) if r["on"] != "step"]
        self.step_rules = [r for r in spec.get("rules", []) if r["on"] == "step"]

    async def process_output_stream(self, chunk: AnyChunk, ctx: ProcessorContext) -> AnyChunk | None:
        for rule in self.stream_rules:
            if rule["on"] != chunk.type:
                continue
            payload = chunk.payload if isinstance(chunk.payload, dict) else {}
            text = payload.get("text", "")
            if "textContains" in rule and rule["textContains"] not in str(text):
                continue
            action = rule["action"]
            if action == "tripwire":
                ctx.abort(rule["reason"], retry=bool(rule.get("retry", False)), metadata=rule.get("metadata"))
            if action == "drop":
                return None
            if action == "replace-text":
                chunk.payload = {**payload, "text": rule["text"]}
        return chunk

    async def process_output_step(self, step: StepView, ctx: ProcessorContext) -> None:
        for rule in self.step_rules:
            if "textContains" in rule and rule["textContains"] not in step.text:
                continue
            if rule["action"] == "tripwire":
                ctx.abort(rule["reason"], retry=bool(rule.get("retry", False)), metadata=rule.get("metadata"))


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
