"""The Runstream of the Temporal cluster tests: the API process (the test) builds it with a
scripted model and runs no tool; worker processes run it with ``runstream worker
temporal_app:worker_runtime``.

Configured by the environment the test sets: ``RUNSTREAM_TEST_POSTGRES_URL``,
``RUNSTREAM_TEST_REDIS_URL``, ``TEMPORAL_TEST_ADDRESS``, ``TEMPORAL_TEST_SCHEMA`` and
``TEMPORAL_TEST_PREFIX`` (the PostgreSQL schema, and the Redis channel prefix and Temporal task
queue), and optionally ``TEMPORAL_TEST_GLOBAL_CONCURRENCY`` and ``TEMPORAL_TEST_PRINT_SPANS``
(a worker then prints every finished OpenTelemetry span as a JSON line, ``{"event": "span"}``). The tools print JSON lines on stdout (``{"event", "tool", "pid", ...}``) so the test
waits on what they do; ``research`` and ``ask`` wait until the test pushes to the Redis list
``<prefix>:gate:<name>``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis

from runstream import Agent, ToolContext, tool
from runstream.abort import AbortError
from runstream.memory import Memory
from runstream.models.base import LanguageModel
from runstream.runtime import Runstream
from runstream.storage import PostgresStorage
from runstream.tasks.config import BackgroundTaskConfig
from runstream.tasks.temporal import TemporalSettings, TemporalTaskManager
from runstream.testing import ScriptedModel

AGENT_ID = "bg"
GATE_TIMEOUT_S = 60
HEARTBEAT_TIMEOUT_MS = 2000


def env(name: str) -> str:
    return os.environ[name]


def say(**line: Any) -> None:
    print(json.dumps({**line, "pid": os.getpid()}), flush=True)


def gate_key(prefix: str, name: str) -> str:
    return f"{prefix}:gate:{name}"


async def gate(name: str) -> None:
    """Wait until the test opens the gate ``name``."""
    client = Redis.from_url(env("RUNSTREAM_TEST_REDIS_URL"))
    try:
        if await client.blpop([gate_key(env("TEMPORAL_TEST_PREFIX"), name)], timeout=GATE_TIMEOUT_S) is None:
            raise TimeoutError(f"gate {name} never opened")
    finally:
        await client.aclose()


def build_agent(model: LanguageModel) -> Agent:
    @tool(background={"enabled": True, "maxRetries": 1})
    async def research(topic: str, ctx: ToolContext) -> dict[str, Any]:
        """Research a topic (slow)."""
        say(event="started", tool="research", topic=topic, attempt=ctx.attempt)
        await ctx.writer.write({"type": "progress", "attempt": ctx.attempt, "pid": os.getpid()})
        await gate(topic)
        return {"topic": topic, "summary": f"{topic} is fast", "attempt": ctx.attempt}

    @tool(background=True)
    async def hang(label: str, ctx: ToolContext) -> str:
        """Work until cancelled."""
        say(event="started", tool="hang", label=label)
        try:
            await ctx.abort_signal.wait()
        finally:
            say(event="aborted", reason=str(ctx.abort_signal.reason))
        raise AbortError("aborted")

    @tool(background=True)
    async def ask(question: str, ctx: ToolContext) -> dict[str, Any]:
        """Ask the user a question."""
        say(event="started", tool="ask", resume_data=ctx.resume_data)
        if ctx.resume_data is None:
            await gate(question)
            await ctx.suspend({"question": question})
        return {"answer": ctx.resume_data}

    @tool(background=True)
    async def hold(label: str, ctx: ToolContext) -> str:
        """Hold a slot until the test opens the gate ``label``; pushes to the Redis list
        ``<prefix>:starts`` how many ``hold`` tools run at that moment, cluster-wide."""
        client = Redis.from_url(env("RUNSTREAM_TEST_REDIS_URL"))
        prefix = env("TEMPORAL_TEST_PREFIX")
        try:
            running = await client.incr(f"{prefix}:running")
            start = {"label": label, "running": running, "pid": os.getpid()}
            await client.rpush(f"{prefix}:starts", json.dumps(start))  # type: ignore[misc]
            try:
                await gate(label)
            finally:
                await client.decr(f"{prefix}:running")
        finally:
            await client.aclose()
        return label

    @tool(background=True)
    async def work(label: str, ctx: ToolContext) -> str:
        """Do a quick piece of work."""
        say(event="ran", tool="work", label=label)
        return label

    return Agent(
        AGENT_ID,
        instructions="Research.",
        model=model,
        tools=[research, hang, ask, hold, work],
        memory=Memory(),
    )


def print_spans() -> None:
    """Install an OpenTelemetry SDK whose finished spans are printed as JSON lines."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

    def hex_ids(context: Any) -> dict[str, str]:
        return {"trace_id": format(context.trace_id, "032x"), "span_id": format(context.span_id, "016x")}

    class PrintingExporter(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            for span in spans:
                say(
                    event="span",
                    name=span.name,
                    **hex_ids(span.context),
                    parent=span.parent is not None,
                    attributes=dict(span.attributes or {}),
                    links=[
                        {**hex_ids(link.context), "attributes": dict(link.attributes or {})}
                        for link in span.links
                    ],
                )
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(PrintingExporter()))
    trace.set_tracer_provider(provider)


def build_runtime(model: LanguageModel) -> Runstream:
    storage = PostgresStorage(env("RUNSTREAM_TEST_POSTGRES_URL"), schema=env("TEMPORAL_TEST_SCHEMA"))
    prefix = env("TEMPORAL_TEST_PREFIX")
    manager = TemporalTaskManager(
        storage,
        BackgroundTaskConfig(
            global_concurrency=int(os.environ.get("TEMPORAL_TEST_GLOBAL_CONCURRENCY", "10"))
        ),
        temporal=TemporalSettings(
            address=env("TEMPORAL_TEST_ADDRESS"),
            task_queue=prefix,
            heartbeat_timeout_ms=HEARTBEAT_TIMEOUT_MS,
            recheck_interval_ms=1000,
            graceful_shutdown_ms=2000,
        ),
        redis_url=env("RUNSTREAM_TEST_REDIS_URL"),
        channel_prefix=prefix,
    )
    return Runstream(agents=[build_agent(model)], storage=storage, task_manager=manager)


def worker_runtime() -> Runstream:
    """A worker's Runstream: the same agent; its model is never called in a worker."""
    if os.environ.get("TEMPORAL_TEST_PRINT_SPANS"):
        print_spans()
    return build_runtime(ScriptedModel(calls=[[]]))
