"""Real MCP servers for the tests (the official SDK, in mcp_test_server.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

SERVER = Path(__file__).with_name("mcp_test_server.py")
ROOT = Path(__file__).parents[2]


def stdio_command() -> tuple[str, list[str]]:
    return sys.executable, [str(SERVER), "stdio"]


def start_http_server(*args: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[str], str]:
    """Start a uvicorn-served Python program on a free port; returns the process and its base URL."""
    process = subprocess.Popen(
        [sys.executable, *args],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
    )
    assert process.stderr is not None
    for line in process.stderr:
        found = re.search(r"Uvicorn running on (http://\S+)", line)
        if found:
            # Keep reading its log so a full pipe never blocks the server.
            threading.Thread(target=process.stderr.read, daemon=True).start()
            return process, found.group(1)
    process.wait()
    raise RuntimeError(f"{args} did not start (exit code {process.returncode})")


@pytest.fixture
def http_server_url() -> Iterator[str]:
    process, base = start_http_server(str(SERVER), "http", "0")
    try:
        yield f"{base}/mcp"
    finally:
        process.terminate()
        process.wait(10)
