"""A run called with no options copies its agent's template configuration; the template follows
every change to the agent (``runstream.agent._plain_runs``)."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from runstream import Agent, tool
from runstream.abort import AbortController
from runstream.agent.run_options import RunOptions
from runstream.run._run_state import LoopConfig
from runstream.testing import ScriptedModel

PER_RUN = {"abort_signal", "request_context"}


async def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


async def mul(a: int, b: int) -> int:
    """Multiply two numbers."""
    return a * b


def _agent(**kwargs: Any) -> Agent:
    return Agent(
        "plain",
        model=ScriptedModel.text("hi"),
        instructions="Be brief.",
        tools=[tool(add)],
        tool_choice="auto",
        **kwargs,
    )


def _config(agent: Agent) -> LoopConfig | None:
    return agent._plain_runs.config(agent, RunOptions.of({}), AbortController().signal)


async def _run(agent: Agent, **options: Any) -> str:
    return (await agent.generate("hello", **options))["text"]


async def test_a_plain_run_copies_the_configuration_the_long_way_makes() -> None:
    agent = _agent()
    assert _config(agent) is None  # no template before the first plain run
    assert await _run(agent) == "hi"
    copied = _config(agent)
    assert copied is not None
    state = (await agent.stream("x")).state
    made = await agent._configure(RunOptions.of({}), state, AbortController())
    for spec in fields(LoopConfig):
        if spec.name not in PER_RUN:
            assert getattr(copied, spec.name) == getattr(made, spec.name), spec.name


async def test_each_copy_has_its_own_signal_request_context_and_containers() -> None:
    agent = _agent()
    await _run(agent)
    options = RunOptions.of({})
    controller = AbortController()
    first = agent._plain_runs.config(agent, options, controller.signal)
    second = _config(agent)
    assert first is not None and second is not None
    assert first.abort_signal is controller.signal and first.request_context is options.request_context
    assert second.abort_signal is not first.abort_signal
    assert second.request_context is not first.request_context
    first.stop_when.append(lambda step: True)
    first.tools["extra"] = first.tools["add"]
    first.system.append({"role": "system", "content": "more"})
    assert second.stop_when == [] and "extra" not in second.tools and len(second.system) == 1
    third = _config(agent)
    assert third is not None and third.stop_when == [] and "extra" not in third.tools
    template = agent._plain_runs._config
    for spec in fields(LoopConfig):  # every container, whatever its field
        value = getattr(third, spec.name)
        if isinstance(value, list | dict):
            assert value is not getattr(template, spec.name), spec.name


async def test_the_template_follows_changes_to_the_agent() -> None:
    model = ScriptedModel.text("first")
    agent = Agent("plain", model=model, instructions="Be brief.", tools=[tool(add)])
    await _run(agent)
    agent.tools["mul"] = tool(mul)  # changed in place
    agent.instructions = "Be thorough."
    await _run(agent)
    assert model.recorded[-1].tools == ["add", "mul"]
    assert model.recorded[-1].prompt[0] == {"role": "system", "content": "Be thorough."}
    other = ScriptedModel.text("second")
    agent.model = other
    assert await _run(agent) == "second"
    agent.max_steps = 1
    config = _config(agent)
    assert config is None  # changed since the template was made: the next run makes it anew
    await _run(agent)
    config = _config(agent)
    assert config is not None and config.max_steps == 1 and config.model is other


async def test_an_equal_model_is_not_the_same_model() -> None:
    agent = _agent()
    await _run(agent)
    assert isinstance(agent.model, ScriptedModel)
    agent.model = ScriptedModel(calls=list(agent.model.calls))  # equal, another object
    assert _config(agent) is None


async def test_runs_with_options_or_dynamic_parts_make_no_template() -> None:
    agent = _agent()
    await _run(agent, max_steps=2)
    assert _config(agent) is None
    dynamic = Agent("dynamic", model=ScriptedModel.text("hi"), instructions=lambda ctx: "Be brief.")
    await _run(dynamic)
    assert dynamic._plain_runs.config(dynamic, RunOptions.of({}), AbortController().signal) is None
    durable_defaults = _agent(default_options={"max_steps": 2})
    await _run(durable_defaults)
    assert _config(durable_defaults) is None


async def test_an_agent_that_stops_being_plain_gets_no_copy() -> None:
    agent = _agent()
    await _run(agent)
    assert _config(agent) is not None
    agent.instructions = lambda ctx: "Be thorough."  # now a function of the request
    assert _config(agent) is None
    await _run(agent)  # configured the long way: the function is called
    assert _config(agent) is None
    assert isinstance(agent.model, ScriptedModel)
    assert agent.model.recorded[-1].prompt[0] == {"role": "system", "content": "Be thorough."}
