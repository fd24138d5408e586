"""The results as a rich table, plain lines and JSON."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from rich.console import Console
from rich.table import Table

from bench.suite import Plan, Row


def _num(value: float) -> str:
    return f"{value:,.3g}" if abs(value) < 100 else f"{value:,.0f}"


def table(rows: list[Row]) -> Table:
    out = Table(title="runstream vs bare asyncio pipeline (medians)")
    for column in ("figure", "unit", "runstream", "bare", "ratio", "target", ""):
        out.add_column(column, justify="left" if column in ("figure", "target") else "right")
    for r in rows:
        style = {"PASS": "green", "FAIL": "bold red"}.get(r.verdict, "")
        verdict = f"[{style}]{r.verdict}[/]" if style else ""
        out.add_row(r.label, r.unit, _num(r.runstream), _num(r.bare), f"{r.ratio:.2f}x", r.target, verdict)
    return out


def plain_lines(rows: list[Row]) -> list[str]:
    return [
        f"{r.label}: runstream {_num(r.runstream)} {r.unit}, bare {_num(r.bare)} {r.unit}, "
        f"ratio {r.ratio:.2f}x" + (f", target {r.target}: {r.verdict}" if r.verdict else "")
        for r in rows
    ]


def show(rows: list[Row], console: Console) -> None:
    console.print(table(rows))
    for line in plain_lines(rows):
        print(line)


def write_json(path: Path, plan: Plan, rows: list[Row]) -> None:
    data = {
        "plan": asdict(plan),
        "rows": [{**asdict(r), "ratio": r.ratio, "target": r.target, "verdict": r.verdict} for r in rows],
    }
    path.write_text(json.dumps(data, indent=2) + "\n")
