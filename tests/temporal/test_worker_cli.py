"""``runstream worker`` refuses what it cannot run, saying why (no Temporal needed)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest


async def worker(target: str, cwd: Path) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "runstream", "worker", target, cwd=cwd, stderr=asyncio.subprocess.PIPE
    )
    _, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return process.returncode, err.decode()


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("plain_app", "expected 'module:attr'"),
        ("plain_app:answer", "plain_app:answer is not a Runstream"),
        ("plain_app:runtime", "needs task_manager=TemporalTaskManager"),
    ],
)
async def test_the_worker_command_refuses_what_it_cannot_run(
    tmp_path: Path, target: str, message: str
) -> None:
    (tmp_path / "plain_app.py").write_text(
        "from runstream.runtime import Runstream\n\nanswer = 42\nruntime = Runstream(background_tasks=True)\n"
    )
    code, err = await worker(target, tmp_path)
    assert code != 0 and message in err
