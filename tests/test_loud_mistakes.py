"""Mistakes a newcomer makes fail or warn loudly instead of passing silently."""

from __future__ import annotations

from typing import Any

import pytest

from runstream import Agent, ToolContext, tool
from runstream.runtime import Runstream
from runstream.tasks.policy import ForegroundFallbackWarning
from runstream.testing import ScriptedModel, Text, ToolCall


def test_a_tool_parameter_without_a_type_hint_is_an_error() -> None:
    def lookup(city, ctx: ToolContext) -> str:  # type: ignore[no-untyped-def]
        """Look a city up."""
        return str(city)

    with pytest.raises(TypeError, match="tool lookup: parameter 'city' has no type hint"):
        tool(lookup)


def test_an_unannotated_context_parameter_is_an_error_too() -> None:
    async def lookup(city: str, ctx) -> str:  # type: ignore[no-untyped-def]
        """Look a city up."""
        return city

    with pytest.raises(TypeError, match="'ctx: ToolContext' for the context"):
        tool(lookup)


def test_explicit_any_is_accepted() -> None:
    @tool
    def echo(value: Any) -> Any:
        """Echo."""
        return value

    assert "value" in echo.input_schema["properties"]


ran: list[str] = []


@tool(background=True)
async def research(topic: str) -> str:
    """Research a topic (slow)."""
    ran.append(topic)
    return f"{topic}: fine"


def model() -> ScriptedModel:
    return ScriptedModel.turns(ToolCall("research", {"topic": "tides"}), Text("Done."))


async def test_a_background_tool_without_a_task_manager_warns_and_runs_in_the_foreground() -> None:
    ran.clear()
    agent = Agent("researcher", model=model(), tools=[research])
    with pytest.warns(
        ForegroundFallbackWarning, match=r"'researcher': research should run in the background"
    ):
        out = await agent.stream("Research the tides")
    chunks = [chunk async for chunk in out.full_stream]
    assert ran == ["tides"]
    result = next(c for c in chunks if c.type == "tool-result")
    assert result.payload["result"] == "tides: fine"  # the real result: it ran in the foreground
    assert "background-task-started" not in [c.type for c in chunks]


async def test_a_runtime_without_background_tasks_warns_too() -> None:
    agent = Agent("researcher2", model=model(), tools=[research])
    async with Runstream(agents=[agent]):
        with pytest.warns(ForegroundFallbackWarning, match="background_tasks=\\{'enabled': True\\}"):
            out = await agent.stream("Research the tides")
        await out.text


async def test_no_warning_when_background_tasks_are_configured_or_declined(
    recwarn: pytest.WarningsRecorder,
) -> None:
    agent = Agent("researcher3", model=model(), tools=[research])
    async with Runstream(agents=[agent], background_tasks={"enabled": True}):
        out = await agent.stream("Research the tides")
        await out.text
    plain = Agent("researcher4", model=model(), tools=[research])
    out = await plain.stream("Research the tides", disable_background_tasks=True)
    await out.text
    assert not [w for w in recwarn if issubclass(w.category, ForegroundFallbackWarning)]


def test_a_plain_function_as_a_tool_says_to_decorate_it() -> None:
    from runstream import Agent, ConfigurationTypeError
    from runstream.testing import ScriptedModel

    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    with pytest.raises(
        ConfigurationTypeError, match=r"'add' is a function, not a Tool; decorate it with @tool"
    ):
        Agent("a", model=ScriptedModel.text("x"), tools=[add])  # type: ignore[list-item]


async def test_mastras_until_idle_spelling_names_the_python_keyword() -> None:
    from runstream import Agent
    from runstream.testing import ScriptedModel

    agent = Agent("a", model=ScriptedModel.text("x"))
    with pytest.raises(ValueError, match=r"did you mean until_idle=\.\.\.\?"):
        await agent.stream("hi", untilIdle=True)  # type: ignore[call-arg]
