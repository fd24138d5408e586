"""Mastra's metrics, computed from the stored spans (no second write path).

Mastra records a metric observation per span as it ends; runstream derives the same observations
from the span store when asked: ``mastra_agent_duration_ms`` per agent run (a continuation turn
is a run of its own), ``mastra_workflow_duration_ms`` per workflow run, ``mastra_tool_duration_ms``
per tool call, ``mastra_model_duration_ms`` and the token counts per model call. The database
aggregates, groups, buckets and ranks them (:mod:`.metric_sql`); this module names the metrics
and shapes its rows into Mastra's answers.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TypedDict

from runstream.observability._sql import SqlRow, SqlValue

METRICS: dict[str, tuple[str, str]] = {
    "mastra_agent_duration_ms": ("agent_run", "duration"),
    "mastra_workflow_duration_ms": ("workflow_run", "duration"),
    "mastra_tool_duration_ms": ("tool_call", "duration"),
    "mastra_model_duration_ms": ("model_generation", "duration"),
    "mastra_model_total_input_tokens": ("model_generation", "input_tokens"),
    "mastra_model_total_output_tokens": ("model_generation", "output_tokens"),
}
"""Metric name → (span type, stored value)."""
AGGREGATIONS = ("sum", "avg", "min", "max", "count", "count_distinct", "last")
INTERVALS = {
    "1m": timedelta(minutes=1),
    "5m": timedelta(minutes=5),
    "15m": timedelta(minutes=15),
    "1h": timedelta(hours=1),
    "1d": timedelta(days=1),
}
COMPARE_PERIODS = ("previous_period", "previous_day", "previous_week")


class Group(TypedDict):
    """A breakdown's group: its dimensions' values and its aggregate."""

    dimensions: dict[str, str | None]
    value: float


class SeriesPoint(TypedDict):
    """A bucket of a series: its start and its aggregate (or percentile)."""

    timestamp: datetime
    value: float


class Series(TypedDict):
    name: str
    points: list[SeriesPoint]


class PercentileSeries(TypedDict):
    percentile: float
    points: list[SeriesPoint]


def number(value: SqlValue) -> float | None:
    """An aggregate as Mastra's number (``None``, Mastra's null, when there was nothing to
    aggregate; PostgreSQL's exact sums and averages of integers come as decimals)."""
    return None if value is None else float(value)


def change_percent(value: float | None, previous: float | None) -> float | None:
    if value is None or previous is None or previous == 0:
        return None
    return (value - previous) / abs(previous) * 100


def previous_window(start: datetime, end: datetime, period: str) -> tuple[datetime, datetime]:
    shift = {"previous_day": timedelta(days=1), "previous_week": timedelta(weeks=1)}.get(period, end - start)
    return start - shift, end - shift


def _in_order(rows: Sequence[SqlRow]) -> list[SqlRow]:
    """Groups as their first observations came."""
    return sorted(rows, key=lambda row: str(row["first"]))


def breakdown(
    rows: Sequence[SqlRow], group_by: Sequence[str], *, limit: int | None, descending: bool
) -> list[Group]:
    """``metric_sql.grouped`` rows as Mastra's groups, by value (ties as they first came)."""
    groups: list[Group] = [
        {
            "dimensions": {
                name: None if row[f"g{i}"] is None else str(row[f"g{i}"]) for i, name in enumerate(group_by)
            },
            "value": number(row["value"]) or 0.0,
        }
        for row in _in_order(rows)
    ]
    groups.sort(key=lambda group: group["value"], reverse=descending)
    return groups[:limit] if limit is not None else groups


def _moment(bucket: SqlValue) -> datetime:
    return datetime.fromtimestamp(int(bucket or 0), UTC)


def time_series(rows: Sequence[SqlRow], name: str) -> list[Series]:
    """``metric_sql.grouped`` rows (per series and bucket) as Mastra's series: one named
    ``name``, or one per group (named by the group's values joined with ``|``)."""
    series: dict[str, list[SeriesPoint]] = defaultdict(list)
    for row in _in_order(rows):
        series[str(row["series"]) if "series" in row else name]
    for row in sorted(rows, key=lambda row: int(row["bucket"] or 0)):
        key = str(row["series"]) if "series" in row else name
        series[key].append({"timestamp": _moment(row["bucket"]), "value": number(row["value"]) or 0.0})
    return [{"name": key, "points": points} for key, points in series.items()]


def interpolate(rows: Sequence[SqlRow], fractions: Sequence[float]) -> dict[int, list[float]]:
    """SQLite's ``metric_sql.percentiles`` rows (the ranks each fraction reads) as each bucket's
    percentiles: linear interpolation between the closest ranks (PostgreSQL's ``percentile_cont``)."""
    ranked: dict[int, dict[int, float]] = defaultdict(dict)
    counts: dict[int, int] = {}
    for row in rows:
        bucket = int(row["bucket"] or 0)
        ranked[bucket][int(row["rn"] or 0)] = float(row["value"] or 0)
        counts[bucket] = int(row["n"] or 0)
    answer: dict[int, list[float]] = {}
    for bucket, values in ranked.items():
        answer[bucket] = []
        for fraction in fractions:
            rank = fraction * (counts[bucket] - 1)
            low = math.floor(rank)
            high = min(low + 1, counts[bucket] - 1)
            answer[bucket].append(values[low] + (values[high] - values[low]) * (rank - low))
    return answer


def percentile_series(
    buckets: Mapping[int, Sequence[float]], fractions: Sequence[float]
) -> list[PercentileSeries]:
    """Each fraction's series over the buckets (bucket start, epoch seconds → its percentiles)."""
    ordered = sorted(buckets.items())
    return [
        {
            "percentile": fraction,
            "points": [{"timestamp": _moment(bucket), "value": values[i]} for bucket, values in ordered],
        }
        for i, fraction in enumerate(fractions)
    ]
