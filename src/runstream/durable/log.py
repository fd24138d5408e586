"""The chunk log of durable runs, in Redis: written by workers, read by API processes.

A run's chunks go to log *segments*: the run up to its first stop for a human is one segment,
each continuation (an approval, a resume) another. Per segment, under ``<prefix>:<segment>``:
``:seq`` (the last sequence number), ``:events`` (a Redis stream whose entry ids are
``<seq>-0``; the end is the entry ``<last seq>-1``) and ``:info`` (a hash: whether it ended, the
writers' fence, the run's final state, the owner of an until-idle flow's segment and its
driver's checkpoint, see :mod:`runstream.durable.idle`). Per run, ``<prefix>:abort:<run id>`` asks the worker
running it to abort.

Writes are idempotent by sequence number: :meth:`RunLog.append_at` adds chunk ``seq`` only if
the segment does not hold it yet (chunks go in batches: whatever the step produced while the
previous batch was written), so a step that a worker lost half-way, run again by another
worker, adds only the chunks past the ones already there. Every write carries a *fence* (the
step's number times the attempts it may take, plus its attempt): a write with a lower fence
than one already seen is refused, so a worker taken for dead cannot write after its successor.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any, TypedDict

from redis.asyncio import Redis

from runstream._json import JsonObject
from runstream.errors import ConfigurationError, StateConflictError
from runstream.tasks.redis_bus import retrying

READ_BLOCK_MS = 1000
READ_BATCH = 500

_APPEND_AT = """
local fence = tonumber(ARGV[2])
local seen = tonumber(redis.call('HGET', KEYS[3], 'fence') or '0')
if fence < seen then return -1 end
if fence > seen then redis.call('HSET', KEYS[3], 'fence', fence) end
if redis.call('HGET', KEYS[3], 'ended') == '1' then return -2 end
local first = tonumber(ARGV[1])
local last = tonumber(redis.call('GET', KEYS[1]) or '0')
if first > last + 1 then return redis.error_reply('chunk ' .. first .. ' after ' .. last) end
if ARGV[4] ~= '' then redis.call('HSET', KEYS[3], 'checkpoint', ARGV[4]) end
local added = 0
for i = 5, #ARGV do
  local seq = first + i - 5
  if seq > last then
    redis.call('XADD', KEYS[2], seq .. '-0', 'd', ARGV[i])
    last = seq
    added = added + 1
  end
end
redis.call('SET', KEYS[1], last)
for i = 1, 3 do redis.call('EXPIRE', KEYS[i], ARGV[3]) end
return added
"""

_END = """
if redis.call('HGET', KEYS[3], 'ended') == '1' then return 0 end
local seq = tonumber(redis.call('GET', KEYS[1]) or '0')
redis.call('XADD', KEYS[2], seq .. '-1', 'end', '1')
redis.call('HSET', KEYS[3], 'ended', '1', 'state', ARGV[1])
for i = 1, 3 do redis.call('EXPIRE', KEYS[i], ARGV[2]) end
return 1
"""


class FlowOwner(TypedDict):
    """Who may read an until-idle flow's stream: its agent and the thread's resource."""

    agentId: str
    resourceId: str | None


class FencedOffError(StateConflictError, RuntimeError):
    """A newer attempt of the run's step writes its log: this one must stop."""


