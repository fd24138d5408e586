import asyncio

from runstream import Agent, tool
from runstream.testing import ScriptedModel, Text, ToolCall  # a real model: "openai/gpt-4.1-mini"


@tool
def get_weather(city: str) -> dict[str, object]:
    """Get the weather for a city."""
    return {"city": city, "tempC": 21}


model = ScriptedModel.turns(ToolCall("get_weather", {"city": "Paris"}), Text("It is 21C in Paris."))
agent = Agent("weather", instructions="Use tools.", model=model, tools=[get_weather])


async def main() -> None:
    out = await agent.stream("Weather in Paris?")
    async for chunk in out.full_stream:
        if chunk.type == "tool-result":
            print("tool:", chunk.payload["result"])
        elif chunk.type == "text-delta":
            print("text:", chunk.payload["text"])


asyncio.run(main())
