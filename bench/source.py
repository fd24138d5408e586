"""What both pipelines share: the scripted token source, the tool, and the per-run timings.

A script is a tuple of steps ``(tokens, ends_with_tool_call)``; step ``k`` is the model's k-th
call in a run. Parts are made lazily, one fresh dict per part as a provider's parser makes them;
with ``suspend`` the source yields to the event loop before every part, as a network stream does.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

Step = tuple[int, bool]
Script = tuple[Step, ...]
Hold = Callable[[], Awaitable[None]]
"""Awaited by a consumer after its run's last text-delta (keeps the run in flight)."""

TOOL_INPUT = '{"a":1,"b":2}'

CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": time.process_time}
_clock = [CLOCKS["wall"]]


def use_clock(name: str) -> None:
    """Time with ``wall`` (``time.perf_counter``, the default) or ``cpu`` (``time.process_time``:
    this process's CPU time, which other processes on a busy machine do not inflate)."""
    _clock[0] = CLOCKS[name]


def clock() -> Callable[[], float]:
    return _clock[0]


def reply(tokens: int) -> Script:
    """One step of ``tokens`` text tokens."""
    return ((tokens, False),)


def tool_steps(steps: int, tokens: int) -> Script:
    """``steps`` steps of ``tokens`` tokens ending in a tool call, then a final text step."""
    return (*((tokens, True) for _ in range(steps)), (tokens, False))


def token_count(script: Script) -> int:
    return sum(tokens for tokens, _ in script)


async def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def _parts(step: int, tokens: int, tool_call: bool) -> Iterator[dict[str, Any]]:
    yield {"type": "stream-start", "warnings": []}
    yield {"type": "text-start", "id": "t"}
    for _ in range(tokens):
        yield {"type": "text-delta", "id": "t", "delta": "tok "}
    yield {"type": "text-end", "id": "t"}
    if tool_call:
        yield {"type": "tool-call", "toolCallId": f"c{step}", "toolName": "add", "input": TOOL_INPUT}
    yield {
        "type": "finish",
        "finishReason": "tool-calls" if tool_call else "stop",
        "usage": {"inputTokens": 1, "outputTokens": tokens, "totalTokens": tokens + 1},
    }


async def provider_parts(script: Script, step: int, suspend: bool) -> AsyncIterator[dict[str, Any]]:
    """The parts of the model's ``step``-th call (the last step repeats)."""
    tokens, tool_call = script[min(step, len(script) - 1)]
    for part in _parts(step, tokens, tool_call):
        if suspend:
            await asyncio.sleep(0)
        yield part


@dataclass(slots=True)
class RunTimes:
    """Clock readings (see :func:`use_clock`) of one run, as its consumer saw it."""

    call: float
    first_chunk: float
    first_delta: float
    end: float
    chunks: int


class Runner(Protocol):
    """Runs ``script`` once through one pipeline, consuming every chunk."""

    def __call__(self, script: Script, suspend: bool, hold: Hold | None = None) -> Awaitable[RunTimes]: ...
