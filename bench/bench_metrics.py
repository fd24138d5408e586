"""Metrics and discovery over a full span store: each route's latency with ``spans`` stored.

``python -m bench.bench_metrics [--spans 100000] [--rounds 5] [--pg-url URL] [--no-pg]``:
synthetic agent runs (model calls with tokens, tool calls, some failures; three agents, three
resources, a few workflows) go through the OpenTelemetry SDK and the
:class:`~runstream.observability.processor.StoreSpanProcessor` into a :class:`SpanStore` on a
temporary SQLite file and, unless ``--no-pg``, a :class:`PostgresSpanStore` in a fresh schema;
then each route (``POST /api/observability/metrics/aggregate``, ``/breakdown``, ``/timeseries``,
``/percentiles``, ``GET .../discovery/*``) is asked ``rounds`` times through the ASGI app, and
its median ms printed, a JSON line per backend. Only public APIs and HTTP routes are used, so the
same script measures an older runstream (``PYTHONPATH=<its src>``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx2 as httpx
from opentelemetry import trace
from opentelemetry.sdk.trace import Tracer, TracerProvider
from opentelemetry.trace import Status, StatusCode

from runstream.observability import PostgresSpanStore, SpanStore
from runstream.observability.processor import StoreSpanProcessor
from runstream.runtime import Runstream
from runstream.server.app import create_app

AGENTS = (("weather", "Weather"), ("support", "Support"), ("writer", None))
RESOURCES = ("user-a", "user-b", None)
TOOLS = ("get_weather", "search", "divide")
MODELS = (("openai", "gpt-4o-mini"), ("anthropic", "claude-haiku"), ("openai", None))
_MS = 1_000_000


def _agent_run(tracer: Tracer, rng: random.Random, number: int, start: int) -> int:
    """A run's spans (its model calls and tool calls under it); returns how many."""
    agent_id, agent_name = rng.choice(AGENTS)
    attributes: dict[str, str] = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.id": agent_id,
        "runstream.run.id": f"run-{number}",
        "gen_ai.conversation.id": f"thread-{number % 7}",
    }
    if agent_name is not None:
        attributes["gen_ai.agent.name"] = agent_name
    if (resource := rng.choice(RESOURCES)) is not None:
        attributes["runstream.resource.id"] = resource
    root = tracer.start_span(f"invoke_agent {agent_name}", attributes=attributes, start_time=start)
    context, now, count = trace.set_span_in_context(root), start, 1
    for _ in range(rng.randint(1, 4)):
        provider, model = rng.choice(MODELS)
        chat: dict[str, str | int] = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": provider}
        if model is not None:
            chat["gen_ai.request.model"] = model
        if rng.random() < 0.9:
            chat["gen_ai.usage.input_tokens"] = rng.randint(1, 5000)
            chat["gen_ai.usage.output_tokens"] = rng.randint(0, 500)
        span = tracer.start_span(f"chat {model}", context=context, attributes=chat, start_time=now)
        now += rng.randint(0, 2000) * _MS + rng.randint(0, _MS - 1)
        span.end(end_time=now)
        count += 1
        if rng.random() < 0.7:
            tool = rng.choice(TOOLS)
            attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool}
            span = tracer.start_span(
                f"execute_tool {tool}", context=context, attributes=attributes, start_time=now
            )
            if rng.random() < 0.1:
                span.set_status(Status(StatusCode.ERROR, "tool failed"))
            now += rng.randint(0, 300) * _MS
            span.end(end_time=now)
            count += 1
    if rng.random() < 0.05:
        root.set_status(Status(StatusCode.ERROR, "run failed"))
    root.end(end_time=now + rng.randint(0, 5) * _MS)
    return count


def _workflow_run(tracer: Tracer, rng: random.Random, start: int) -> int:
    workflow = rng.choice(("summary", "review"))
    root = tracer.start_span(
        f"invoke_workflow {workflow}",
        attributes={"gen_ai.operation.name": "invoke_workflow", "runstream.workflow.id": workflow},
        start_time=start,
    )
    context, now = trace.set_span_in_context(root), start
    for step in ("fetch", "write"):
        attributes = {"gen_ai.operation.name": "workflow_step", "runstream.workflow.step.id": step}
        span = tracer.start_span(f"step {step}", context=context, attributes=attributes, start_time=now)
        now += rng.randint(1, 50) * _MS
        span.end(end_time=now)
    helper = tracer.start_span("helper", context=context, start_time=now)  # a generic span
    helper.end(end_time=now)
    root.end(end_time=now + _MS)
    return 4


