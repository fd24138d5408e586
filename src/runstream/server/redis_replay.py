"""A :class:`~runstream.server.resumable.ReplayLog` in Redis, shared by every API process.

With ``create_app(runstream, replay_log=RedisReplayLog(url))`` in every replica, a client that
reconnects (``Last-Event-ID``, the observe routes) through a load balancer to another replica
than the one running its run still gets the rest of the chunks, each exactly once.

Per run, under ``<prefix>:<run id>``: ``:info`` (a hash: the owner, whether the run ended),
``:seq`` (the last sequence number) and ``:events``, a Redis stream whose entry ids are
``<seq>-0``, so a reader resumes after any sequence number with ``XRANGE``/``XREAD``. The end of
the run is an entry ``<last seq>-1`` that wakes blocked readers. An event's large strings (the
conversation that ``step-finish`` and ``finish`` both carry) are kept once, in ``:shared``. The
stream is capped at ``max_events`` and ``max_run_bytes`` (``:bytes`` counts them; the oldest
events go first, and are a :class:`ReplayGapError`); the keys expire ``ttl_s`` after
the run ends, and ``live_ttl_s`` after its last event while it runs (a run whose process died
is forgotten, and its readers stop, rather than waited for forever).

All runs together keep at most ``max_total_bytes``: ``<prefix>::total`` counts their bytes,
``::sizes`` each run's, ``::ended`` and ``::live`` order the runs by end and by last event.
An append beyond the total forgets the runs whose keys expired, then the oldest ended runs, then
the oldest events of the largest live ones (as :class:`InMemoryReplayLog` does), atomically in
the append's script. (Its scripts reach other runs' keys: one Redis, not a Redis Cluster.)

The process that writes a run holds a *lease* on it, ``:lease``, a key that it refreshes every
``lease_ttl_s / 3`` while the run is live. A reader that finds the lease expired and the run not
ended (its process died: killed, lost) ends the log itself, atomically and once, with an
``error`` and a ``finish`` chunk, as a run that fails mid-stream ends: a client reconnecting to
another API process gets the error and the end of the stream within ``lease_ttl_s`` and a
second, never an open connection with keepalives until the TTL.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from runstream.errors import ConfigurationError
from runstream.server.resumable import MIB, ReplayGapError, RunAlreadyStreamingError, RunInfo, split_large
from runstream.server.wire import failure_json
from runstream.tasks.redis_bus import retrying

logger = logging.getLogger("runstream.server")

READ_BLOCK_MS = 1000
"""A blocked reader wakes this often to notice a log that expired."""
READ_BATCH = 500

Entry = tuple[str, dict[str, str]]
"""A stream entry as the client decodes it: ``(id, fields)``."""

_COMMON = """
local prefix, sizes, ended, live, total = ARGV[1], KEYS[1], KEYS[2], KEYS[3], KEYS[4]

local function run_keys(run)
  local base = prefix .. ':' .. run
  return {base .. ':seq', base .. ':events', base .. ':info', base .. ':bytes', base .. ':shared'}
end

-- Forget a run's log and what it counted for; returns the total left.
local function forget(run)
  local size = tonumber(redis.call('HGET', sizes, run) or '0')
  redis.call('HDEL', sizes, run)
  redis.call('ZREM', ended, run)
  redis.call('ZREM', live, run)
  redis.call('DEL', unpack(run_keys(run)))
  return redis.call('DECRBY', total, size)
end

