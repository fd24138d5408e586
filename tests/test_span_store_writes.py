"""What writing spans costs the run: the span processor's queue and the store's SQLite file.

A finished span waits for the worker as bytes (its entry encoded when it ends), so a run's
queued spans give the cyclic garbage collector nothing to track; what orjson refuses is still
kept; a new store file has 16 KiB pages (a batch's JSON row fits a page)."""

from __future__ import annotations

import gc
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from runstream.observability import SpanStore, TraceQuery
from runstream.observability.processor import StoreSpanProcessor
from runstream.runtime import Runstream
from tests.otel_testkit import PROVIDER, spans
from tests.test_tracing import calculator

__all__ = ["spans"]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SpanStore]:
    made = SpanStore(str(tmp_path / "spans.db"))
    yield made
    made.close()


async def test_queued_spans_hold_nothing_the_collector_tracks(
    spans: InMemorySpanExporter, store: SpanStore
) -> None:
    processor = StoreSpanProcessor(store, schedule_delay_millis=3_600_000)
    PROVIDER.add_span_processor(processor)
    agent = calculator()
    try:
        async with Runstream(agents=[agent]):
            await agent.generate("divide", memory=None)
        ended = spans.get_finished_spans()
        queued = list(processor._queue)
        assert len(queued) == 4 * len(ended) and not any(gc.is_tracked(item) for item in queued)
        assert processor.force_flush() and not processor._queue
        (root,), _ = store.list_traces(TraceQuery())
        stored = store.get_trace(root["traceId"])
        assert sorted(s["spanId"] for s in stored) == sorted(f"{s.context.span_id:016x}" for s in ended)
    finally:
        processor.shutdown()


def test_attributes_orjson_refuses_are_kept(store: SpanStore) -> None:
    """An integer beyond 64 bits and a lone surrogate: orjson refuses both; the span is stored
    (the surrogate as ``?``), readable by the read path and by SQLite's JSON functions."""
    provider = TracerProvider()
    processor = StoreSpanProcessor(store)
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("test")
    agent = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.id": "big", "gen_ai.agent.name": "Big"}
    with (
        tracer.start_as_current_span("invoke_agent Big", attributes={**agent, "runstream.huge": 2**70}),
        tracer.start_as_current_span("chat m", attributes={"gen_ai.request.model": "m\ud800"}),
    ):
        pass
    assert processor.force_flush() and processor.dropped == 0
    (root,), total = store.list_traces(TraceQuery())
    assert total == 1 and (root["entityId"], root["entityName"]) == ("big", "Big")
    chat = next(s for s in store.get_trace(root["traceId"]) if s["name"] == "chat m")
    assert chat["attributes"]["model"] == "m?"
    rows = store._rows("SELECT name, model FROM ai_span_rows WHERE trace_id = ?", (root["traceId"],))
    assert sorted((r["name"], r["model"]) for r in rows) == [("chat m", "m?"), ("invoke_agent Big", None)]
    processor.shutdown()


def test_a_new_store_file_has_16k_pages_and_a_file_made_before_keeps_its_own(tmp_path: Path) -> None:
    made = SpanStore(str(tmp_path / "new.db"))
    assert made._rows("PRAGMA page_size") == [{"page_size": 16384}]
    made.close()
    shared = tmp_path / "shared.db"
    with sqlite3.connect(shared) as db:  # a SqliteStorage's file, say, made first
        db.execute("PRAGMA page_size = 8192")
        db.execute("CREATE TABLE t (a)")
    kept = SpanStore(str(shared))
    assert kept._rows("PRAGMA page_size") == [{"page_size": 8192}]
    kept.write_spans([])
    assert kept.list_traces(TraceQuery()) == ([], 0)
    kept.close()
