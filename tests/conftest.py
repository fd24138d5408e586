"""Shared test configuration."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
CONFORMANCE = HERE / "conformance_data"

# compare.py is a stdlib-only tool shipped with the conformance data; import it from there.
sys.path.insert(0, str(CONFORMANCE))

POSTGRES_URL = os.environ.get("RUNSTREAM_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("RUNSTREAM_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")

LONGEST_FIRST = (
    "tests/temporal/test_temporal_conformance.py",
    "tests/test_docs.py",
    "tests/temporal/test_temporal_cluster.py",
    "tests/temporal/test_durable_runs.py",
    "tests/server/test_tenant_property.py",
    "tests/server/test_studio_js.py",
    "tests/test_ecosystem_docs.py",
    "tests/temporal/test_scale_out_doc.py",
    "tests/temporal/test_durable_faults.py",
    "tests/test_typing.py",
    "tests/mcp/test_mcp_client.py",
    "tests/temporal/test_temporal_manager.py",
    "tests/temporal/test_temporal_processes.py",
    "tests/mcp/test_mcp_server.py",
    "tests/server/test_security.py",
    "tests/test_bench_smoke.py",
    "tests/test_conformance_extra.py",
    "tests/server/test_cli.py",
    "tests/server/test_security_routes.py",
    "tests/server/test_studio_api.py",
    "tests/server/test_js_interop.py",
    "tests/test_wheel.py",
)
"""The test files that take longest (wall time of a whole parallel run, longest first: measured
with ``--durations`` and per-file timings on the 2-core machine); test_schedule.py checks that
each exists. ``make test`` hands whole files to its two xdist workers in collection order, so
these start first and the short files fill in behind them, instead of a worker idling while the
other ends with a two-minute file."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The files of :data:`LONGEST_FIRST` first, in its order; the others after them in their
    order (a stable sort: the tests of a file keep theirs)."""
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    root = config.rootpath
    items.sort(key=lambda item: rank.get(item.path.relative_to(root).as_posix(), len(rank)))
