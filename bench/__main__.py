"""``python -m bench [--quick] [--clock wall|cpu] [--json PATH]``"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from bench.report import show, write_json
from bench.source import CLOCKS, use_clock
from bench.suite import QUICK, Plan, run_suite


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (smoke run)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the results here")
    parser.add_argument(
        "--clock",
        choices=sorted(CLOCKS),
        default="wall",
        help="wall time (default) or this process's CPU time (steadier on a busy machine)",
    )
    args = parser.parse_args()
    use_clock(args.clock)
    plan = QUICK if args.quick else Plan()
    rows = run_suite(plan)
    show(rows, Console())
    if args.json is not None:
        write_json(args.json, plan, rows)


if __name__ == "__main__":
    main()
