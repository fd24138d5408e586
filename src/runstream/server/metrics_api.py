"""Mastra's metrics and logs routes over the span store: ``POST /observability/metrics/aggregate``,
``/breakdown``, ``/timeseries``, ``/percentiles`` (computed from the stored spans, see
:mod:`runstream.observability.metrics`), metric discovery, and ``GET /observability/logs`` (the
``runstream`` loggers' records kept with the run they belong to).

Bodies are checked as Mastra's schemas check them; a bad one is Mastra's 400
``{"error": "Invalid request body", "issues": [{"field", "message"}]}`` naming the field. A
confined caller's metrics and logs are those of its resource.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, field_validator
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from runstream.observability import metric_sql, metrics
from runstream.observability._sql import SqlRow
from runstream.observability.metric_sql import METRIC_DIMENSIONS
from runstream.observability.records import epoch_ms
from runstream.observability.store import SpanStore, iso
from runstream.server.auth import principal_of
from runstream.server.context import ServerContext, json_body, json_response
from runstream.server.errors import ApiError
from runstream.server.observability_api import _json_param, _page, _paging, _param

Text = Annotated[str, StringConstraints(max_length=256)]
_DISTINCT = Literal[
    "entityType",
    "entityName",
    "name",
    "provider",
    "model",
    "environment",
    "serviceName",
    "threadId",
    "resourceId",
]
_LEVELS = ("debug", "info", "warn", "error", "fatal")
_POINTS_PER_METRIC = 100_000
_Model = TypeVar("_Model", bound=BaseModel)


class _DateRange(BaseModel):
    model_config = ConfigDict(extra="ignore")
    start: datetime | None = None
    end: datetime | None = None

    @field_validator("start", "end")
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        """A date without a zone is UTC (as Mastra's ``new Date``)."""
        return value.replace(tzinfo=UTC) if value is not None and value.tzinfo is None else value


class _Filters(BaseModel):
    """Mastra's metric filters; the ones runstream's spans carry narrow the points, any other
    (``userId``, ``experimentId``, ``tags``...) matches nothing stored."""

    model_config = ConfigDict(extra="allow")
    timestamp: _DateRange | None = None
    traceIds: Annotated[list[Text], Field(min_length=1, max_length=1000)] | None = None
    name: Annotated[list[Text], Field(min_length=1, max_length=100)] | None = None
    entityType: Text | None = None
    entityId: Text | None = None
    entityName: Text | None = None
    resourceId: Text | None = None
    threadId: Text | None = None
    runId: Text | None = None
    traceId: Text | None = None
    serviceName: Text | None = None
    environment: Text | None = None
    provider: Text | None = None
    model: Text | None = None


_Names = Annotated[list[Text], Field(min_length=1, max_length=100)]
_GroupBy = Annotated[list[Text], Field(min_length=1, max_length=10)]


class _Aggregate(BaseModel):
    name: _Names
    aggregation: Literal["sum", "avg", "min", "max", "count", "count_distinct", "last"]
    distinctColumn: _DISTINCT | None = None
    filters: _Filters | None = None
    comparePeriod: Literal["previous_period", "previous_day", "previous_week"] | None = None


class _Breakdown(BaseModel):
    name: _Names
    groupBy: _GroupBy
    aggregation: Literal["sum", "avg", "min", "max", "count", "count_distinct", "last"]
    distinctColumn: _DISTINCT | None = None
    filters: _Filters | None = None
    limit: Annotated[int, Field(gt=0, le=1000, strict=True)] | None = None
    orderDirection: Literal["ASC", "DESC"] | None = None


class _TimeSeries(BaseModel):
    name: _Names
    interval: Literal["1m", "5m", "15m", "1h", "1d"]
    aggregation: Literal["sum", "avg", "min", "max", "count", "count_distinct", "last"]
    distinctColumn: _DISTINCT | None = None
    filters: _Filters | None = None
    groupBy: _GroupBy | None = None


class _Percentiles(BaseModel):
    name: Text
    percentiles: Annotated[
        list[Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]], Field(min_length=1, max_length=20)
    ]
    interval: Literal["1m", "5m", "15m", "1h", "1d"]
    filters: _Filters | None = None


def _invalid(issues: list[dict[str, str]]) -> ApiError:
    return ApiError(400, "Invalid request body", issues=issues)


