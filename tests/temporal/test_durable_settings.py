"""TemporalRuns' settings and its failure to reach Temporal: clear errors, before any run."""

from __future__ import annotations

import pytest

from runstream import Agent
from runstream.durable import TemporalRuns
from runstream.durable.runner import DurableRunError
from runstream.runtime import Runstream
from runstream.tasks.temporal import TemporalSettings
from runstream.testing import ScriptedModel
from tests.conftest import REDIS_URL


def test_timeouts_are_checked() -> None:
    with pytest.raises(ValueError, match="heartbeat_timeout_ms must be >= 100"):
        TemporalRuns(REDIS_URL, heartbeat_timeout_ms=10)
    with pytest.raises(ValueError, match="step_timeout_ms >= heartbeat_timeout_ms"):
        TemporalRuns(REDIS_URL, heartbeat_timeout_ms=5_000, step_timeout_ms=1_000)


async def test_an_unreachable_temporal_fails_the_runtimes_start() -> None:
    runs = TemporalRuns(REDIS_URL, temporal=TemporalSettings(address="127.0.0.1:1"))
    runtime = Runstream(agents=[Agent("a", model=ScriptedModel.text("hi"))], durable_runs=runs)
    with pytest.raises(DurableRunError, match=r"Cannot reach Temporal at 127\.0\.0\.1:1"):
        await runtime.start()
    await runtime.close()
    assert runs.task_queue == "runstream.runs" and runs.workflow_id("r1") == "runstream-run-r1"
