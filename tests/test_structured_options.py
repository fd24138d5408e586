"""Mastra's structured-output options beyond the schema: a separate structuring ``model`` with its
``instructions``, ``jsonPromptInjection``, and the ``metadata`` Mastra puts on the object chunks.
The streams are pinned by the recorded scenarios ``x-pt11`` and ``x-pt20``..``x-pt22``; these
tests check the prompts the models get (the recorded ``modelCalls`` of those scenarios)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from runstream import Agent
from runstream.chunks import AnyChunk
from runstream.structured import StructuredOutput
from runstream.testing import ScriptedModel

USAGE = {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2}
SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "year": {"type": "number"}},
    "required": ["name", "year"],
}
SCHEMA_JSON = json.dumps(
    {"$schema": "http://json-schema.org/draft-07/schema#", **SCHEMA}, separators=(",", ":")
)


def say(*deltas: str) -> list[dict[str, Any]]:
    return [
        {"type": "text-start", "id": "t"},
        *({"type": "text-delta", "id": "t", "delta": d} for d in deltas),
        {"type": "text-end", "id": "t"},
        {"type": "finish", "finishReason": "stop", "usage": USAGE},
    ]


async def run(agent: Agent, **options: Any) -> list[AnyChunk]:
    async with asyncio.timeout(10):
        out = await agent.stream("Tell me about solana", **options)
        return [chunk async for chunk in out.full_stream]


def system_text(model: ScriptedModel) -> str:
    return str(model.recorded[0].prompt[0]["content"])


async def test_a_separate_model_structures_the_answer() -> None:
    model = ScriptedModel(calls=[say("Solana is a fast chain ", "launched in 2020.")])
    structurer = ScriptedModel(calls=[say('{"name":"Sol', 'ana","year":2020}')])
    agent = Agent("so", model=model, instructions="Answer.")
    chunks = await run(
        agent,
        structured_output={"schema": SCHEMA, "model": structurer, "instructions": "Extract the chain."},
    )
    objects = [c for c in chunks if c.type in ("object", "object-result")]
    assert [(c.type, c.object, c.metadata) for c in objects] == [  # type: ignore[union-attr]
        ("object", {"name": "Sol"}, {"from": "structured-output"}),
        ("object", {"name": "Solana", "year": 2020}, {"from": "structured-output"}),
        ("object-result", {"name": "Solana", "year": 2020}, {"from": "structured-output"}),
    ]
    assert (
        len({c.run_id for c in objects}) == 1 and objects[0].run_id != chunks[0].run_id
    )  # the structurer's run
    # the agent's model answers in prose, told what will be extracted (no response format)
    assert model.recorded[0].response_format is None
    assert system_text(model) == (
        "Answer.\n\nYour response will be processed by another agent to extract structured data. Please "
        "ensure your response contains comprehensive information for all the following fields that will be "
        f"extracted:\n\n{SCHEMA_JSON}\n\n\nYou don't need to format your response as JSON unless the user asks "
        "you to. Just ensure your natural language response includes relevant information for each field in "
        "the schema above."
    )
    (call,) = structurer.recorded
    assert call.prompt[0] == {"role": "system", "content": "Extract the chain."}
    assert call.prompt[1]["content"][0]["text"] == (
        "Extract and structure the key information from the following text according to the specified schema. "
        "Keep the original meaning and details. Rely on the provided text and conversation history.\n\n"
        "# Assistant Response\nSolana is a fast chain launched in 2020."
    )
    assert (
        call.response_format is not None
        and call.response_format["schema"]["properties"] == SCHEMA["properties"]
    )


async def test_default_structuring_instructions_and_strict_failure() -> None:
    structurer = ScriptedModel(calls=[say('{"name":"Solana"}')])
    agent = Agent("so", model=ScriptedModel(calls=[say("Solana.")]))
    chunks = await run(agent, structured_output={"schema": SCHEMA, "model": structurer})
    assert system_text(structurer).startswith("You are a data structuring specialist.")
    assert '"required": [\n    "name",\n    "year"\n  ]' in system_text(structurer)
    # As Mastra (x-pt27): no error chunk; the step and the run finish with reason tripwire.
    assert not any(c.type in ("error", "tripwire", "object-result") for c in chunks)
    assert chunks[-1].type == "finish" and chunks[-1].payload["stepResult"]["reason"] == "tripwire"


async def test_json_prompt_injection_modes() -> None:
    answer = say('{"name":"Solana","year":2020}')
    system = ScriptedModel(calls=[answer])
    chunks = await run(
        Agent("so", model=system, instructions="Extract."),
        structured_output={"schema": SCHEMA, "jsonPromptInjection": True},
    )
    assert [c.object for c in chunks if c.type == "object-result"] == [{"name": "Solana", "year": 2020}]  # type: ignore[attr-defined]
    assert system.recorded[0].response_format is None
    assert system_text(system) == (
        f"Extract.\n\nJSON schema:\n{SCHEMA_JSON}\nYou MUST answer with a JSON object that matches the JSON schema above."
    )

    compact = ScriptedModel(calls=[answer])
    await run(
        Agent("so", model=compact, instructions="Extract."),
        structured_output={"schema": SCHEMA, "jsonPromptInjection": "system", "instructions": "name + year"},
    )
    assert system_text(compact) == "Extract.\n\nname + year"

    inline = ScriptedModel(calls=[answer])
    await run(
        Agent("so", model=inline), structured_output={"schema": SCHEMA, "json_prompt_injection": "inline"}
    )
    (user,) = [m for m in inline.recorded[0].prompt if m["role"] == "user"]
    assert user["content"][-1]["text"].startswith("Return your response as JSON matching this schema:")

    native = ScriptedModel(calls=[answer], provider="openai")
    await run(Agent("so", model=native), structured_output={"schema": SCHEMA, "jsonPromptInjection": "auto"})
    assert native.recorded[0].response_format is not None  # a provider with a native JSON format


def test_bad_options_are_errors() -> None:
    with pytest.raises(ValueError, match="jsonPromptInjection must be"):
        StructuredOutput.coerce({"schema": SCHEMA, "jsonPromptInjection": "header"})
    with pytest.raises(TypeError, match="model"):
        StructuredOutput.coerce({"schema": SCHEMA, "model": 42})
    with pytest.raises(ValueError, match="'useAgent' is not supported"):
        StructuredOutput.coerce({"schema": SCHEMA, "useAgent": True})
    with pytest.raises(
        TypeError, match=r"structured_output.providerOptions.openai must be a mapping, not str"
    ):
        StructuredOutput.coerce({"schema": SCHEMA, "providerOptions": {"openai": "low"}})


class SettingsSeen:
    """A model that plays a script and keeps the settings of each request."""

    def __init__(self, model: ScriptedModel) -> None:
        self.inner = model
        self.model_id = model.model_id
        self.provider = model.provider
        self.specification_version = model.specification_version
        self.settings: list[Any] = []

    async def stream(self, request: Any) -> Any:
        self.settings.append(request.settings)
        return await self.inner.stream(request)


async def test_provider_options_reach_the_structuring_model() -> None:
    structurer = SettingsSeen(ScriptedModel(calls=[say('{"name":"Solana","year":2020}')]))
    agent = Agent("so", model=ScriptedModel(calls=[say("Solana, 2020.")]))
    chunks = await run(
        agent,
        structured_output={
            "schema": SCHEMA,
            "model": structurer,
            "providerOptions": {"openai": {"reasoningEffort": "low"}},
        },
    )
    assert [c.type for c in chunks if c.type == "object-result"] == ["object-result"]
    assert structurer.settings[0].provider_options == {"openai": {"reasoningEffort": "low"}}
