"""Chunks as the server writes them: Mastra's wire JSON, redacted, one line, never NaN.

Like Mastra's server, the model request is stripped from ``step-start`` / ``step-finish`` /
``finish`` before a chunk leaves the process. NaN and infinities become ``null`` (as
``JSON.stringify`` does); a chunk holding a value with no JSON form is logged and skipped; a failure of the run itself after the response has started
becomes an in-band ``error`` chunk followed by ``finish`` (reason ``error``).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

from runstream.chunks import AnyChunk, dumps, error_to_wire

logger = logging.getLogger("runstream.server")


def encode_json(value: Any) -> str | None:
    """Compact one-line JSON (dates, bytes, errors converted); ``None`` if it has no JSON form."""
    try:
        return dumps(value)
    except (TypeError, ValueError, RecursionError) as exc:
        logger.warning("skipping a value that cannot be sent as JSON: %s", exc)
        return None


def redact(wire: dict[str, Any]) -> dict[str, Any]:
    """The wire dict without the model request (a shallow copy when something is removed)."""
    kind = wire.get("type")
    payload = wire.get("payload")
    if not isinstance(payload, dict):
        return wire
    if kind == "step-start" and "request" in payload:
        return {**wire, "payload": {**payload, "request": {}}}
    if kind not in ("step-finish", "finish"):
        return wire
    clean = {k: v for k, v in payload.items() if k != "request"}
    metadata = clean.get("metadata")
    if isinstance(metadata, dict) and "request" in metadata:
        clean["metadata"] = {k: v for k, v in metadata.items() if k != "request"}
    output = clean.get("output")
    if isinstance(output, dict) and isinstance(output.get("steps"), list):
        steps = [
            {k: v for k, v in step.items() if k != "request"} if isinstance(step, dict) else step
            for step in output["steps"]
        ]
        clean["output"] = {**output, "steps": steps}
    return {**wire, "payload": clean}


def chunk_json(chunk: AnyChunk) -> str | None:
    return encode_json(redact(chunk.to_wire()))


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