class RunLog:
    """Segment logs in the Redis at ``url`` (see the module docstring)."""

    def __init__(
        self, url: str, *, prefix: str = "runstream:durable", ttl_s: int = 3600, live_ttl_s: int = 7 * 86400
    ) -> None:
        if ttl_s < 1 or live_ttl_s < 1:
            raise ConfigurationError("ttl_s and live_ttl_s must be at least 1")
        self.client: Redis = Redis.from_url(url, decode_responses=True)
        self.prefix = prefix
        self.ttl_s = ttl_s
        self.live_ttl_s = live_ttl_s
        self._append = self.client.register_script(_APPEND_AT)
        self._end = self.client.register_script(_END)

    def _keys(self, segment: str) -> list[str]:
        base = f"{self.prefix}:{segment}"
        return [f"{base}:seq", f"{base}:events", f"{base}:info"]

    async def open(self, segment: str, owner: FlowOwner | None = None) -> None:
        """Create an empty segment (before its run or continuation starts, so readers wait);
        ``owner``: who may read it (an until-idle flow's agent and resource)."""
        info = self._keys(segment)[2]
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.hsetnx(info, "ended", "0")
            if owner is not None:
                pipe.hsetnx(info, "owner", json.dumps(owner))
            pipe.expire(info, self.live_ttl_s)
            await retrying(pipe.execute)

    async def discard_ended(self, segment: str) -> None:
        """Delete the segment if it has ended (a new flow of the same run takes its name)."""
        keys = self._keys(segment)
        if await retrying(lambda: self.client.hget(keys[2], "ended")) == "1":
            await retrying(lambda: self.client.delete(*keys))

    async def append_at(
        self, segment: str, first_seq: int, data: list[str], fence: int, checkpoint: str | None = None
    ) -> int:
        """Add the chunks ``data`` as ``first_seq``, ``first_seq + 1``, ...; the ones the segment
        holds already are skipped. Returns how many were added. Raises :class:`FencedOffError`
        if a newer attempt writes the log, or the segment has ended. ``checkpoint`` is stored
        with the chunks, in the same atomic write (what a writer needs to go on after them)."""
        if not data and checkpoint is None:
            return 0
        keys = self._keys(segment)
        args: list[str | int] = [first_seq, fence, self.live_ttl_s, checkpoint or "", *data]
        added = int(await retrying(lambda: self._append(keys=keys, args=args)))
        if added < 0:
            raise FencedOffError(f"log segment {segment} is written by a newer attempt or has ended")
        return added

    async def end(self, segment: str, state: Mapping[str, object]) -> None:
        """End the segment (once) with the run's state; its readers stop after the last chunk."""
        args: list[str | int] = [json.dumps(state), self.ttl_s]
        await retrying(lambda: self._end(keys=self._keys(segment), args=args))

    async def checkpoint(self, segment: str) -> JsonObject | None:
        """The checkpoint stored with the segment's last chunks (``None``: none yet)."""
        raw = await retrying(lambda: self.client.hget(self._keys(segment)[2], "checkpoint"))
        return None if raw is None else _object(raw)

    async def owner(self, segment: str) -> FlowOwner | None:
        """The ``owner`` the segment was opened with (``None``: unknown segment, or none)."""
        raw = await retrying(lambda: self.client.hget(self._keys(segment)[2], "owner"))
        if raw is None:
            return None
        owner: FlowOwner = json.loads(raw)  # (as open wrote it)
        return owner

    async def last_seq(self, segment: str) -> int:
        return int(await retrying(lambda: self.client.get(self._keys(segment)[0])) or 0)

    async def final_state(self, segment: str) -> JsonObject | None:
        raw = await retrying(lambda: self.client.hget(self._keys(segment)[2], "state"))
        return None if raw is None else _object(raw)

    async def read(self, segment: str, after: int = 0) -> AsyncIterator[tuple[int, str]]:
        """``(seq, data)`` of the segment's chunks after ``after``, live ones too, until it ends.
        Raises ``KeyError`` for an unknown (or expired) segment. A dropped Redis connection is
        replaced and the reading goes on after the last chunk delivered (none lost or repeated)."""
        _, events, info = self._keys(segment)
        if not await retrying(lambda: self.client.exists(info)):
            raise KeyError(segment)
        last = f"{max(after, 0)}-0"
        while True:
            entries: Any = await retrying(self.client.xrange, events, f"({last}", "+", count=READ_BATCH)
            if not entries:
                got: Any = await retrying(
                    self.client.xread, {events: last}, count=READ_BATCH, block=READ_BLOCK_MS
                )
                entries = list(got[0][1]) if got else []
                if not entries and not await retrying(lambda: self.client.exists(info)):
                    return  # expired
            for entry_id, fields in entries:
                if "end" in fields:
                    return
                yield int(entry_id.partition("-")[0]), fields["d"]
                last = entry_id

    async def request_abort(self, run_id: str, reason: str) -> None:
        await self.client.set(f"{self.prefix}:abort:{run_id}", reason, ex=self.ttl_s)

    async def abort_requested(self, run_id: str) -> str | None:
        value = await retrying(lambda: self.client.get(f"{self.prefix}:abort:{run_id}"))
        return None if value is None else str(value)

    async def clear_abort(self, run_id: str) -> None:
        await self.client.delete(f"{self.prefix}:abort:{run_id}")

    async def close(self) -> None:
        await self.client.aclose()


def _object(raw: str | bytes) -> JsonObject:
    """A JSON object this log wrote (a checkpoint, a run's state)."""
    data: JsonObject = json.loads(raw)
    return data
