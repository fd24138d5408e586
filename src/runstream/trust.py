"""The order of trust for a run's options: what the agent's author set in code (the agent's own
settings, its ``default_options``, its :class:`RequestPolicy`) may be **tightened** by a
request, never **loosened** by one.

:func:`request_options` is the one function that applies it; every entry point that starts or
continues a run for someone other than the agent's author (the HTTP routes, thread routes,
AG-UI, the MCP server) passes the request's options through it before ``Agent.stream()`` /
``approve_tool_call()``; :func:`needs_approval` is its answer for a tool run directly (the
``/tools/:id/execute`` routes and ``runstream mcp --tool``). What it does, option by option:

- ``require_tool_approval``: a request may ask for approval (``True``), never drop it: ``False``
  leaves the author's (``True`` or a policy function) in force.
- ``active_tools``: a request may offer fewer tools, never a tool outside the author's
  ``active_tools`` (a 400 naming it); its own client tools are the client's to offer.
- ``max_steps`` and ``model_settings.max_output_tokens`` / ``max_retries``: at most the author's.
- ``model``: never from a request. ``model_settings``: the request's values over the author's
  (which a request no longer replaces as a whole); ``provider_options`` and ``headers`` only the
  names the author's :class:`RequestPolicy` lists (a 400 naming the field otherwise).
- ``memory`` options: ``readOnly`` only turned on, ``lastMessages`` at most the author's,
  ``generateTitle`` and working memory only turned off.
- ``request_context``: only the keys the author's :class:`RequestPolicy` lists (a 400 naming
  the key otherwise); the keys the server's auth hook set (``reserved``) always win.
- ``scorers``: a request's scorers (named ones only, over HTTP) join the author's; one under a
  key of the author's leaves the author's in place (a request cannot drop, replace or re-sample them).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from runstream.agent.run_options import (
    DEFAULT_POLICY,
    DefaultOptions,
    InvalidOptionError,
    RequestPolicy,
    read_default_options,
)
from runstream.memory import MemoryScope
from runstream.models.base import ModelSettings
from runstream.request_context import RequestContext, resolve
from runstream.scoring import run_scorers

__all__ = ["DEFAULT_POLICY", "RequestPolicy", "needs_approval", "request_options", "trusted_context"]

if TYPE_CHECKING:
    from runstream.agent import Agent
    from runstream.tools import Tool


def policy_of(agent: Agent) -> RequestPolicy:
    policy = getattr(agent, "request_policy", None)
    return policy if isinstance(policy, RequestPolicy) else DEFAULT_POLICY


async def author_options(agent: Agent, context: Mapping[str, object] | None = None) -> DefaultOptions:
    """The agent's ``default_options`` (resolved for ``context`` when a function), by their
    Python names."""
    defaults = agent.default_options
    if defaults is None:
        return DefaultOptions()
    if not isinstance(defaults, Mapping):
        defaults = await resolve(defaults, RequestContext(context or {}))
    return read_default_options(defaults)


def trusted_context(
    agent: Agent, given: Mapping[str, object] | None, reserved: Mapping[str, object] | None = None
) -> RequestContext:
    """A request's ``requestContext``: the keys the author allows, then the reserved keys (what
    the auth hook set for the caller), which a request cannot override."""
    allowed = policy_of(agent).request_context
    context = RequestContext()
    for key, value in (given or {}).items():
        if key in (reserved or {}):
            continue
        if key not in allowed:
            raise InvalidOptionError(
                f"'requestContext.{key}' is not accepted from a request for agent {agent.id!r} "
                "(its author lists the keys a request may set: RequestPolicy(request_context=...))"
            )
        context[key] = value
    context.update(reserved or {})
    return context


async def request_options(
    agent: Agent, given: Mapping[str, Any], *, reserved: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """``given`` (``stream()``'s options, as a request gave them) tightened against what the
    agent's author set; raises :class:`~runstream.agent.run_options.InvalidOptionError` (a 400 over
    HTTP) for what a request may not set at all."""
    out = {key: value for key, value in given.items() if value is not None}
    if "model" in out:
        raise InvalidOptionError("'model' is the server's to choose (set it on the agent)")
    context = trusted_context(agent, out.get("request_context"), reserved)
    if context or "request_context" in out:
        out["request_context"] = context
    author = await author_options(agent, context)
    if out.get("require_tool_approval") is not True:
        out.pop("require_tool_approval", None)
    limit = author.get("max_steps") or agent.max_steps
    if "max_steps" in out:
        out["max_steps"] = min(int(out["max_steps"]), limit)
    if "active_tools" in out:
        out["active_tools"] = _active_tools(agent, author, out)
    if "model_settings" in out:
        base = author.get("model_settings") or agent.model_settings
        out["model_settings"] = _model_settings(base, out["model_settings"], policy_of(agent))
    if isinstance(out.get("memory"), MemoryScope):
        out["memory"] = _memory(agent, out["memory"])
    if "scorers" in out:
        out["scorers"] = _scorers(agent, author.get("scorers"), out["scorers"])
    return out


def _scorers(agent: Agent, authors: object, given: Mapping[str, object]) -> dict[str, object]:
    """A request's scorers join the author's (its ``default_options`` scorers, else the agent's;
    ``stream(scorers=...)`` would replace them): a request may score a run more, never less, so
    it cannot drop, replace or re-sample the author's."""
    own: Mapping[str, object] = agent.scorers if authors is None else run_scorers(authors)
    return {**given, **own}  # (under a key of the author's, the author's stays)


