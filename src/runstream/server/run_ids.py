"""Run ids per tenant: a confined caller names its runs in a namespace of its own.

A client may choose a run's id (client-js sends ``runId``; workflow routes take ``?runId=``).
Were ids shared, tenant B sending an id tenant A already uses would learn that it exists (a
409) or reach A's run. So a confined principal's run id ``X`` is stored as ``X~<tag>``, the
tag a digest of its resource (:func:`run_key`): every place a run id reaches — the run's owner
record, its suspended state, its replay log keys, its background tasks, durable workflow ids,
workflow runs — holds the stored id, and B's ``X`` is another run than A's ``X``. An unconfined
principal (single-tenant servers, operators) uses ids as they are.

Requests name runs by the client's id: each route turns it into the stored one with
:func:`run_key` before it looks anything up. Responses carry the client's id:
:class:`RunIdMiddleware` removes the caller's own tag from every response body (chunks, replay
event ids, lists, error messages), so the wire is Mastra's and the client sees its own ``runId``.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from runstream.server.auth import Principal

SEPARATOR = "~"


@lru_cache(maxsize=1024)
def _tag(resource_id: str) -> str:
    """``~t`` and 20 hex digits of the resource's SHA-256 (80 bits: no two tenants share one)."""
    return f"{SEPARATOR}t{hashlib.sha256(resource_id.encode()).hexdigest()[:20]}"


def run_key(principal: Principal, run_id: str) -> str:
    """The id under which the run ``run_id`` of ``principal`` is stored."""
    return run_id if principal.resource_id is None else run_id + _tag(principal.resource_id)


def tag_of(principal: Principal) -> bytes | None:
    """What :class:`RunIdMiddleware` removes from the principal's responses (``None``: nothing)."""
    return None if principal.resource_id is None else _tag(principal.resource_id).encode()


class RunIdMiddleware:
    """A confined caller's responses name its runs by the ids it chose: its tag is removed from
    each body message (an SSE event or a whole JSON body is one message; a body of one message
    gets its ``content-length`` set again). Runs after the auth middleware, which sets the
    principal; unconfined callers' responses pass untouched."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        principal = scope.get("state", {}).get("principal") if scope["type"] == "http" else None
        tag = tag_of(principal) if isinstance(principal, Principal) else None
        if tag is None:
            await self.app(scope, receive, send)
            return
        start: Message | None = None
        verbatim = False  # a body in parts of a promised length (a file: no run id in it)

        async def untagged(message: Message) -> None:
            nonlocal start, verbatim
            if message["type"] == "http.response.start":
                if "content-length" in MutableHeaders(scope=message):
                    start = message  # held until the first body message: its length may change
                else:  # streamed (SSE): sent at once, or a quiet stream's client waits for an event
                    await send(message)
                return
            if message["type"] != "http.response.body" or verbatim:
                await send(message)
                return
            body = message.get("body", b"").replace(tag, b"")
            if start is not None:
                verbatim = message.get("more_body", False)
                if verbatim:
                    body = message.get("body", b"")
                else:
                    MutableHeaders(scope=start)["content-length"] = str(len(body))
                await send(start)
                start = None
            await send({**message, "body": body})

        await self.app(scope, receive, untagged)
