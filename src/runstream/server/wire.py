"""Chunks as the server writes them: Mastra's wire JSON, redacted, one line, never NaN.

Like Mastra's server, the model request is stripped from ``step-start`` / ``step-finish`` /
``finish`` before a chunk leaves the process. NaN and infinities become ``null`` (as
``JSON.stringify`` does); a chunk holding a value with no JSON form is logged and skipped; a failure of the run itself after the response has started
becomes an in-band ``error`` chunk followed by ``finish`` (reason ``error``).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Mapping
from typing import TypeVar

from runstream._payloads import ToolErrorPayload
from runstream.chunks import (
    AnyChunk,
    BackgroundTaskFailedChunk,
    Chunk,
    ToolErrorChunk,
    dumps,
    dumps_bytes,
    error_to_wire,
)
from runstream.tools import ToolExecutionError, private_error_text, public_task_error

logger = logging.getLogger("runstream.server")

REDACTED_TYPES = frozenset({"step-start", "step-finish", "finish", "tool-error", "background-task-failed"})
"""The chunk types that carry the model request or a tool's error (the only ones :func:`redact`
changes)."""


def encode_json(value: object) -> str | None:
    """Compact one-line JSON (dates, bytes, errors converted); ``None`` if it has no JSON form."""
    try:
        return dumps(value)
    except (TypeError, ValueError, RecursionError) as exc:
        logger.warning("skipping a value that cannot be sent as JSON: %s", exc)
        return None


def encode_json_bytes(value: object) -> bytes | None:
    """:func:`encode_json` as UTF-8 bytes (a lone surrogate becomes ``?``), for the socket."""
    try:
        return dumps_bytes(value)
    except (TypeError, ValueError, RecursionError) as exc:
        logger.warning("skipping a value that cannot be sent as JSON: %s", exc)
        return None


def public_error(error: object, tool_name: str, run_id: str = "") -> object:
    """What a caller may see of a tool's error: runstream's own errors (an unknown tool, bad
    arguments, an abort) and a :class:`~runstream.errors.ToolError` the tool raised as they
    are; any other exception the tool raised as "Tool <name> failed" (logged whole here: its
    text may carry secrets or paths)."""
    if isinstance(error, dict) and error.get("name") in PUBLIC_ERROR_NAMES:  # (from a remote task)
        return error
    hidden = private_error_text(error, tool_name)
    if hidden is None:
        return error
    raised = error.__cause__ if isinstance(error, ToolExecutionError) else error
    logger.warning(
        "run %r: tool %r failed: %r",
        run_id,
        tool_name,
        raised,
        exc_info=raised if isinstance(raised, BaseException) else None,
    )
    return {"message": hidden, "name": "Error"}


PUBLIC_ERROR_NAMES = frozenset({"ToolError", "ToolArgumentsError", "ToolNotFoundError", "AbortError"})


def public_chunk(chunk: AnyChunk) -> AnyChunk:
    """``chunk`` as a caller may see it: a ``tool-error`` with :func:`public_error`'s error, a
    ``background-task-failed`` with :func:`~runstream.tools.public_task_error`'s."""
    if isinstance(chunk, BackgroundTaskFailedChunk):
        failed = chunk.payload
        public = public_task_error(failed["error"], failed["toolName"])
        return (
            chunk
            if public is failed["error"]
            else BackgroundTaskFailedChunk(chunk.run_id, {**failed, "error": dict(public)})
        )
    if chunk.type != "tool-error":
        return chunk
    payload: ToolErrorPayload = chunk.payload
    error = public_error(payload.get("error"), str(payload.get("toolName")), chunk.run_id)
    if error is payload.get("error"):
        return chunk
    return ToolErrorChunk(chunk.run_id, {**payload, "error": error})


def redact(wire: Mapping[str, object]) -> Mapping[str, object]:
    """The wire dict without the model request (a shallow copy when something is removed), and a
    tool's error as :func:`public_error` has it."""
    kind = wire.get("type")
    if kind not in REDACTED_TYPES:
        return wire
    payload = wire.get("payload")
    if not isinstance(payload, dict):
        return wire
    if kind == "tool-error":
        error = payload.get("error")
        public = public_error(error, str(payload.get("toolName")), str(wire.get("runId", "")))
        return wire if public is error else {**wire, "payload": {**payload, "error": public}}
    if kind == "background-task-failed":
        error = payload.get("error")
        public = public_task_error(error if isinstance(error, dict) else None, str(payload.get("toolName")))
        return wire if public is error else {**wire, "payload": {**payload, "error": public}}
    if kind == "step-start":
        return {**wire, "payload": {**payload, "request": {}}} if "request" in payload else wire
    clean = _without_request(payload)
    metadata = clean.get("metadata")
    if isinstance(metadata, dict):
        clean["metadata"] = _without_request(metadata)
    output = clean.get("output")
    if isinstance(output, dict) and isinstance(steps := output.get("steps"), list):
        clean["output"] = {
            **output,
            "steps": [_without_request(step) if isinstance(step, dict) else step for step in steps],
        }
    return {**wire, "payload": _hide_tool_errors(clean)}


