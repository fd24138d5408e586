"""The test side of the Temporal cluster tests: worker processes (``runstream worker``) and
the shared services (a fresh PostgreSQL schema, Redis prefix and Temporal task queue)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from redis.asyncio import Redis
from temporal_app import gate_key

from runstream.memory import Memory, MemoryScope
from tests.conftest import POSTGRES_URL, REDIS_URL

HERE = Path(__file__).parent
LINE_TIMEOUT_S = 30.0
SCOPE = MemoryScope("t1", "u1")


class WorkerProcess:
    """``runstream worker temporal_app:worker_runtime``; ``expect`` waits for one of its JSON lines."""

    def __init__(self, process: asyncio.subprocess.Process, log: IO[bytes]) -> None:
        self.process = process
        self.log = log
        self.lines: list[dict[str, Any]] = []

    @classmethod
    async def start(
        cls, env: dict[str, str], log_dir: Path, target: str = "temporal_app:worker_runtime"
    ) -> WorkerProcess:
        log = (log_dir / f"worker-{uuid.uuid4().hex[:6]}.log").open("wb")
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "runstream", "worker", target, "--log-level", "warning",
            cwd=HERE, env={**os.environ, **env}, stdout=asyncio.subprocess.PIPE, stderr=log,
        )  # fmt: skip
        worker = cls(process, log)
        await worker.expect(lambda line: line["event"] == "ready")
        return worker

    @property
    def pid(self) -> int:
        return self.process.pid

    async def expect(self, match: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        for line in self.lines:
            if match(line):
                return line
        assert self.process.stdout is not None
        async with asyncio.timeout(LINE_TIMEOUT_S):
            while True:
                raw = await self.process.stdout.readline()
                if not raw:
                    raise AssertionError(f"worker exited ({self.process.returncode}); see {self.log.name}")
                got = self._parse(raw)
                self.lines.append(got)
                if match(got):
                    return got

    async def stop(self) -> int:
        """SIGTERM (graceful shutdown); the exit code. Every line it printed is in ``lines``."""
        if self.process.returncode is None:
            self.process.terminate()
            async with asyncio.timeout(LINE_TIMEOUT_S):
                rest, _ = await self.process.communicate()
                self.lines += [self._parse(raw) for raw in rest.splitlines() if raw.strip()]
        self.log.close()
        assert self.process.returncode is not None
        return self.process.returncode

    @staticmethod
    def _parse(raw: bytes) -> dict[str, Any]:
        text = raw.decode().strip()
        if text.startswith("runstream worker ready"):
            return {"event": "ready"}
        try:
            return dict(json.loads(text))
        except ValueError:  # not one of the tools' lines
            return {"event": "text", "text": text}

    async def kill(self) -> None:
        self.process.kill()
        await self.process.wait()
        self.log.close()


@dataclass
class Cluster:
    env: dict[str, str]
    log_dir: Path
    memory: Memory
    gates: Redis
    workers: list[WorkerProcess] = field(default_factory=list)

    @classmethod
    def environment(cls, temporal_address: str) -> dict[str, str]:
        prefix = f"tq-{uuid.uuid4().hex[:12]}"
        return {
            "RUNSTREAM_TEST_POSTGRES_URL": POSTGRES_URL,
            "RUNSTREAM_TEST_REDIS_URL": REDIS_URL,
            "TEMPORAL_TEST_ADDRESS": temporal_address,
            "TEMPORAL_TEST_SCHEMA": f"runstream_test_{uuid.uuid4().hex}",
            "TEMPORAL_TEST_PREFIX": prefix,
        }

    async def start_worker(self, target: str = "temporal_app:worker_runtime") -> WorkerProcess:
        worker = await WorkerProcess.start(self.env, self.log_dir, target)
        self.workers.append(worker)
        return worker

    async def open_gate(self, name: str) -> None:
        await self.gates.rpush(gate_key(self.env["TEMPORAL_TEST_PREFIX"], name), "go")  # type: ignore[misc]

    async def tool_results(self) -> list[Any]:
        history = await self.memory.load_prompt(SCOPE)
        return [part["output"] for m in history if m["role"] == "tool" for part in m["content"]]

    async def close(self) -> None:
        for worker in self.workers:
            if worker.process.returncode is None:
                await worker.stop()