-- Drop the oldest event of a run (and the shared strings no kept event holds); returns its size.
local function drop_oldest(keys)
  local first = redis.call('XRANGE', keys[2], '-', '+', 'COUNT', 1)[1]
  redis.call('XDEL', keys[2], first[1])
  local size = redis.call('DECRBY', keys[4], #first[2][2])
  if first[2][1] == 'p' then
    local pieces = cjson.decode(first[2][2])
    for j = 2, #pieces, 2 do
      if redis.call('HINCRBY', keys[5], pieces[j] .. ':n', -1) <= 0 then
        size = redis.call('DECRBY', keys[4], redis.call('HSTRLEN', keys[5], pieces[j]))
        redis.call('HDEL', keys[5], pieces[j], pieces[j] .. ':n')
      end
    end
  end
  return size
end

-- Record a run's size in the total; returns the total.
local function account(run, size)
  local before = tonumber(redis.call('HGET', sizes, run) or '0')
  redis.call('HSET', sizes, run, size)
  return redis.call('INCRBY', total, size - before)
end

-- The total within budget: runs whose keys expired are forgotten, then the oldest ended runs,
-- then the oldest events of the largest live runs.
local function now_ms()
  local time = redis.call('TIME')
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end

local function within_budget(now, max_total, ttl_ms, live_ttl_ms)
  for _, run in ipairs(redis.call('ZRANGEBYSCORE', ended, '-inf', now - ttl_ms, 'LIMIT', 0, 32)) do forget(run) end
  for _, run in ipairs(redis.call('ZRANGEBYSCORE', live, '-inf', now - live_ttl_ms, 'LIMIT', 0, 32)) do forget(run) end
  local left = tonumber(redis.call('GET', total) or '0')
  while left > max_total do
    local oldest = redis.call('ZRANGE', ended, 0, 0)[1]
    if not oldest then break end
    left = forget(oldest)
  end
  while left > max_total do
    local largest, most = nil, -1
    for _, run in ipairs(redis.call('ZRANGE', live, 0, -1)) do
      local size = tonumber(redis.call('HGET', sizes, run) or '0')
      if size > most then largest, most = run, size end
    end
    if not largest then break end
    local keys = run_keys(largest)
    if redis.call('XLEN', keys[2]) <= 1 then break end
    while left > max_total and redis.call('XLEN', keys[2]) > 1 do
      left = account(largest, drop_oldest(keys))
    end
  end
end
"""

_APPEND = (
    _COMMON
    + """
-- KEYS 5..9: the run's seq, events, info, bytes, shared.
-- ARGV: prefix, run id, data, max events, live ttl, max run bytes, expected seq, max total,
-- ttl ms, live ttl ms, then the shared strings (key, text, ...).
local keys = {KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9]}
local run = ARGV[2]
local expected = tonumber(ARGV[7])
if expected > 0 and tonumber(redis.call('GET', keys[1]) or '0') >= expected then
  return expected  -- a retry of an append that was applied (its reply was lost)
end
local seq = redis.call('INCR', keys[1])
local added = 0
for i = 11, #ARGV, 2 do
  if redis.call('HSETNX', keys[5], ARGV[i], ARGV[i + 1]) == 1 then added = added + #ARGV[i + 1] end
  redis.call('HINCRBY', keys[5], ARGV[i] .. ':n', 1)
end
local field = 'd'
if #ARGV > 10 then field = 'p' end
redis.call('XADD', keys[2], seq .. '-0', field, ARGV[3])
local size = redis.call('INCRBY', keys[4], added + #ARGV[3])
local count = redis.call('XLEN', keys[2])
while count > 1 and (count > tonumber(ARGV[4]) or size > tonumber(ARGV[6])) do
  size = drop_oldest(keys)
  count = count - 1
end
for i = 1, 5 do redis.call('EXPIRE', keys[i], ARGV[5]) end
account(run, size)
local now = now_ms()
redis.call('ZADD', live, now, run)
within_budget(now, tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10]))
return seq
"""
)

_CREATE = (
    _COMMON
    + """
-- KEYS 5..6: the run's info and lease. ARGV: prefix, run id, owner, live ttl, lease ms.
forget(ARGV[2])
redis.call('HSET', KEYS[5], 'owner', ARGV[3], 'ended', '0', 'lease', '1')
redis.call('EXPIRE', KEYS[5], ARGV[4])
redis.call('SET', KEYS[6], '1', 'PX', ARGV[5])
redis.call('ZADD', live, now_ms(), ARGV[2])
return 1
"""
)

_ENDED = """
local time = redis.call('TIME')
redis.call('ZREM', KEYS[8], ARGV[2])
redis.call('ZADD', KEYS[7], tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000), ARGV[2])
"""
"""Moves a run from the live runs (KEYS[8]) to the ended ones (KEYS[7]), by its end time."""

_END = (
    """
-- KEYS: the run's seq, events, info, bytes, shared; sizes, ended, live, total.
-- ARGV: the TTL, the run id.
if redis.call('HGET', KEYS[3], 'ended') ~= '0' then return 0 end
local seq = tonumber(redis.call('GET', KEYS[1]) or '0')
redis.call('XADD', KEYS[2], seq .. '-1', 'end', '1')
redis.call('HSET', KEYS[3], 'ended', '1')
for i = 1, 5 do redis.call('EXPIRE', KEYS[i], ARGV[1]) end
"""
    + _ENDED
    + """
return 1
"""
)


_ABANDON = (
    """
-- KEYS: the run's seq, events, info, bytes, shared; sizes, ended, live, total; its lease.
-- ARGV: the TTL, the run id, then the events to add before the end.
if redis.call('EXISTS', KEYS[3]) == 0 then return -1 end
if redis.call('HGET', KEYS[3], 'ended') ~= '0' or redis.call('HGET', KEYS[3], 'lease') ~= '1' then
  return 0
