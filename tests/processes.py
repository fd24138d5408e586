"""Long-running commands of the docs (servers, workers) started for real, checked, and stopped."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx2 as httpx

BIN = Path(sys.executable).parent
STARTUP_TIMEOUT_S = 30


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def with_port(argv: Sequence[str], port: int) -> list[str]:
    """``argv`` with its ``--port N`` replaced (or added), so parallel runs never collide."""
    out = list(argv)
    if "--port" in out:
        out[out.index("--port") + 1] = str(port)
    else:
        out += ["--port", str(port)]
    return out


def executable(argv: Sequence[str]) -> list[str]:
    """Run ``runstream``, ``uvicorn`` and ``python`` from this interpreter's environment."""
    first = argv[0]
    if first in ("python", "python3"):
        return [sys.executable, *argv[1:]]
    if (BIN / first).exists():
        return [str(BIN / first), *argv[1:]]
    return list(argv)


@contextmanager
def running(argv: Sequence[str], cwd: Path, env: Mapping[str, str]) -> Iterator[subprocess.Popen[str]]:
    """Start ``argv``; on exit, SIGTERM it (SIGKILL if it lingers) and reap it."""
    process = subprocess.Popen(
        executable(argv),
        cwd=cwd,
        env=dict(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)


def wait_healthy(process: subprocess.Popen[str], port: int) -> httpx.Response:
    """Poll ``GET /health`` until it answers; fail with the server's output if it dies first."""
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            out, err = process.communicate()
            raise AssertionError(f"the server exited with {process.returncode}:\n{out}\n{err}")
        try:
            return httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)
        except httpx.TransportError:
            time.sleep(0.1)
    raise AssertionError("the server did not answer /health in time")


def stop_and_read(process: subprocess.Popen[str]) -> tuple[str, str]:
    """Stop a process gracefully and return what it printed (stdout, stderr)."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        return process.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.communicate()


def read_line_with(process: subprocess.Popen[str], needle: str) -> str:
    """Read stdout lines until one contains ``needle`` (the process prints it when ready)."""
    assert process.stdout is not None
    for line in process.stdout:
        if needle in line:
            return line
    _, err = process.communicate()
    raise AssertionError(f"the process ended without printing {needle!r}:\n{err}")


def clean_env(**extra: str) -> dict[str, str]:
    """The environment of a documented command: no provider keys and no API token."""
    hidden = ("_API_KEY", "_BASE_URL")
    env = {k: v for k, v in os.environ.items() if not k.endswith(hidden) and k != "RUNSTREAM_API_TOKEN"}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return {**env, **extra}
