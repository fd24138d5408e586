"""Mastra's metrics as SQL over ``ai_span_facts`` (SQLite and PostgreSQL): the observations a
request selects, aggregated, grouped, bucketed and ranked by the database.

A metric's observations are the spans of its type with a value (:data:`METRICS`), oldest first
(by ``started_at``, then as written: ``upto``, ``position``), at most ``limit`` per metric. A
request naming several metrics (or one twice) takes each one's in turn: ties in time are ordered
by that metric's place (``k``), then as written, which is what ``last`` and the order of groups (as they
first appear) read. Values, group names and buckets are what Python computed from decoded
batches before (``tests/test_metric_sql.py`` checks them against a plain Python computation).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from runstream.observability._sql import SqlParam

METRIC_COLUMNS = {
    "duration": "duration_ms",
    "input_tokens": "input_tokens",
    "output_tokens": "output_tokens",
}
METRIC_DIMENSIONS = {
    "entityType": "entity_type",
    "entityId": "entity_id",
    "entityName": "entity_name",
    "resourceId": "resource_id",
    "threadId": "thread_id",
    "runId": "run_id",
    "traceId": "trace_id",
    "serviceName": "service_name",
    "environment": "environment",
    "provider": "provider",
    "model": "model",
    "status": "status",
}
"""Metric filters and group-by fields (Mastra's name → a span's column; ``status`` is
``ok``/``error`` as Mastra's metric label, what Studio's Trace Volume chart groups by)."""
COLUMNS = {**METRIC_DIMENSIONS, "name": "name"}
"""Group-by and ``count_distinct`` fields: the dimensions and the metric's ``name``."""
_STATUS = "CASE WHEN has_error = 0 THEN 'ok' ELSE 'error' END"
_POINT = (
    "upto, position, started_ms, trace_id, entity_type, entity_id, entity_name, resource_id, "
    f"thread_id, run_id, service_name, environment, provider, model, {_STATUS} AS status"
)


@dataclass(frozen=True, slots=True)
class Member:
    """One metric of a request: its name, span type and value column (a :data:`METRIC_COLUMNS` key)."""

    name: str
    span_type: str
    column: str


@dataclass(frozen=True, slots=True)
class Selection:
    """The observations a request selects."""

    members: Sequence[Member]
    filters: Mapping[str, str] = field(default_factory=dict)
    """A :data:`METRIC_DIMENSIONS` key → the value it must have."""
    start: int | None = None
    end: int | None = None
    """Bounds of the start, epoch milliseconds (inclusive)."""
    resource_id: str | None = None
    """Confined to one resource's spans."""
    trace_ids: Sequence[str] | None = None
    """Only these traces' spans (applied after ``limit``, as the points were cut before)."""
    limit: int = 100_000


def _member(k: int, member: Member, selection: Selection) -> tuple[str, list[SqlParam]]:
    value = METRIC_COLUMNS[member.column]
    where = ["span_type = ?", f"{value} IS NOT NULL"]
    params: list[SqlParam] = [member.name, member.span_type]
    for bound, operator in ((selection.start, ">="), (selection.end, "<=")):
        if bound is not None:
            where.append(f"started_ms {operator} ?")
            params.append(bound)
    if selection.resource_id is not None:
        where.append("resource_id = ?")
        params.append(selection.resource_id)
    for key, wanted in selection.filters.items():
        where.append(f"{_STATUS if key == 'status' else METRIC_DIMENSIONS[key]} = ?")
        params.append(wanted)
    params.append(selection.limit)
    sql = (
        f"SELECT * FROM (SELECT {k} AS k, CAST(? AS TEXT) AS name, {value} AS value, {_POINT} "
        f"FROM ai_span_facts WHERE {' AND '.join(where)} ORDER BY started_ms, upto, position LIMIT ?) m{k}"
    )
    return sql, params


def points(selection: Selection) -> tuple[str, list[SqlParam]]:
    """The selected observations: ``k``, ``name``, ``value``, ``upto``, ``position``,
    ``started_ms``, ``trace_id`` and the dimensions' columns (``status`` included)."""
    parts = [_member(k, member, selection) for k, member in enumerate(selection.members)]
    params = [param for _, member_params in parts for param in member_params]
    sql = " UNION ALL ".join(part for part, _ in parts)
    if selection.trace_ids is not None:
        sql = f"SELECT * FROM ({sql}) t WHERE trace_id IN ({', '.join('?' for _ in selection.trace_ids)})"
        params.extend(selection.trace_ids)
    return sql, params