end
if redis.call('EXISTS', KEYS[10]) == 1 then return 0 end
local seq = tonumber(redis.call('GET', KEYS[1]) or '0')
for i = 3, #ARGV do
  seq = seq + 1
  redis.call('XADD', KEYS[2], seq .. '-0', 'd', ARGV[i])
end
redis.call('SET', KEYS[1], seq)
redis.call('XADD', KEYS[2], seq .. '-1', 'end', '1')
redis.call('HSET', KEYS[3], 'ended', '1')
for i = 1, 5 do redis.call('EXPIRE', KEYS[i], ARGV[1]) end
"""
    + _ENDED
    + """
return 1
"""
)
"""A reader ends a live run whose writer's lease expired."""

ABANDONED = "the process serving this stream stopped before it ended; the run's result may still reach memory"


class RedisReplayLog:
    """Replay logs in the Redis at ``url``, for every process using the same ``prefix``."""

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "runstream:replay",
        max_events: int = 10_000,
        max_run_bytes: int = 16 * MIB,
        max_total_bytes: int = 256 * MIB,
        ttl_s: int = 300,
        live_ttl_s: int = 3600,
        lease_ttl_s: float = 10.0,
    ) -> None:
        if min(max_events, max_run_bytes, max_total_bytes, ttl_s, live_ttl_s) < 1:
            raise ConfigurationError(
                "max_events, max_run_bytes, max_total_bytes, ttl_s and live_ttl_s must be at least 1"
            )
        if lease_ttl_s < 0.1:
            raise ConfigurationError("lease_ttl_s must be at least 0.1")
        self.client: Redis = Redis.from_url(url, decode_responses=True)
        self.prefix = prefix
        self.max_events = max_events
        self.max_run_bytes = max_run_bytes
        self.max_total_bytes = max_total_bytes
        self.ttl_s = ttl_s
        self.live_ttl_s = live_ttl_s
        self.lease_ttl_s = lease_ttl_s
        self._create = self.client.register_script(_CREATE)
        self._append = self.client.register_script(_APPEND)
        self._end = self.client.register_script(_END)
        self._abandon = self.client.register_script(_ABANDON)
        self._leases: asyncio.Task[None] | None = None
        self._appended: dict[str, int] = {}
        """The last sequence number appended by this process, per run it writes (so that an
        append retried after a dropped connection is applied once)."""

    def _keys(self, run_id: str) -> list[str]:
        base = f"{self.prefix}:{run_id}"
        return [f"{base}:seq", f"{base}:events", f"{base}:info", f"{base}:bytes", f"{base}:shared"]

    def _lease(self, run_id: str) -> str:
        return f"{self.prefix}:{run_id}:lease"

    @property
    def _totals(self) -> list[str]:
        """The keys shared by every run: each run's bytes (a hash), the ended runs by end time
        and the live ones by last event (sorted sets), and the bytes of all (``::`` can start no
        run's key: a run id is never empty)."""
        return [
            f"{self.prefix}::sizes",
            f"{self.prefix}::ended",
            f"{self.prefix}::live",
            f"{self.prefix}::total",
        ]

    async def total_bytes(self) -> int:
        """The bytes kept by every run's log (its events and its shared strings)."""
        return int(await retrying(lambda: self.client.get(self._totals[3])) or 0)

    async def create(self, info: RunInfo) -> None:
        keys = self._keys(info.run_id)
        meta = keys[2]
        if await retrying(lambda: self.client.hget(meta, "ended")) == "0":
            raise RunAlreadyStreamingError(f"run {info.run_id!r} is already streaming")
        owner = json.dumps({"agent_id": info.agent_id, "resource_id": info.resource_id})
        lease_ms = int(self.lease_ttl_s * 1000)
        args: list[str | int] = [self.prefix, info.run_id, owner, self.live_ttl_s, lease_ms]
        await retrying(lambda: self._create(keys=[*self._totals, meta, self._lease(info.run_id)], args=args))
        self._appended[info.run_id] = 0
        if self._leases is None or self._leases.done():
            self._leases = asyncio.create_task(self._hold_leases(), name="replay log leases")

    async def append(self, run_id: str, data: str) -> int:
        """Add one event; its large strings (``split_large``) are kept once per run, in the
        ``:shared`` hash by their SHA-256, and the event as its pieces with those as keys."""
        pieces = split_large(data)
        shared: list[str] = []
        if len(pieces) > 1:
            for index in range(1, len(pieces), 2):
                key = hashlib.sha256(pieces[index].encode("utf-8", "surrogatepass")).hexdigest()
                shared += (key, pieces[index])
                pieces[index] = key
            data = json.dumps(pieces)
        known = self._appended.get(run_id)
        expected = 0 if known is None else known + 1
        args: list[str | int] = [
            self.prefix,
            run_id,
            data,
            self.max_events,
            self.live_ttl_s,
            self.max_run_bytes,
            expected,
            self.max_total_bytes,
            self.ttl_s * 1000,
            self.live_ttl_s * 1000,
            *shared,
        ]
        keys = [*self._totals, *self._keys(run_id)]
        seq = int(await retrying(lambda: self._append(keys=keys, args=args)))
        if known is not None:
            self._appended[run_id] = seq
        return seq

    async def end(self, run_id: str) -> None:
        keys = [*self._keys(run_id), *self._totals]
        await retrying(lambda: self._end(keys=keys, args=[self.ttl_s, run_id]))
        self._appended.pop(run_id, None)
        if not self._appended and self._leases is not None:
            self._leases.cancel()  # no lease left to hold

    async def _hold_leases(self) -> None:
        """Refresh the lease of every run this process writes, until none is left. A failed
        refresh (Redis away) is tried again at the next tick; cancellation ends the loop."""
        interval_s = self.lease_ttl_s / 3
        while self._appended:
            await asyncio.sleep(interval_s)
            try:
                async with self.client.pipeline(transaction=False) as pipe:
                    for run_id in list(self._appended):
                        pipe.set(self._lease(run_id), "1", px=int(self.lease_ttl_s * 1000))
                    await pipe.execute()
            except RedisError as exc:
                logger.warning("replay log: could not refresh the leases of live runs: %s", exc)

    async def _abandoned(self, run_id: str) -> int:
        """End the run with an error if its writer's lease expired (1); 0 if it is alive or
        ended, -1 if its log expired."""
        args: list[str | int] = [self.ttl_s, run_id, *failure_json(run_id, RuntimeError(ABANDONED))]
        keys = [*self._keys(run_id), *self._totals, self._lease(run_id)]
        return int(await retrying(lambda: self._abandon(keys=keys, args=args)))

    async def info(self, run_id: str) -> RunInfo | None:
        owner = await retrying(lambda: self.client.hget(self._keys(run_id)[2], "owner"))
        if owner is None:
            return None
        fields = json.loads(owner)
        return RunInfo(run_id, fields["agent_id"], fields["resource_id"])

    async def read(self, run_id: str, after: int) -> AsyncIterator[tuple[int, str]]:
        """Each Redis call is made again on a fresh connection after a dropped one, from the
        last event delivered: a disconnect neither loses nor repeats an event."""
        _, events, meta, _, shared = self._keys(run_id)
        if not await retrying(lambda: self.client.exists(meta)):
            raise KeyError(run_id)
        last = f"{max(after, 0)}-0"
        entries: list[Entry] = await self._after(events, last)
        await self._check_gap(events, after, entries)
        while True:
            for entry_id, fields in entries:
                if "end" in fields:
                    return
                yield int(entry_id.partition("-")[0]), await self._text(shared, fields)
                last = entry_id
            if entries:
                entries = await self._after(events, last)
                continue
            got: Any = await retrying(
                self.client.xread, {events: last}, count=READ_BATCH, block=READ_BLOCK_MS
            )
            entries = list(got[0][1]) if got else []
            if not entries:
                abandoned = await self._abandoned(run_id)
                if abandoned < 0:
                    return  # expired: its process died long ago
                if abandoned > 0:
                    entries = await self._after(events, last)  # the error, then the end

    async def _text(self, shared: str, fields: dict[str, str]) -> str:
        if "d" in fields:
            return fields["d"]
        pieces: list[str] = json.loads(fields["p"])
        found: Any = await retrying(lambda: self.client.hmget(shared, pieces[1::2]))
        pieces[1::2] = [
            str(text) if text is not None else '""' for text in found
        ]  # (expired with its run: an empty string)
        return "".join(pieces)

    async def _after(self, events: str, last: str) -> list[Entry]:
        entries: Any = await retrying(lambda: self.client.xrange(events, f"({last}", "+", count=READ_BATCH))
        return list(entries)

    async def _check_gap(self, events: str, after: int, entries: list[Entry]) -> None:
        """Events after ``after`` that the cap trimmed away are a :class:`ReplayGapError`."""
        if entries:
            first = int(entries[0][0].partition("-")[0])
            if "end" in entries[0][1]:
                first += 1
        else:
            seq_key = events.rpartition(":")[0] + ":seq"
            first = int(await retrying(lambda: self.client.get(seq_key)) or 0) + 1
        if first > max(after, 0) + 1:
            raise ReplayGapError(f"events {after + 1}..{first - 1} of the run are no longer kept")

    async def close(self) -> None:
        """Stop holding the leases (the runs still live here are taken for dead elsewhere)."""
        if self._leases is not None:
            self._leases.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._leases
        await self.client.aclose()
