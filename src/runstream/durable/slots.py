"""A cluster-wide cap on concurrent durable runs: a counting semaphore in Redis with leases.

``TemporalRuns(max_concurrent_runs=N)`` lets at most ``N`` durable runs execute at once in the
whole cluster, however many workers there are. A run holds a slot while its ``run_step``
activity runs (its steps, until it ends or stops for a human); a run waiting for a human, an
until-idle flow waiting for its tasks, and a background task hold none (tasks have their own
limits, the slots workflow of :mod:`runstream.tasks.temporal.slots`).

Why Redis and not Temporal's slots workflow: asking a workflow for a slot is a signal, a
workflow task and a grant signal before the run's first step (about 100 ms measured for
tasks), where the first answer token of a durable run has only a few milliseconds of headroom;
one Lua script here is one round trip (about 1 ms). Runs and tasks are counted apart: a run
waiting for a task's result must not hold the slot that task needs.

The keys, under ``<prefix>:slots``: ``:holders`` (a sorted set, run id -> lease expiry in
Redis server milliseconds), ``:tokens`` (run id -> the attempt holding it), ``:queue`` (run id
-> when it started waiting: grants go in that order) and ``:queue-leases`` (run id -> its
waiting lease). Every script first drops the expired leases, so the slot of a holder whose
worker died (its lease not refreshed) comes back within ``lease_ms``; a run's attempt retried
on another worker takes over its own slot at once. Times come from the Redis server's clock
(``TIME``), never compared across machines.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass

from redis.asyncio import Redis

from runstream.abort import AbortSignal
from runstream.errors import ConfigurationError, RunstreamError
from runstream.tasks.redis_bus import retrying

logger = logging.getLogger(__name__)

_EXPIRE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)) do
  redis.call('ZREM', KEYS[1], m)
  redis.call('HDEL', KEYS[2], m)
end
for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now)) do
  redis.call('ZREM', KEYS[3], m)
  redis.call('ZREM', KEYS[4], m)
end
"""

_ACQUIRE = (
    _EXPIRE
    + """
local member, token, expiry, limit = ARGV[1], ARGV[2], now + tonumber(ARGV[3]), tonumber(ARGV[4])
if redis.call('ZSCORE', KEYS[1], member) then
  redis.call('ZADD', KEYS[1], expiry, member)
  redis.call('HSET', KEYS[2], member, token)
  return 1
end
local free = limit - redis.call('ZCARD', KEYS[1])
if free > 0 then
  local rank = redis.call('ZRANK', KEYS[3], member)
  if not rank then rank = redis.call('ZCARD', KEYS[3]) end
  if rank < free then
    redis.call('ZADD', KEYS[1], expiry, member)
    redis.call('HSET', KEYS[2], member, token)
    redis.call('ZREM', KEYS[3], member)
    redis.call('ZREM', KEYS[4], member)
    return 1
  end
end
redis.call('ZADD', KEYS[3], 'NX', now, member)
redis.call('ZADD', KEYS[4], expiry, member)
return 0
"""
)

_REFRESH = (
    _EXPIRE
    + """
if redis.call('HGET', KEYS[2], ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[3]), ARGV[1])
return 1
"""
)

_RELEASE = """
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
if redis.call('HGET', KEYS[2], ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
return 1
"""


class RunSlotsBusyError(RunstreamError):
    """A durable run waited ``slot_wait_ms`` for a slot of ``max_concurrent_runs`` in vain."""


@dataclass(frozen=True, slots=True)
class SlotsState:
    """Who holds a slot and who waits (in grant order), run ids."""

    holders: list[str]
    waiting: list[str]