def emit(
    tracer: Tracer, spans: int, *, start: datetime, hours: int = 3, seed: int = 7, grain_ms: int = 1
) -> int:
    """About ``spans`` spans of agent and workflow runs started within ``hours`` of ``start``
    (at multiples of ``grain_ms``, so some start together); returns how many."""
    rng = random.Random(seed)
    base = int(start.timestamp()) * 1_000_000_000
    emitted = number = 0
    while emitted < spans:
        begin = base + rng.randrange(hours * 3_600_000 // grain_ms) * grain_ms * _MS
        if rng.random() < 0.05:
            emitted += _workflow_run(tracer, rng, begin)
        else:
            emitted += _agent_run(tracer, rng, number, begin)
        number += 1
    return emitted


def fill(store: SpanStore, spans: int, start: datetime) -> tuple[int, float]:
    """``store`` fed about ``spans`` spans through the processor; returns how many, and the
    seconds the store's writes took (emitting and flushing)."""
    processor = StoreSpanProcessor(store, max_queue_size=spans * 2, schedule_delay_millis=3_600_000)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    began = time.perf_counter()
    emitted = emit(provider.get_tracer("bench"), spans, start=start)
    processor.force_flush()
    took = time.perf_counter() - began
    processor.shutdown()
    return emitted, took


def requests(start: datetime) -> dict[str, tuple[str, str, dict[str, object] | None]]:
    """The routes asked: label → (method, path, JSON body)."""
    window = {"timestamp": {"start": start.isoformat(), "end": (start + timedelta(hours=3)).isoformat()}}
    metrics = "/api/observability/metrics"
    discovery = "/api/observability/discovery"
    return {
        "aggregate count": (
            "POST",
            f"{metrics}/aggregate",
            {"name": ["mastra_agent_duration_ms"], "aggregation": "count"},
        ),
        "aggregate sum tokens": (
            "POST",
            f"{metrics}/aggregate",
            {"name": ["mastra_model_total_input_tokens"], "aggregation": "sum", "filters": window},
        ),
        "aggregate avg, compared": (
            "POST",
            f"{metrics}/aggregate",
            {
                "name": ["mastra_tool_duration_ms"],
                "aggregation": "avg",
                "filters": window,
                "comparePeriod": "previous_period",
            },
        ),
        "breakdown": (
            "POST",
            f"{metrics}/breakdown",
            {
                "name": ["mastra_agent_duration_ms"],
                "groupBy": ["entityName", "status"],
                "aggregation": "count",
            },
        ),
        "timeseries 5m": (
            "POST",
            f"{metrics}/timeseries",
            {"name": ["mastra_model_duration_ms"], "interval": "5m", "aggregation": "avg"},
        ),
        "timeseries 1h by model": (
            "POST",
            f"{metrics}/timeseries",
            {
                "name": ["mastra_model_total_output_tokens"],
                "interval": "1h",
                "aggregation": "sum",
                "groupBy": ["model"],
            },
        ),
        "percentiles": (
            "POST",
            f"{metrics}/percentiles",
            {"name": "mastra_model_duration_ms", "percentiles": [0.5, 0.9, 0.99], "interval": "1h"},
        ),
        "entity-types": ("GET", f"{discovery}/entity-types", None),
        "entity-names": ("GET", f"{discovery}/entity-names?entityType=tool", None),
        "service-names": ("GET", f"{discovery}/service-names", None),
        "environments": ("GET", f"{discovery}/environments", None),
    }


async def _latencies(store: SpanStore, start: datetime, rounds: int) -> dict[str, float]:
    """Median ms of each route over ``rounds`` (after one warm-up, the first request's ms kept as
    ``first request``: a store that indexes what it was written first does it then), answers
    checked to be 200."""
    app = create_app(Runstream(observability=store), heartbeat_s=None)
    transport = httpx.ASGITransport(app=app)
    medians: dict[str, float] = {}
    async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
        for label, (method, path, body) in requests(start).items():
            times = []
            for round_number in range(rounds + 1):
                began = time.perf_counter()
                answer = await client.request(method, path, json=body)
                if answer.status_code != 200:
                    raise RuntimeError(f"{label}: {answer.status_code} {answer.text}")
                if round_number:
                    times.append((time.perf_counter() - began) * 1000)
                elif not medians:
                    medians["first request"] = round((time.perf_counter() - began) * 1000, 2)
            medians[label] = round(statistics.median(times), 2)
    return medians


def measure(store: SpanStore, backend: str, spans: int, rounds: int) -> dict[str, object]:
    start = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=4)
    stored, took = fill(store, spans, start)
    routes = asyncio.run(_latencies(store, start, rounds))
    return {"backend": backend, "spans": stored, "write_s": round(took, 2), "median_ms": routes}


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.bench_metrics",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--spans", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--pg-url", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--no-pg", action="store_true", help="SQLite only")
    args = parser.parse_args()
    limits = {"max_spans": args.spans * 2}
    with tempfile.TemporaryDirectory() as folder:
        store = SpanStore(str(Path(folder) / "spans.db"), **limits)
        print(json.dumps(measure(store, "sqlite", args.spans, args.rounds)), flush=True)
        store.close()
    if not args.no_pg:
        schema = f"bench_metrics_{uuid.uuid4().hex[:12]}"
        pg = PostgresSpanStore(args.pg_url, schema=schema, **limits)
        try:
            print(json.dumps(measure(pg, "postgres", args.spans, args.rounds)), flush=True)
        finally:
            pg._backend.write([(f'DROP SCHEMA "{schema}" CASCADE', (), False)])
            pg.close()


if __name__ == "__main__":
    main()
