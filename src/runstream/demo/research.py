"""A research agent streaming live in the terminal, every chunk type visible.

With no API key it uses a scripted model (deterministic, no network); with ``OPENAI_API_KEY``
or ``ANTHROPIC_API_KEY`` set (and the provider extra installed) it talks to the real model.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from rich.console import Console
from rich.text import Text

from runstream import Agent, ToolContext, tool
from runstream.chunks import AnyChunk
from runstream.models.base import LanguageModel
from runstream.testing import ScriptedModel

STYLES = {
    "text-delta": "white",
    "reasoning-delta": "dim italic",
    "tool-call": "bold cyan",
    "tool-result": "green",
    "tool-output": "cyan",
    "tool-error": "bold red",
    "error": "bold red",
    "finish": "bold magenta",
}


@tool
async def lookup_price(symbol: str, ctx: ToolContext) -> dict[str, Any]:
    """Look up the latest price of a crypto asset.

    Args:
        symbol: The ticker, e.g. SOL.
    """
    await ctx.writer.write({"status": f"querying exchanges for {symbol}"})
    await asyncio.sleep(0.3)
    return {"symbol": symbol, "usd": 142.17}


def _words(text: str, call: int) -> list[dict[str, Any]]:
    words = text.split(" ")
    return [
        {
            "type": "text-delta",
            "id": f"t{call}",
            "delta": w + (" " if i < len(words) - 1 else ""),
            "delayMs": 40,
        }
        for i, w in enumerate(words)
    ]


def scripted_model() -> ScriptedModel:
    usage = {"inputTokens": 42, "outputTokens": 17, "totalTokens": 59}
    return ScriptedModel(
        calls=[
            [
                {"type": "stream-start", "warnings": []},
                {"type": "reasoning-start", "id": "r0"},
                {"type": "reasoning-delta", "id": "r0", "delta": "The user wants a price; ", "delayMs": 60},
                {"type": "reasoning-delta", "id": "r0", "delta": "I should call the tool.", "delayMs": 60},
                {"type": "reasoning-end", "id": "r0"},
                {"type": "text-start", "id": "t0"},
                *_words("Let me check the current SOL price.", 0),
                {"type": "text-end", "id": "t0"},
                {"type": "tool-input-start", "id": "call-1", "toolName": "lookup_price"},
                {"type": "tool-input-delta", "id": "call-1", "delta": '{"symbol":', "delayMs": 50},
                {"type": "tool-input-delta", "id": "call-1", "delta": '"SOL"}', "delayMs": 50},
                {"type": "tool-input-end", "id": "call-1"},
                {
                    "type": "tool-call",
                    "toolCallId": "call-1",
                    "toolName": "lookup_price",
                    "input": '{"symbol":"SOL"}',
                },
                {"type": "finish", "finishReason": "tool-calls", "usage": usage},
            ],
            [
                {"type": "stream-start", "warnings": []},
                {"type": "text-start", "id": "t1"},
                *_words("Solana (SOL) trades at $142.17 right now.", 1),
                {"type": "text-end", "id": "t1"},
                {"type": "finish", "finishReason": "stop", "usage": usage},
            ],
        ]
    )


def pick_model() -> LanguageModel:
    for env, spec in (
        ("OPENAI_API_KEY", "openai/gpt-4.1-mini"),
        ("ANTHROPIC_API_KEY", "anthropic/claude-sonnet-4-5"),
    ):
        if os.environ.get(env):
            try:
                from runstream.models.registry import resolve_model

                return resolve_model(spec)
            except (ImportError, ValueError) as exc:
                Console(stderr=True).print(
                    f"[yellow]{env} is set but {spec} is unavailable ({exc}); scripted[/]"
                )
    return scripted_model()


def render(console: Console, chunk: AnyChunk, inline: bool) -> bool:
    """Print one chunk; deltas continue the current line. Returns whether the line is open."""
    kind = chunk.type
    payload = chunk.payload if isinstance(chunk.payload, dict) else {}
    if kind in ("text-delta", "reasoning-delta"):
        console.print(Text(payload["text"], style=STYLES[kind]), end="")
        return True
    label = Text(("\n" if inline else "") + f"[{kind}]", style=STYLES.get(kind, "dim"))
    detail = ""
    if kind == "tool-call":
        detail = f" {payload['toolName']}({payload.get('args')})"
    elif kind == "tool-result":
        detail = f" {payload['toolName']} -> {payload['result']}"
    elif kind == "tool-output":
        detail = f" {payload['output']}"
    elif kind == "tool-call-delta":
        detail = f" {payload['argsTextDelta']}"
    elif kind in ("step-finish", "finish"):
        detail = (
            f" reason={payload['stepResult']['reason']} usage={payload['output']['usage'].get('totalTokens')}"
        )
    elif kind == "error":
        detail = f" {payload['error']}"
    console.print(label, Text(detail, style=STYLES.get(kind, "")), sep="")
    return False


async def run_demo(console: Console | None = None) -> None:
    console = console or Console()
    agent = Agent(
        "research-agent",
        instructions="You are a crypto research assistant. Use tools for prices.",
        model=pick_model(),
        tools=[lookup_price],
    )
    console.rule("[bold]runstream demo: an agent with a tool, every chunk type visible")
    out = await agent.stream("What is SOL trading at?")
    inline = False
    async for chunk in out.full_stream:
        inline = render(console, chunk, inline)
    console.print()
    console.rule(f"text: {await out.text!r}  usage: {await out.usage}")
