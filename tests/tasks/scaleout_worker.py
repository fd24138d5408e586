"""The other processes of the scale-out tests, and the test side's handle on them.

Run as a script, it is one of:

* ``listen PREFIX COUNT``: a :class:`RedisEventBus` subscriber that prints every event it
  receives (``{"event": "got", "type", "task", "seq"}``) and exits after ``COUNT`` of them;
* ``worker DB PREFIX LEASE_MS RENEW_MS POLL_MS``: a worker :class:`DistributedTaskManager` on the
  SQLite file ``DB`` with the tools below, until SIGTERM (graceful) or SIGKILL (a crash).

Both print JSON lines on stdout, first ``{"event": "ready", ...}`` once connected; the tools
print what they do, so the tests wait on those lines instead of on time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import pytest

from runstream.abort import AbortError
from runstream.storage import SqliteStorage
from runstream.tasks.bus import TaskEventFilter
from runstream.tasks.config import BackgroundTaskConfig
from runstream.tasks.distributed import DistributedTaskManager, ScaleOutConfig
from runstream.tasks.redis_bus import RedisEventBus
from runstream.tools import Tool, ToolContext

AGENT = "scale-agent"
REDIS_URL = os.environ.get("RUNSTREAM_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
LINE_TIMEOUT_S = 20.0


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
    assert await bus.connect()
    say(event="ready")
    for _ in range(count):
        event = await anext(events)
        payload = event.chunk.payload
        say(event="got", type=event.chunk.type, task=event.record.id, seq=payload["payload"]["seq"])
    await bus.close()


def worker_tools(worker_id: Callable[[], str]) -> list[Tool]:
    async def work(args: dict[str, Any], ctx: ToolContext) -> Any:
        await asyncio.sleep(args.get("ms", 0) / 1000)
        say(event="ran", label=args["label"], worker=worker_id())
        return {"label": args["label"], "worker": worker_id()}

    async def hang(args: dict[str, Any], ctx: ToolContext) -> Any:
        say(event="started", label=args["label"], attempt=ctx.attempt, worker=worker_id())
        try:
            await ctx.abort_signal.wait()
        finally:
            say(event="aborted", label=args["label"], reason=str(ctx.abort_signal.reason))
        raise AbortError("aborted")

    async def ask(args: dict[str, Any], ctx: ToolContext) -> Any:
        say(event="started", label=args["label"], attempt=ctx.attempt, worker=worker_id())
        if ctx.resume_data is None:
            await ctx.suspend({"question": "name?"})
        return {"answer": ctx.resume_data, "worker": worker_id()}

    async def flaky(args: dict[str, Any], ctx: ToolContext) -> Any:
        """Hangs on its first attempt (the test kills that worker), completes on the next."""
        say(event="started", label=args["label"], attempt=ctx.attempt, worker=worker_id())
        if ctx.attempt == 1:
            await asyncio.Event().wait()
        return {"worker": worker_id(), "attempt": ctx.attempt}

    return [Tool(f.__name__, f, input_schema={"type": "object"}) for f in (work, hang, ask, flaky)]


async def work(db: str, prefix: str, lease_ms: int, renew_ms: int, poll_ms: int) -> None:
    manager = DistributedTaskManager(
        SqliteStorage(db),
        BackgroundTaskConfig(per_agent_concurrency=10),
        redis_url=REDIS_URL,
        channel_prefix=prefix,
        scale_out=ScaleOutConfig(
            lease_ms=lease_ms, renew_interval_ms=renew_ms, poll_interval_ms=poll_ms, control_timeout_ms=10_000
        ),
    )
    for tool in worker_tools(lambda: manager.worker_id):
        manager.register_tool(AGENT, tool)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await manager.start()
    say(event="ready", worker=manager.worker_id)
    await stop.wait()
    await manager.shutdown()
    await manager.storage.close()


# -- the test side -------------------------------------------------------------------------


class ScriptProcess:
    """One run of this script; ``expect`` waits for a matching stdout line (bounded)."""

    def __init__(self, process: asyncio.subprocess.Process, stderr: IO[bytes]) -> None:
        self.process = process
        self.stderr = stderr
        self.lines: list[dict[str, Any]] = []
        self.worker_id = ""

    @classmethod
    async def start(cls, tmp_path: Path, *args: str, script: Path = Path(__file__)) -> ScriptProcess:
        """Run ``script`` (this one by default) with ``args``; its stderr goes to a log file."""
        stderr = (tmp_path / f"{script.stem}-{os.urandom(4).hex()}.log").open("wb")
        process = await asyncio.create_subprocess_exec(
            sys.executable, str(script), *args, stdout=asyncio.subprocess.PIPE, stderr=stderr
        )
        started = cls(process, stderr)
        ready = await started.expect(lambda line: line["event"] == "ready")
        started.worker_id = ready.get("worker", "")
        return started

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

    async def stop(self) -> None:
        """SIGTERM (graceful shutdown) and wait; SIGKILL if it hangs."""
        if self.process.returncode is None:
            self.process.terminate()
            try:
                async with asyncio.timeout(LINE_TIMEOUT_S):
                    await self.process.wait()
            except TimeoutError:
                self.process.kill()
                await self.process.wait()
        self.stderr.close()

    async def kill(self) -> None:
        self.process.kill()
        await self.process.wait()


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        if sys.argv[1] == "listen":
            asyncio.run(listen(sys.argv[2], int(sys.argv[3])))
        else:
            db, prefix, lease_ms, renew_ms, poll_ms = sys.argv[2:7]
            asyncio.run(work(db, prefix, int(lease_ms), int(renew_ms), int(poll_ms)))
