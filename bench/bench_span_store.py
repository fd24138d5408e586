"""What keeping spans costs: W1 and W3 with the span store on and off, alternating in one process.

``python -m bench.bench_span_store [--reps N] [--w3-block RUNS]``. Both sides trace with the OpenTelemetry SDK
(the store is fed by the SDK's spans; an application that exports OTLP pays for those already);
"on" adds the :class:`StoreSpanProcessor` writing a :class:`SpanStore` on a SQLite file. Each
sample is a block of runs ended by the store's flush (the processor batches as in service), so
the conversion and the writes on the processor's worker thread are inside the measured time. Times are this process's CPU (all its threads), so
other work on a shared machine does not count; the figure is the median over ``reps``.

A W3 block is 10 runs by default: 220 spans, fewer than a batch (512), so the worker writes them
in the flush, while the runs wait. ``--w3-block 50`` (1,100 spans) has the worker write batches
while runs go on, as in a busy service: the writer then works on the other CPU beside the runs
and both slow down, the same writes costing several times the CPU (docs/benchmarks.md: the two
CPUs interfering, not the GIL; a writer process measured worse).

The two sides swap runstream's tracer (``_tracing._tracer``) between two SDK providers: the
global provider can be set only once per process.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from opentelemetry.sdk.trace import TracerProvider

from bench.source import Script, reply, token_count, tool_steps
from bench.subject import run_runstream
from runstream import _tracing
from runstream.observability import SpanStore, TraceQuery
from runstream.observability.processor import StoreSpanProcessor


@contextmanager
def _traced(provider: TracerProvider) -> Iterator[None]:
    saved = _tracing._tracer
    _tracing._tracer = provider.get_tracer("runstream")
    try:
        yield
    finally:
        _tracing._tracer = saved


async def _cpu(
    script: Script, runs: int, provider: TracerProvider, processor: StoreSpanProcessor | None
) -> float:
    """CPU seconds of ``runs`` runs of ``script`` (and the store's flush after them, when on)."""
    with _traced(provider):
        start = time.process_time()
        for _ in range(runs):
            await run_runstream(script, suspend=True)
        if processor is not None:
            await asyncio.to_thread(processor.force_flush)
        return time.process_time() - start


async def measure(
    reps: int, w1_tokens: int = 10_000, w3_steps: int = 10, w3_tokens: int = 20, w3_block: int = 10
) -> dict[str, dict[str, float]]:
    """Median CPU µs per W1 token and per W3 step, store off and on, and spans stored per W3 run."""
    with tempfile.TemporaryDirectory() as folder:
        store = SpanStore(str(Path(folder) / "spans.db"))
        processor = StoreSpanProcessor(store)
        on, off = TracerProvider(), TracerProvider()
        on.add_span_processor(processor)
        scripts = {"W1": reply(w1_tokens), "W3": tool_steps(w3_steps, w3_tokens)}
        block = {"W1": 2, "W3": w3_block}
        units = {"W1": token_count(scripts["W1"]) * block["W1"], "W3": (w3_steps + 1) * block["W3"]}
        samples: dict[str, dict[str, list[float]]] = {w: {"off": [], "on": []} for w in scripts}
        for rep in range(reps + 1):  # repetition 0 warms up
            for workload, script in scripts.items():
                for side in ("off", "on"):
                    cpu = await _cpu(
                        script,
                        block[workload],
                        on if side == "on" else off,
                        processor if side == "on" else None,
                    )
                    if rep:
                        samples[workload][side].append(cpu / units[workload] * 1e6)
        spans_per_w3 = len(store.get_trace(store.list_traces(TraceQuery(per_page=1))[0][0]["traceId"]))
        processor.shutdown()
        store.close()
    result = {
        w: {side: statistics.median(values) for side, values in sides.items()} for w, sides in samples.items()
    }
    result["W3"]["spans"] = spans_per_w3
    return result


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_span_store", description=__doc__)
    parser.add_argument("--reps", type=int, default=11)
    parser.add_argument(
        "--w3-block", type=int, default=10, help="W3 runs a sample (10: flushed between runs)"
    )
    args = parser.parse_args()
    figures = asyncio.run(measure(args.reps, w3_block=args.w3_block))
    for workload, unit in (("W1", "token"), ("W3", "tool step")):
        off, on = figures[workload]["off"], figures[workload]["on"]
        print(
            f"{workload} CPU µs per {unit}: store off {off:.2f}, on {on:.2f} ({(on / off - 1) * 100:+.1f}%)"
        )
    w3 = figures["W3"]
    per_span = (w3["on"] - w3["off"]) * 11 / w3["spans"]
    print(f"W3: {w3['spans']:.0f} spans a run, {per_span:.1f} µs CPU per stored span")


if __name__ == "__main__":
    main()
