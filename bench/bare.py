"""The limit: model async-gen → loop async-gen → consumer, one small dict per chunk."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from bench.source import Hold, RunTimes, Script, add, provider_parts, token_count
from bench.source import clock as source_clock


async def _loop(script: Script, suspend: bool, run_id: str) -> AsyncIterator[dict[str, Any]]:
    yield {"type": "start", "runId": run_id}
    step = 0
    while True:
        calls: list[dict[str, Any]] = []
        async for part in provider_parts(script, step, suspend):
            kind = part["type"]
            if kind == "text-delta":
                yield {"type": kind, "runId": run_id, "text": part["delta"]}
            elif kind == "tool-call":
                calls.append(part)
                yield {"type": kind, "runId": run_id, "toolCallId": part["toolCallId"]}
            else:
                yield {"type": kind, "runId": run_id}
        if not calls:
            return
        for call in calls:
            result = await add(**json.loads(call["input"]))
            yield {"type": "tool-result", "runId": run_id, "toolCallId": call["toolCallId"], "result": result}
        step += 1


async def run_bare(script: Script, suspend: bool, hold: Hold | None = None) -> RunTimes:
    clock = source_clock()
    last = token_count(script)
    call = clock()
    first_chunk = first_delta = 0.0
    chunks = deltas = 0
    async for chunk in _loop(script, suspend, "run"):
        if not chunks:
            first_chunk = clock()
        chunks += 1
        if chunk["type"] == "text-delta":
            if not deltas:
                first_delta = clock()
            deltas += 1
            if hold is not None and deltas == last:
                await hold()
    return RunTimes(call, first_chunk, first_delta, clock(), chunks)