async def _body(request: Request, model: type[_Model]) -> _Model:
    body = await json_body(request)
    try:
        parsed = model.model_validate(body)
    except ValidationError as exc:
        raise _invalid(
            [
                {
                    "field": ".".join(str(part) for part in error["loc"]) or "root",
                    "message": error["msg"],
                }
                for error in exc.errors(include_url=False)
            ]
        ) from None
    if (
        getattr(parsed, "aggregation", None) == "count_distinct"
        and getattr(parsed, "distinctColumn", 1) is None
    ):
        raise _invalid(
            [
                {
                    "field": "distinctColumn",
                    "message": "distinctColumn is required when aggregation is 'count_distinct'",
                }
            ]
        )
    group_by = getattr(parsed, "groupBy", None) or ()
    if unknown := [name for name in group_by if name not in METRIC_DIMENSIONS and name != "name"]:
        raise _invalid([{"field": "groupBy", "message": f"Cannot group metrics by {', '.join(unknown)}"}])
    return parsed


class MetricsRoutes:
    def __init__(self, ctx: ServerContext) -> None:
        self.ctx = ctx

    def routes(self) -> list[Route]:
        return [
            Route("/observability/metrics/aggregate", self.aggregate, methods=["POST"]),
            Route("/observability/metrics/breakdown", self.breakdown, methods=["POST"]),
            Route("/observability/metrics/timeseries", self.time_series, methods=["POST"]),
            Route("/observability/metrics/percentiles", self.percentiles, methods=["POST"]),
            Route("/observability/discovery/metric-names", self.metric_names),
            Route("/observability/discovery/metric-label-keys", self.label_keys),
            Route("/observability/discovery/metric-label-values", self.label_values),
            Route("/observability/logs", self.logs),
        ]

    @property
    def store(self) -> SpanStore | None:
        return self.ctx.runstream.observability

    def _selection(
        self,
        request: Request,
        names: Sequence[str],
        filters: _Filters | None,
        window: tuple[datetime | None, datetime | None] | None = None,
    ) -> metric_sql.Selection | None:
        """The observations of the metrics ``names`` that ``filters`` select (``None``: none)."""
        filters = filters or _Filters()
        extra = filters.model_extra or {}
        if self.store is None or any(value is not None for value in extra.values()):
            return None
        if window is None:
            window = (filters.timestamp.start, filters.timestamp.end) if filters.timestamp else (None, None)
        wanted = [
            metric_sql.Member(name, *metrics.METRICS[name])
            for name in names
            if name in metrics.METRICS and (not filters.name or name in filters.name)
        ]
        if not wanted:
            return None
        return metric_sql.Selection(
            wanted,
            {
                key: value
                for key in METRIC_DIMENSIONS
                if isinstance(value := getattr(filters, key, None), str)
            },
            start=None if window[0] is None else epoch_ms(iso(window[0])),
            end=None if window[1] is None else epoch_ms(iso(window[1])),
            resource_id=principal_of(request).resource_id,
            trace_ids=filters.traceIds,
            limit=_POINTS_PER_METRIC,
        )

    async def _groups(
        self,
        selection: metric_sql.Selection | None,
        aggregation: str,
        distinct: str | None,
        group_by: Sequence[str] = (),
        step: int | None = None,
    ) -> list[SqlRow]:
        """The selection aggregated per group (and per bucket of ``step`` seconds: a series)."""
        if selection is None or self.store is None:
            return []
        store = self.store
        return await asyncio.to_thread(
            lambda: store.metric_groups(
                selection,
                aggregation=aggregation,
                distinct=distinct,
                group_by=group_by,
                series=step is not None,
                step=step,
            )
        )

    async def _value(
        self, selection: metric_sql.Selection | None, aggregation: str, distinct: str | None
    ) -> float | None:
        """One aggregate over the selection (``count``s are 0, others Mastra's null, over nothing)."""
        rows = await self._groups(selection, aggregation, distinct)
        if not rows:
            return 0.0 if aggregation in ("count", "count_distinct") else None
        return metrics.number(rows[0]["value"])

    async def aggregate(self, request: Request) -> Response:
        body = await _body(request, _Aggregate)
        value = await self._value(
            self._selection(request, body.name, body.filters), body.aggregation, body.distinctColumn
        )
        previous = None
        timestamp = body.filters.timestamp if body.filters else None
        if body.comparePeriod and timestamp and timestamp.start and timestamp.end:
            window = metrics.previous_window(timestamp.start, timestamp.end, body.comparePeriod)
            earlier = self._selection(request, body.name, body.filters, window)
            previous = await self._value(earlier, body.aggregation, body.distinctColumn)
        return json_response(
            {
                "value": value,
                "estimatedCost": None,
                "costUnit": None,
                "previousValue": previous,
                "previousEstimatedCost": None,
                "changePercent": metrics.change_percent(value, previous),
                "costChangePercent": None,
            }
        )

    async def breakdown(self, request: Request) -> Response:
        body = await _body(request, _Breakdown)
        selection = self._selection(request, body.name, body.filters)
        rows = await self._groups(selection, body.aggregation, body.distinctColumn, body.groupBy)
        groups = metrics.breakdown(
            rows, body.groupBy, limit=body.limit, descending=body.orderDirection != "ASC"
        )
        return json_response(
            {"groups": [{**group, "estimatedCost": None, "costUnit": None} for group in groups]}
        )

    async def time_series(self, request: Request) -> Response:
        body = await _body(request, _TimeSeries)
        selection = self._selection(request, body.name, body.filters)
        rows = await self._groups(
            selection,
            body.aggregation,
            body.distinctColumn,
            body.groupBy or (),
            _seconds(body.interval),
        )
        series = metrics.time_series(rows, body.name[0] if len(body.name) == 1 else ",".join(body.name))
        return json_response(
            {"series": [{**one, "costUnit": None, "points": _dated(one["points"])} for one in series]}
        )

    async def percentiles(self, request: Request) -> Response:
        body = await _body(request, _Percentiles)
        selection = self._selection(request, [body.name], body.filters)
        buckets: dict[int, list[float]] = {}
        if selection is not None and self.store is not None:
            buckets = await asyncio.to_thread(
                self.store.metric_percentiles, selection, body.percentiles, _seconds(body.interval)
            )
        series = metrics.percentile_series(buckets, body.percentiles)
        return json_response({"series": [{**one, "points": _dated(one["points"])} for one in series]})

    # -- discovery --------------------------------------------------------------------------------
    async def metric_names(self, request: Request) -> Response:
        prefix = _param(request, {}, "prefix") or ""
        names = [name for name in metrics.METRICS if name.startswith(prefix)]
        return json_response({"names": names})

    async def label_keys(self, request: Request) -> Response:
        _param(request, {}, "metricName")
        return json_response({"keys": []})  # runstream's metrics carry no labels

    async def label_values(self, request: Request) -> Response:
        _param(request, {}, "metricName")
        _param(request, {}, "labelKey")
        return json_response({"values": []})

    # -- logs -------------------------------------------------------------------------------------
    async def logs(self, request: Request) -> Response:
        """``GET /observability/logs``: filters ``traceId``, ``runId``, ``resourceId``, ``level``
        (one or a JSON list), ``timestamp`` (``{"start", "end"}``), flat or in a JSON ``filters``."""
        nested = _json_param(request, "filters")
        page, per_page = _paging(request)
        filters = {
            key: value
            for key in ("traceId", "runId", "resourceId")
            if (value := _param(request, nested, key))
        }
        levels = _levels(request.query_params.get("level", nested.get("level")))
        start, end = _range(request.query_params.get("timestamp", nested.get("timestamp")))
        direction = (_param(request, _json_param(request, "orderBy"), "direction") or "DESC").upper()
        if direction not in ("ASC", "DESC"):
            raise ApiError(400, "Query parameter 'direction' must be ASC or DESC")
        if self.store is None:
            return _page("logs", [], 0, page, per_page)
        items, total = await asyncio.to_thread(
            self.store.list_logs,
            filters=filters,
            levels=levels,
            start=start,
            end=end,
            page=page,
            per_page=per_page,
            ascending=direction == "ASC",
            resource_id=principal_of(request).resource_id,
        )
        return _page("logs", items, total, page, per_page)


