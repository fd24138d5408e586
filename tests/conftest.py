"""Shared test configuration."""

from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).parent
CONFORMANCE = HERE / "conformance_data"

# compare.py is a stdlib-only tool shipped with the conformance data; import it from there.
sys.path.insert(0, str(CONFORMANCE))

POSTGRES_URL = os.environ.get("RUNSTREAM_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("RUNSTREAM_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
