"""A :class:`~runstream.server.resumable.ReplayLog` in Redis, shared by every API process.

With ``create_app(runstream, replay_log=RedisReplayLog(url))`` in every replica, a client that
reconnects (``Last-Event-ID``, the observe routes) through a load balancer to another replica
than the one running its run still gets the rest of the chunks, each exactly once.

Per run, under ``<prefix>:<run id>``: ``:info`` (a hash: the owner, whether the run ended),
``:seq`` (the last sequence number) and ``:events``, a Redis stream whose entry ids are
``<seq>-0``, so a reader resumes after any sequence number with ``XRANGE``/``XREAD``. The end of
the run is an entry ``<last seq>-1`` that wakes blocked readers. The stream is capped at
``max_events`` (older events are a :class:`ReplayGapError`); the keys expire ``ttl_s`` after
the run ends, and ``live_ttl_s`` after its last event while it runs (a run whose process died
is forgotten, and its readers stop, rather than waited for forever).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from redis.asyncio import Redis

from runstream.errors import ConfigurationError
from runstream.server.resumable import ReplayGapError, RunAlreadyStreamingError, RunInfo

READ_BLOCK_MS = 1000
"""A blocked reader wakes this often to notice a log that expired."""
READ_BATCH = 500

Entry = tuple[str, dict[str, str]]
"""A stream entry as the client decodes it: ``(id, fields)``."""

_APPEND = """
local seq = redis.call('INCR', KEYS[1])
redis.call('XADD', KEYS[2], 'MAXLEN', ARGV[2], seq .. '-0', 'd', ARGV[1])
for i = 1, 3 do redis.call('EXPIRE', KEYS[i], ARGV[3]) end
return seq
"""

_END = """
if redis.call('HGET', KEYS[3], 'ended') ~= '0' then return 0 end
local seq = tonumber(redis.call('GET', KEYS[1]) or '0')
redis.call('XADD', KEYS[2], seq .. '-1', 'end', '1')
redis.call('HSET', KEYS[3], 'ended', '1')
for i = 1, 3 do redis.call('EXPIRE', KEYS[i], ARGV[1]) end
return 1
"""


class RedisReplayLog:
    """Replay logs in the Redis at ``url``, for every process using the same ``prefix``."""

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "runstream:replay",
        max_events: int = 10_000,
        ttl_s: int = 300,
        live_ttl_s: int = 3600,
    ) -> None:
        if max_events < 1 or ttl_s < 1 or live_ttl_s < 1:
            raise ConfigurationError("max_events, ttl_s and live_ttl_s must be at least 1")
        self.client: Redis = Redis.from_url(url, decode_responses=True)
        self.prefix = prefix
        self.max_events = max_events
        self.ttl_s = ttl_s
        self.live_ttl_s = live_ttl_s
        self._append = self.client.register_script(_APPEND)
        self._end = self.client.register_script(_END)

    def _keys(self, run_id: str) -> list[str]:
        base = f"{self.prefix}:{run_id}"
        return [f"{base}:seq", f"{base}:events", f"{base}:info"]

    async def create(self, info: RunInfo) -> None:
        seq, events, meta = self._keys(info.run_id)
        if await self.client.hget(meta, "ended") == "0":
            raise RunAlreadyStreamingError(f"run {info.run_id!r} is already streaming")
        owner = json.dumps({"agent_id": info.agent_id, "resource_id": info.resource_id})
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.delete(seq, events, meta)
            pipe.hset(meta, mapping={"owner": owner, "ended": "0"})
            pipe.expire(meta, self.live_ttl_s)
            await pipe.execute()

    async def append(self, run_id: str, data: str) -> int:
        return int(await self._append(keys=self._keys(run_id), args=[data, self.max_events, self.live_ttl_s]))

    async def end(self, run_id: str) -> None:
        await self._end(keys=self._keys(run_id), args=[self.ttl_s])

    async def info(self, run_id: str) -> RunInfo | None:
        owner = await self.client.hget(self._keys(run_id)[2], "owner")
        if owner is None:
            return None
        fields = json.loads(owner)
        return RunInfo(run_id, fields["agent_id"], fields["resource_id"])

    async def read(self, run_id: str, after: int) -> AsyncIterator[tuple[int, str]]:
        _, events, meta = self._keys(run_id)
        if not await self.client.exists(meta):
            raise KeyError(run_id)
        last = f"{max(after, 0)}-0"
        entries: list[Entry] = await self._after(events, last)
        await self._check_gap(events, after, entries)
        while True:
            for entry_id, fields in entries:
                if "end" in fields:
                    return
                yield int(entry_id.partition("-")[0]), fields["d"]
                last = entry_id
            if entries:
                entries = await self._after(events, last)
                continue
            got: Any = await self.client.xread({events: last}, count=READ_BATCH, block=READ_BLOCK_MS)
            entries = list(got[0][1]) if got else []
            if not entries and not await self.client.exists(meta):
                return  # expired: its process died long ago

    async def _after(self, events: str, last: str) -> list[Entry]:
        entries: Any = await self.client.xrange(events, f"({last}", "+", count=READ_BATCH)
        return list(entries)

    async def _check_gap(self, events: str, after: int, entries: list[Entry]) -> None:
        """Events after ``after`` that the cap trimmed away are a :class:`ReplayGapError`."""
        if entries:
            first = int(entries[0][0].partition("-")[0])
            if "end" in entries[0][1]:
                first += 1
        else:
            first = int(await self.client.get(events.rpartition(":")[0] + ":seq") or 0) + 1
        if first > max(after, 0) + 1:
            raise ReplayGapError(f"events {after + 1}..{first - 1} of the run are no longer kept")

    async def close(self) -> None:
        await self.client.aclose()
