"""Per-request values (Mastra's ``RequestContext``): the user, the tenant, feature flags.

A run carries one :class:`RequestContext`; its tools read it (``ctx.request_context``) and an
agent's instructions, model and tools may be functions of it::

    agent = Agent(
        "support",
        model=model,
        instructions=lambda rc: f"You help {rc.get('user', 'a customer')} of {rc['tenant']}.",
    )
    await agent.stream("Hi", request_context={"tenant": "acme", "user": "ada"})

Over HTTP it is the ``requestContext`` object of the body, as client-js sends it.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from runstream._json import JsonObject
from runstream.errors import InvalidTypeError

T = TypeVar("T")

Dynamic = Callable[["RequestContext"], T | Awaitable[T]]
"""A value computed per request (sync or async), as Mastra's ``DynamicArgument``."""


class RequestContext(dict[str, Any]):
    """A ``dict`` of per-request values, with the method names of Mastra's ``RequestContext``
    (``set``, ``has``, ``delete``) for code ported from TypeScript."""

    def set(self, key: str, value: object) -> None:
        self[key] = value

    def has(self, key: str) -> bool:
        return key in self

    def delete(self, key: str) -> bool:
        return self.pop(key, _MISSING) is not _MISSING

    @classmethod
    def coerce(cls, value: RequestContext | Mapping[str, object] | None) -> RequestContext:
        """The given context itself (so tools and the caller share it), a copy of a mapping,
        or a new empty one."""
        if isinstance(value, RequestContext):
            return value
        if value is None:
            return cls()
        if not isinstance(value, Mapping):
            raise InvalidTypeError(f"request_context must be a mapping, not {type(value).__name__}")
        return cls(value)

    def to_json(self) -> JsonObject:
        """The JSON-representable entries (what a run saved for a later process keeps)."""
        kept: JsonObject = {}
        for key, value in self.items():
            try:
                json.dumps(value)
            except (TypeError, ValueError):
                continue
            kept[key] = value
        return kept


_MISSING = object()


async def resolve(function: Dynamic[T], context: RequestContext) -> T:
    """What a per-request function (sync or async) returns for ``context``."""
    result = function(context)
    if inspect.isawaitable(result):
        return await result
    return result
