"""A failed run raises where a Python caller waits for its result (issue 26): the awaited
aggregates, ``generate()``, the end of ``text_stream``; ``full_stream`` keeps Mastra's ``error``
chunk. The ``runstream`` logger records the failure (silent unless the application configures
logging)."""

from __future__ import annotations

import logging
import warnings

import pytest

from runstream import Agent, RunFailedError, RunstreamError, tool
from runstream.testing import CallError, ScriptedModel, StreamError, Text, ToolCall


def failing_agent(kind: str) -> Agent:
    turn = (
        StreamError("model exploded") if kind == "stream" else CallError("401 unauthorized", status_code=401)
    )
    return Agent("err", model=ScriptedModel.turns([Text("partial "), turn] if kind == "stream" else turn))


@pytest.mark.parametrize("kind", ["stream", "call"])
@pytest.mark.parametrize(
    "aggregate",
    ["text", "usage", "object", "steps", "tool_calls", "tool_results", "finish_reason", "reasoning_text"],
)
async def test_every_awaited_aggregate_raises_the_runs_error(kind: str, aggregate: str) -> None:
    # Mastra rejects each of these promises when they are awaited directly (g1 / g3 recorded).
    out = await failing_agent(kind).stream("hi")
    with pytest.raises(RunFailedError) as caught:
        await getattr(out, aggregate)
    assert isinstance(caught.value, RunstreamError)
    assert caught.value.__cause__ is caught.value.cause
    expected = "model exploded" if kind == "stream" else "401 unauthorized"
    assert str(caught.value.cause) == expected and expected in str(caught.value)
    assert caught.value.run_id == out.run_id


@pytest.mark.parametrize("kind", ["stream", "call"])
async def test_generate_raises(kind: str) -> None:
    with pytest.raises(RunFailedError):
        await failing_agent(kind).generate("hi")


async def test_text_stream_yields_what_came_then_raises() -> None:
    out = await failing_agent("stream").stream("hi")
    seen: list[str] = []
    with pytest.raises(RunFailedError, match="model exploded"):
        async for text in out.text_stream:
            seen.append(text)
    assert seen == ["partial "]


async def test_full_stream_keeps_the_error_chunk_and_aggregates_then_raise() -> None:
    out = await failing_agent("stream").stream("hi")
    types = [chunk.type async for chunk in out.full_stream]
    assert types[-3:] == ["error", "step-finish", "finish"]
    assert out.status == "failed" and str(out.error) == "model exploded"
    with pytest.raises(RunFailedError):
        await out.text


async def test_a_successful_run_does_not_raise() -> None:
    out = await Agent("ok", model=ScriptedModel.text("fine")).stream("hi")
    assert await out.text == "fine"
    assert (await out.usage)["totalTokens"] >= 0


async def test_the_model_error_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    out = await failing_agent("call").stream("hi")
    with caplog.at_level(logging.INFO, logger="runstream"):
        await out.consume()
    [record] = [r for r in caplog.records if r.name.startswith("runstream")]
    assert record.levelno == logging.ERROR and record.name == "runstream.run"
    assert "401 unauthorized" in record.getMessage() and out.run_id in record.getMessage()


async def test_a_tool_exception_is_logged_with_its_traceback(caplog: pytest.LogCaptureFixture) -> None:
    @tool
    def explode(what: str) -> str:
        """Fail."""
        raise RuntimeError(f"no {what}")

    model = ScriptedModel.turns(ToolCall("explode", {"what": "tea"}), Text("sorry"))
    out = await Agent("t", model=model, tools=[explode]).stream("x")
    with caplog.at_level(logging.INFO, logger="runstream"):
        assert await out.text == "sorry"  # a tool error is the model's to handle: the run succeeds
    [record] = [r for r in caplog.records if r.name == "runstream.tools" and "tea" in str(r.exc_info)]
    assert record.levelno == logging.WARNING and "explode" in record.getMessage()
    assert record.exc_info is not None and "no tea" in str(record.exc_info[1])


def test_the_library_logger_is_silent_by_default() -> None:
    handlers = logging.getLogger("runstream").handlers
    assert any(isinstance(h, logging.NullHandler) for h in handlers)


async def test_an_unawaited_aggregate_says_so_when_printed() -> None:
    out = await Agent("ok", model=ScriptedModel.text("fine")).stream("hi")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        shown = str(out.text)
    assert "await out.text" in shown
    assert [w.category for w in caught] == [RuntimeWarning] and "await out.text" in str(caught[0].message)
    assert await out.text == "fine"
