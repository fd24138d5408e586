"""Tools: schemas from typed functions, argument validation, execution and the tool context."""

from __future__ import annotations

import asyncio
from typing import Any, Literal

import pytest

from runstream import AbortController, DataChunk, Tool, ToolContext, ToolWriter, tool
from runstream.chunks import AnyChunk, ToolOutputChunk
from runstream.tools import BackgroundToolConfig, ToolArgumentsError, ToolSuspended


def make_context(emitted: list[AnyChunk], *, resume_data: Any = None) -> ToolContext:
    return ToolContext(
        tool_call_id="call-1",
        tool_name="t",
        run_id="run-1",
        agent_id="agent",
        writer=ToolWriter(emitted.append, "run-1", "call-1", "t"),
        abort_signal=AbortController().signal,
        resume_data=resume_data,
    )


@tool
async def get_weather(
    city: str, ctx: ToolContext, units: Literal["c", "f"] = "c", days: int = 1
) -> dict[str, Any]:
    """Get the weather for a city.

    Uses the scripted forecast.

    Args:
        city: The city name.
        units: Temperature units.
    """
    await ctx.writer.write({"looking up": city})
    return {"city": city, "units": units, "days": days, "call": ctx.tool_call_id}


def test_schema_from_type_hints_and_docstring() -> None:
    assert get_weather.name == "get_weather"
    assert get_weather.description == "Get the weather for a city. Uses the scripted forecast."
    assert get_weather.input_schema == {
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "The city name."},
            "units": {
                "enum": ["c", "f"],
                "type": "string",
                "default": "c",
                "description": "Temperature units.",
            },
            "days": {"type": "integer", "default": 1},
        },
        "required": ["city"],
        "additionalProperties": False,
    }
    assert get_weather.spec() == {
        "type": "function",
        "name": "get_weather",
        "description": get_weather.description,
        "inputSchema": get_weather.input_schema,
    }


def test_decorator_options_override_name_and_description() -> None:
    @tool(name="sum_all", description="Adds numbers.", require_approval=True, background=True)
    def total(values: list[int]) -> int:
        return sum(values)

    assert total.name == "sum_all"
    assert total.description == "Adds numbers."
    assert total.require_approval
    assert total.background == BackgroundToolConfig(enabled=True)
    assert total.input_schema["properties"] == {"values": {"type": "array", "items": {"type": "integer"}}}


def test_parameter_named_title_stays_in_the_schema() -> None:
    @tool
    def create_issue(title: str, body: str = "") -> str:
        return title

    assert create_issue.input_schema["properties"]["title"] == {"type": "string"}


async def test_context_is_injected_and_defaults_are_applied() -> None:
    emitted: list[AnyChunk] = []
    args = get_weather.validate_args({"city": "Paris"})
    assert args == {"city": "Paris", "units": "c", "days": 1}
    result = await get_weather.execute(args, make_context(emitted))
    assert result == {"city": "Paris", "units": "c", "days": 1, "call": "call-1"}
    assert [c.to_wire() for c in emitted] == [
        {
            "type": "tool-output",
            "runId": "run-1",
            "from": "USER",
            "payload": {"output": {"looking up": "Paris"}, "toolCallId": "call-1", "toolName": "t"},
        }
    ]


async def test_sync_and_async_functions_both_run() -> None:
    @tool
    def double(x: int) -> int:
        return x * 2

    @tool
    async def triple(x: int) -> int:
        await asyncio.sleep(0)
        return x * 3

    ctx = make_context([])
    assert await double.execute(double.validate_args({"x": 4}), ctx) == 8
    assert await triple.execute(triple.validate_args({"x": 4}), ctx) == 12


async def test_plain_tool_with_sync_or_async_execute() -> None:
    def sync_execute(args: dict[str, Any], ctx: ToolContext) -> str:
        return f"{args['q']}@{ctx.run_id}"

    async def async_execute(args: dict[str, Any], ctx: ToolContext) -> str:
        return f"async {args['q']}"

    ctx = make_context([])
    assert await Tool("s", sync_execute).execute({"q": "a"}, ctx) == "a@run-1"
    assert await Tool("a", async_execute).execute({"q": "b"}, ctx) == "async b"


def test_validation_error_lists_every_field() -> None:
    with pytest.raises(ToolArgumentsError) as info:
        get_weather.validate_args({"units": "kelvin", "days": "many", "extra": 1})
    message = str(info.value)
    assert message.startswith("Tool input validation failed for get_weather.")
    assert "- city: Field required" in message
    assert "- units: Input should be 'c' or 'f'" in message
    assert "- days: Input should be a valid integer" in message
    assert "- extra: Extra inputs are not permitted" in message
    assert "ctx" not in message


def test_validation_error_for_non_object_arguments() -> None:
    with pytest.raises(ToolArgumentsError, match="- root: "):
        get_weather.validate_args(["Paris"])


SEARCH_SCHEMA = {
    "type": "object",
    "properties": {"query": {"type": "string", "minLength": 2}, "limit": {"type": "integer", "minimum": 1}},
    "required": ["query"],
    "additionalProperties": False,
}


