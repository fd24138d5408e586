"""Conformance scenarios replayed as ``python -m runstream.conformance SCENARIO`` replays them,
each in a process of its own, but forked from a server process that has imported runstream once.

Importing runstream is most of a replay's CPU time (about 0.7 s of 0.8 s in process, 1.9 s of
2.6 s with the Temporal SDK), and the suites replay some 230 scenarios: forking saves minutes of
CPU on the 2-core machine. Each replay still starts from a fresh process image (nothing carries
over from one scenario to the next) and runs the command's own ``main``; it ends without
interpreter finalization, as the command does under Temporal. ``test_conformance_command.py``
runs the command itself.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import threading
from collections.abc import Mapping
from multiprocessing.connection import wait
from pathlib import Path

_FORKSERVER = multiprocessing.get_context("forkserver")
_FORKSERVER.set_forkserver_preload(
    ["runstream.conformance.__main__", "runstream.tasks.temporal", "temporalio.worker", "redis.asyncio"]
)


def _replay(scenario: str, out: str, err: str, env: Mapping[str, str]) -> None:
    """In the forked process: the command's ``main``, its stdout and stderr on the given files."""
    os.environ.update(env)
    for path, fd in ((out, 1), (err, 2)):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(target, fd)
        os.close(target)
    from runstream.conformance.__main__ import main

    sys.exit(main([scenario]))  # (the forked process ends with os._exit and this exit code)


_PROCESSES = threading.Lock()
"""Held to start a process and to read its exit code: ``Process.start`` polls every other child,
and two threads polling one forkserver child at once both read its exit code from one pipe, so
that one gets nothing and reports 255 ("the forkserver died")."""


def replay(
    scenario: Path, out: Path, timeout_s: float, env: Mapping[str, str] | None = None
) -> tuple[int, str]:
    """Replay ``scenario`` with its chunks (JSONL) into ``out``; the exit code (-1 if it outlasted
    ``timeout_s``, then killed) and what it printed on stderr."""
    err = out.with_suffix(".stderr")
    process = _FORKSERVER.Process(target=_replay, args=(str(scenario), str(out), str(err), dict(env or {})))
    with _PROCESSES:
        process.start()
    ended = bool(wait([process.sentinel], timeout_s))
    with _PROCESSES:
        if not ended:
            process.kill()
        process.join()
    if not ended:
        return -1, f"timed out after {timeout_s} s: {err.read_text()}"
    assert process.exitcode is not None
    return process.exitcode, err.read_text()
