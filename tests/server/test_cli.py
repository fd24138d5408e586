"""``runstream serve module:attr``."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette

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


def test_serve_command_runs_uvicorn(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[Any, dict[str, Any]]] = []
    monkeypatch.setattr(cli.uvicorn, "run", lambda app, **kw: calls.append((app, kw)))
    assert cli.serve_command(["served_project:runtime", "--port", "9999", "--log-level", "debug"]) == 0
    app, options = calls[0]
    assert isinstance(app, Starlette)
    assert options == {"host": "127.0.0.1", "port": 9999, "log_level": "debug"}
    monkeypatch.delenv(cli.TARGET_ENV, raising=False)
    cli.serve_command(["served_project:app", "--reload"])
    target, options = calls[1]
    assert target == "runstream.server.cli:reload_factory" and options["factory"] and options["reload"]
    assert isinstance(cli.reload_factory(), Starlette)