def _hide_tool_errors(value: object) -> object:
    """``value`` with the text of every failed tool result in its messages and steps replaced by
    "Tool <name> failed" (a copy where something changed): the conversation a ``step-finish``
    or ``finish`` carries holds what the model was told of a tool's error."""
    if isinstance(value, list):
        items = [_hide_tool_errors(item) for item in value]
        return items if any(new is not old for new, old in zip(items, value, strict=True)) else value
    if not isinstance(value, dict):
        return value
    output = value.get("output")
    if (
        value.get("type") == "tool-result"
        and isinstance(output, dict)
        and output.get("type") in ("error-text", "error-json")
    ):
        return {**value, "output": {"type": "error-text", "value": f"Tool {value.get('toolName')} failed"}}
    if value.get("state") == "output-error" and "errorText" in value:  # a UI message's tool part
        name = str(value.get("toolName") or str(value.get("type", "")).removeprefix("tool-"))
        return {**value, "errorText": f"Tool {name} failed"}
    if value.get("type") == "tool-error" and "error" in value:
        return {**value, "error": public_error(value["error"], str(value.get("toolName")))}
    changed = {key: _hide_tool_errors(item) for key, item in value.items() if isinstance(item, list | dict)}
    changed = {key: item for key, item in changed.items() if item is not value[key]}
    return {**value, **changed} if changed else value


def _without_request(value: Mapping[str, object]) -> dict[str, object]:
    """A copy of ``value`` without its ``request`` key (dict copies run in C; a comprehension
    over the keys costs several times as much on the per-step chunks)."""
    clean = dict(value)
    clean.pop("request", None)
    return clean


def chunk_json(chunk: AnyChunk) -> str | None:
    return encode_json(redact(chunk.to_wire()))


def chunk_frame(chunk: AnyChunk) -> bytes | None:
    """The chunk as an SSE event, ``data: <wire JSON>\\n\\n`` (``None`` if it has no JSON form):
    the bytes of ``data_frame(chunk_json(chunk))``, encoded once."""
    encoded = encode_json_bytes(redact(chunk.to_wire()))
    return None if encoded is None else b"data: " + encoded + b"\n\n"


class FrameEncoder:
    """One stream's chunks as SSE events: :func:`chunk_frame`, the envelope encoded once.

    A chunk's wire JSON is ``{"type":…,"runId":…,"from":…,"payload":<payload>}``, and a stream
    repeats the same few envelopes (one per chunk type) for every token: each is encoded the
    first time it is seen, then only the payload is. Chunks with their own wire shape, and those
    :func:`redact` changes, take :func:`chunk_frame`. The bytes are the same either way.
    """

    __slots__ = ("_envelopes",)

    def __init__(self) -> None:
        self._envelopes: dict[tuple[str, str, str], bytes] = {}

    def frame(self, chunk: AnyChunk) -> bytes | None:
        kind, run_id = chunk.type, chunk.run_id
        if not run_id or kind in REDACTED_TYPES or type(chunk).to_wire is not Chunk.to_wire:
            return chunk_frame(chunk)
        key = (kind, run_id, chunk.from_)
        envelope = self._envelopes.get(key)
        if envelope is None:
            wire = dumps_bytes({"type": kind, "runId": run_id, "from": chunk.from_, "payload": 0})
            envelope = self._envelopes[key] = b"data: " + wire[: -len(b"0}")]
        payload = encode_json_bytes(chunk.payload)
        return None if payload is None else b"".join((envelope, payload, _FRAME_END))


_FRAME_END = b"}\n\n"


def failure_json(run_id: str, error: BaseException) -> list[str]:
    """The in-band ``error`` + ``finish`` pair for a run that failed mid-stream."""
    envelope = {"runId": run_id, "from": "AGENT"}
    error_chunk = {"type": "error", **envelope, "payload": {"error": error_to_wire(error)}}
    finish = {
        "type": "finish",
        **envelope,
        "payload": {
            "stepResult": {"reason": "error", "isContinued": False},
            "output": {"usage": {"inputTokens": 0, "outputTokens": 0, "totalTokens": 0}},
        },
    }
    return [text for text in (encode_json(error_chunk), encode_json(finish)) if text is not None]


T = TypeVar("T")


async def run_events(
    chunks: AsyncIterator[AnyChunk], run_id: str, wrap: Callable[[str], T]
) -> AsyncIterator[T]:
    """Each chunk as ``wrap(wire JSON)``; an exception from the run ends it with error + finish."""
    try:
        async for chunk in chunks:
            text = chunk_json(chunk)
            if text is not None:
                yield wrap(text)
    except Exception as exc:
        logger.exception("run %s failed while streaming", run_id)
        for text in failure_json(run_id, exc):
            yield wrap(text)