def _seconds(interval: str) -> int:
    return int(metrics.INTERVALS[interval].total_seconds())


def _dated(points: Sequence[metrics.SeriesPoint]) -> list[dict[str, object]]:
    return [{**point, "timestamp": iso(point["timestamp"])} for point in points]


def _levels(raw: Any) -> list[str]:
    """``level``: one level, or a JSON list of them (400 naming the field otherwise)."""
    if raw is None or raw == "":
        return []
    if isinstance(raw, str) and raw.startswith("["):
        raw = _loads(raw, "level")
    levels = raw if isinstance(raw, list) else [raw]
    if not levels or any(level not in _LEVELS for level in levels):
        raise ApiError(400, f"Query parameter 'level' must be one or a list of {', '.join(_LEVELS)}")
    return [str(level) for level in levels]


def _range(raw: Any) -> tuple[datetime | None, datetime | None]:
    if raw is None or raw == "":
        return None, None
    value = _loads(raw, "timestamp") if isinstance(raw, str) else raw
    try:
        parsed = _DateRange.model_validate(value)
    except ValidationError:
        raise ApiError(400, "Query parameter 'timestamp' must be an object with ISO 8601 start/end") from None
    return parsed.start, parsed.end


def _loads(raw: str, name: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        raise ApiError(400, f"Query parameter {name!r} must be JSON") from None
