"""``runstream serve module:attr``."""

from __future__ import annotations

import gc
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx2 as httpx
import pytest
from starlette.applications import Starlette
from starlette.testclient import TestClient

from runstream.cli import main
from runstream.server import cli

MODULE = """
from runstream import Agent
from runstream.runtime import Runstream
from runstream.server import create_app
from runstream.testing import ScriptedModel

runtime = Runstream(agents=[Agent("a", model=ScriptedModel.text("hi"))])
app = create_app(runtime)

def make():
    return runtime
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    (tmp_path / "served_project.py").write_text(MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield tmp_path
    sys.modules.pop("served_project", None)


@pytest.mark.parametrize("attr", ["runtime", "app", "make"])
def test_load_app_accepts_a_runtime_an_app_or_a_factory(project: Path, attr: str) -> None:
    assert isinstance(cli.load_app(f"served_project:{attr}"), Starlette)


def test_bad_target(project: Path) -> None:
    with pytest.raises(SystemExit, match="expected 'module:attr'"):
        cli.load_app("served_project")


def test_a_wrong_attribute_or_module_is_one_line(project: Path) -> None:
    with pytest.raises(
        SystemExit, match=r"^runstream serve: 'served_project' has no attribute 'ap' \(it has: .*app"
    ):
        cli.load_app("served_project:ap")
    with pytest.raises(SystemExit, match=r"^runstream serve: no module 'not_a_project' \(from "):
        cli.load_app("not_a_project:app")


def test_serve_command_runs_uvicorn(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[Any, dict[str, Any]]] = []
    frozen: list[int] = []

    def run(app: Any, **kw: Any) -> None:
        calls.append((app, kw))
        frozen.append(gc.get_freeze_count())

    monkeypatch.setattr(cli.uvicorn, "run", run)
    try:
        assert cli.serve_command(["served_project:runtime", "--port", "9999", "--log-level", "debug"]) == 0
    finally:
        gc.unfreeze()
    assert frozen[0] > 0  # what was loaded before serving is out of the collector's way
    app, options = calls[0]
    assert isinstance(app, Starlette)
    assert {k: options.pop(k) for k in ("host", "port", "log_level")} == {
        "host": "127.0.0.1",
        "port": 9999,
        "log_level": "debug",
    }
    assert options["limit_concurrency"] == 1000 and options["http"].header_timeout == 10  # socket limits
    monkeypatch.delenv(cli.TARGET_ENV, raising=False)
    cli.serve_command(["served_project:app", "--reload"])
    target, options = calls[1]
    assert target == "runstream.server.cli:reload_factory" and options["factory"] and options["reload"]
    assert options["http"] == "runstream.server.socket_limits:ReadTimeoutProtocol"
    assert isinstance(cli.reload_factory(), Starlette)


def _allowed(app: Starlette, origin: str) -> bool:
    """Whether a browser on ``origin`` gets through the app's CORS preflight."""
    preflight = TestClient(app).options(
        "/api/agents", headers={"Origin": origin, "Access-Control-Request-Method": "GET"}
    )
    return preflight.headers.get("access-control-allow-origin") == origin


