"""``runstream studio`` / ``runstream serve --studio``: Mastra Studio next to the server.

Studio is the prebuilt UI in the npm package ``mastra``; ``npx`` fetches it (or uses a local
install) and ``mastra studio`` serves it on its own port, pointed at this server. It talks to the
server from the browser, across origins, which the server's CORS allows.

Studio's own output (npm's warnings, its logs) is kept back unless ``--verbose``: one line says
when it serves, and if it exits on its own its last lines are shown. SIGTERM and SIGINT end the
command cleanly (exit 0, no traceback): the server shuts down, then Studio's whole process group
is stopped, so nothing outlives the command.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from types import FrameType

from runstream.server.studio import STUDIO_URL_ENV, STUDIO_VERSION

NO_NODE = (
    "Mastra Studio runs on Node.js, and `npx` was not found on PATH. Install Node.js 20 or newer "
    "(https://nodejs.org, or your package manager: apt install nodejs npm), then run this again. "
    "The server alone needs no Node.js: runstream serve {target}"
)


@dataclass(frozen=True, slots=True)
class StudioCommand:
    """Where the server listens, and where Studio should."""

    server_host: str
    server_port: int
    studio_port: int
    api_prefix: str = "/api"

    @property
    def browser_host(self) -> str:
        """The host a browser uses for the server (a wildcard bind is not an address)."""
        return "localhost" if self.server_host in ("0.0.0.0", "::", "") else self.server_host

    @property
    def studio_url(self) -> str:
        return f"http://localhost:{self.studio_port}"

    @property
    def server_url(self) -> str:
        return f"http://{self.browser_host}:{self.server_port}"

    def argv(self, npx: str) -> list[str]:
        return [
            npx,
            "--yes",
            f"mastra@{STUDIO_VERSION}",
            "studio",
            "--port",
            str(self.studio_port),
            "--server-host",
            self.browser_host,
            "--server-port",
            str(self.server_port),
            "--server-api-prefix",
            self.api_prefix,
        ]


READY_LINE = "Mastra Studio running"
"""What ``mastra studio`` logs once it serves."""

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class Studio:
    """A running ``mastra studio`` (npx and its children, one process group)."""

    def __init__(self, process: subprocess.Popen[bytes], url: str) -> None:
        self.process = process
        self.url = url
        self.ready = threading.Event()
        self._stopping = threading.Event()

    def watch(self, tail_lines: int = 40) -> None:
        """Read Studio's output (kept back): say when it serves; if it ends on its own, show
        its last lines. Runs in a thread until the output ends."""
        assert self.process.stdout is not None
        tail: deque[str] = deque(maxlen=tail_lines)
        for raw in self.process.stdout:
            line = _ANSI.sub("", raw.decode(errors="replace")).rstrip()
            tail.append(line)
            if not self.ready.is_set() and READY_LINE in line:
                self.ready.set()
                print(f"Mastra Studio running at {self.url}", flush=True)
        code = self.process.wait()
        if not self._stopping.is_set():
            shown = "\n".join(f"  {line}" for line in tail)
            print(
                f"runstream studio: Mastra Studio exited (code {code}); its last output:\n{shown}",
                file=sys.stderr,
                flush=True,
            )

    def stop(self) -> None:
        """Stop npx and the Studio server it started (the whole process group)."""
        self._stopping.set()
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, sig)
            try:
                self.process.wait(10)
                return
            except subprocess.TimeoutExpired:
                continue


def start_studio(command: StudioCommand, target: str, *, verbose: bool = False) -> Studio:
    """Start ``mastra studio`` (SystemExit with a clear message when Node.js is missing); its
    output is passed through only when ``verbose``."""
    npx = shutil.which("npx")
    if npx is None:
        raise SystemExit(NO_NODE.format(target=target))
    os.environ[STUDIO_URL_ENV] = command.studio_url  # the server's root page links to it
    env = {**os.environ, "MASTRA_TELEMETRY_DISABLED": "1"}
    output = None if verbose else subprocess.PIPE
    # Its own process group: npx runs Studio as a child, and stopping must reach both; the
    # terminal's Ctrl-C reaches runstream only, which stops the group.
    process = subprocess.Popen(
        command.argv(npx),
        env=env,
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=output,
        stderr=subprocess.STDOUT if output else None,
    )
    studio = Studio(process, command.studio_url)
    if not verbose:
        threading.Thread(target=studio.watch, name="studio-output", daemon=True).start()
    quiet = "" if verbose else "; --verbose shows its output"
    print(f"runstream server: {command.server_url} (playground: {command.server_url}/playground)")
    print(f"Mastra Studio:    {command.studio_url} (starting via npx mastra@{STUDIO_VERSION}{quiet})")
    return studio


@contextlib.contextmanager
def exit_on_signals() -> Iterator[None]:
    """SIGTERM and SIGINT end the block with ``SystemExit(0)``, so what it started is stopped on
    the way out. uvicorn, while it serves, takes both signals itself (a graceful shutdown) and
    raises them again when it is done, which lands here."""

    def leave(signum: int, _frame: FrameType | None) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):  # one is enough: the way out is under way
            signal.signal(sig, signal.SIG_IGN)
        raise SystemExit(0)

    previous = {sig: signal.signal(sig, leave) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
