"""Faults on a durable cluster, as an operator meets them: two API processes (``runstream
serve``) and two workers (``runstream worker``) on a Temporal dev server that keeps its state in
a file, with PostgreSQL and Redis shared. Through one bounded run:

* an API process ``kill -9``-ed while until-idle streams wait for their tasks: the clients
  reconnect (``Last-Event-ID``) to the other one and get the continuation turns, to the end;
* a worker ``kill -9``-ed while it runs a task (and maybe the stream's flow): the task runs
  again elsewhere, once, and the stream ends with its continuation turn;
* the Temporal server killed and started again during a wait;
* every Redis and PostgreSQL connection of the cluster killed during a wait;
* 50 durable runs at once, through both API processes.

Every until-idle stream must hold each chunk once, in order (its SSE ids 1, 2, ... with no gap),
its first turn, the task's completion and the continuation turn; every task must complete once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import socket
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import IO, Any

import asyncpg
import httpx2 as httpx
import pytest
from redis.asyncio import Redis
from temporal_cluster import HERE, Cluster, WorkerProcess
from test_durable_runs import Event, events, kinds, text
from test_temporal_cluster import postgres_problem, require_redis

from runstream.memory import Memory, MemoryScope
from runstream.storage import PostgresStorage, TaskFilter
from runstream.tasks.temporal.devserver import TemporalDevServer
from tests.conftest import POSTGRES_URL, REDIS_URL
from tests.storage.postgres_testkit import drop_schema, require_postgres

WORKER = "durable_app:runtime"
TIMEOUT = httpx.Timeout(60.0)
ROUTE = "/api/agents/durable/stream-until-idle?resumable=true"
pytestmark = pytest.mark.timeout(300)


class ApiProcess:
    """``runstream serve durable_app:api_app`` on a free port."""

    def __init__(self, process: asyncio.subprocess.Process, url: str, log: IO[bytes]) -> None:
        self.process, self.url, self.log = process, url, log

    @classmethod
    async def start(cls, env: dict[str, str], log_dir: Path) -> ApiProcess:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        log = (log_dir / f"api-{port}.log").open("wb")
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "runstream", "serve", "durable_app:api_app", "--port", str(port),
            "--log-level", "warning", cwd=HERE, env={**os.environ, **env}, stdout=log, stderr=log,
        )  # fmt: skip
        api = cls(process, f"http://127.0.0.1:{port}", log)
        async with httpx.AsyncClient(base_url=api.url) as client, asyncio.timeout(60):
            while True:
                assert process.returncode is None, f"API process exited; see {log.name}"
                try:
                    if (await client.get("/api/agents")).status_code == 200:
                        return api
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.2)

    async def kill(self) -> None:
        if self.process.returncode is None:
            self.process.kill()
            await self.process.wait()
        self.log.close()


@pytest.fixture
async def faulty(
    postgres_problem: str | None, tmp_path: Path
) -> AsyncIterator[tuple[Cluster, TemporalDevServer]]:
    """A cluster on a Temporal dev server of its own, whose state is in a file."""
    require_postgres(postgres_problem)
    require_redis()
    server = TemporalDevServer(db_filename=str(tmp_path / "temporal.db")).start()
    env = Cluster.environment(server.address)
    storage = PostgresStorage(POSTGRES_URL, schema=env["TEMPORAL_TEST_SCHEMA"])
    await storage.init()
    gates = Redis.from_url(REDIS_URL)
    cluster = Cluster(env, tmp_path, Memory(storage=storage), gates)
    try:
        yield cluster, server
    finally:
        await cluster.close()
        await gates.aclose()
        await storage.close()
        await drop_schema(env["TEMPORAL_TEST_SCHEMA"])
        server.stop()


async def first_turn(client: httpx.AsyncClient, url: str, topic: str) -> list[Event]:
    """Start an until-idle stream whose first turn starts ``research <topic>``; its events
    through the first turn's ``finish`` (the stream then waits for the task)."""
    body = {"messages": f"research {topic}", "memory": {"thread": topic, "resource": "u1"}}
    async with client.stream("POST", url + ROUTE, json=body) as response:
        assert response.status_code == 200, await response.aread()
        return [event async for event in events(response, stop_at="finish")]


async def rest(client: httpx.AsyncClient, url: str, seen: list[Event]) -> list[Event]:
    """Reconnect with the last event's id: the events after it, through ``[DONE]``."""
    headers = {"last-event-id": str(seen[-1][0])}
    async with client.stream("POST", url + ROUTE, json={}, headers=headers) as response:
        assert response.status_code == 200, await response.aread()
        return [event async for event in events(response)]


