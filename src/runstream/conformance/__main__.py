"""``python -m runstream.conformance SCENARIO.json``: the scenario's chunks as JSONL on stdout."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys

from runstream.conformance.runner import ScenarioRunner, UnsupportedScenario
from runstream.conformance.temporal import TEMPORAL_ENV


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m runstream.conformance", description=__doc__)
    parser.add_argument("scenario", help="path to a scenario JSON file")
    args = parser.parse_args(argv)
    with open(args.scenario, encoding="utf-8") as fh:
        scenario = json.load(fh)
    timeout = scenario.get("timeoutMs", 60000) / 1000
    try:
        asyncio.run(asyncio.wait_for(ScenarioRunner(scenario, sys.stdout).run(), timeout))
    except UnsupportedScenario as exc:
        print(f"unsupported scenario {scenario.get('name')}: {exc}", file=sys.stderr)
        return 3
    finally:
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    code = main()
    if os.environ.get(TEMPORAL_ENV):
        from runstream.tasks.temporal.worker import exit_process

        exit_process(code)
    sys.exit(code)