class RunSlots:
    """At most ``limit`` holders at once across every process sharing ``client``'s Redis and
    ``prefix``; a holder's lease lasts ``lease_ms`` unless refreshed (see the module docstring).
    A waiter polls every ``poll_ms`` and gives up after ``wait_ms``."""

    def __init__(
        self, client: Redis, prefix: str, *, limit: int, lease_ms: int, wait_ms: int, poll_ms: int = 50
    ) -> None:
        if limit < 1 or lease_ms < 100 or wait_ms < 0 or poll_ms < 1:
            raise ConfigurationError(
                "max_concurrent_runs must be >= 1, the lease >= 100 ms and slot_wait_ms >= 0"
            )
        self.client = client
        self.limit = limit
        self.lease_ms = lease_ms
        self.wait_ms = wait_ms
        self.poll_ms = poll_ms
        base = f"{prefix}:slots"
        self.keys = [f"{base}:holders", f"{base}:tokens", f"{base}:queue", f"{base}:queue-leases"]
        self._acquire = client.register_script(_ACQUIRE)
        self._refresh = client.register_script(_REFRESH)
        self._release = client.register_script(_RELEASE)

    async def try_acquire(self, run_id: str, token: str) -> bool:
        """Take a slot for ``run_id`` (or take over its own, held by an earlier attempt), else
        join (or stay in) the queue. One round trip."""
        args: list[str | int] = [run_id, token, self.lease_ms, self.limit]
        return bool(await retrying(lambda: self._acquire(keys=self.keys, args=args)))

    async def acquire(self, run_id: str, token: str, signal: AbortSignal | None = None) -> bool:
        """Wait for a slot; ``False`` if ``signal`` aborted first (the run ends at once, with
        no slot). Raises :class:`RunSlotsBusyError` after ``wait_ms``."""
        if await self.try_acquire(run_id, token):
            return True
        deadline = asyncio.get_running_loop().time() + self.wait_ms / 1000
        try:
            while signal is None or not signal.aborted:
                if asyncio.get_running_loop().time() >= deadline:
                    raise RunSlotsBusyError(
                        f"run {run_id!r} waited {self.wait_ms} ms for one of the "
                        f"{self.limit} durable-run slots (max_concurrent_runs) in vain"
                    )
                await asyncio.sleep(self.poll_ms / 1000)
                if await self.try_acquire(run_id, token):
                    return True
        except BaseException:
            await self.release(run_id, token)  # leaves the queue
            raise
        await self.release(run_id, token)
        return False

    async def refresh(self, run_id: str, token: str) -> bool:
        """Extend the lease of ``token``'s slot; ``False`` if it holds none (any more)."""
        args: list[str | int] = [run_id, token, self.lease_ms]
        return bool(await retrying(lambda: self._refresh(keys=self.keys, args=args)))

    async def release(self, run_id: str, token: str) -> None:
        """Give the slot back (only if ``token`` holds it: a later attempt may have taken it
        over), and leave the queue."""
        args: list[str | int] = [run_id, token]
        await retrying(lambda: self._release(keys=self.keys, args=args))

    @contextlib.asynccontextmanager
    async def held(self, run_id: str, token: str, signal: AbortSignal | None = None) -> AsyncIterator[None]:
        """Within: ``run_id`` holds a slot, its lease refreshed every third of ``lease_ms``; it
        is released on the way out, however the body ends."""
        if not await self.acquire(run_id, token, signal):
            yield
            return
        keeper = asyncio.create_task(self._keep(run_id, token))
        try:
            yield
        finally:
            keeper.cancel()
            await asyncio.gather(keeper, return_exceptions=True)
            await self.release(run_id, token)

    async def _keep(self, run_id: str, token: str) -> None:
        while True:
            await asyncio.sleep(self.lease_ms / 3000)
            if not await self.refresh(run_id, token):
                logger.warning("durable run %s lost its slot (its lease expired); it goes on", run_id)
                return

    async def state(self) -> SlotsState:
        """The current holders and waiters (expired leases left out)."""
        now_s, now_us = await self.client.time()
        now = now_s * 1000 + now_us // 1000
        holders = await self.client.zrangebyscore(self.keys[0], f"({now}", "+inf")
        live = set(await self.client.zrangebyscore(self.keys[3], f"({now}", "+inf"))
        queue = await self.client.zrange(self.keys[2], 0, -1)
        return SlotsState([str(m) for m in holders], [str(m) for m in queue if m in live])
