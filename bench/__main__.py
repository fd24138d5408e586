"""``python -m bench [--quick] [--json PATH]``"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from bench.report import show, write_json
from bench.suite import QUICK, Plan, run_suite


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (smoke run)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the results here")
    args = parser.parse_args()
    plan = QUICK if args.quick else Plan()
    rows = run_suite(plan)
    show(rows, Console())
    if args.json is not None:
        write_json(args.json, plan, rows)


if __name__ == "__main__":
    main()
