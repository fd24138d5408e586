"""``Agent``: configuration plus ``stream()`` / ``generate()`` and the human-in-the-loop calls.

An agent wires a model, tools, processors and defaults into a :class:`~runstream.loop.LoopConfig`
per run and returns a :class:`~runstream.output.RunOutput`. Runs that stop for a human (an
approval, a suspended tool) are remembered by run id so ``approve_tool_call``,
``decline_tool_call`` and ``resume_stream`` can continue them.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from runstream.abort import AbortController, AbortSignal
from runstream.chunks import AnyChunk
from runstream.loop import LoopConfig, ResumeAction, RunState, agent_loop
from runstream.models.base import LanguageModel, ModelSettings, PromptMessage
from runstream.output import RunOutput
from runstream.structured import StructuredOutput
from runstream.tools import Tool, ToolContext

MessagesInput = str | Sequence[str] | Sequence[Mapping[str, Any]]


class RunNotFoundError(LookupError):
    """No suspended run with that id (it finished, or it never stopped for a human)."""


def normalize_messages(messages: MessagesInput | None) -> list[PromptMessage]:
    """Accept a string, a list of strings, or ``{"role", "content"}`` messages."""
    if messages is None:
        return []
    if isinstance(messages, str):
        messages = [messages]
    out: list[PromptMessage] = []
    for message in messages:
        if isinstance(message, str):
            out.append({"role": "user", "content": [{"type": "text", "text": message}]})
            continue
        if not isinstance(message, Mapping) or "role" not in message:
            raise TypeError("a message must be a string or a mapping with 'role' and 'content'")
        role = message["role"]
        if role not in ("user", "assistant", "system", "tool"):
            raise ValueError(f"unknown message role {role!r}")
        content = message.get("content", "")
        if role == "system":
            out.append({"role": "system", "content": content if isinstance(content, str) else str(content)})
        elif isinstance(content, str):
            out.append({"role": role, "content": [{"type": "text", "text": content}]})
        else:
            out.append({"role": role, "content": [dict(part) for part in content]})
    return out


def normalize_tool_choice(choice: str | Mapping[str, Any] | None) -> dict[str, Any] | None:
    if choice is None:
        return None
    if isinstance(choice, str):
        if choice not in ("auto", "none", "required"):
            raise ValueError(f"tool_choice must be 'auto', 'none', 'required' or a tool, not {choice!r}")
        return {"type": choice}
    return dict(choice)


class Agent:
    """An LLM agent whose every step streams out as typed chunks."""

    def __init__(
        self,
        id: str,
        *,
        model: LanguageModel,
        instructions: str = "",
        name: str | None = None,
        description: str = "",
        tools: Iterable[Tool] | Mapping[str, Tool] = (),
        agents: Iterable[Agent] = (),
        max_steps: int = 5,
        tool_choice: str | Mapping[str, Any] | None = None,
        structured_output: Any = None,
        output_processors: Iterable[Any] = (),
        max_processor_retries: int = 0,
        model_settings: ModelSettings | None = None,
    ) -> None:
        self.id = id
        self.name = name or id
        self.description = description
        self.instructions = instructions
        self.model = model
        tool_list = list(tools.values()) if isinstance(tools, Mapping) else list(tools)
        self.tools: dict[str, Tool] = {t.name: t for t in tool_list}
        for sub in agents:
            sub_tool = sub.as_tool()
            self.tools[sub_tool.name] = sub_tool
        self.max_steps = max_steps
        self.tool_choice = normalize_tool_choice(tool_choice)
        self.structured_output = StructuredOutput.coerce(structured_output)
        self.output_processors = list(output_processors)
        self.max_processor_retries = max_processor_retries
        self.model_settings = model_settings or ModelSettings()
        self._suspended: dict[str, tuple[LoopConfig, RunState]] = {}

    def __repr__(self) -> str:
        return f"Agent({self.id!r})"

    # -- running -----------------------------------------------------------------------------------
    async def stream(
        self,
        messages: MessagesInput | None = None,
        *,
        max_steps: int | None = None,
        tool_choice: str | Mapping[str, Any] | None = None,
        include_raw_chunks: bool = False,
        structured_output: Any = None,
        output_processors: Iterable[Any] | None = None,
        max_processor_retries: int | None = None,
        model_settings: ModelSettings | None = None,
        abort_signal: AbortSignal | None = None,
        run_id: str | None = None,
        context: Sequence[Mapping[str, Any]] = (),
    ) -> RunOutput:
        """Start a run; iterate ``out.full_stream`` for its chunks."""
        controller = AbortController()
        signal = AbortSignal.any(controller.signal, abort_signal) if abort_signal else controller.signal
        structured = StructuredOutput.coerce(structured_output) or self.structured_output
        system: list[PromptMessage] = (
            [{"role": "system", "content": self.instructions}] if self.instructions else []
        )
        cfg = LoopConfig(
            agent_id=self.id,
            model=self.model,
            tools=self.tools,
            system=system,
            max_steps=max_steps if max_steps is not None else self.max_steps,
            tool_choice=normalize_tool_choice(tool_choice) or self.tool_choice,
            include_raw_chunks=include_raw_chunks,
            structured_output=structured,
            output_processors=list(output_processors)
            if output_processors is not None
            else self.output_processors,
            max_processor_retries=(
                max_processor_retries if max_processor_retries is not None else self.max_processor_retries
            ),
            model_settings=model_settings or self.model_settings,
            abort_signal=signal,
            context=normalize_messages(list(context)) if context else [],
        )
        input_messages = normalize_messages(messages)
        state = RunState(
            run_id=run_id or str(uuid.uuid4()),
            message_id=str(uuid.uuid4()),
            messages=input_messages,
            input_count=len(input_messages),
        )
        return self._output(cfg, state, controller, None)

    def _output(
        self, cfg: LoopConfig, state: RunState, controller: AbortController, resume: ResumeAction | None
    ) -> RunOutput:
        async def on_close() -> None:
            if state.status == "suspended":
                self._suspended[state.run_id] = (cfg, state)

        return RunOutput(agent_loop(cfg, state, resume), state, controller, on_close=on_close)

    async def generate(self, messages: MessagesInput | None = None, **options: Any) -> dict[str, Any]:
        """Run to the end and return the full output (``text``, ``usage``, ``steps`` …)."""
        out = await self.stream(messages, **options)
        return await out.get_full_output()

    # -- human in the loop ---------------------------------------------------------------------------
    async def approve_tool_call(self, *, run_id: str, tool_call_id: str | None = None) -> RunOutput:
        """Approve a tool call the run stopped for; the returned stream continues the run."""
        return self._continue(run_id, ResumeAction("approve", tool_call_id))

    async def decline_tool_call(
        self, *, run_id: str, tool_call_id: str | None = None, reason: str | None = None
    ) -> RunOutput:
        """Decline it: the model is told the call was not approved (``tool-output-denied``)."""
        return self._continue(run_id, ResumeAction("decline", tool_call_id, reason=reason))

    async def resume_stream(self, data: Any, *, run_id: str, tool_call_id: str | None = None) -> RunOutput:
        """Resume a suspended tool with ``data`` (it runs again with ``ctx.resume_data``)."""
        return self._continue(run_id, ResumeAction("resume", tool_call_id, data=data))

    def _continue(self, run_id: str, action: ResumeAction) -> RunOutput:
        try:
            cfg, state = self._suspended.pop(run_id)
        except KeyError:
            raise RunNotFoundError(f"no suspended run {run_id!r} on agent {self.id!r}") from None
        pending = state.pending
        if pending is None:
            raise RunNotFoundError(f"run {run_id!r} is not waiting for anything")
        waiting = pending.awaiting_approval if action.kind != "resume" else set(pending.suspended)
        if action.tool_call_id is not None and action.tool_call_id not in waiting:
            self._suspended[run_id] = (cfg, state)
            what = "waiting for approval" if action.kind != "resume" else "suspended"
            raise ValueError(f"tool call {action.tool_call_id!r} of run {run_id!r} is not {what}")
        controller = AbortController()
        state.status = "running"
        cfg = replace(cfg, abort_signal=controller.signal)
        return self._output(cfg, state, controller, action)

    # -- composition -----------------------------------------------------------------------------------
    def as_tool(self) -> Tool:
        """This agent as a tool ``agent-<id>`` taking ``{"prompt"}``; its chunks stream as tool output."""

        async def execute(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
            out = await self.stream(args["prompt"], abort_signal=ctx.abort_signal)
            results: list[AnyChunk] = []
            async for chunk in out.full_stream:
                await ctx.writer.write(chunk)
                if chunk.type == "tool-result":
                    results.append(chunk)
            return {
                "text": out.state.text,
                "subAgentThreadId": str(uuid.uuid4()),
                "subAgentResourceId": str(uuid.uuid4()),
                "subAgentToolResults": [c.payload for c in results],
            }

        return Tool(
            f"agent-{self.id}",
            execute,
            description=self.description or f"Agent: {self.name}",
            input_schema={
                "type": "object",
                "properties": {"prompt": {"type": "string"}},
                "required": ["prompt"],
                "additionalProperties": False,
            },
        )
