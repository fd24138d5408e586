"""Mastra's metrics, computed from the stored spans (no second write path).

Mastra records a metric observation per span as it ends; runstream derives the same observations
from the span store when asked: ``mastra_agent_duration_ms`` per agent run (a continuation turn
is a run of its own), ``mastra_workflow_duration_ms`` per workflow run, ``mastra_tool_duration_ms``
per tool call, ``mastra_model_duration_ms`` and the token counts per model call. Aggregates,
breakdowns, time series and percentiles are computed here over those points, the same way
whichever backend stored them.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TypeAlias, TypedDict

from runstream.observability._sql import SqlValue

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

Point: TypeAlias = Mapping[str, SqlValue]
"""An observation (``SpanStore.metric_points``): ``timestamp`` (ISO text), ``value``, the
dimensions metrics filter and group by, and ``name`` once the server adds it."""


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


def _number(value: SqlValue) -> float:
    """A point's ``value`` (the store keeps only points with one)."""
    return float(value or 0)


def aggregate(points: Sequence[Point], aggregation: str, distinct_column: str | None = None) -> float | None:
    """One value over ``points`` (``None`` when there are none, as Mastra's null)."""
    if aggregation == "count":
        return float(len(points))
    if aggregation == "count_distinct":
        assert distinct_column is not None
        return float(len({point.get(distinct_column) for point in points} - {None}))
    if not points:
        return None
    values = [_number(point["value"]) for point in points]
    if aggregation == "sum":
        return math.fsum(values)
    if aggregation == "avg":
        return math.fsum(values) / len(values)
    if aggregation == "min":
        return min(values)
    if aggregation == "max":
        return max(values)
    return values[-1]  # last: points are oldest first


def change_percent(value: float | None, previous: float | None) -> float | None:
    if value is None or previous is None or previous == 0:
        return None
    return (value - previous) / abs(previous) * 100


def previous_window(start: datetime, end: datetime, period: str) -> tuple[datetime, datetime]:
    shift = {"previous_day": timedelta(days=1), "previous_week": timedelta(weeks=1)}.get(period, end - start)
    return start - shift, end - shift


def group_key(point: Point, group_by: Sequence[str]) -> tuple[str | None, ...]:
    return tuple(None if point.get(name) is None else str(point.get(name)) for name in group_by)


def breakdown(
    points: Sequence[Point],
    group_by: Sequence[str],
    aggregation: str,
    *,
    distinct_column: str | None,
    limit: int | None,
    descending: bool,
) -> list[Group]:
    groups: dict[tuple[str | None, ...], list[Point]] = defaultdict(list)
    for point in points:
        groups[group_key(point, group_by)].append(point)
    values = sorted(
        ((aggregate(members, aggregation, distinct_column) or 0.0, key) for key, members in groups.items()),
        key=lambda pair: pair[0],
        reverse=descending,
    )
    rows: list[Group] = [
        {"dimensions": dict(zip(group_by, key, strict=True)), "value": value} for value, key in values
    ]
    return rows[:limit] if limit is not None else rows


def bucket(moment: str, interval: timedelta) -> datetime:
    """The start of ``interval``'s bucket holding the ISO timestamp ``moment`` (UTC-aligned)."""
    seconds = datetime.fromisoformat(moment).timestamp()
    step = interval.total_seconds()
    return datetime.fromtimestamp(seconds // step * step, UTC)


def _buckets(points: Iterable[Point], interval: timedelta) -> dict[datetime, list[Point]]:
    buckets: dict[datetime, list[Point]] = defaultdict(list)
    for point in points:
        buckets[bucket(str(point["timestamp"]), interval)].append(point)
    return dict(sorted(buckets.items()))


def time_series(
    points: Sequence[Point],
    name: str,
    interval: timedelta,
    aggregation: str,
    *,
    distinct_column: str | None,
    group_by: Sequence[str] | None,
) -> list[Series]:
    """Series of ``{timestamp, value}`` buckets: one named ``name``, or one per group (named by
    the group's values joined with ``|``)."""
    grouped: dict[str, list[Point]] = defaultdict(list)
    for point in points:
        key = name if not group_by else "|".join(value or "" for value in group_key(point, group_by))
        grouped[key].append(point)
    return [
        {
            "name": key,
            "points": [
                {"timestamp": moment, "value": aggregate(members, aggregation, distinct_column) or 0.0}
                for moment, members in _buckets(series, interval).items()
            ],
        }
        for key, series in grouped.items()
    ]


def percentile(values: Sequence[float], fraction: float) -> float:
    """Linear interpolation between the closest ranks (PostgreSQL's ``percentile_cont``)."""
    ordered = sorted(values)
    rank = fraction * (len(ordered) - 1)
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def percentile_series(
    points: Sequence[Point], fractions: Sequence[float], interval: timedelta
) -> list[PercentileSeries]:
    buckets = _buckets(points, interval)
    return [
        {
            "percentile": fraction,
            "points": [
                {"timestamp": moment, "value": percentile([_number(p["value"]) for p in members], fraction)}
                for moment, members in buckets.items()
            ],
        }
        for fraction in fractions
    ]