def test_json_schema_tool_validates_with_the_schema() -> None:
    search = Tool("search", lambda args, ctx: args, description="Search.", input_schema=SEARCH_SCHEMA)
    assert search.spec()["inputSchema"] == SEARCH_SCHEMA
    assert search.validate_args({"query": "cats", "limit": 3}) == {"query": "cats", "limit": 3}
    with pytest.raises(ToolArgumentsError) as info:
        search.validate_args({"query": "a", "limit": 0, "page": 2})
    assert str(info.value).splitlines()[1:4] == [  # zod's words and order, as Mastra reports them
        "- query: Too small: expected string to have >=2 characters",
        "- limit: Too small: expected number to be >=1",
        '- root: Unrecognized key: "page"',
    ]
    assert info.value.as_result()["validationErrors"] == {
        "errors": ['Unrecognized key: "page"'],
        "fields": {
            "query": {"errors": ["Too small: expected string to have >=2 characters"], "fields": {}},
            "limit": {"errors": ["Too small: expected number to be >=1"], "fields": {}},
        },
    }
    with pytest.raises(
        ToolArgumentsError, match="- query: Invalid input: expected string, received undefined"
    ):
        search.validate_args({})


def test_tool_without_schema_accepts_any_object() -> None:
    free = Tool("free", lambda args, ctx: None)
    assert free.input_schema == {"type": "object", "properties": {}}
    assert free.validate_args({"anything": [1]}) == {"anything": [1]}


@pytest.mark.parametrize(
    "schema",
    [{"type": "nonsense"}, {"type": "object", "properties": {"a": {"minimum": "zero"}}}, {"required": "a"}],
)
def test_invalid_json_schema_raises_value_error(schema: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="invalid JSON schema"):
        Tool("bad", lambda args, ctx: None, input_schema=schema)


def test_tool_needs_a_name_and_plain_parameters() -> None:
    with pytest.raises(ValueError, match="needs a name"):
        Tool("", lambda args, ctx: None)

    def variadic(*values: int) -> int:
        return sum(values)

    with pytest.raises(TypeError, match=r"\*args/\*\*kwargs"):
        tool(variadic)


async def test_writer_custom_emits_data_chunks() -> None:
    emitted: list[AnyChunk] = []
    writer = ToolWriter(emitted.append, "run-1", "call-1", "t")
    await writer.write("progress")
    await writer.custom({"type": "data-status", "data": {"pct": 50}, "transient": True, "id": "s1"})
    first, second = emitted
    assert isinstance(first, ToolOutputChunk)
    assert first.payload == {"output": "progress", "toolCallId": "call-1", "toolName": "t"}
    assert isinstance(second, DataChunk)
    assert second.to_wire() == {"type": "data-status", "data": {"pct": 50}, "id": "s1", "transient": True}
    with pytest.raises(ValueError, match="must start with 'data-'"):
        await writer.custom({"type": "status", "data": 1})


async def test_suspend_stops_the_tool_and_resume_data_reaches_it() -> None:
    steps: list[str] = []

    @tool
    async def confirm(ctx: ToolContext) -> str:
        if ctx.resume_data is None:
            steps.append("asking")
            await ctx.suspend({"question": "sure?"})
            steps.append("unreachable")
        return f"answer: {ctx.resume_data}"

    ctx = make_context([])
    with pytest.raises(ToolSuspended) as info:
        await confirm.execute({}, ctx)
    assert info.value.payload == {"question": "sure?"}
    assert ctx.suspended and ctx.suspended_with == {"question": "sure?"}
    assert steps == ["asking"]
    assert await confirm.execute({}, make_context([], resume_data="yes")) == "answer: yes"


def test_background_config_accepts_mastra_mapping() -> None:
    config = BackgroundToolConfig.coerce(
        {"timeoutMs": 500, "maxRetries": 2, "defaultDisposition": "foreground"}
    )
    # As in Mastra, a mapping without "enabled" configures the tool without making it eligible.
    assert config == BackgroundToolConfig(
        enabled=False, timeout_ms=500, max_retries=2, default_disposition="foreground"
    )
    assert BackgroundToolConfig.coerce(False) is None


async def test_an_output_the_schema_rejects_becomes_an_error_result() -> None:
    def forecast(args: dict[str, Any], ctx: ToolContext) -> Any:
        return args["out"]

    weather = Tool(
        "forecast",
        forecast,
        input_schema={"type": "object", "properties": {"out": {}}},
        output_schema={
            "type": "object",
            "properties": {"tempC": {"type": "number"}},
            "required": ["tempC"],
            "additionalProperties": False,
        },
    )
    ctx = make_context([])
    assert await weather.execute({"out": {"tempC": 21}}, ctx) == {"tempC": 21}
    rejected = await weather.execute({"out": {"tempC": "warm"}}, ctx)
    assert rejected == {
        "error": True,
        "message": "Tool output validation failed for forecast. The tool returned invalid output:\n"
        "- tempC: Invalid input: expected number, received string\n\n"
        'Returned output: {\n  "tempC": "warm"\n}',
        "validationErrors": {
            "errors": [],
            "fields": {
                "tempC": {"errors": ["Invalid input: expected number, received string"], "fields": {}}
            },
        },
    }
    with pytest.raises(ValueError, match="invalid JSON schema"):
        Tool("bad", forecast, output_schema={"type": "nonsense"})
