"""runstream under test: an ``Agent`` on a bench model that plays the shared token source."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from bench.source import Hold, RunTimes, Script, add, provider_parts, token_count
from bench.source import clock as source_clock
from runstream import Agent, tool
from runstream.models.base import ModelRequest, ModelStream

ADD = tool(add)
_PROMPT_BEFORE_STEPS = 2


@dataclass(frozen=True, slots=True)
class BenchModel:
    """A ``LanguageModel`` whose k-th call in a run (k = tool messages so far) plays step k."""

    script: Script
    suspend: bool
    provider: str = "bench"
    model_id: str = "bench-model"
    specification_version: str = "v2"

    async def stream(self, request: ModelRequest) -> ModelStream:
        # The prompt is the instructions, the user's message, then an assistant message and a
        # tool message per tool step: the step number in O(1) (counting the tool messages is
        # the bench model's own work, growing with the run, that the bare pipeline never does).
        step = (len(request.prompt) - _PROMPT_BEFORE_STEPS) // 2
        return ModelStream(parts=provider_parts(self.script, step, self.suspend))


@cache
def _agent(script: Script, suspend: bool) -> Agent:
    return Agent(
        "bench",
        model=BenchModel(script, suspend),
        instructions="You are a benchmark.",
        tools=[ADD],
        max_steps=len(script) + 1,
    )


async def run_runstream(script: Script, suspend: bool, hold: Hold | None = None) -> RunTimes:
    agent = _agent(script, suspend)
    clock = source_clock()
    last = token_count(script)
    call = clock()
    out = await agent.stream("hi")
    first_chunk = first_delta = 0.0
    chunks = deltas = 0
    async for chunk in out.full_stream:
        if not chunks:
            first_chunk = clock()
        chunks += 1
        if chunk.type == "text-delta":
            if not deltas:
                first_delta = clock()
            deltas += 1
            if hold is not None and deltas == last:
                await hold()
    return RunTimes(call, first_chunk, first_delta, clock(), chunks)