def test_cors_flags(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    apps: list[Any] = []
    monkeypatch.setattr(cli.uvicorn, "run", lambda app, **kw: apps.append(app))
    monkeypatch.setattr(
        cli, "start_studio", lambda command, target, verbose: SimpleNamespace(stop=lambda: None)
    )
    cli.serve_command(["served_project:runtime"])
    cli.serve_command(
        ["served_project:runtime", "--cors-origin", "https://a.example", "--cors-origin", "https://b.example"]
    )
    cli.serve_command(["served_project:runtime", "--no-cors"])
    cli.serve_command(["served_project:runtime", "--cors-origin", "*"])
    # Studio's origin is added to named origins (here: not a local one, from another host).
    cli.serve_command(["served_project:runtime", "--studio", "--cors-origin", "https://a.example"])
    default, named, none, anything, studio = apps
    origins = ["http://localhost:3000", "http://127.0.0.1:5173", "https://a.example", "https://evil.example"]
    assert [_allowed(default, o) for o in origins] == [True, True, False, False]
    assert [_allowed(named, o) for o in origins] == [False, False, True, False]
    assert [_allowed(none, o) for o in origins] == [False, False, False, False]
    assert [_allowed(anything, o) for o in origins] == [True, True, True, True]
    assert [_allowed(studio, o) for o in origins] == [True, False, True, False]
    with pytest.raises(SystemExit, match="exclude each other"):
        cli.serve_command(["served_project:runtime", "--no-cors", "--cors-origin", "https://a.example"])


def test_studio_without_node_says_what_to_do(
    project: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(
        SystemExit, match=r"Install Node.js 20 or newer.*runstream serve served_project:runtime"
    ):
        main(["studio", "served_project:runtime"])


JS = Path(__file__).parents[1] / "js"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


NEEDS_STUDIO = pytest.mark.skipif(
    shutil.which("npx") is None or not (JS / "node_modules" / "mastra").is_dir(),
    reason="needs npx and tests/js/node_modules (sh tests/js/setup.sh)",
)


def _start_studio_command(tmp_path: Path, *options: str) -> tuple[subprocess.Popen[str], int, int]:
    (tmp_path / "served_project.py").write_text(MODULE)
    port, studio_port = _free_port(), _free_port()
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "runstream", "studio", "served_project:runtime"),
            *("--port", str(port), "--studio-port", str(studio_port), *options),
        ],
        cwd=JS,  # npx finds the pinned mastra here, without the network
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    return process, port, studio_port


def _read_until(process: subprocess.Popen[str], *needles: str) -> str:
    """The command's output up to the line where every needle has been seen."""
    assert process.stdout is not None
    seen: list[str] = []
    for line in process.stdout:
        seen.append(line)
        if all(any(n in s for s in seen) for n in needles):
            return "".join(seen)
    raise AssertionError(f"the command ended ({process.wait()}) before printing {needles}:\n{''.join(seen)}")


def _stop(process: subprocess.Popen[str], sig: signal.Signals) -> str:
    """Signal the command; the rest of its output, once it exited with code 0."""
    process.send_signal(sig)
    rest, _ = process.communicate(timeout=30)
    assert process.returncode == 0, rest
    return rest


@NEEDS_STUDIO
def test_runstream_studio_is_quiet_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    process, port, studio_port = _start_studio_command(tmp_path)
    try:
        printed = _read_until(process, "Uvicorn running", "Mastra Studio running at")
        assert f"runstream server: http://127.0.0.1:{port}" in printed
        assert f"Mastra Studio:    http://localhost:{studio_port} (starting via npx" in printed
        assert f"Mastra Studio running at http://localhost:{studio_port}" in printed
        page = httpx.get(f"http://localhost:{studio_port}/agents").text
        assert f"window.MASTRA_SERVER_PORT = '{port}'" in page
        assert f'href="http://localhost:{studio_port}"' in httpx.get(f"http://127.0.0.1:{port}/").text
        printed += _stop(process, signal.SIGTERM)
    finally:
        process.kill()
        process.wait()
    assert _closes(studio_port), "Studio (npx's child) outlived runstream studio"
    # Studio's own log lines and the access log are kept back; no traceback on the way out.
    assert "(Mastra CLI)" not in printed and '"GET /' not in printed, printed
    assert "Traceback" not in printed, printed
    assert len(printed.splitlines()) <= 12, printed


@NEEDS_STUDIO
def test_runstream_studio_verbose_shows_studios_output_and_stops_on_sigint(tmp_path: Path) -> None:
    process, port, studio_port = _start_studio_command(tmp_path, "--verbose")
    try:
        printed = _read_until(process, "Uvicorn running", "(Mastra CLI)")
        assert "--verbose shows" not in printed
        httpx.get(f"http://127.0.0.1:{port}/api/agents")
        printed += _stop(process, signal.SIGINT)
    finally:
        process.kill()
        process.wait()
    assert _closes(studio_port), "Studio (npx's child) outlived runstream studio"
    assert '"GET /api/agents HTTP/1.1" 200' in printed and "Traceback" not in printed, printed


def _closes(port: int, within_s: float = 10) -> bool:
    """Whether nothing listens on ``port`` any more, within ``within_s`` (a process shutting down)."""
    gone = threading.Event()
    for _ in range(int(within_s / 0.05)):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        except OSError:
            return True
        gone.wait(0.05)
    return False