def _first(dialect: str) -> str:
    """A text key ordering observations as they come (time, ``k``, ``upto``, ``position``)."""
    if dialect == "postgres":
        return (
            "lpad(started_ms::text, 19, '0') || lpad(k::text, 3, '0') || lpad(upto::text, 19, '0') "
            "|| lpad(position::text, 10, '0')"
        )
    return "printf('%019d%03d%019d%010d', started_ms, k, upto, position)"


def _bucket(step: int) -> str:
    """The start (epoch seconds) of the ``step``-second bucket an observation started in."""
    return f"(started_ms / {int(step) * 1000}) * {int(step)}"


def _aggregate(aggregation: str, distinct: str | None) -> str:
    if aggregation == "count":
        return "COUNT(*)"
    if aggregation == "count_distinct":
        return f"COUNT(DISTINCT {COLUMNS[distinct or 'name']})"
    if aggregation == "last":
        return "MAX(last)"
    return f"{aggregation.upper()}(value)"


def grouped(
    selection: Selection,
    dialect: str,
    *,
    aggregation: str,
    distinct: str | None = None,
    group_by: Sequence[str] = (),
    series: bool = False,
    step: int | None = None,
) -> tuple[str, list[SqlParam]]:
    """A row per group of the selected observations: the ``group_by`` columns (``g0``, ``g1``...)
    or, for a ``series``, their values joined with ``|`` (``series``), the ``bucket`` of ``step``
    seconds when given, the aggregate (``value``) and, when grouped, the key of the group's first
    observation (``first``)."""
    source, params = points(selection)
    keys = [COLUMNS[name] for name in group_by]
    if series:
        keys = [" || '|' || ".join(f"COALESCE({key}, '')" for key in keys)] if keys else []
    if step is not None:
        keys.append(_bucket(step))
        source = f"SELECT * FROM ({source}) s WHERE started_ms IS NOT NULL"
    names = ["series"] if series and group_by else [f"g{i}" for i in range(len(group_by))]
    names += ["bucket"] if step is not None else []
    if aggregation == "last":
        partition = f"PARTITION BY {', '.join(keys)} " if keys else ""
        source = (
            f"SELECT p.*, FIRST_VALUE(value) OVER ({partition}ORDER BY started_ms DESC, k DESC, upto DESC, position DESC) "
            f"AS last FROM ({source}) p"
        )
    selected = ", ".join(f"{key} AS {name}" for key, name in zip(keys, names, strict=True))
    first = f", MIN({_first(dialect)}) AS first" if keys else ""
    sql = f"SELECT {selected + ', ' if selected else ''}{_aggregate(aggregation, distinct)} AS value{first} FROM ({source}) p"
    if keys:
        sql += f" GROUP BY {', '.join(keys)}"
    return sql, params


def percentiles(
    selection: Selection, dialect: str, fractions: Sequence[float], step: int
) -> tuple[str, list[SqlParam]]:
    """PostgreSQL: a row per bucket, ``bucket`` and ``percentiles`` (``percentile_cont`` of each
    fraction). SQLite: the rows of each bucket whose rank (``rn``, from 0, of ``n``) a fraction's
    linear interpolation reads (:func:`~runstream.observability.metrics.interpolate`)."""
    source, params = points(selection)
    values = f"SELECT {_bucket(step)} AS bucket, value FROM ({source}) p WHERE started_ms IS NOT NULL"
    literals = [repr(float(fraction)) for fraction in fractions]
    if dialect == "postgres":
        sql = (
            f"SELECT bucket, percentile_cont(ARRAY[{', '.join(literals)}]::double precision[]) "
            f"WITHIN GROUP (ORDER BY value::double precision) AS percentiles FROM ({values}) v "
            "GROUP BY bucket ORDER BY bucket"
        )
        return sql, params
    ranks = " OR ".join(
        f"rn = CAST({f} * (n - 1) AS INTEGER) OR rn = CAST({f} * (n - 1) AS INTEGER) + 1" for f in literals
    )
    sql = (
        "SELECT bucket, n, rn, value FROM (SELECT bucket, value, "
        "ROW_NUMBER() OVER (PARTITION BY bucket ORDER BY value) - 1 AS rn, "
        f"COUNT(*) OVER (PARTITION BY bucket) AS n FROM ({values}) v) r WHERE {ranks} ORDER BY bucket, rn"
    )
    return sql, params
