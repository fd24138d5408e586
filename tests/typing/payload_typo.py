"""Must NOT type-check (tests/test_typing.py): a misspelled payload key is an error once
``chunk.type == ...`` has narrowed the chunk (line 13), and so is a payload key read from a chunk
nothing narrowed (line 17)."""

from __future__ import annotations

from runstream import AgentChunk, RunOutput


async def typo(out: RunOutput) -> None:
    async for chunk in out.full_stream:
        if chunk.type == "text-delta":
            print(chunk.payload["txt"])  # the key is "text"


def unnarrowed(chunk: AgentChunk) -> str:
    return chunk.payload["text"]  # any chunk: its payload may have no "text"
