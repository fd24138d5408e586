"""Property: any JSON message content and aware timestamp round-trips through every backend."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from runstream.storage import InMemoryStorage, SqliteStorage, Storage, StoredMessage, Thread

text = st.text(st.characters(codec="utf-8"), max_size=20)
json_scalars = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | text
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(text, children, max_size=4),
    max_leaves=20,
)
parts = st.lists(
    st.fixed_dictionaries(
        {"type": st.sampled_from(["text", "reasoning", "tool-invocation"])}, optional={"x": json_values}
    ),
    max_size=4,
)
contents = st.fixed_dictionaries(
    {"format": st.just(2), "parts": parts},
    optional={"content": text, "metadata": st.dictionaries(text, json_values)},
)
zones = st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=30)), timezone(timedelta(hours=-8))])
timestamps = st.datetimes(min_value=datetime(1970, 1, 2), max_value=datetime(2200, 1, 1), timezones=zones)


async def round_trip(storage: Storage, saved: StoredMessage) -> StoredMessage:
    try:
        await storage.save_thread(Thread("t1", "r1"))
        await storage.save_messages([saved])
        [loaded] = (await storage.list_messages("t1", resource_id="r1")).items
        return loaded
    finally:
        await storage.close()


@settings(max_examples=60, deadline=None, derandomize=True)
@given(content=contents, created_at=timestamps, role=st.sampled_from(["user", "assistant", "system", "tool"]))
def test_message_round_trip(content: dict[str, Any], created_at: datetime, role: Any) -> None:
    saved = StoredMessage("m1", "t1", "r1", role, content, created_at=created_at)

    for storage in (InMemoryStorage(), SqliteStorage(":memory:")):
        loaded = asyncio.run(round_trip(storage, saved))

        assert loaded == saved
        assert loaded.created_at.tzinfo == UTC
