"""A ``stream()`` call's keyword arguments as :class:`~runstream.run_options.RunOptions`, and the
options a resume call gives on top of a run's own.

Mastra's ``resumeStream(data, options)``, ``approveToolCall({runId, ...options})`` and
``declineToolCall(...)`` take every ``stream()`` option; those given act on the continued run
(recorded: ``x-pt24`` ``maxSteps``, ``x-pt25`` ``structuredOutput``, ``x-pt26``
``includeRawChunks``). Here the run keeps its own options and the resume call's replace them
one by one.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import fields, replace
from typing import Any

from runstream._callbacks import RunCallbacks
from runstream.delegation import DelegationConfig
from runstream.memory import MemoryScope
from runstream.request_context import RequestContext
from runstream.run_options import (
    RunOptions,
    by_name,
    concurrency_options,
    default_stream_options,
    normalize_messages,
    system_messages,
)
from runstream.scoring import TaskCompletion

NOT_RESUME_OPTIONS = ("run_id", "until_idle")
"""``stream()`` arguments a resume call takes as its own keywords (or not at all)."""
CALLBACKS = {f.name for f in fields(RunCallbacks)}


def call_options(p: Mapping[str, Any]) -> RunOptions:
    """``stream()``'s keyword arguments (all of them, defaults included) as run options."""
    stop_when = p["stop_when"]
    return RunOptions(
        max_steps=p["max_steps"],
        tool_choice=p["tool_choice"],
        include_raw_chunks=p["include_raw_chunks"],
        structured_output=p["structured_output"],
        output_processors=list(p["output_processors"]) if p["output_processors"] is not None else None,
        input_processors=list(p["input_processors"]) if p["input_processors"] is not None else None,
        max_processor_retries=p["max_processor_retries"],
        model_settings=p["model_settings"],
        abort_signal=p["abort_signal"],
        memory=MemoryScope.coerce(p["memory"]),
        disable_background_tasks=p["disable_background_tasks"],
        context=normalize_messages(list(p["context"])) if p["context"] else [],
        is_task_complete=TaskCompletion.coerce(p["is_task_complete"]),
        client_tools=by_name(p["client_tools"]) if p["client_tools"] else {},
        request_context=RequestContext.coerce(p["request_context"]),
        callbacks=RunCallbacks(**{name: p[name] for name in CALLBACKS}).check(),
        instructions=p["instructions"],
        system=system_messages(p["system"]),
        model=p["model"],
        active_tools=list(p["active_tools"]) if p["active_tools"] is not None else None,
        require_tool_approval=p["require_tool_approval"],
        **concurrency_options(p["tool_call_concurrency"]),
        stop_when=[stop_when] if callable(stop_when) else list(stop_when),
        prepare_step=p["prepare_step"],
        delegation=DelegationConfig.coerce(p["delegation"]),
    )


def resumed_options(stored: RunOptions, given: Mapping[str, Any], stream: Callable[..., Any]) -> RunOptions:
    """``stored`` with the options a resume call gives (Mastra's names or Python's) replacing
    them; an unknown option is an error naming it."""
    if not given:
        return stored
    chosen = default_stream_options(given, stream)
    for name in NOT_RESUME_OPTIONS:
        if name in chosen:
            raise TypeError(f"{name} is not an option of a resume (it continues the run it names)")
    defaults = {
        name: parameter.default
        for name, parameter in inspect.signature(stream).parameters.items()
        if name not in ("self", "messages")
    }
    fresh = call_options({**defaults, **chosen})
    changed: dict[str, Any] = {}
    for name in chosen:
        if name in CALLBACKS:
            changed["callbacks"] = replace(changed.get("callbacks", stored.callbacks), **{name: chosen[name]})
        elif name == "tool_call_concurrency":
            changed["tool_call_concurrency"] = fresh.tool_call_concurrency
            changed["tool_call_strategy"] = fresh.tool_call_strategy
        else:
            changed[name] = getattr(fresh, name)
    return replace(stored, **changed)
