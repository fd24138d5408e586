"""Per-principal request rates: each caller (by its :class:`~runstream.server.auth.Principal`
id) may send ``rate`` requests (``limits``' notation: ``"6000/minute"``, ``"50/second"``); beyond
that it gets 429 with ``retry-after`` (seconds) until its window has room again.

The window is ``limits``' sliding-window counter, kept in this process's memory: like a token
bucket it lets a caller spend a burst up to the rate at once and then refills continuously, in
constant memory per caller. Behind several processes the rate is per process (each has its own
counters).
"""

from __future__ import annotations

import math
import time

from limits import RateLimitItem, parse
from limits.aio.storage import MemoryStorage
from limits.aio.strategies import SlidingWindowCounterRateLimiter
from starlette.types import ASGIApp, Receive, Scope, Send

from runstream.errors import ConfigurationError
from runstream.server.auth import ANONYMOUS, Principal
from runstream.server.errors import error_response

DEFAULT_RATE = "6000/minute"
"""The default per-principal rate (100 requests a second on average, bursts up to 6,000)."""


def parse_rate(rate: str) -> RateLimitItem:
    try:
        return parse(rate)
    except ValueError as exc:
        raise ConfigurationError(f"rate limit {rate!r}: {exc} (e.g. '6000/minute')") from None


class RateLimitMiddleware:
    """429 for a principal that exceeds ``rate`` (runs after the auth middleware)."""

    def __init__(self, app: ASGIApp, rate: str, exempt_paths: frozenset[str] = frozenset()) -> None:
        self.app = app
        self.item = parse_rate(rate)
        self.exempt_paths = exempt_paths
        self.limiter = SlidingWindowCounterRateLimiter(MemoryStorage())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self.exempt_paths:
            await self.app(scope, receive, send)
            return
        principal = scope.get("state", {}).get("principal", ANONYMOUS)
        key = principal.id if isinstance(principal, Principal) else ANONYMOUS.id
        if not await self.limiter.hit(self.item, key):
            stats = await self.limiter.get_window_stats(self.item, key)
            wait = max(1, math.ceil(stats.reset_time - time.time()))
            response = error_response(
                429,
                f"Too many requests: at most {self.item} per caller; retry in {wait} s",
                headers={"retry-after": str(wait)},
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)
