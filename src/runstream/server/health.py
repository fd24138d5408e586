"""``GET /health``: whether this process can serve, for load balancers and orchestrators.

Unauthenticated (probes carry no token) and cheap: one primary-key read from storage, bounded
by a timeout, so a database that is down or unreachable shows as ``503`` instead of a hang. The
body says only ``ok`` or ``unavailable``: no error text, which could name hosts or credentials.
"""

from __future__ import annotations

import asyncio
import logging

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from runstream.runtime import Runstream

HEALTH_PATH = "/health"
STORAGE_TIMEOUT_S = 2.0
_PROBE_THREAD = "runstream-health-probe"

logger = logging.getLogger("runstream.server")


def health_route(runstream: Runstream, timeout_s: float = STORAGE_TIMEOUT_S) -> Route:
    async def health(request: Request) -> Response:
        try:
            async with asyncio.timeout(timeout_s):
                await runstream.storage.get_thread(_PROBE_THREAD)
        except Exception as exc:
            logger.warning("health check: storage unreachable (%s)", type(exc).__name__)
            return JSONResponse({"status": "unavailable", "storage": "unreachable"}, status_code=503)
        return JSONResponse({"status": "ok", "storage": "ok"}, headers={"cache-control": "no-store"})

    return Route(HEALTH_PATH, health, methods=["GET", "HEAD"])
