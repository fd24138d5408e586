"""Must NOT type-check (tests/test_typing.py): a misspelled payload key is an error once
``chunk.type == ...`` has narrowed the chunk."""

from __future__ import annotations

from runstream import RunOutput


async def typo(out: RunOutput) -> None:
    async for chunk in out.full_stream:
        if chunk.type == "text-delta":
            print(chunk.payload["txt"])  # the key is "text"
