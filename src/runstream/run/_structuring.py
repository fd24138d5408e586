"""Mastra's separate structuring pass (``structuredOutput.model``), recorded in ``x-pt20``/``x-pt22``.

The agent's model answers in prose (its system prompt asks it to cover the schema's fields).
After the final step's text, a second model call (Mastra's internal "structured-output-
structurer" agent, with its own run id) gets the answer under ``# Assistant Response`` and the
schema as its response format; its partial objects stream as ``object`` chunks and its result as
``object-result``, each with ``metadata: {"from": "structured-output"}``. Its usage is not the
run's. A failing answer follows ``errorStrategy``: ``fallback`` yields the fallback value with
``metadata.fallback: true``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from runstream._payloads import TripwirePayload
from runstream.abort import AbortSignal
from runstream.chunks import AgentChunk, ObjectChunk, ObjectResultChunk
from runstream.models.base import ModelRequest, ModelSettings
from runstream.models.registry import ready_model
from runstream.structured import NO_OBJECT, StructuredOutput, StructuredOutputError, partial_object

FROM = {"from": "structured-output"}
PROMPT = (
    "Extract and structure the key information from the following text according to the specified "
    "schema. Keep the original meaning and details. Rely on the provided text and conversation history."
)


@dataclass(slots=True)
class Structured:
    """The pass's outcome: the object (or :data:`NO_OBJECT`) or the error of a strict failure."""

    object: Any = NO_OBJECT
    error: Exception | None = None


def structuring_tripwire(error: Exception) -> TripwirePayload:
    """How a strict structuring pass that failed ends the run (recorded ``x-pt27``): Mastra's
    processor asks for a retry, which ``maxProcessorRetries`` 0 does not give, so the step and
    the run finish with reason ``tripwire`` (no ``tripwire`` chunk; the run's status is
    ``success``)."""
    return {
        "reason": f"[StructuredOutputProcessor] Structuring failed: {error}",
        "retry": True,
        "metadata": {"error": error},
        "processorId": "structured-output",
    }


def instructions(structured: StructuredOutput) -> str:
    """The structuring model's system prompt: ``instructions``, or Mastra's generated one."""
    if structured.instructions:
        return structured.instructions
    schema = json.dumps(structured.schema, indent=2)
    return f"""You are a data structuring specialist. Your job is to convert unstructured text into a specific JSON format.

TASK: Convert the provided unstructured text into valid JSON that matches the following schema:
{schema}

REQUIREMENTS:
- Return ONLY valid JSON, no additional text or explanation
- Extract relevant information from the input text
- If information is missing, use reasonable defaults or null values
- Maintain data types as specified in the schema
- Be consistent and accurate in your conversions

The input text may be in any format (sentences, bullet points, paragraphs, etc.). Extract the relevant data and structure it according to the schema."""


def structuring_prompt(reasoning: str, text: str) -> str:
    sections = []
    if reasoning:
        sections.append(f"# Assistant Reasoning\n{reasoning}")
    if text:
        sections.append(f"# Assistant Response\n{text}")
    return f"{PROMPT}\n\n" + "\n\n".join(sections)


async def structure(
    structured: StructuredOutput, text: str, reasoning: str, signal: AbortSignal, outcome: Structured
) -> AsyncIterator[AgentChunk]:
    """Run the structuring model on the answer; yields its ``object``/``object-result`` chunks
    and leaves the object (or a strict failure) in ``outcome``."""
    run_id = str(uuid.uuid4())  # the structuring agent's own run, as in Mastra
    model = ready_model(structured.structuring_model)
    request = ModelRequest(
        prompt=[
            {"role": "system", "content": instructions(structured)},
            {"role": "user", "content": [{"type": "text", "text": structuring_prompt(reasoning, text)}]},
        ],
        response_format={"type": "json", "schema": structured.schema},
        settings=ModelSettings(provider_options=structured.provider_options or {}),
        abort_signal=signal,
    )
    deltas: list[str] = []
    last: Any = None
    try:
        stream = await model.stream(request)
        async for part in stream.parts:
            if part["type"] == "error":
                raise StructuredOutputError(f"the structuring model failed: {part.get('error')}")
            if part["type"] != "text-delta" or not part["delta"]:
                continue
            deltas.append(part["delta"])
            partial = partial_object("".join(deltas))
            if partial is not None and partial != last:
                last = partial
                yield ObjectChunk(run_id, partial, metadata=dict(FROM))
        obj = structured.parse_final("".join(deltas))
    except ValueError as exc:
        if structured.error_strategy == "strict":
            outcome.error = exc
            return
        obj = structured.recover(exc)
        if obj is NO_OBJECT:
            return
        outcome.object = obj
        yield ObjectResultChunk(run_id, obj, metadata={"fallback": True, **FROM})
        return
    outcome.object = obj
    yield ObjectResultChunk(run_id, obj, metadata=dict(FROM))
