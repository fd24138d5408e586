"""``GET /health`` (unauthenticated, checks storage) and what ``runstream serve`` says at startup."""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from starlette.applications import Starlette

from runstream.runtime import Runstream
from runstream.server import bearer_auth, cli
from runstream.server.health import health_route
from runstream.storage import PostgresStorage

from .conftest import serve

MODULE = """
from runstream import Agent
from runstream.runtime import Runstream
from runstream.server import bearer_auth, create_app
from runstream.testing import ScriptedModel

runtime = Runstream(agents=[Agent("a", model=ScriptedModel.text("hi"))])
locked = create_app(runtime, auth=bearer_auth("s3cret"))
"""


def test_health_needs_no_token_and_says_ok(app_factory: Any) -> None:
    url = app_factory(auth=bearer_auth("s3cret"))
    with httpx.Client(base_url=url, timeout=10) as client:
        assert client.get("/api/agents").status_code == 401
        response = client.get("/health")
        assert response.status_code == 200
        assert response.json() == {"status": "ok", "storage": "ok"}
        assert client.head("/health").status_code == 200


@pytest.mark.parametrize("listening", [False, True], ids=["refused", "silent"])
def test_health_is_503_when_storage_cannot_be_reached(listening: bool) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        if listening:  # accepts connections but never answers: the check times out
            sock.listen()
        port = sock.getsockname()[1]
        runtime = Runstream(storage=PostgresStorage(f"postgresql://runstream@127.0.0.1:{port}/x"))
        app = Starlette(routes=[health_route(runtime, timeout_s=0.5)])
        with serve(app) as url:
            response = httpx.get(f"{url}/health", timeout=10)
    assert response.status_code == 503
    assert response.json() == {"status": "unavailable", "storage": "unreachable"}
    assert str(port) not in response.text


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    (tmp_path / "health_project.py").write_text(MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(cli.uvicorn, "run", lambda app, **kw: None)
    monkeypatch.delenv(cli.TOKEN_ENV, raising=False)
    yield tmp_path
    sys.modules.pop("health_project", None)


def test_serve_prints_the_playground_url(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cli.serve_command(["health_project:runtime", "--port", "4999"])
    err = capsys.readouterr().err
    assert "runstream: playground at http://127.0.0.1:4999/playground" in err
    assert "WARNING" not in err


def test_serving_every_interface_without_a_token_warns(
    project: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    cli.serve_command(["health_project:runtime", "--host", "0.0.0.0"])
    err = capsys.readouterr().err
    assert "WARNING: serving on 0.0.0.0 without authentication" in err
    assert "RUNSTREAM_API_TOKEN" in err
    assert "playground at http://127.0.0.1:4111/playground" in err
    cli.serve_command(["health_project:locked", "--host", "0.0.0.0"])  # its own auth
    assert "WARNING" not in capsys.readouterr().err
    monkeypatch.setenv(cli.TOKEN_ENV, "t0ken")
    cli.serve_command(["health_project:runtime", "--host", "0.0.0.0"])
    assert "WARNING" not in capsys.readouterr().err
