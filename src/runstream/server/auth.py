"""Who is calling, and which resource they may touch.

An auth hook takes the request and returns a :class:`Principal`, or ``None`` to refuse it (401).
Out of the box: a bearer token (``bearer_auth(token)``, or the ``RUNSTREAM_API_TOKEN``
environment variable), and open access when no token is configured.

A principal may carry a ``resource_id``. When it does, every request that names a resource
(memory scopes, thread and task listings) is forced to it, naming another one is refused (403),
and records owned by another resource (threads, messages, tasks, runs) answer 404 as if they did
not exist.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from runstream.errors import ConfigurationError
from runstream.server.errors import ApiError, error_response

TOKEN_ENV = "RUNSTREAM_API_TOKEN"


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated caller; ``resource_id`` confines it to one resource's data. ``context``:
    request-context keys the auth hook vouches for (the user, the tenant): every run the caller
    starts carries them, and a request's ``requestContext`` cannot override them (reserved keys,
    see docs/security.md)."""

    id: str
    resource_id: str | None = None
    context: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=False)

    def resource(self, requested: str | None) -> str | None:
        """The resource a request may use: the principal's own, or whatever it asked for."""
        if self.resource_id is None:
            return requested
        if requested is not None and requested != self.resource_id:
            raise ApiError(403, f"Resource {requested!r} is not accessible with these credentials")
        return self.resource_id

    def owns(self, owner: str | None) -> bool:
        """Whether a record owned by ``owner`` is visible to this principal."""
        return self.resource_id is None or owner == self.resource_id


AuthHook = Callable[[Request], Awaitable[Principal | None]]

ANONYMOUS = Principal("anonymous")


async def open_access(request: Request) -> Principal | None:
    """Everyone is let in, unconfined."""
    return ANONYMOUS


def bearer_auth(token: str, principal: Principal | None = None) -> AuthHook:
    """Accept ``Authorization: Bearer <token>`` (constant-time comparison)."""
    if not token:
        raise ConfigurationError("bearer_auth needs a non-empty token")
    expected = token.encode()
    who = principal or Principal("bearer")

    async def check(request: Request) -> Principal | None:
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), expected):
            return who
        return None

    return check


def default_auth() -> AuthHook:
    """A bearer token from ``RUNSTREAM_API_TOKEN`` if set, open access otherwise."""
    token = os.environ.get(TOKEN_ENV)
    return bearer_auth(token) if token else open_access


def principal_of(request: Request) -> Principal:
    principal = getattr(request.state, "principal", None)
    return principal if isinstance(principal, Principal) else ANONYMOUS


class AuthMiddleware:
    """Runs the hook for every HTTP request except ``public_paths``; 401 when it refuses."""

    def __init__(
        self,
        app: ASGIApp,
        hook: AuthHook,
        public_paths: frozenset[str],
        is_public: Callable[[Scope], bool] | None = None,
    ) -> None:
        self.app = app
        self.hook = hook
        self.public_paths = public_paths
        self.is_public = is_public
        """Further open requests (custom routes registered with ``requires_auth=False``)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self.public_paths:
            await self.app(scope, receive, send)
            return
        if self.is_public is not None and self.is_public(scope):
            scope.setdefault("state", {})["principal"] = ANONYMOUS
            await self.app(scope, receive, send)
            return
        if self.hook is open_access and _rebindable_host(Headers(scope=scope).get("host")):
            # An open API trusts whoever can reach it. A web page whose own domain an attacker has
            # re-pointed at 127.0.0.1 (DNS rebinding) is same-origin with it for the browser, and
            # CORS would not stop it; such requests name that domain in ``Host``.
            response = error_response(
                403,
                f"This API has no token ({TOKEN_ENV}): it answers only requests addressed to "
                "localhost, an IP address or a single-label host name",
            )
            await response(scope, receive, send)
            return
        principal = await self.hook(Request(scope, receive))
        if principal is None:
            response = error_response(401, "Unauthorized", headers={"www-authenticate": "Bearer"})
            await response(scope, receive, send)
            return
        scope.setdefault("state", {})["principal"] = principal
        await self.app(scope, receive, send)


@lru_cache(maxsize=256)  # parsing an IP address is most of an open API's per-request check
def _rebindable_host(host: str | None) -> bool:
    """Whether a ``Host`` header is a DNS name someone could point at this machine: one with a
    dot, other than ``*.localhost``. IP addresses and single-label names (``testserver``, a
    machine's LAN name) cannot be rebound by a web site; no header means no browser."""
    if host is None:
        return False
    name = host if host.endswith("]") else host.rsplit(":", 1)[0]
    name = name.strip("[]").lower().rstrip(".")
    try:
        ipaddress.ip_address(name)
        return False
    except ValueError:
        pass
    return "." in name and name != "localhost" and not name.endswith(".localhost")
