"""N concurrent SSE streams over loopback: runstream's ``/api/agents/:id/stream`` against a
minimal Starlette SSE endpoint that emits the same chunks, in the same server process and run.

``python -m bench.bench_server [--streams 1000] [--deltas 50] [--timeout 120] [--profile FILE]``

The server (uvicorn, one process, 127.0.0.1 only) runs in a subprocess; the client opens all
streams at once with raw asyncio sockets and reads each to ``data: [DONE]``. Per endpoint:
p50/p99 time to first chunk (request sent → first ``data:`` event), chunks/s over the phase,
the server's CPU time per chunk (the figure least moved by other load on a shared machine), the
server's peak RSS during the phase, and errors (anything but a complete 200 stream). The
baseline replays the exact chunk JSON the agent produced for the same prompt, so the difference
is runstream's work per request (run, loop, chunk objects, encoding, SSE response) minus a
plain generator. The agent's model replays prepared provider parts, so neither side pays for
producing its input.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

MAX_STREAMS = 5_000


# -- the server (subprocess) ------------------------------------------------------------------------


def _serve(port: int, deltas: int, profile: str | None = None) -> None:
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import StreamingResponse
    from starlette.routing import Route

    from runstream import Agent
    from runstream.models.base import ModelRequest, ModelStream
    from runstream.runtime import Runstream
    from runstream.server import create_app, open_access
    from runstream.server.wire import chunk_json
    from runstream.testing import ScriptedModel
    from runstream.testing.scripted import prepare_part

    # The model replays prepared provider parts: its own cost is not runstream's (nor the
    # baseline's, which replays prepared bytes). Provider parsing is measured by bench_providers.
    script = ScriptedModel.text(" ".join(f"w{i}" for i in range(deltas)), chunk_size=1).calls[0]
    parts = [prepare_part(part) for part in script["parts"]]

    class BenchModel:
        provider, model_id, specification_version = "bench", "bench-model", "v2"

        async def stream(self, request: ModelRequest) -> ModelStream:
            async def play() -> AsyncIterator[dict[str, Any]]:
                for part in parts:
                    yield dict(part)

            return ModelStream(parts=play(), request={"body": "{}"}, response={"headers": {}})

    runtime = Runstream(agents=[Agent("bench", model=BenchModel())])
    recorded: list[bytes] = []

    async def record() -> None:
        out = await runtime.agents["bench"].stream("go")
        async for chunk in out.full_stream:
            recorded.append(f"data: {chunk_json(chunk)}\n\n".encode())
        recorded.append(b"data: [DONE]\n\n")

    async def baseline(request: Request) -> StreamingResponse:
        await request.body()

        async def events() -> AsyncIterator[bytes]:
            for event in recorded:
                yield event

        return StreamingResponse(
            events(), media_type="text/event-stream", headers={"cache-control": "no-cache"}
        )

    asyncio.run(record())
    minimal = Starlette(routes=[Route("/baseline", baseline, methods=["POST"])])
    served = create_app(runtime, auth=open_access, rate_limit=None)  # one client sends thousands of streams

    async def app(scope: Any, receive: Any, send: Any) -> None:  # each request sees only its own app
        await (minimal if scope.get("path") == "/baseline" else served)(scope, receive, send)

    class Server(uvicorn.Server):
        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets)
            print(f"READY {len(recorded) - 1}", flush=True)

    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", access_log=False, backlog=8192
    )
    if profile is None:
        Server(config).run()
        return
    import cProfile

    profiler = cProfile.Profile()
    profiler.runcall(Server(config).run)
    profiler.dump_stats(profile)


# -- the client ---------------------------------------------------------------------------------------


@dataclass
class Phase:
    name: str
    ttfc_ms: list[float] = field(default_factory=list)
    chunks: int = 0
    errors: int = 0
    seconds: float = 0.0
    peak_rss_mb: float = 0.0
    server_cpu_s: float = 0.0

    def row(self) -> dict[str, Any]:
        ordered = sorted(self.ttfc_ms) or [float("nan")]
        return {
            "endpoint": self.name,
            "streams": len(self.ttfc_ms) + self.errors,
            "ttfc_p50_ms": round(statistics.median(ordered), 1),
            "ttfc_p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 1),
            "chunks_per_s": round(self.chunks / self.seconds) if self.seconds else 0,
            "wall_s": round(self.seconds, 2),
            "server_peak_rss_mb": round(self.peak_rss_mb, 1),
            "server_cpu_us_per_chunk": round(self.server_cpu_s * 1e6 / self.chunks, 1) if self.chunks else 0,
            "errors": self.errors,
        }


async def _one(port: int, path: str, phase: Phase, expected: int) -> None:
    body = b'{"messages":"go"}'
    request = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode() + body
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        phase.errors += 1
        return
    try:
        started = time.perf_counter()
        writer.write(request)
        await writer.drain()
        buffer = b""
        first: float | None = None
        while b"data: [DONE]\n\n" not in buffer:
            data = await reader.read(65536)
            if not data:
                break
            buffer += data
            if first is None and b"data: " in buffer:
                first = time.perf_counter()
        count = buffer.count(b"data: {")
        if first is None or not buffer.startswith(b"HTTP/1.1 200") or count != expected:
            phase.errors += 1
            return
        phase.ttfc_ms.append((first - started) * 1000)
        phase.chunks += count
    except OSError:
        phase.errors += 1
    finally:
        writer.close()


def _rss_mb(pid: int, field: str) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return 0.0


def _cpu_s(pid: int) -> float:
    """The server's user + system CPU time: unlike wall time, barely moved by other load."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _reset_peak(pid: int) -> None:
    with open(f"/proc/{pid}/clear_refs", "w") as refs:
        refs.write("5")  # the server's peak RSS := its current RSS


