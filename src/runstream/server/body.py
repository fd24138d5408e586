"""The body of Mastra's agent generate/stream requests, validated into ``Agent.stream`` options.

Field names are exactly those client-js sends (``messages``, ``memory``, ``runId``, ``maxSteps``,
``toolChoice``, ``modelSettings``, ``providerOptions``, ``structuredOutput``, ``untilIdle``,
``maxIdleMs``, ``context``, ``clientTools``, ``activeTools``, ``instructions``,
``requireToolApproval``, ``requestContext``, ``scorers`` by name, ``returnScorerData``), plus runstream's ``resumeWindowMs`` and ``maxContinuations`` (see
``agent/until_idle.py``). Fields client-js may send that runstream has no use for are listed in
:data:`IGNORED_FIELDS`; any other field is a 400 naming it (Mastra's schema lets unknown keys
through, so a misspelled option would silently do nothing). Every mistake is a 400 with a
message naming the field, raised before any run starts; every number is finite and bounded
(``runstream.server.limits``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar, cast

import jsonschema

from runstream._json import JsonObject, JsonValue
from runstream.agent.run_options import StreamOptions, client_tool
from runstream.errors import InvalidInputError
from runstream.memory import MemoryOptions, MemoryScope, memory_options
from runstream.memory.working import WorkingMemory
from runstream.models.base import ModelSettings, PromptMessage
from runstream.scoring import RunScorer, run_scorers
from runstream.server.auth import Principal
from runstream.server.errors import ApiError
from runstream.server.limits import (
    MAX_CONTINUATIONS,
    MAX_IDLE_MS,
    MAX_MESSAGES,
    MAX_RESUME_WINDOW_MS,
    MAX_STEPS,
    MAX_WORKING_MEMORY,
    bounded_int,
    bounded_number,
    check_id,
    check_metadata,
    check_title,
)
from runstream.server.messages import to_prompt
from runstream.structured import StructuredOutput
from runstream.tools import Tool
from runstream.trust import request_options

if TYPE_CHECKING:
    from runstream.agent import Agent

_NUMBER_SETTINGS: dict[str, tuple[str, float, float]] = {
    "temperature": ("temperature", 0, 2),
    "topP": ("top_p", 0, 1),
    "presencePenalty": ("presence_penalty", -2, 2),
    "frequencyPenalty": ("frequency_penalty", -2, 2),
}
_INT_SETTINGS: dict[str, tuple[str, int, int]] = {
    "maxOutputTokens": ("max_output_tokens", 1, 1_000_000),
    "maxTokens": ("max_output_tokens", 1, 1_000_000),
    "topK": ("top_k", 1, 1_000_000),
    "seed": ("seed", -(2**63), 2**63 - 1),
    "maxRetries": ("max_retries", 0, 10),
}
MAX_STOP_SEQUENCES = 16

FIELDS = frozenset(
    {
        "messages", "memory", "runId", "maxSteps", "toolChoice", "modelSettings", "providerOptions",
        "structuredOutput", "untilIdle", "maxIdleMs", "resumeWindowMs", "maxContinuations", "context",
        "clientTools", "activeTools", "instructions", "requireToolApproval", "requestContext",
        "scorers", "returnScorerData",
    }
)  # fmt: skip
IGNORED_FIELDS = frozenset(
    {
        # client-js and AI SDK transports send these; runstream has no use for them (yet)
        "tracingOptions", "versions", "format",
        "savePerStep", "tools", "actor", "id", "trigger", "messageId", "resourceId", "threadId",
    }
)  # fmt: skip


T = TypeVar("T")


class IdleRequest(TypedDict, total=False):
    """The until-idle options a request chose (``Agent.stream``'s ``until_idle`` mapping)."""

    max_idle_ms: float
    resume_window_ms: float
    max_continuations: int


def invalid(message: str) -> ApiError:
    return ApiError(400, f"Invalid request body: {message}")


@dataclass(slots=True)
class StreamRequest:
    """A validated generate/stream body: the messages, what the server itself needs (the memory
    scope it checks ownership of, the run id it claims, until-idle), and the run's options as
    ``Agent.stream`` takes them (read into a ``RunOptions`` there, with the agent's defaults)."""

    messages: list[PromptMessage]
    memory: MemoryScope | None = None
    run_id: str | None = None
    until_idle: bool | IdleRequest = False
    options: StreamOptions = field(default_factory=lambda: StreamOptions())


def _optional(body: JsonObject, key: str, kind: type[T], what: str) -> T | None:
    value = body.get(key)
    if value is not None and (not isinstance(value, kind) or (isinstance(value, bool) and kind is int)):
        raise invalid(f"'{key}' must be {what}")
    return value


def memory_scope(value: JsonValue, principal: Principal) -> MemoryScope | None:
    """``memory: {thread, resource, options?}`` with the resource forced to the principal's; the
    thread may be ``{id, title?, metadata?}`` (used when the run creates it)."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise invalid("'memory' must be an object with 'thread' and 'resource'")
    unknown = sorted(set(value) - {"thread", "resource", "options"})
    if unknown:
        raise invalid(f"unknown field 'memory.{unknown[0]}' (known: thread, resource, options)")
    thread = value.get("thread")
    title, metadata = None, None
    if isinstance(thread, Mapping):
        title = check_title(thread.get("title"), "memory.thread.title")
        metadata = check_metadata(thread.get("metadata"), "memory.thread.metadata")
        thread = thread.get("id")
    if not isinstance(thread, str) or not thread:
        raise invalid("'memory.thread' must be a thread id (or an object with an 'id')")
    check_id(thread, "memory.thread")
    requested = value.get("resource")
    resource = principal.resource(None if requested is None else check_id(requested, "memory.resource"))
    if resource is None:
        raise ApiError(400, "A resource ID is required when using memory: pass memory.resource")
    return MemoryScope(
        thread, resource, title=title, metadata=metadata, options=memory_call_options(value.get("options"))
    )


MAX_LAST_MESSAGES = 10_000
_HTTP_MEMORY_OPTIONS = ("lastMessages", "readOnly", "workingMemory", "generateTitle")


def memory_call_options(value: JsonValue, where: str = "memory.options") -> MemoryOptions:
    """A request's memory options: Mastra's JSON-valued ones, bounded and fully checked here, so
    a mistake is a 400 before anything runs (a title model, its instructions and a working-memory
    schema are the server's to choose, so ``generateTitle`` is a boolean here and ``schema`` is
    refused)."""
    if value is None:
        return MemoryOptions()
    if not isinstance(value, Mapping):
        raise invalid(f"'{where}' must be an object")
    unknown = sorted(set(value) - set(_HTTP_MEMORY_OPTIONS))
    if unknown:
        raise invalid(f"unknown field '{where}.{unknown[0]}' (known: {', '.join(_HTTP_MEMORY_OPTIONS)})")
    last = value.get("lastMessages")
    if last is not None and last is not False:
        bounded_int(last, f"{where}.lastMessages", minimum=0, maximum=MAX_LAST_MESSAGES)
    if not isinstance(value.get("generateTitle", False), bool):
        raise invalid(f"'{where}.generateTitle' must be true or false")
    working = value.get("workingMemory")
    if isinstance(working, Mapping):
        if "schema" in working:
            raise invalid(
                f"'{where}.workingMemory.schema' is the server's to choose (give the agent's Memory one)"
            )
        template = working.get("template")
        if template is not None and (not isinstance(template, str) or len(template) > MAX_WORKING_MEMORY):
            raise invalid(
                f"'{where}.workingMemory.template' must be a string of at most {MAX_WORKING_MEMORY} characters"
            )
    try:
        options = memory_options(value, where=where)
        if isinstance(working, Mapping):
            WorkingMemory().merged(working)  # the checks the run would make, made now
    except (TypeError, ValueError) as exc:
        raise invalid(str(exc)) from None
    return options


def _tool_choice(value: JsonValue) -> str | JsonObject | None:
    if value is None or value in ("auto", "none", "required"):
        return None if value is None else str(value)
    if isinstance(value, Mapping) and value.get("type") == "tool" and isinstance(value.get("toolName"), str):
        return dict(value)
    raise invalid("'toolChoice' must be 'auto', 'none', 'required' or {type: 'tool', toolName}")


def _model_settings(body: JsonObject) -> ModelSettings | None:
    settings = _optional(body, "modelSettings", dict, "an object")
    provider_options = _optional(body, "providerOptions", dict, "an object")
    if settings is None and provider_options is None:
        return None
    out = ModelSettings(provider_options=dict(provider_options or {}))
    for key, value in (settings or {}).items():
        name = f"modelSettings.{key}"
        if value is None:
            continue
        if key in _NUMBER_SETTINGS:
            attr, low, high = _NUMBER_SETTINGS[key]
            setattr(out, attr, bounded_number(value, name, minimum=low, maximum=high))
        elif key in _INT_SETTINGS:
            attr, low_int, high_int = _INT_SETTINGS[key]
            setattr(out, attr, bounded_int(value, name, minimum=low_int, maximum=high_int))
        elif key == "stopSequences":
            if (
                not isinstance(value, list)
                or len(value) > MAX_STOP_SEQUENCES
                or not all(isinstance(item, str) for item in value)
            ):
                raise invalid(f"'{name}' must be an array of at most {MAX_STOP_SEQUENCES} strings")
            out.stop_sequences = list(value)
        elif key == "headers":
            if not isinstance(value, Mapping) or not all(isinstance(v, str) for v in value.values()):
                raise invalid(f"'{name}' must map header names to strings")
            out.headers = {str(k): v for k, v in value.items()}
        else:
            known = sorted([*_NUMBER_SETTINGS, *_INT_SETTINGS, "stopSequences", "headers"])
            raise invalid(f"unknown option '{name}' (known: {', '.join(known)})")
    return out


_IDLE_OPTIONS = {
    "maxIdleMs": "max_idle_ms",
    "resumeWindowMs": "resume_window_ms",
    "maxContinuations": "max_continuations",
}


def _until_idle(body: JsonObject, forced: bool) -> bool | IdleRequest:
    value = body.get("untilIdle")
    options = {key: body.get(key) for key in _IDLE_OPTIONS}
    if isinstance(value, Mapping):
        unknown = sorted(set(value) - set(_IDLE_OPTIONS))
        if unknown:
            raise invalid(f"unknown option 'untilIdle.{unknown[0]}' (known: {', '.join(_IDLE_OPTIONS)})")
        options.update({key: value[key] for key in options if key in value})
        value = True
    elif value is not None and not isinstance(value, bool):
        raise invalid("'untilIdle' must be a boolean or {maxIdleMs, resumeWindowMs, maxContinuations}")
    chosen: IdleRequest = {}
    if options["maxIdleMs"] is not None:
        chosen["max_idle_ms"] = bounded_number(
            options["maxIdleMs"], "maxIdleMs", minimum=0, maximum=MAX_IDLE_MS, exclusive_min=True
        )
    if options["resumeWindowMs"] is not None:
        chosen["resume_window_ms"] = bounded_number(
            options["resumeWindowMs"], "resumeWindowMs", minimum=0, maximum=MAX_RESUME_WINDOW_MS
        )
    if options["maxContinuations"] is not None:
        chosen["max_continuations"] = bounded_int(
            options["maxContinuations"], "maxContinuations", minimum=0, maximum=MAX_CONTINUATIONS
        )
    if not (value or forced):
        return False
    return chosen or True


def _structured(value: JsonObject | None) -> StructuredOutput | None:
    if value is None:
        return None
    if "schema" not in value:
        raise invalid("'structuredOutput' needs a 'schema' (a JSON Schema)")
    if "model" in value:
        # The server's provider keys would pay for, and receive the conversation with, a model
        # the caller names: like a title model, it is the server's to choose.
        raise invalid("'structuredOutput.model' is the server's to choose (set it on the agent)")
    try:
        return StructuredOutput.coerce(dict(value))
    except (jsonschema.SchemaError, TypeError, ValueError) as exc:
        message = exc.message if isinstance(exc, jsonschema.SchemaError) else str(exc)
        raise invalid(f"'structuredOutput.schema' is not a valid JSON Schema: {message}") from None


def _client_tools(value: JsonValue) -> dict[str, Tool]:
    """``clientTools: {name: {description, inputSchema | parameters}}`` as tools the client runs."""
    if value is None:
        return {}
    specs = (
        {name: spec for name, spec in value.items() if isinstance(spec, dict)}
        if isinstance(value, dict)
        else {}
    )
    if not isinstance(value, dict) or len(specs) != len(value):
        raise invalid("'clientTools' must map tool names to tool definitions")
    tools: dict[str, Tool] = {}
    for name, spec in specs.items():
        # a schema that is not a JSON Schema object fails in client_tool (a 400 below)
        schema = cast("Mapping[str, JsonValue] | None", spec.get("inputSchema") or spec.get("parameters"))
        try:
            tools[str(name)] = client_tool(
                str(name), description=str(spec.get("description") or ""), input_schema=schema
            )
        except (ValueError, TypeError) as exc:
            raise invalid(f"clientTools.{name}: {exc}") from None
    return tools


MAX_RUN_SCORERS = 32


def _scorers(value: JsonValue) -> dict[str, RunScorer] | None:
    """``scorers: {key: name | {scorer: name, sampling?}}``: a run's own scorers, named only (a
    scorer is the server's code: the agent's ``scorers`` or ``Runstream(scorers=...)``; the agent
    refuses a name that is neither before the run starts)."""
    if value is None:
        return None
    if not isinstance(value, dict) or len(value) > MAX_RUN_SCORERS:
        raise invalid(
            f"'scorers' must map at most {MAX_RUN_SCORERS} keys to scorers' names ({{key: {{scorer, sampling?}}}})"
        )
    for key, entry in value.items():
        check_id(key, "scorers")
        if not isinstance(entry.get("scorer") if isinstance(entry, dict) else entry, str):
            raise invalid(
                f"'scorers.{key}' must name a scorer of the agent or the server: a name, or "
                "{scorer: name, sampling?} (a request names scorers, it never gives one)"
            )
    try:
        return run_scorers(value)
    except (TypeError, ValueError) as exc:
        raise invalid(str(exc)) from None


CONTINUE_FIELDS = frozenset({"toolCallId", "reason", "resumeData"})
"""What approve/decline/resume bodies carry besides a stream body's options."""