def _active_tools(agent: Agent, author: Mapping[str, Any], given: Mapping[str, Any]) -> list[str]:
    names = list(given["active_tools"])
    offered = author.get("active_tools")
    if offered is None:
        return names
    client = given.get("client_tools") or {}
    allowed = set(offered) | set(client if isinstance(client, Mapping) else (t.name for t in client))
    outside = [name for name in names if name not in allowed]
    if outside:
        raise InvalidOptionError(
            f"'activeTools' names {', '.join(map(repr, outside))}, which agent {agent.id!r} does not offer"
        )
    return names


def _model_settings(base: ModelSettings, given: ModelSettings, policy: RequestPolicy) -> ModelSettings:
    """The request's settings over the author's; limits at most the author's; provider options
    and headers only where the policy allows."""
    for provider, options in given.provider_options.items():
        allowed = policy.provider_options.get(provider, ())
        refused = [name for name in options if name not in allowed]
        if refused:
            raise InvalidOptionError(
                f"'providerOptions.{provider}.{refused[0]}' is the server's to choose "
                "(its author lists what a request may set: RequestPolicy(provider_options=...))"
            )
    allowed_headers = {name.lower() for name in policy.headers}
    for name in given.headers or {}:
        if name.lower() not in allowed_headers:
            raise InvalidOptionError(
                f"'modelSettings.headers.{name}' is the server's to choose "
                "(its author lists what a request may set: RequestPolicy(headers=...))"
            )
    changes = {
        name: getattr(given, name)
        for name in ModelSettings.__dataclass_fields__
        if name not in ("provider_options", "headers") and getattr(given, name) is not None
    }
    for name in ("max_output_tokens", "max_retries"):
        ceiling = getattr(base, name)
        if name in changes and ceiling is not None:
            changes[name] = min(changes[name], ceiling)
    if given.headers:
        changes["headers"] = {**(base.headers or {}), **given.headers}
    if given.provider_options:
        merged = {provider: dict(options) for provider, options in base.provider_options.items()}
        for provider, options in given.provider_options.items():
            merged.setdefault(provider, {}).update(options)
        changes["provider_options"] = merged
    return replace(base, **changes)


def _memory(agent: Agent, scope: MemoryScope) -> MemoryScope:
    """A request's memory options tightened against the agent's memory."""
    memory = agent.memory
    if memory is None or not scope.options:
        return scope
    options = scope.options.copy()
    if memory.read_only:
        options["read_only"] = True
    last = options.get("last_messages")
    if isinstance(last, int) and not isinstance(last, bool) and memory.last_messages is not None:
        options["last_messages"] = min(last, memory.last_messages)
    if options.get("generate_title") and memory.generate_title is None:
        options.pop("generate_title")
    working = options.get("working_memory")
    if working is not None and memory.working_memory is None:
        options.pop("working_memory")  # a request cannot give the model a tool the author did not
    return replace(scope, options=options)


async def needs_approval(
    agent: Agent | None, tool: Tool, args: Mapping[str, object], context: Mapping[str, object] | None = None
) -> bool:
    """Whether running ``tool`` with ``args`` for ``agent`` needs a person's approval: its own
    flag, or the author's ``require_tool_approval`` (``True``, or a policy function asked about
    this call), or a tool the author's ``active_tools`` does not offer."""
    if tool.require_approval:
        return True
    if agent is None:
        return False
    author = await author_options(agent, context)
    offered = author.get("active_tools")
    if offered is not None and tool.name not in offered:
        return True
    policy = author.get("require_tool_approval")
    if callable(policy):
        verdict = policy(
            {"toolName": tool.name, "args": dict(args), "requestContext": RequestContext(context or {})}
        )
        if inspect.isawaitable(verdict):
            verdict = await verdict
        return bool(verdict)
    return policy is True