def assert_whole(stream: list[Event], rerun_on: WorkerProcess | None = None) -> None:
    """Each chunk once, in order; the first turn, the task's completion, the continuation; the
    output of the task's attempt, or with ``rerun_on``, of its attempt that ran again there,
    published maybe while no attempt of the flow listened (read from the thread's replay
    stream; a killed attempt's own output may not have left its process)."""
    ids = [int(str(event_id).rpartition(":")[2]) for event_id, data in stream if data != "[DONE]"]
    assert ids == list(range(1, len(ids) + 1)), ids
    seen = kinds(stream)
    outputs = [int(m[1]) for _, data in stream if (m := re.search(r'"pid": ?(\d+)', data))]
    assert len(outputs) == len(set(outputs)) == seen.count("background-task-output"), seen
    assert rerun_on.pid in outputs if rerun_on is not None else len(outputs) == 1, (outputs, seen)
    assert seen.count("start") == 2 and seen.count("finish") == 2, seen
    assert seen.count("background-task-completed") == 1, seen
    last_start = len(seen) - 1 - seen[::-1].index("start")
    assert seen.index("finish") < seen.index("background-task-completed") < last_start
    assert text(stream).endswith("All the research is in.") and stream[-1][1] == "[DONE]"


async def started_on(workers: list[WorkerProcess], topic: str, after: int = 0) -> WorkerProcess:
    """The worker that prints the ``after``-th next start of ``research <topic>``."""

    def match(line: dict[str, Any]) -> bool:
        return line.get("tool") == "research" and line.get("topic") == topic

    async with asyncio.timeout(60):
        while True:
            for worker in workers:
                if sum(1 for line in worker.lines if match(line)) > after:
                    return worker
            waits = [asyncio.create_task(next_line(worker)) for worker in workers]
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            for wait in waits:
                wait.cancel()
            await asyncio.gather(*waits, return_exceptions=True)


async def next_line(worker: WorkerProcess) -> None:
    assert worker.process.stdout is not None
    raw = await worker.process.stdout.readline()
    assert raw, f"worker exited; see {worker.log.name}"
    worker.lines.append(worker._parse(raw))


def postgres_ports(pids: list[int]) -> set[int]:
    """The local TCP ports of the processes ``pids``' connections to PostgreSQL (port 5432)."""
    inodes = set()
    for pid in pids:
        fds = Path(f"/proc/{pid}/fd")
        for fd in fds.iterdir() if fds.exists() else ():
            with contextlib.suppress(OSError):
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            fields = row.split()
            if fields[2].endswith(":1538") and fields[9] in inodes:  # 0x1538: 5432
                ports.add(int(fields[1].rpartition(":")[2], 16))
    return ports


async def kill_connections(cluster: Cluster, pids: list[int]) -> tuple[int, int]:
    """Kill every Redis connection on the test database (but the test's own) and every
    PostgreSQL connection of the processes ``pids``: how many of each."""
    redis_db = int(REDIS_URL.rpartition("/")[2] or 0)
    gates: Any = cluster.gates
    clients = await gates.client_list()
    me = await gates.client_id()
    redis_kills = 0
    for client in clients:
        if int(client["db"]) == redis_db and int(client["id"]) != me:
            redis_kills += int(await gates.execute_command("CLIENT", "KILL", "ID", client["id"]))
    ports = sorted(postgres_ports(pids))
    conn = await asyncpg.connect(POSTGRES_URL)
    try:
        rows = await conn.fetch(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE client_port = ANY($1::int[])", ports
        )
    finally:
        await conn.close()
    return redis_kills, sum(1 for row in rows if row[0])


async def settled_once(cluster: Cluster, topic: str) -> None:
    """The thread's one task completed once, and its result is in memory once."""
    storage = cluster.memory.storage
    assert storage is not None
    tasks = await storage.list_tasks(TaskFilter(thread_id=topic))
    assert [task.status for task in tasks.items] == ["completed"], tasks.items
    history = await cluster.memory.load_prompt(MemoryScope(topic, "u1"))
    results = [part["output"] for m in history if m["role"] == "tool" for part in m["content"]]
    assert results == [{"type": "json", "value": {"topic": topic, "summary": f"{topic} is fast"}}]