async def _phase(name: str, path: str, port: int, streams: int, expected: int) -> Phase:
    phase = Phase(name)
    started = time.perf_counter()
    await asyncio.gather(*(_one(port, path, phase, expected) for _ in range(streams)))
    phase.seconds = time.perf_counter() - started
    return phase


def _measure(name: str, path: str, port: int, pid: int, streams: int, expected: int, limit_s: float) -> Phase:
    _reset_peak(pid)
    cpu_before = _cpu_s(pid)

    async def bounded() -> Phase:
        async with asyncio.timeout(limit_s):
            return await _phase(name, path, port, streams, expected)

    phase = asyncio.run(bounded())
    phase.peak_rss_mb = _rss_mb(pid, "VmHWM")
    phase.server_cpu_s = _cpu_s(pid) - cpu_before
    return phase


def _summary(bare: list[dict[str, Any]], ours: list[dict[str, Any]]) -> None:
    """Medians over the rounds, and runstream relative to the baseline."""

    def median(rows: list[dict[str, Any]], key: str) -> float:
        return float(statistics.median(row[key] for row in rows))

    keys = ("chunks_per_s", "ttfc_p50_ms", "server_cpu_us_per_chunk")
    summary = {key: {"baseline": median(bare, key), "runstream": median(ours, key)} for key in keys}
    for values in summary.values():
        values["ratio"] = round(values["runstream"] / values["baseline"], 2) if values["baseline"] else 0
    print(json.dumps({"median_of_rounds": len(ours), **summary}))


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.bench_server", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--deltas", type=int, default=50, help="text deltas per reply")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds allowed per phase")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (medians are reported)")
    parser.add_argument(
        "--profile", metavar="FILE", help="cProfile the server (both endpoints) into FILE (pstats)"
    )
    parser.add_argument("--serve", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        _serve(args.serve, args.deltas, args.profile)
        return
    streams = max(1, min(args.streams, MAX_STREAMS))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, streams * 2 + 100)), hard))
    port = _free_port()
    profile = ["--profile", os.path.abspath(args.profile)] if args.profile else []
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bench.bench_server",
            "--serve",
            str(port),
            "--deltas",
            str(args.deltas),
            *profile,
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    try:
        assert server.stdout is not None
        ready = server.stdout.readline().split()
        if ready[:1] != ["READY"]:
            raise SystemExit("the bench server did not start")
        expected = int(ready[1])
        idle_rss = _rss_mb(server.pid, "VmRSS")
        print(
            f"{streams} concurrent SSE streams, {expected} chunks each, loopback; server idle RSS {idle_rss:.1f} MB"
        )
        rows: dict[str, list[dict[str, Any]]] = {}
        for _ in range(max(1, args.rounds)):
            for name, path in (
                ("starlette baseline", "/baseline"),
                ("runstream", "/api/agents/bench/stream"),
            ):
                row = _measure(name, path, port, server.pid, streams, expected, args.timeout).row()
                rows.setdefault(name, []).append(row)
                print(json.dumps(row))
        _summary(rows["starlette baseline"], rows["runstream"])
    finally:
        server.terminate()
        server.wait(10)


if __name__ == "__main__":
    main()