async def trusted_options(
    agent: Agent, options: Mapping[str, object], principal: Principal
) -> dict[str, Any]:
    """A request's run options tightened against what the agent's author set, with the
    caller's reserved request context (:func:`runstream.trust.request_options`); 400 for what a
    request may not set."""
    try:
        return await request_options(agent, options, reserved=principal.context)
    except InvalidInputError as exc:
        raise invalid(str(exc)) from None


async def resume_options(agent: Agent, body: JsonObject, principal: Principal) -> dict[str, Any]:
    """The ``stream()`` options an approve/decline/resume body gives for the continued run
    (Mastra's client-js sends them next to ``runId``), validated as a stream body's and
    tightened as a new run's; the run keeps its memory scope and its untilIdle setting."""
    rest = {key: value for key, value in body.items() if key not in CONTINUE_FIELDS}
    for key in ("memory", "untilIdle", "maxIdleMs", "resumeWindowMs", "maxContinuations"):
        if key in rest:
            raise invalid(f"'{key}' cannot change on a continuation (the run keeps its own)")
    parsed = parse_stream_body(rest, principal, need_messages=False)
    given = {
        key: value
        for key, value in parsed.options.items()
        if value is not None and value is not False and value != [] and value != {}
    }
    return await trusted_options(agent, given, principal) if given else {}


