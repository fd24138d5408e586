"""Mastra's ``/api/observability`` routes over the runtime's span store (``Runstream(observability=
SpanStore(...))``): traces (their root spans, filtered, sorted, paged), a trace's span tree, a
span, scores and feedback (created and listed), and discovery of entity types and names, service
names and environments.

Without a span store the lists are empty, as Mastra answers when it stores no traces. A confined
caller sees only its resource's traces, scores and feedback; another resource's trace answers 404
like a missing one.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from runstream._json import JsonObject
from runstream.background_scoring import Job, ScoringQueueFullError
from runstream.observability.store import TRACE_FILTERS, TRACE_ORDER, SpanStore, TraceQuery
from runstream.observability.trace_query import TraceQueryError, plan_trace_query
from runstream.scoring import Scorer
from runstream.server.auth import principal_of
from runstream.server.context import ServerContext, json_body, json_response, query_date, query_int
from runstream.server.errors import ApiError
from runstream.server.limits import MAX_METADATA_BYTES, MAX_PAGE, bounded_number, check_id, parse_json
from runstream.server.trace_scoring import score_input, scoring_job, target_span

MAX_PER_PAGE = 100
MAX_SCORE_TARGETS = 20
"""Traces one ``traces/score`` request may score (each runs the scorer once, in the background)."""
MAX_TRACE_QUERY_BYTES = 256 * 1024
"""Mastra's body limit for a trace query (413 above it)."""
_HEAVY = frozenset({"input", "output", "attributes", "metadata", "tags", "links"})
_MAX_TEXT = 10_000
_SIGNALS = {"score": ("scores", "scorerId"), "feedback": ("feedback", "feedbackType")}
_SCORE_TEXT = (
    "scorerName",
    "scorerVersion",
    "scoreSource",
    "source",
    "reason",
    "experimentId",
    "scoreTraceId",
)
_FEEDBACK_TEXT = ("feedbackSource", "source", "comment", "experimentId", "feedbackUserId", "userId")


def _json_param(request: Request, name: str) -> JsonObject:
    """A query parameter holding a JSON object (how Mastra's client sends ``filters`` and
    ``pagination``); 400 naming it when it is not one."""
    raw = request.query_params.get(name)
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise ApiError(400, f"Query parameter {name!r} must be a JSON object")
    return value


def _param(request: Request, nested: JsonObject, name: str) -> str | None:
    value = request.query_params.get(name, nested.get(name))
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) > 256 or "\x00" in value:
        raise ApiError(400, f"Query parameter {name!r} must be a string of at most 256 characters")
    return value


def _paging(request: Request) -> tuple[int, int]:
    nested = _json_param(request, "pagination")
    given = {"page": 0, "perPage": 10}
    for name in ("page", "perPage"):
        if name in nested and name not in request.query_params:
            value = nested[name]
            if isinstance(value, bool) or not isinstance(value, int):
                raise ApiError(400, f"Query parameter 'pagination.{name}' must be an integer")
            given[name] = value
    page = query_int(request, "page", None, maximum=MAX_PAGE)
    per_page = query_int(request, "perPage", None, minimum=1, maximum=MAX_PER_PAGE)
    page = page if page is not None else given["page"]
    per_page = per_page if per_page is not None else given["perPage"]
    if not 0 <= page <= MAX_PAGE or not 1 <= per_page <= MAX_PER_PAGE:
        raise ApiError(
            400, f"Pagination must have page from 0 to {MAX_PAGE} and perPage from 1 to {MAX_PER_PAGE}"
        )
    return page, per_page


def _page(key: str, items: Sequence[Mapping[str, object]], total: int, page: int, per_page: int) -> Response:
    pagination = {"total": total, "page": page, "perPage": per_page, "hasMore": (page + 1) * per_page < total}
    return json_response({key: items, "pagination": pagination})


def _score_row(score: Mapping[str, object]) -> dict[str, object]:
    """An observability score record in the scores domain's row shape (``scoreRowDataSchema``)."""
    return {
        "id": score["scoreId"],
        "scorerId": score["scorerId"],
        "entityId": score.get("entityId") or score.get("spanId") or score.get("traceId") or "",
        "runId": score.get("runId") or score.get("traceId") or "",
        "score": score["score"],
        "reason": score.get("reason"),
        "scorer": {"id": score["scorerId"], "name": score.get("scorerName") or score["scorerId"]},
        "source": score.get("scoreSource") or score.get("source") or "LIVE",
        "entity": {"id": score["entityId"], "name": score.get("entityName")} if score.get("entityId") else {},
        "metadata": score.get("metadata"),
        "traceId": score.get("traceId"),
        "spanId": score.get("spanId"),
        "createdAt": score["timestamp"],
        "updatedAt": score["timestamp"],
    }


