"""``runstream studio`` / ``runstream serve --studio``: Mastra Studio next to the server.

Studio is the prebuilt UI in the npm package ``mastra``; ``npx`` fetches it (or uses a local
install) and ``mastra studio`` serves it on its own port, pointed at this server. It talks to the
server from the browser, across origins, which the server's CORS allows.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from dataclasses import dataclass

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


def start_studio(command: StudioCommand, target: str) -> subprocess.Popen[bytes]:
    """Start ``mastra studio`` (SystemExit with a clear message when Node.js is missing)."""
    npx = shutil.which("npx")
    if npx is None:
        raise SystemExit(NO_NODE.format(target=target))
    os.environ[STUDIO_URL_ENV] = command.studio_url  # the server's root page links to it
    env = {**os.environ, "MASTRA_TELEMETRY_DISABLED": "1"}
    # Its own process group: npx runs Studio as a child, and stopping must reach both.
    process = subprocess.Popen(command.argv(npx), env=env, start_new_session=True)
    print(f"runstream server: {command.server_url} (playground: {command.server_url}/playground)")
    print(f"Mastra Studio:    {command.studio_url} (starting via npx mastra@{STUDIO_VERSION})")
    return process


def stop_studio(process: subprocess.Popen[bytes]) -> None:
    """Stop npx and the Studio server it started (the whole process group)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        try:
            process.wait(10)
            return
        except subprocess.TimeoutExpired:
            continue