def parse_stream_body(
    body: JsonObject, principal: Principal, *, until_idle: bool = False, need_messages: bool = True
) -> StreamRequest:
    """Validate a generate/stream body (``until_idle`` forces until-idle, as the route does)."""
    unknown = sorted(set(body) - FIELDS - IGNORED_FIELDS)
    if unknown:
        raise invalid(f"unknown option '{unknown[0]}' (see docs/server.md for the accepted fields)")
    messages = body.get("messages")
    if need_messages and (messages is None or messages == "" or messages == []):
        raise invalid("'messages' is required (a string or a non-empty array)")
    active = _optional(body, "activeTools", list, "an array of tool names")
    if active is not None and not all(isinstance(name, str) for name in active):
        raise invalid("'activeTools' must be an array of tool names")
    structured = _optional(body, "structuredOutput", dict, "an object with a 'schema'")
    max_steps = body.get("maxSteps")
    if max_steps is not None:
        max_steps = bounded_int(max_steps, "maxSteps", minimum=1, maximum=MAX_STEPS)
    context = _optional(body, "context", list, "an array of messages")
    for name, value in (("messages", messages), ("context", context)):
        if isinstance(value, list) and len(value) > MAX_MESSAGES:
            raise invalid(f"'{name}' may hold at most {MAX_MESSAGES} messages")
    options = StreamOptions(
        max_steps=max_steps,
        tool_choice=_tool_choice(body.get("toolChoice")),
        model_settings=_model_settings(body),
        structured_output=_structured(structured),
        context=to_prompt(context, "context") if context else [],
        client_tools=_client_tools(body.get("clientTools")),
        active_tools=active,
        instructions=_optional(body, "instructions", str, "a string"),
        request_context=_optional(body, "requestContext", dict, "an object"),
        scorers=_scorers(body.get("scorers")),
        return_scorer_data=_optional(body, "returnScorerData", bool, "a boolean") or False,
    )
    if _optional(body, "requireToolApproval", bool, "a boolean"):
        # only when the request asks for approval: an explicit False would override the agent's
        # own (runstream.trust: a request tightens the author's options, never loosens them)
        options["require_tool_approval"] = True
    return StreamRequest(
        messages=to_prompt(messages) if messages is not None else [],
        memory=memory_scope(body.get("memory"), principal),
        run_id=None if body.get("runId") is None else check_id(body["runId"], "runId"),
        until_idle=_until_idle(body, until_idle),
        options=options,
    )