class ObservabilityRoutes:
    def __init__(self, ctx: ServerContext) -> None:
        self.ctx = ctx

    def routes(self) -> list[Route]:
        return [
            Route("/observability/traces", self.traces),
            Route("/observability/traces/light", self.traces),
            Route("/observability/traces/query", self.query_traces, methods=["POST"]),
            Route("/observability/traces/score", self.score_traces, methods=["POST"]),
            Route("/observability/traces/{trace_id}", self.trace),
            Route("/observability/traces/{trace_id}/light", self.trace_light),
            Route("/observability/traces/{trace_id}/spans/{span_id}", self.span),
            Route("/observability/traces/{trace_id}/{span_id}/scores", self.span_scores),
            Route("/observability/scores", self.scores, methods=["GET", "POST"]),
            Route("/observability/feedback", self.feedback, methods=["GET", "POST"]),
            Route("/observability/discovery/entity-types", self.entity_types),
            Route("/observability/discovery/entity-names", self.entity_names),
            Route("/observability/discovery/service-names", self.discovery("service_name", "serviceNames")),
            Route("/observability/discovery/environments", self.discovery("environment", "environments")),
            Route("/observability/discovery/tags", self.tags),
        ]

    @property
    def store(self) -> SpanStore | None:
        return self.ctx.runstream.observability

    async def _owned_trace(self, request: Request, trace_id: str) -> SpanStore:
        """The store, once the caller may see ``trace_id`` (404 naming it otherwise)."""
        return (await self._trace_and_owner(request, trace_id))[0]

    async def _trace_and_owner(self, request: Request, trace_id: str) -> tuple[SpanStore, str | None]:
        """The store and the trace's resource, once the caller may see ``trace_id``."""
        store = self.store
        exists, owner = (
            await asyncio.to_thread(store.trace_owner, trace_id) if store is not None else (False, None)
        )
        if store is None or not exists or not principal_of(request).owns(owner):
            raise ApiError(404, f"Trace with id {trace_id} not found")
        return store, owner

    # -- traces -----------------------------------------------------------------------------------
    async def traces(self, request: Request) -> Response:
        filters_param = _json_param(request, "filters")
        order = _json_param(request, "orderBy")
        page, per_page = _paging(request)
        filters = {key: value for key in TRACE_FILTERS if (value := _param(request, filters_param, key))}
        status = _param(request, filters_param, "status")
        if status is not None and status not in ("error", "success"):
            raise ApiError(400, "Query parameter 'status' must be 'error' or 'success'")
        field = _param(request, order, "field") or "startedAt"
        direction = (_param(request, order, "direction") or "DESC").upper()
        if field not in TRACE_ORDER or direction not in ("ASC", "DESC"):
            raise ApiError(
                400, "Query parameter 'orderBy' must be field startedAt|endedAt, direction ASC|DESC"
            )
        query = TraceQuery(
            filters=filters,
            status=status,
            start=query_date(request, "startDate"),
            end=query_date(request, "endDate"),
            order_by=field,
            ascending=direction == "ASC",
            page=page,
            per_page=per_page,
            resource_id=principal_of(request).resource_id,
        )
        if self.store is None:
            return _page("spans", [], 0, page, per_page)
        spans, total = await asyncio.to_thread(self.store.list_traces, query)
        return _page("spans", spans, total, page, per_page)

    async def query_traces(self, request: Request) -> Response:
        """Mastra's advanced trace query (Studio's Traces pages): errors in its shapes, 422 with
        the issues for a query it refuses."""
        raw = await request.body()
        if len(raw) > MAX_TRACE_QUERY_BYTES:
            return json_response({"error": "Request body too large"}, status=413)
        try:
            body = parse_json(raw) if raw.strip() else None
        except ApiError as exc:
            body, problem = None, exc.message
        else:
            problem = "Expected a JSON object"
        if not isinstance(body, dict):
            issue = {"field": "body", "message": problem}
            return json_response({"error": "Invalid request body", "issues": [issue]}, status=400)
        store = self.store
        try:
            query = plan_trace_query(
                body,
                dialect=store.dialect if store is not None else "sqlite",
                resource_id=principal_of(request).resource_id,
            )
        except TraceQueryError as exc:
            return json_response(exc.body, status=exc.status)
        if store is None:
            return json_response(
                {
                    "code": "TRACE_QUERY_UNSUPPORTED",
                    "message": "Observability storage domain is not available",
                },
                status=501,
            )
        return json_response(await asyncio.to_thread(store.query_traces, query))

    async def trace(self, request: Request) -> Response:
        trace_id = request.path_params["trace_id"]
        store = await self._owned_trace(request, trace_id)
        return json_response(
            {"traceId": trace_id, "spans": await asyncio.to_thread(store.get_trace, trace_id)}
        )

    async def trace_light(self, request: Request) -> Response:
        """client-js ``getTraceLight``: the spans without their heavy fields (timeline only)."""
        trace_id = request.path_params["trace_id"]
        store = await self._owned_trace(request, trace_id)
        spans = await asyncio.to_thread(store.get_trace, trace_id)
        light = [{k: v for k, v in span.items() if k not in _HEAVY} for span in spans]
        return json_response({"traceId": trace_id, "spans": light})

    async def span(self, request: Request) -> Response:
        trace_id, span_id = request.path_params["trace_id"], request.path_params["span_id"]
        store = await self._owned_trace(request, trace_id)
        span = await asyncio.to_thread(store.get_span, trace_id, span_id)
        if span is None:
            raise ApiError(404, f"Span with id {span_id} not found in trace {trace_id}")
        return json_response({"span": span})

    async def span_scores(self, request: Request) -> Response:
        """A span's scores as Mastra's scores domain lists them (Studio's Scores tab of a trace)."""
        trace_id, span_id = request.path_params["trace_id"], request.path_params["span_id"]
        store = await self._owned_trace(request, trace_id)
        page = query_int(request, "page", 0) or 0
        per_page = query_int(request, "perPage", 10, minimum=1, maximum=MAX_PER_PAGE) or 10
        scores, total = await asyncio.to_thread(
            store.list_signals,
            "score",
            filters={"traceId": trace_id, "spanId": span_id},
            page=page,
            per_page=per_page,
        )
        return _page("scores", [_score_row(score) for score in scores], total, page, per_page)

    async def score_traces(self, request: Request) -> Response:
        """Mastra's ``score`` (Studio's "Score trace"): a registered scorer run over each target
        span's input and output as stored, its score kept on the span. The body, the scorer and
        every target (found, the caller's, with a stored output) are checked here; the scorer
        runs then go to the runtime's :class:`~runstream.background_scoring.ScoringRunner` and the
        answer comes at once, as Mastra's (a full runner: 429, nothing started)."""
        body = await json_body(request)
        name = check_id(body.get("scorerName"), "scorerName")
        targets = body.get("targets")
        if not isinstance(targets, list) or not 1 <= len(targets) <= MAX_SCORE_TARGETS:
            raise ApiError(
                400, f"Invalid request body: 'targets' must be a list of 1 to {MAX_SCORE_TARGETS} targets"
            )
        scorer = self.ctx.runstream.scorers.get(name)
        if scorer is None:
            raise ApiError(404, f"Scorer '{name}' not found")
        jobs = [await self._score_job(request, scorer, index, target) for index, target in enumerate(targets)]
        try:
            self.ctx.runstream.scoring.submit(jobs)
        except ScoringQueueFullError as exc:
            raise ApiError(429, str(exc), headers={"Retry-After": "1"}) from None
        noun = "trace" if len(targets) == 1 else "traces"
        return json_response(
            {
                "status": "success",
                "message": f"Scoring started for {len(targets)} {noun}",
                "traceCount": len(targets),
            }
        )

    async def _score_job(self, request: Request, scorer: Scorer, index: int, target: object) -> Job:
        """The scorer run for ``targets[index]``, once the target is checked (400/404 otherwise)."""
        if not isinstance(target, dict):
            raise ApiError(400, f"Invalid request body: 'targets.{index}' must be an object")
        trace_id = check_id(target.get("traceId"), f"targets.{index}.traceId")
        span_id = target.get("spanId")
        if span_id is not None:
            span_id = check_id(span_id, f"targets.{index}.spanId")
        store, owner = await self._trace_and_owner(request, trace_id)
        spans = await asyncio.to_thread(store.get_trace, trace_id)
        span = target_span(spans, span_id)
        if span is None:
            raise ApiError(404, f"Span with id {span_id} not found in trace {trace_id}")
        data = score_input(spans, span)
        if data is None:
            raise ApiError(
                400,
                f"Trace {trace_id} has no stored output to score: spans keep message content "
                "only when it is captured (OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true)",
            )
        return scoring_job(scorer, data, span, store, owner)

    # -- scores and feedback ----------------------------------------------------------------------
    async def scores(self, request: Request) -> Response:
        return await self._signals(request, "score")

    async def feedback(self, request: Request) -> Response:
        return await self._signals(request, "feedback")

    async def _signals(self, request: Request, kind: str) -> Response:
        key, name_field = _SIGNALS[kind]
        principal = principal_of(request)
        if request.method == "POST":
            record = await self._signal_body(request, kind)
            owner = principal.resource_id
            trace_id = record.get("traceId")
            if isinstance(trace_id, str):
                exists, trace_owner = (
                    await asyncio.to_thread(self.store.trace_owner, trace_id)
                    if self.store is not None
                    else (False, None)
                )
                if not exists or not principal.owns(trace_owner):
                    raise ApiError(404, f"Trace with id {trace_id} not found")
                owner = trace_owner
            if self.store is None:
                raise ApiError(501, "Observability storage domain is not available")
            await asyncio.to_thread(self.store.add_signal, kind, record, owner)
            return json_response({"success": True})
        nested = _json_param(request, "filters")
        page, per_page = _paging(request)
        filters = {
            column: value
            for column, name in (("traceId", "traceId"), ("spanId", "spanId"), ("name", name_field))
            if (value := _param(request, nested, name))
        }
        if self.store is None:
            return _page(key, [], 0, page, per_page)
        items, total = await asyncio.to_thread(
            self.store.list_signals,
            kind,
            filters=filters,
            page=page,
            per_page=per_page,
            resource_id=principal.resource_id,
        )
        return _page(key, items, total, page, per_page)

    @staticmethod
    async def _signal_body(request: Request, kind: str) -> JsonObject:
        """Mastra's ``{"score": {...}}`` / ``{"feedback": {...}}`` body, checked field by field."""
        body = await json_body(request)
        record = body.get(kind)
        if not isinstance(record, dict):
            raise ApiError(400, f"Invalid request body: '{kind}' must be an object")
        checked: JsonObject = {}
        if kind == "score":
            checked["scorerId"] = check_id(record.get("scorerId"), "score.scorerId")
            checked["score"] = bounded_number(record.get("score"), "score.score", minimum=-1e12, maximum=1e12)
            texts: tuple[str, ...] = _SCORE_TEXT
        else:
            checked["feedbackType"] = check_id(record.get("feedbackType"), "feedback.feedbackType")
            value = record.get("value")
            if isinstance(value, str):
                if len(value) > _MAX_TEXT:
                    raise ApiError(400, f"Invalid request body: 'feedback.value' is longer than {_MAX_TEXT}")
                checked["value"] = value
            else:
                checked["value"] = bounded_number(value, "feedback.value", minimum=-1e12, maximum=1e12)
            texts = _FEEDBACK_TEXT
        for name in ("traceId", "spanId"):
            if record.get(name) is not None:
                checked[name] = check_id(record[name], f"{kind}.{name}")
        for name in texts:
            value = record.get(name)
            if value is None:
                continue
            if not isinstance(value, str) or len(value) > _MAX_TEXT:
                raise ApiError(
                    400,
                    f"Invalid request body: '{kind}.{name}' must be a string of at most {_MAX_TEXT} characters",
                )
            checked[name] = value
        metadata = record.get("metadata")
        if metadata is not None:
            if not isinstance(metadata, dict) or len(orjson.dumps(metadata)) > MAX_METADATA_BYTES:
                raise ApiError(
                    400,
                    f"Invalid request body: '{kind}.metadata' must be an object of at most "
                    f"{MAX_METADATA_BYTES} bytes as JSON",
                )
            checked["metadata"] = metadata
        return checked

    # -- discovery --------------------------------------------------------------------------------
    async def _distinct(self, request: Request, column: str, entity_type: str | None = None) -> list[str]:
        if self.store is None:
            return []
        return await asyncio.to_thread(
            self.store.distinct,
            column,
            entity_type=entity_type,
            resource_id=principal_of(request).resource_id,
        )

    async def entity_types(self, request: Request) -> Response:
        return json_response({"entityTypes": await self._distinct(request, "entity_type")})

    async def entity_names(self, request: Request) -> Response:
        entity_type = _param(request, {}, "entityType")
        return json_response({"names": await self._distinct(request, "entity_name", entity_type)})

    def discovery(self, column: str, key: str) -> Callable[[Request], Awaitable[Response]]:
        async def answer(request: Request) -> Response:
            return json_response({key: await self._distinct(request, column)})

        return answer

    async def tags(self, request: Request) -> Response:
        return json_response({"tags": []})  # runstream's spans carry no tags
