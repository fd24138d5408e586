"""What a registered scorer sees of a stored trace, and the score it leaves (Mastra's trace
scoring, ``POST /api/observability/traces/score``), and the background job that scores it.

The target is a span (the trace's root when none is named). Its scorer input is read from the
span store, not written anew: for an agent run, its model calls' — the first one's input messages
and the last one's answer, what the run was asked and what it said (the run span's own input is
only the turn's new messages, and a turn that only started a tool has no answer text of its own);
for any other span (model, tool), its own ``input``/``output``, with message content captured.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from functools import partial

from runstream.background_scoring import MAX_REASON, Job, score_once, uninterrupted
from runstream.models.base import PromptMessage
from runstream.observability.store import SpanStore
from runstream.scoring import ScoreInput, Scorer

Span = Mapping[str, object]


def target_span(spans: Sequence[Span], span_id: str | None) -> Span | None:
    """The span ``span_id`` of the trace, or its root when no span is named."""
    for span in spans:
        if span["spanId"] == span_id if span_id else span["parentSpanId"] is None:
            return span
    return None


def score_input(spans: Sequence[Span], target: Span) -> ScoreInput | None:
    """The target's input messages and output text; ``None`` when the store kept no output for
    it (message content is captured only on request, see docs/otel.md)."""
    calls = [
        span
        for span in spans
        if span["parentSpanId"] == target["spanId"] and span["spanType"] == "model_generation"
    ]
    if calls:  # a run: what its first model call was asked, and its last call's answer
        input_value, output_value = calls[0].get("input"), calls[-1].get("output")
    else:
        input_value, output_value = target.get("input"), target.get("output")
    if output_value is None:
        return None
    return ScoreInput(text=_text(output_value), messages=_messages(input_value), iteration=1)


def scoring_job(scorer: Scorer, data: ScoreInput, target: Span, store: SpanStore, owner: str | None) -> Job:
    """The background run of ``scorer`` over ``data``, its score stored on ``target`` under the
    trace's resource (a failure is logged by :func:`~runstream.background_scoring.score_once`)."""

    async def job() -> None:
        trace_id = str(target["traceId"])
        result = await score_once(scorer, data, traceId=trace_id, resourceId=owner)
        if result is not None:
            record = score_record(scorer, result, target)
            await uninterrupted(partial(store.add_signal, "score", record, owner))

    return job


def score_record(scorer: Scorer, result: Mapping[str, object], target: Span) -> dict[str, object]:
    """The stored score in Mastra's shape for a trace-scoring run (``source: "TEST"``)."""
    return {
        "scorerId": scorer.id,
        "scorerName": scorer.name or scorer.id,
        "score": result["score"],
        "reason": None if result["reason"] is None else str(result["reason"])[:MAX_REASON],
        "traceId": target["traceId"],
        "spanId": target["spanId"],
        "source": "TEST",
        "metadata": {"entityType": target.get("spanType"), "entityId": target.get("entityId")},
    }


def _parts_text(message: Mapping[str, object]) -> str:
    parts = message.get("parts")
    if not isinstance(parts, list):
        return ""
    return "".join(
        str(part.get("content", ""))
        for part in parts
        if isinstance(part, dict) and part.get("type") == "text"
    )


def _text(value: object) -> str:
    """Stored messages' text parts (the last message's), a string, or anything else as JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value and all(isinstance(m, dict) and "parts" in m for m in value):
        return _parts_text(value[-1])
    return json.dumps(value)


def _messages(value: object) -> list[PromptMessage]:
    """Stored messages (role + typed parts) as prompt messages holding their text."""
    if isinstance(value, str):
        return [{"role": "user", "content": [{"type": "text", "text": value}]}]
    if not isinstance(value, list):
        return []
    messages: list[PromptMessage] = []
    for message in value:
        if isinstance(message, dict) and message.get("role") in ("user", "assistant"):
            messages.append(
                {"role": message["role"], "content": [{"type": "text", "text": _parts_text(message)}]}
            )
    return messages
