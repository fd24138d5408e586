"""Structured output: partial objects while the JSON streams, the final object, and failures."""

from __future__ import annotations

import itertools
import json
from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from runstream import Agent, RunFailedError, StructuredOutput, StructuredOutputError
from runstream.chunks import AnyChunk, ObjectChunk, ObjectResultChunk
from runstream.memory import Memory
from runstream.models.base import StreamPart
from runstream.runtime import Runstream
from runstream.testing import ScriptedModel

PERMISSIVE = {"schema": {"type": "object"}}

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**20), max_value=10**20)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=10,
)
json_objects = st.dictionaries(st.text(max_size=4), json_values, max_size=4)


def text_call(deltas: list[str], finish_reason: str = "stop") -> list[StreamPart]:
    return [
        {"type": "stream-start", "warnings": []},
        {"type": "text-start", "id": "t"},
        *({"type": "text-delta", "id": "t", "delta": d} for d in deltas),
        {"type": "text-end", "id": "t"},
        {
            "type": "finish",
            "finishReason": finish_reason,
            "usage": {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2},
        },
    ]


@st.composite
def split_text(draw: st.DrawFn, text: str) -> list[str]:
    """``text`` cut at random places into non-empty pieces."""
    cuts = sorted(draw(st.sets(st.integers(min_value=1, max_value=max(1, len(text) - 1)), max_size=12)))
    bounds = [0, *(c for c in cuts if c < len(text)), len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


def is_prefix_partial(partial: Any, final: Any) -> bool:
    """Whether ``partial`` is what parsing a prefix of ``json.dumps(final)`` may give.

    Complete members equal the final ones; only the last member of a container may be partial
    (a truncated string, a number cut short, a container with fewer members).
    """
    if isinstance(final, dict):
        if not isinstance(partial, dict):
            return False
        keys, final_keys = list(partial), list(final)
        if keys != final_keys[: len(keys)]:
            return False
        if not keys:
            return True
        *complete, last = keys
        return all(partial[k] == final[k] for k in complete) and is_prefix_partial(partial[last], final[last])
    if isinstance(final, list):
        if not isinstance(partial, list) or len(partial) > len(final):
            return False
        if not partial:
            return True
        n = len(partial)
        return partial[:-1] == final[: n - 1] and is_prefix_partial(partial[-1], final[n - 1])
    if isinstance(final, str):
        return isinstance(partial, str) and final.startswith(partial)
    if isinstance(final, bool) or final is None:
        return partial is final
    number = json.dumps(final)
    return any(_number_prefix(number[:n]) == partial for n in range(1, len(number) + 1))


def _number_prefix(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


async def run_structured(deltas: list[str], structured_output: Any = PERMISSIVE) -> list[AnyChunk]:
    agent = Agent("so", model=ScriptedModel(calls=[text_call(deltas)]), structured_output=structured_output)
    out = await agent.stream("give me JSON")
    return [chunk async for chunk in out.full_stream]


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(data=st.data())
async def test_partial_objects_are_prefixes_of_the_final_object(data: st.DataObject) -> None:
    obj = data.draw(json_objects)
    deltas = data.draw(split_text(json.dumps(obj)))
    chunks = await run_structured(deltas)

    partials = [c.object for c in chunks if isinstance(c, ObjectChunk)]
    for partial in partials:
        assert is_prefix_partial(partial, obj), (partial, obj)
    for before, after in itertools.pairwise(partials):
        assert before != after
    results = [c for c in chunks if isinstance(c, ObjectResultChunk)]
    assert len(results) == 1
    assert results[0].object == obj
    assert [c.type for c in chunks[-2:]] == ["step-finish", "finish"]
    assert chunks[-1].payload["output"]["object"] == obj


def test_prefix_partial_oracle() -> None:
    final = {"a": "hello", "b": [1, 23], "c": 1.5}
    assert is_prefix_partial({"a": "he"}, final)
    assert is_prefix_partial({"a": "hello", "b": [1, 2]}, final)
    assert is_prefix_partial({"a": "hello", "b": [1, 23], "c": 1}, final)
    assert not is_prefix_partial({"a": "hex"}, final)
    assert not is_prefix_partial({"b": [1]}, final)
    assert not is_prefix_partial({"a": "he", "b": []}, final)


async def test_object_stream_and_aggregate() -> None:
    model = ScriptedModel(calls=[text_call(['{"city": "Pa', 'ris", "temp', '": 21}'])])
    out = await Agent("so", model=model).stream("weather", structured_output=PERMISSIVE)
    partials = [p async for p in out.object_stream]
    assert partials == [{"city": "Pa"}, {"city": "Paris"}, {"city": "Paris", "temp": 21}]
    assert await out.object == {"city": "Paris", "temp": 21}
    assert model.recorded[0].response_format == {
        "type": "json",
        "schema": {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"},
    }


async def test_pydantic_model_gives_a_model_instance() -> None:
    class Weather(BaseModel):
        city: str
        temp: int

    chunks = await run_structured(['{"city": "Oslo",', ' "temp": -3}'], Weather)
    result = next(c for c in chunks if isinstance(c, ObjectResultChunk))
    assert result.object == Weather(city="Oslo", temp=-3)
    assert json.loads(result.to_json())["object"] == {"city": "Oslo", "temp": -3}


@pytest.mark.parametrize(
    ("deltas", "message"),
    [
        (['{"city": 5}'], "Structured output validation failed"),
        (['{"city": "Paris"', ", oops"], "not valid JSON"),
    ],
)
async def test_invalid_final_object_gives_error_then_finish(deltas: list[str], message: str) -> None:
    schema = {"schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
    agent = Agent("so", model=ScriptedModel(calls=[text_call(deltas)]))
    out = await agent.stream("weather", structured_output=schema)
    chunks = [c async for c in out.full_stream]
    types = [c.type for c in chunks]
    assert types[-3:] == ["error", "step-finish", "finish"]
    assert "object-result" not in types
    error = chunks[-3].payload["error"]
    assert isinstance(error, StructuredOutputError)
    assert message in str(error)
    assert chunks[-1].payload["stepResult"]["reason"] == "error"
    assert out.status == "failed"
    assert out.error is error
    with pytest.raises(RunFailedError) as caught:
        await out.object
    assert caught.value.cause is error and out.state.object is None


def test_coerce_rejects_an_invalid_schema() -> None:
    with pytest.raises(jsonschema.SchemaError, match="is not valid"):
        StructuredOutput.coerce({"schema": {"type": "nonsense"}})
    with pytest.raises(TypeError, match="pydantic model or a JSON schema"):
        StructuredOutput.coerce(42)


def test_parse_final_strips_code_fences() -> None:
    structured = StructuredOutput.coerce({"type": "object"})
    assert structured is not None
    assert structured.parse_final('```json\n{"a": 1}\n```') == {"a": 1}


async def test_a_fenced_answer_streams_partial_objects_too() -> None:
    model = ScriptedModel(calls=[text_call(['```json\n{"city": "Pa', 'ris", "temp', '": 21}\n```'])])
    out = await Agent("so", model=model).stream("weather", structured_output=PERMISSIVE)
    partials = [p async for p in out.object_stream]
    assert partials == [{"city": "Pa"}, {"city": "Paris"}, {"city": "Paris", "temp": 21}]
    assert await out.object == {"city": "Paris", "temp": 21}


async def test_the_structured_answer_is_in_the_message_metadata() -> None:
    model = ScriptedModel(calls=[text_call(['{"city": "Paris"}'])])
    agent = Agent("so", model=model, memory=Memory())
    async with Runstream(agents=[agent]):
        out = await agent.stream(
            "weather", structured_output=PERMISSIVE, memory={"thread": "t", "resource": "u"}
        )
        finish = [c async for c in out.full_stream][-1]
        stored = await agent.memory.storage.list_messages("t")  # type: ignore[union-attr]
    (ui,) = finish.payload["response"]["uiMessages"]
    assert ui["metadata"]["structuredOutput"] == {"city": "Paris"}
    assert stored.items[-1].content["metadata"]["structuredOutput"] == {"city": "Paris"}


# -- errorStrategy / fallbackValue (Mastra's structured output options) ----------------------


async def test_error_strategies_of_an_answer_that_fails_the_schema(caplog: pytest.LogCaptureFixture) -> None:
    schema = {"type": "object", "properties": {"age": {"type": "number"}}, "required": ["age"]}

    async def run(**options: Any) -> Any:
        agent = Agent("a", model=ScriptedModel.text('{"name":"Ada"}'))
        out = await agent.stream("x", structured_output={"schema": schema, **options})
        kinds = [c.type async for c in out.full_stream]
        return kinds, out.state

    kinds, state = await run()
    assert "error" in kinds and state.status == "failed"
    assert str(state.error) == (
        "Structured output validation failed: - age: Invalid input: expected number, received undefined"
    )
    kinds, state = await run(errorStrategy="fallback", fallbackValue={"age": 0})
    assert "object-result" in kinds and state.object == {"age": 0} and state.status == "success"
    kinds, state = await run(error_strategy="warn")
    assert "object-result" not in kinds and "error" not in kinds and state.object is None
    assert "errorStrategy warn" in caplog.text
    with pytest.raises(ValueError, match="errorStrategy 'fallback' needs a fallbackValue"):
        await run(errorStrategy="fallback")
