"""A research agent streaming live in the terminal, every chunk type visible.

The agent looks up a price with a foreground tool, then starts two background research tasks
that finish at different times. One until-idle stream carries it all: the first turn, the tasks'
progress and results, and the continuation turn that reacts to them, printed by
:mod:`runstream.console`. Memory and task records
live in an embedded SQLite file.

With no API key it uses a scripted model (deterministic, no network); with ``OPENAI_API_KEY``
or ``ANTHROPIC_API_KEY`` set (and the provider extra installed) it talks to the real model.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path
from typing import TypedDict

from rich.console import Console

from runstream import Agent, ToolContext, tool
from runstream._json import JsonObject
from runstream.console import render
from runstream.memory import Memory
from runstream.models.base import LanguageModel
from runstream.runtime import Runstream
from runstream.storage import SqliteStorage
from runstream.testing import ScriptedModel

RESEARCH_SECONDS = {"solana": 1.2, "ethereum": 2.6}


class Price(TypedDict):
    symbol: str
    usd: float


class Finding(TypedDict):
    topic: str
    finding: str


@tool
async def lookup_price(symbol: str, ctx: ToolContext) -> Price:
    """Look up the latest price of a crypto asset.

    Args:
        symbol: The ticker, e.g. SOL.
    """
    await ctx.writer.write({"status": f"querying exchanges for {symbol}"})
    await asyncio.sleep(0.2)
    return {"symbol": symbol, "usd": 142.17}


@tool(background=True)
async def research(topic: str, ctx: ToolContext) -> Finding:
    """Research a blockchain in depth (slow: runs in the background).

    Args:
        topic: The blockchain to research.
    """
    seconds = RESEARCH_SECONDS.get(topic, 1.0)
    for step in ("reading whitepaper", "checking on-chain data"):
        await asyncio.sleep(seconds / 2)
        await ctx.writer.write({"topic": topic, "status": step})
    return {"topic": topic, "finding": f"{topic} looks healthy; {seconds:.1f}s of research"}


def _words(text: str, block: str) -> list[JsonObject]:
    words = text.split(" ")
    return [
        {"type": "text-delta", "id": block, "delta": w + (" " if i < len(words) - 1 else ""), "delayMs": 35}
        for i, w in enumerate(words)
    ]


def _reply(text: str, block: str) -> list[JsonObject]:
    return [
        {"type": "stream-start", "warnings": []},
        {"type": "text-start", "id": block},
        *_words(text, block),
        {"type": "text-end", "id": block},
        {
            "type": "finish",
            "finishReason": "stop",
            "usage": {"inputTokens": 60, "outputTokens": 20, "totalTokens": 80},
        },
    ]


def scripted_model() -> ScriptedModel:
    usage: JsonObject = {"inputTokens": 42, "outputTokens": 17, "totalTokens": 59}

    def call(call_id: str, name: str, args: str) -> list[JsonObject]:
        return [
            {"type": "tool-input-start", "id": call_id, "toolName": name},
            {"type": "tool-input-delta", "id": call_id, "delta": args, "delayMs": 40},
            {"type": "tool-input-end", "id": call_id},
            {"type": "tool-call", "toolCallId": call_id, "toolName": name, "input": args},
        ]

    return ScriptedModel(
        calls=[
            [
                {"type": "stream-start", "warnings": []},
                {"type": "reasoning-start", "id": "r0"},
                {
                    "type": "reasoning-delta",
                    "id": "r0",
                    "delta": "Price first, then deep research ",
                    "delayMs": 60,
                },
                {"type": "reasoning-delta", "id": "r0", "delta": "in the background.", "delayMs": 60},
                {"type": "reasoning-end", "id": "r0"},
                *call("call-price", "lookup_price", '{"symbol":"SOL"}'),
                *call("call-sol", "research", '{"topic":"solana"}'),
                *call("call-eth", "research", '{"topic":"ethereum"}'),
                {"type": "finish", "finishReason": "tool-calls", "usage": usage},
            ],
            _reply("SOL trades at $142.17. I started research on Solana and Ethereum; results follow.", "t1"),
            _reply("Both reports are in: Solana and Ethereum look healthy. Want a comparison?", "t2"),
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


async def run_demo(console: Console | None = None, db_path: Path | None = None) -> None:
    console = console or Console()
    with tempfile.TemporaryDirectory() as tmp:
        storage = SqliteStorage(db_path or Path(tmp) / "runstream-demo.db")
        agent = Agent(
            "research-agent",
            instructions="You are a crypto research assistant. Use tools for prices and research.",
            model=pick_model(),
            tools=[lookup_price, research],
            memory=Memory(),
        )
        async with Runstream(
            agents=[agent], storage=storage, background_tasks={"enabled": True, "progressIntervalMs": 500}
        ):
            console.rule("[bold]runstream demo: one until-idle stream, two background tasks")
            out = await agent.stream(
                "What is SOL at, and how healthy are Solana and Ethereum?",
                memory={"thread": "demo-thread", "resource": "demo-user"},
                until_idle=True,
            )
            await render(out, console)
            console.rule(f"first turn: {await out.text!r}")
