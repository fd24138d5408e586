"""Another process of the Redis event-bus tests, and the test side's handle on it.

Run as ``bus_listener.py listen PREFIX COUNT``, it is a :class:`RedisEventBus` subscriber that
prints ``{"event": "ready"}`` once connected, then every event it receives (``{"event": "got",
"type", "task", "seq"}``) as a JSON line, and exits after ``COUNT`` of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import pytest

from runstream.tasks.bus import TaskEventFilter
from runstream.tasks.redis_bus import RedisEventBus

REDIS_URL = os.environ.get("RUNSTREAM_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
# Generous: under CI load a fresh interpreter takes many seconds just to import runstream.
# Every wait on a process is on its output (event-driven), so this bound only ends a hang.
LINE_TIMEOUT_S = 60.0


def require_redis() -> None:
    """Under CI a missing Redis fails the test; elsewhere it skips it, saying why."""
    try:
        import redis

        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2).ping()
    except Exception as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"Redis is required under CI ({REDIS_URL}): {exc}")
        pytest.skip(f"Redis unreachable at {REDIS_URL}: {exc}")


def say(**message: Any) -> None:
    print(json.dumps(message), flush=True)


# -- the script side -----------------------------------------------------------------------


async def listen(prefix: str, count: int) -> None:
    bus = RedisEventBus(REDIS_URL, channel_prefix=prefix)
    events = bus.subscribe(TaskEventFilter())
    assert await bus.connect(timeout_s=LINE_TIMEOUT_S)
    say(event="ready")
    for _ in range(count):
        event = await anext(events)
        payload = event.chunk.payload
        say(event="got", type=event.chunk.type, task=event.record.id, seq=payload["payload"]["seq"])
    await bus.close()


# -- the test side -------------------------------------------------------------------------


class ScriptProcess:
    """One run of this script; ``expect`` waits for a matching stdout line (bounded)."""

    def __init__(self, process: asyncio.subprocess.Process, stderr: IO[bytes]) -> None:
        self.process = process
        self.stderr = stderr
        self.lines: list[dict[str, Any]] = []

    @classmethod
    async def spawn(cls, tmp_path: Path, *args: str, script: Path = Path(__file__)) -> ScriptProcess:
        """Run ``script`` (this one by default) with ``args``; its stderr goes to a log file."""
        stderr = (tmp_path / f"{script.stem}-{os.urandom(4).hex()}.log").open("wb")
        process = await asyncio.create_subprocess_exec(
            sys.executable, str(script), *args, stdout=asyncio.subprocess.PIPE, stderr=stderr
        )
        return cls(process, stderr)

    async def ready(self) -> None:
        await self.expect(lambda line: line["event"] == "ready")

    async def expect(self, match: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        for line in self.lines:
            if match(line):
                return line
        assert self.process.stdout is not None
        async with asyncio.timeout(LINE_TIMEOUT_S):
            while True:
                raw = await self.process.stdout.readline()
                if not raw:
                    raise AssertionError(
                        f"process exited ({self.process.returncode}); see {self.stderr.name}"
                    )
                got: dict[str, Any] = json.loads(raw)
                self.lines.append(got)
                if match(got):
                    return got

    async def drain(self) -> list[dict[str, Any]]:
        """Every line, once the process has ended."""
        assert self.process.stdout is not None
        async with asyncio.timeout(LINE_TIMEOUT_S):
            self.lines.extend(
                json.loads(raw) for raw in (await self.process.stdout.read()).splitlines() if raw
            )
            await self.process.wait()
        return self.lines

    async def kill(self) -> None:
        """SIGKILL and reap: a test's teardown, whatever state the process is in."""
        if self.process.returncode is None:
            self.process.kill()
        await self.process.wait()
        self.stderr.close()


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        if sys.argv[1] != "listen":
            raise SystemExit("usage: bus_listener.py listen PREFIX COUNT")
        asyncio.run(listen(sys.argv[2], int(sys.argv[3])))