async def test_until_idle_streams_and_tasks_survive_process_temporal_and_connection_faults(
    faulty: tuple[Cluster, TemporalDevServer],
) -> None:
    cluster, server = faulty
    began = time.monotonic()
    workers = [await cluster.start_worker(WORKER), await cluster.start_worker(WORKER)]
    api_a, api_b = await asyncio.gather(*(ApiProcess.start(cluster.env, cluster.log_dir) for _ in range(2)))
    apis = [api_a, api_b]
    tag = uuid.uuid4().hex[:6]
    try:
        async with httpx.AsyncClient(timeout=TIMEOUT) as client:
            # 1. API process A dies while three streams wait: they go on through B.
            topics = [f"api{i}-{tag}" for i in range(3)]
            heads = await asyncio.gather(*(first_turn(client, api_a.url, t) for t in topics))
            await api_a.kill()
            for topic in topics:
                await cluster.open_gate(f"research-{topic}")
            tails = await asyncio.gather(*(rest(client, api_b.url, head) for head in heads))
            for topic, head, tail in zip(topics, heads, tails, strict=True):
                assert_whole(head + tail)
                await settled_once(cluster, topic)
            api_a = await ApiProcess.start(cluster.env, cluster.log_dir)
            apis.append(api_a)

            # 2. The worker running a task dies: the task runs again on the other, once.
            topic = f"worker-{tag}"
            head_task = asyncio.create_task(first_turn(client, api_a.url, topic))
            doomed = await started_on(workers, topic)
            await doomed.kill()
            workers.remove(doomed)
            workers.append(await cluster.start_worker(WORKER))
            rerun = await started_on(workers, topic)  # the attempt Temporal runs again after the loss
            await cluster.open_gate(f"research-{topic}")
            head = await head_task
            assert_whole(head + await rest(client, api_b.url, head), rerun)
            await settled_once(cluster, topic)

            # 2b. Every worker dies during a wait (the stream's flow with them): new ones go on.
            topic = f"workers-{tag}"
            head = await first_turn(client, api_b.url, topic)
            await started_on(workers, topic)
            for worker in workers:
                await worker.kill()
            workers = [await cluster.start_worker(WORKER), await cluster.start_worker(WORKER)]
            rerun = await started_on(workers, topic)
            await cluster.open_gate(f"research-{topic}")
            assert_whole(head + await rest(client, api_a.url, head), rerun)
            await settled_once(cluster, topic)

            # 3. The Temporal server is killed and started again during a wait.
            topic = f"temporal-{tag}"
            head = await first_turn(client, api_b.url, topic)
            server.kill()
            await asyncio.to_thread(server.start)
            await cluster.open_gate(f"research-{topic}")
            assert_whole(head + await rest(client, api_a.url, head))
            await settled_once(cluster, topic)

            # 4. Every Redis and PostgreSQL connection is killed during a wait; the API processes
            #    answer the next storage call.
            topic = f"conns-{tag}"
            head = await first_turn(client, api_a.url, topic)
            pids = [p.process.pid for p in (*workers, api_a, api_b)]
            redis_kills, postgres_kills = await kill_connections(cluster, pids)
            for api in (api_a, api_b):  # a storage call on a dropped connection: once more, no 5xx
                url = f"{api.url}/api/memory/threads/{topic}"
                answer = await client.get(url, params={"resourceId": "u1"})
                assert answer.status_code == 200, answer.text
            await cluster.open_gate(f"research-{topic}")
            assert_whole(head + await rest(client, api_b.url, head))
            await settled_once(cluster, topic)
            assert redis_kills > 0 and postgres_kills > 0

            # 5. 50 durable runs at once finish, through both API processes.
            async def poem(i: int) -> list[str]:
                url = (api_a, api_b)[i % 2].url + "/api/agents/poet/stream"
                async with client.stream("POST", url, json={"messages": f"a haiku {i}"}) as response:
                    assert response.status_code == 200
                    return kinds([event async for event in events(response)])

            started = time.monotonic()
            poems = await asyncio.gather(*(poem(i) for i in range(50)))
            assert all(seen[0] == "start" and seen[-1] == "finish" for seen in poems), poems
            print(
                f"faults: 1 API kill -9 (3 streams), 3 worker kill -9, 1 Temporal kill, {redis_kills} Redis "
                f"and {postgres_kills} PostgreSQL connections killed; 50 durable runs at once in "
                f"{time.monotonic() - started:.1f} s; whole test {time.monotonic() - began:.0f} s"
            )
    finally:
        for api in apis:
            await api.kill()


__all__ = ["postgres_problem"]  # the fixture
