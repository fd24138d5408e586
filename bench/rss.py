"""Peak RSS growth per concurrent run, measured in a fresh interpreter per measurement.

``python -m bench.rss IMPL RUNS TOKENS`` warms up, notes VmRSS, resets the high-water mark, then
holds ``RUNS`` runs in flight (each stopped after its last text-delta, keeping everything it
holds) and prints the KB of peak growth per run.
"""

from __future__ import annotations

import asyncio
import gc
import subprocess
import sys
from pathlib import Path

from bench.source import Runner, reply
from bench.workloads import RUNNERS

ROOT = Path(__file__).resolve().parent.parent


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")  # VmHWM := VmRSS


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise LookupError(field)


async def _kb_per_run(run: Runner, runs: int, tokens: int) -> float:
    script = reply(tokens)
    await asyncio.gather(*(run(script, True) for _ in range(min(runs, 10))))
    gc.collect()
    base = _status_kb("VmRSS")
    _reset_peak()
    arrived = 0
    all_in, release = asyncio.Event(), asyncio.Event()

    async def hold() -> None:
        nonlocal arrived
        arrived += 1
        if arrived == runs:
            all_in.set()
        await release.wait()

    tasks = [asyncio.ensure_future(run(script, True, hold)) for _ in range(runs)]
    await all_in.wait()
    peak = max(_status_kb("VmHWM"), _status_kb("VmRSS"))
    release.set()
    await asyncio.gather(*tasks)
    return (peak - base) / runs


def kb_per_run(impl: str, runs: int, tokens: int) -> float:
    """Run one measurement in a fresh subprocess."""
    done = subprocess.run(
        [sys.executable, "-m", "bench.rss", impl, str(runs), str(tokens)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return float(done.stdout)


if __name__ == "__main__":
    print(asyncio.run(_kb_per_run(RUNNERS[sys.argv[1]], int(sys.argv[2]), int(sys.argv[3]))))
