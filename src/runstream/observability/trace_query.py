"""Mastra's advanced trace query (``POST /api/observability/traces/query``, what Studio 1.31's
Traces pages and an agent's Traces tab ask for) compiled to SQL over the span store.

A query selects completed traces (root spans that ended) whose root started inside
``timeRange``, matching a ``where`` predicate: comparisons, membership and presence tests on the
trace's fields (``metadata.<key>`` included), ``and``/``or``/``not``, and ``spans``/``scores``/
``feedback`` clauses (``some``: one related record matches the whole nested predicate; ``none``:
none does). Pages are keyset (``page: {limit, after}``, the default), numbered (``pagination``) or
thread groups (``group: {by: ["threadId"]}``); delta polling is not offered (501, as Mastra for a
store without it).

The request is checked as ``@mastra/core``'s ``traceQueryRequestSchema`` and ``planTraceQuery``
check it (field registry per scope, operators per field, literal types, 100 nodes and 12 levels,
8 related clauses, 1,000 literal units, 31 days); a failure is :class:`TraceQueryError` with
Mastra's status, code and issues. Every value reaches SQL as a parameter; field names come from
the registry below, never from the request.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, TypeAlias, TypedDict

import orjson
from pydantic import BaseModel, ConfigDict, Field, StrictStr, ValidationError

from runstream.errors import InvalidInputError
from runstream.observability._sql import SqlParam

Sql: TypeAlias = tuple[str, list[SqlParam]]
"""A SQL fragment and its parameters (``?`` placeholders)."""


class Issue(TypedDict):
    """One reason a query is refused (Mastra's ``issues`` entry)."""

    code: str
    path: list[str | int]
    message: str


MAX_NODES = 100
MAX_DEPTH = 12
MAX_RELATED = 8
MAX_LITERAL_UNITS = 1000
MAX_STRING_BYTES = 4096
MAX_PATH_BYTES = 128
MAX_RANGE = timedelta(days=31)
_COMPLEXITY = f"Predicates are limited to {MAX_NODES} nodes and {MAX_DEPTH} levels"

STRING_OPS = ("eq", "ne", "in", "notIn", "exists", "notExists")
ORDERED_OPS = (*STRING_OPS, "lt", "lte", "gt", "gte")
PRESENCE_OPS = ("exists", "notExists")
_COMPARE = {"eq": "=", "ne": "<>", "lt": "<", "lte": "<=", "gt": ">", "gte": ">="}

Kind: TypeAlias = Literal["string", "number", "stringOrNumber", "timestamp", "presence"]


@dataclass(frozen=True, slots=True)
class Column:
    """A queryable field: its value kind and where it lives (a column of the scope's table, a
    JSON path in its ``record``, or nowhere: runstream records none, so it is always missing)."""

    kind: Kind
    column: str | None = None
    json: tuple[str, ...] | None = None
    suggestions: bool = False

    @property
    def operators(self) -> tuple[str, ...]:
        return {"string": STRING_OPS, "presence": PRESENCE_OPS}.get(self.kind, ORDERED_OPS)


_STATUS = "CASE WHEN {t}.has_error = 1 THEN 'error' ELSE 'success' END"
_MISSING_STRING = Column("string")
FIELDS: dict[str, dict[str, Column]] = {
    "trace": {
        "traceId": Column("string", "trace_id"),
        "threadId": Column("string", "thread_id"),
        "resourceId": Column("string", "resource_id"),
        "startedAt": Column("timestamp", "started_at"),
        "endedAt": Column("timestamp", "ended_at"),
        "entityName": Column("string", "entity_name", suggestions=True),
        "entityType": Column("string", "entity_type", suggestions=True),
        "environment": Column("string", "environment", suggestions=True),
        "status": Column("string", _STATUS, suggestions=True),
    },
    "spans": {
        "name": Column("string", "name", suggestions=True),
        "spanType": Column("string", "span_type", suggestions=True),
        "model": Column("string", "model", suggestions=True),
        "provider": Column("string", "provider", suggestions=True),
        "startedAt": Column("timestamp", "started_at"),
        "endedAt": Column("timestamp", "ended_at"),
        "durationMs": Column("number", "duration_ms"),
        "status": Column("string", _STATUS, suggestions=True),
        "error": Column("presence", "CASE WHEN {t}.has_error = 1 THEN 1 END"),
        "entityType": Column("string", "entity_type", suggestions=True),
        "entityId": Column("string", "entity_id"),
        "entityName": Column("string", "entity_name", suggestions=True),
        "entityVersionId": _MISSING_STRING,
        "parentEntityVersionId": _MISSING_STRING,
        "rootEntityVersionId": _MISSING_STRING,
    },
    "scores": {
        "scorerId": Column("string", "name", suggestions=True),
        "scorerVersion": Column("string", json=("scorerVersion",), suggestions=True),
        "scoreSource": Column("string", json=("scoreSource",), suggestions=True),
        "score": Column("number", json=("score",)),
        "timestamp": Column("timestamp", "timestamp"),
        "spanId": Column("presence", "span_id"),
        "entityVersionId": _MISSING_STRING,
        "parentEntityVersionId": _MISSING_STRING,
        "rootEntityVersionId": _MISSING_STRING,
    },
    "feedback": {
        "feedbackType": Column("string", "name", suggestions=True),
        "feedbackSource": Column("string", json=("feedbackSource",), suggestions=True),
        "feedbackUserId": Column("string", json=("feedbackUserId",)),
        "sourceId": Column("string", json=("sourceId",)),
        "entityVersionId": _MISSING_STRING,
        "parentEntityVersionId": _MISSING_STRING,
        "rootEntityVersionId": _MISSING_STRING,
        "value": Column("stringOrNumber", json=("value",)),
        "timestamp": Column("timestamp", "timestamp"),
        "comment": Column("presence", json=("comment",)),
    },
}
"""Mastra's ``TRACE_QUERY_FIELD_REGISTRY``, mapped onto the span store's tables."""
_METADATA_COLUMNS = {"runId": "run_id"}
"""Root-span metadata runstream keeps in a column (the rest is read from the stored record)."""
_RELATED = {
    "spans": "SELECT 1 FROM ai_span_rows {t} WHERE {t}.trace_id = r.trace_id",
    "scores": "SELECT 1 FROM ai_signals {t} WHERE {t}.kind = 'score' AND {t}.trace_id = r.trace_id",
    "feedback": "SELECT 1 FROM ai_signals {t} WHERE {t}.kind = 'feedback' AND {t}.trace_id = r.trace_id",
}


class TraceQueryError(InvalidInputError):
    """A trace query Mastra refuses: ``status`` (400 malformed cursor, 409 cursor of another
    query, 422 invalid query, 501 unsupported mode) and its answer ``body``."""

    def __init__(self, status: int, code: str, message: str, issues: Sequence[Issue] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.body: dict[str, object] = {"code": code, "message": message}
        if issues is not None:
            self.body["issues"] = list(issues)


# -- the request's envelope (as core's traceQueryRequestObjectSchema) -------------------------------
class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _TimeRange(_Strict):
    from_: StrictStr = Field(alias="from")
    to: StrictStr


class _Order(_Strict):
    field: Literal["startedAt", "endedAt"]
    direction: Literal["asc", "desc"]


class _Page(_Strict):
    limit: int = Field(default=100, ge=1, le=1000, strict=True)
    after: StrictStr | None = Field(default=None, min_length=1, max_length=8192)


class _Pagination(_Strict):
    page: int = Field(default=0, ge=0, le=1_000_000)
    perPage: int = Field(default=10, ge=1, le=100)


class _Group(_Strict):
    by: tuple[Literal["threadId"]]


class _Request(_Strict):
    timeRange: _TimeRange
    where: dict[str, object] | None = None
    group: _Group | None = None
    orderBy: list[_Order] | None = Field(default=None, min_length=1, max_length=1)
    page: _Page | None = None
    pagination: _Pagination | None = None
    mode: Literal["delta"] | None = None
    after: StrictStr | None = None
    limit: int | None = None


@dataclass(frozen=True, slots=True)
class TraceQueryPlan:
    """A checked trace query, ready to run (:meth:`SpanStore.query_traces`)."""

    start: str
    end: str
    where: Sql | None
    result: Literal["traces", "groups"]
    order_field: str
    descending: bool
    limit: int
    page: int | None
    """Numbered page (``pagination``), or None for keyset pages."""
    after: tuple[str, str] | None
    """Keyset cursor: ``(sort value, traceId)`` for traces, ``("", threadId)`` for groups."""
    binding: str
    resource_id: str | None


def plan_trace_query(body: Mapping[str, object], *, dialect: str, resource_id: str | None) -> TraceQueryPlan:
    """Check a query body and compile it for ``dialect`` (``sqlite``/``postgres``), confined to
    ``resource_id`` when the caller is."""
    try:
        request = _Request.model_validate(body)
    except ValidationError as exc:
        raise TraceQueryError(
            422,
            "TRACE_QUERY_INVALID",
            "The trace query is invalid",
            [
                {
                    "code": "invalid_request",
                    "path": list(error["loc"]),
                    "message": "The value does not match the trace-query request contract",
                }
                for error in exc.errors()
            ],
        ) from None
    issues: list[Issue] = []
    if request.mode == "delta":
        raise TraceQueryError(
            501,
            "TRACE_QUERY_UNSUPPORTED",
            "This storage provider does not support observability delta polling",
        )
    for name in ("after", "limit"):
        if getattr(request, name) is not None:
            issues.append(_issue("invalid_request", [name], f"{name} requires delta mode"))
    if request.page and request.pagination:
        issues.append(
            _issue(
                "pagination_mode_conflict",
                ["pagination"],
                "Trace queries cannot combine keyset and page pagination",
            )
        )
    if request.group and request.pagination:
        issues.append(
            _issue(
                "group_pagination_not_supported",
                ["pagination"],
                "Grouped trace queries do not support page pagination",
            )
        )
    if request.group and request.orderBy:
        issues.append(
            _issue(
                "group_order_not_supported", ["orderBy"], "Grouped trace queries use fixed threadId ordering"
            )
        )
    start, end = _moment(request.timeRange.from_), _moment(request.timeRange.to)
    if start is None or end is None:
        issues.append(_issue("invalid_request", ["timeRange"], "`from` and `to` must be ISO 8601 date-times"))
    elif start >= end:
        issues.append(_issue("invalid_time_range", ["timeRange"], "`from` must be earlier than `to`"))
    elif end - start > MAX_RANGE:
        issues.append(_issue("time_range_too_large", ["timeRange"], "The time range cannot exceed 31 days"))
    where = None
    if request.where is not None:
        where = _Compiler(dialect, issues).predicate(request.where, "trace", ["where"], 1)
    if issues or start is None or end is None:
        raise TraceQueryError(422, "TRACE_QUERY_INVALID", "The trace query is invalid", issues)
    order = request.orderBy[0] if request.orderBy else _Order(field="startedAt", direction="desc")
    result: Literal["traces", "groups"] = "groups" if request.group else "traces"
    range_ = {"from": _iso(start), "to": _iso(end)}
    binding = hashlib.sha256(
        orjson.dumps(
            {
                "timeRange": range_,
                "where": request.where,
                "result": result,
                "orderBy": [order.field, order.direction] if result == "traces" else "threadId",
                "resourceId": resource_id,
            },
            option=orjson.OPT_SORT_KEYS,
        )
    ).hexdigest()
    page = request.page or _Page()
    after = _decode_cursor(page.after, result, binding) if page.after and not request.pagination else None
    return TraceQueryPlan(
        start=range_["from"],
        end=range_["to"],
        where=where,
        result=result,
        order_field="started_at" if order.field == "startedAt" else "ended_at",
        descending=order.direction == "desc",
        limit=request.pagination.perPage if request.pagination else page.limit,
        page=request.pagination.page if request.pagination else None,
        after=after,
        binding=binding,
        resource_id=resource_id,
    )


def encode_cursor(query: TraceQueryPlan, sort_value: str, key: str) -> str:
    """The keyset cursor after a page whose last row had ``sort_value`` and ``key`` (a trace's
    sort value and id; for thread groups, ``key`` is the thread id), bound to the query."""
    values = (
        {"result": "groups", "threadId": key}
        if query.result == "groups"
        else {"result": "traces", "sortValue": sort_value, "traceId": key}
    )
    envelope = {"version": 1, "binding": query.binding, "values": values}
    return base64.urlsafe_b64encode(orjson.dumps(envelope)).decode().rstrip("=")


def _decode_cursor(cursor: str, result: str, binding: str) -> tuple[str, str]:
    try:
        envelope = orjson.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        values = envelope["values"]
        key = (
            ("", values["threadId"])
            if values["result"] == "groups"
            else (values["sortValue"], values["traceId"])
        )
        valid = envelope["version"] == 1 and all(
            isinstance(part, str) for part in (*key, envelope["binding"])
        )
    except (ValueError, binascii.Error, KeyError, TypeError):
        valid = False
    if not valid:
        raise TraceQueryError(400, "TRACE_QUERY_CURSOR_MALFORMED", "The trace query cursor is malformed")
    if envelope["binding"] != binding or values["result"] != result:
        raise TraceQueryError(409, "TRACE_QUERY_CURSOR_CONFLICT", "The cursor does not match the query")
    return key


def _issue(code: str, path: list[str | int], message: str) -> Issue:
    return {"code": code, "path": path, "message": message}


def _moment(text: str) -> datetime | None:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None and "T" in text else None


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


class _Compiler:
    """Checks a predicate tree and compiles it to SQL on ``r`` (the root span) in one walk."""

    def __init__(self, dialect: str, issues: list[Issue]) -> None:
        self.dialect = dialect
        self.issues = issues
        self.nodes = 0
        self.related = 0
        self.literals = 0
        self.aliases = 0

    def fail(self, code: str, path: list[Any], message: str) -> None:
        issue = _issue(code, path, message)
        if issue not in self.issues:
            self.issues.append(issue)

    def predicate(self, node: Any, scope: str, path: list[Any], depth: int, table: str = "r") -> Sql | None:
        self.nodes += 1
        if depth > MAX_DEPTH or self.nodes > MAX_NODES:
            self.fail("predicate_too_complex", path, _COMPLEXITY)
            return None
        if not isinstance(node, dict):
            self.fail("invalid_request", path, "The value does not match the trace-query request contract")
            return None
        collection = next((name for name in _RELATED if name in node), None)
        if collection is not None:
            return self.relation(node, collection, scope, path, depth)
        op = node.get("op")
        if op in ("and", "or") and _shape(node, "args") and isinstance(node["args"], list) and node["args"]:
            parts = [
                self.predicate(arg, scope, [*path, "args", i], depth + 1, table)
                for i, arg in enumerate(node["args"])
            ]
            kept = [part for part in parts if part is not None]
            if not kept:
                return None
            joiner = " AND " if op == "and" else " OR "
            return "(" + joiner.join(sql for sql, _ in kept) + ")", [p for _, params in kept for p in params]
        if op == "not" and _shape(node, "arg"):
            inner = self.predicate(node["arg"], scope, [*path, "arg"], depth + 1, table)
            return (f"(NOT {inner[0]})", inner[1]) if inner else None
        if op in PRESENCE_OPS and _shape(node, "path") and _is_path(node["path"]):
            field = self.field(scope, node["path"], [*path, "path"], op, table)
            if field is None:
                return None
            sql, params = field[1]("presence")
            return f"({sql} IS {'NOT ' if op == 'exists' else ''}NULL)", params
        if op in ("in", "notIn") and _shape(node, "value", "set") and _is_operand(node["value"]):
            return self.membership(node, scope, path, table)
        if (
            op in _COMPARE
            and _shape(node, "left", "right")
            and _is_operand(node["left"])
            and _is_operand(node["right"])
        ):
            return self.comparison(node, scope, path, table)
        self.fail("invalid_request", path, "The value does not match the trace-query request contract")
        return None

    def relation(
        self, node: Mapping[str, Any], collection: str, scope: str, path: list[Any], depth: int
    ) -> Sql | None:
        clause = node[collection]
        if (
            len(node) != 1
            or not isinstance(clause, dict)
            or len(clause) != 1
            or next(iter(clause)) not in ("some", "none")
        ):
            self.fail("invalid_request", path, "The value does not match the trace-query request contract")
            return None
        self.related += 1
        if self.related > MAX_RELATED:
            self.fail(
                "predicate_too_complex",
                path,
                f"Trace queries are limited to {MAX_RELATED} related collection clauses",
            )
        if scope != "trace":
            self.fail(
                "invalid_request",
                path,
                "Related collections cannot be nested inside related-record predicates",
            )
            return None
        quantifier = next(iter(clause))
        self.aliases += 1
        alias = f"q{self.aliases}"
        inner = self.predicate(
            clause[quantifier], collection, [*path, collection, quantifier], depth + 1, alias
        )
        if inner is None:
            return None
        exists = "EXISTS" if quantifier == "some" else "NOT EXISTS"
        return f"({exists} ({_RELATED[collection].format(t=alias)} AND {inner[0]}))", inner[1]

    def membership(self, node: Mapping[str, Any], scope: str, path: list[Any], table: str) -> Sql | None:
        values = node["set"]
        if not isinstance(values, list) or not 1 <= len(values) <= 100:
            self.fail(
                "invalid_request", [*path, "set"], "The value does not match the trace-query request contract"
            )
            return None
        self.literals += len(values)
        if self.literals > MAX_LITERAL_UNITS:
            self.fail(
                "predicate_too_complex",
                [*path, "set"],
                f"Trace queries are limited to {MAX_LITERAL_UNITS} literal units",
            )
        if "path" not in node["value"]:
            self.fail(
                "invalid_operands",
                [*path, "value"],
                "Membership predicates require an allowlisted field path",
            )
            return None
        field = self.field(scope, node["value"]["path"], [*path, "value", "path"], node["op"], table)
        if field is None:
            return None
        column, _ = field
        literals = [_literal(value, column.kind, None) for value in values]
        if any(value is None for value in literals) or len({type(value) for value in literals}) > 1:
            self.fail(
                "invalid_literal",
                [*path, "set"],
                "Membership values must be homogeneous and match the selected field type",
            )
            return None
        sql, params = self.value(field, literals[0])
        negate = "NOT " if node["op"] == "notIn" else ""
        marks = ", ".join("?" for _ in literals)
        return f"({sql} IS NOT NULL AND {sql} {negate}IN ({marks}))", [*params, *params, *literals]

    def comparison(self, node: Mapping[str, Any], scope: str, path: list[Any], table: str) -> Sql | None:
        self.literals += 1
        if self.literals > MAX_LITERAL_UNITS:
            self.fail(
                "predicate_too_complex",
                [*path, "right", "literal"],
                f"Trace queries are limited to {MAX_LITERAL_UNITS} literal units",
            )
        if "path" not in node["left"] or "literal" not in node["right"]:
            self.fail(
                "invalid_operands",
                path,
                "Comparison predicates require a field on the left and a literal on the right",
            )
            return None
        op = node["op"]
        field = self.field(scope, node["left"]["path"], [*path, "left", "path"], op, table)
        if field is None:
            return None
        literal = _literal(node["right"]["literal"], field[0].kind, op)
        if literal is None:
            self.fail(
                "invalid_literal",
                [*path, "right", "literal"],
                "The literal does not match the selected field type",
            )
            return None
        sql, params = self.value(field, literal)
        return f"({sql} IS NOT NULL AND {sql} {_COMPARE[op]} ?)", [*params, *params, literal]

    def field(
        self, scope: str, raw: str, path: list[Any], op: str, table: str
    ) -> tuple[Column, Callable[[str], Sql]] | None:
        """The field at ``raw`` in ``scope`` (issues when not allowed, or ``op`` not for it) and
        a builder of its SQL value (numeric or text, for ``stringOrNumber``)."""
        name = _normalize(raw)
        if scope == "trace" and name.startswith("metadata."):
            key = name[len("metadata.") :]
            if not key or "." in key or len(name.encode()) > MAX_PATH_BYTES:
                self.fail(
                    "invalid_metadata_key", path, "Metadata predicates require one non-empty top-level key"
                )
                return None
            if op not in STRING_OPS:
                self.fail(
                    "operator_not_allowed",
                    [*path[:-1], "op"] if path[-1] == "path" else path,
                    f"Operator {op} is not supported for field {name}",
                )
            return Column("string"), lambda mode: self.metadata(key, table)
        column = FIELDS[scope].get(name)
        if column is None:
            self.fail("field_not_allowed", path, "The predicate field is not allowed here")
            return None
        if op not in column.operators:
            self.fail(
                "operator_not_allowed", _op_path(path), f"Operator {op} is not supported for field {name}"
            )
        return column, lambda mode: self.column(column, table, mode)

    def value(self, field: tuple[Column, Callable[[str], Sql]], literal: Any) -> Sql:
        return field[1]("number" if isinstance(literal, float | int) else "string")

    def column(self, column: Column, table: str, mode: str) -> Sql:
        """The field's SQL value: ``mode`` is ``number`` or ``string`` (which of a
        ``stringOrNumber`` field's values to compare) or ``presence`` (any value)."""
        if column.column is not None:
            sql = column.column.format(t=table) if "{t}" in column.column else f"{table}.{column.column}"
            return sql, []
        if column.json is not None:
            kind = (
                "number"
                if column.kind == "number"
                else mode
                if column.kind == "stringOrNumber"
                else column.kind
            )
            return self.json(f"{table}.record", column.json, "presence" if mode == "presence" else kind)
        return "NULL", []

    def metadata(self, key: str, table: str) -> Sql:
        """A root span's metadata value, trimmed, empty as missing (as Mastra compares them)."""
        params: list[Any] = []
        if key in _METADATA_COLUMNS:
            sql = f"{table}.{_METADATA_COLUMNS[key]}"
        elif key == "otelTraceId":
            sql, params = self.json(f"{table}.record", ("otel", "otelTraceId"), "string")
        else:
            sql, params = self.json(f"{table}.record", ("metadata", key), "string")
        return f"NULLIF(TRIM({sql}), '')", params

    def json(self, column: str, keys: tuple[str, ...], kind: str) -> Sql:
        """A value inside a JSON text column: text for ``string``, a number for ``number``, any
        non-null JSON value for ``presence`` (NULL when absent or of another type)."""
        if self.dialect == "postgres":
            doc = f"({column})::jsonb"
            types = {
                "string": "'string'",
                "number": "'number'",
                "presence": "'string', 'number', 'boolean', 'object', 'array'",
            }
            cast = "::double precision" if kind == "number" else ""
            return (
                f"(CASE WHEN jsonb_typeof({doc} #> ?) IN ({types[kind]}) THEN ({doc} #>> ?){cast} END)",
                [list(keys), list(keys)],
            )
        if any('"' in key or "\\" in key for key in keys):
            return "NULL", []
        json_path = "$" + "".join(f'."{key}"' for key in keys)
        types = {
            "string": "'text'",
            "number": "'integer', 'real'",
            "presence": "'text', 'integer', 'real', 'true', 'false', 'object', 'array'",
        }
        return f"(CASE WHEN json_type({column}, ?) IN ({types[kind]}) THEN json_extract({column}, ?) END)", [
            json_path,
            json_path,
        ]


def _shape(node: Mapping[str, Any], *keys: str) -> bool:
    """Whether the node has exactly ``op`` and ``keys`` (Mastra's predicate objects are strict)."""
    return set(node) == {"op", *keys}


def _is_path(value: Any) -> bool:
    return isinstance(value, str) and bool(value) and len(value.encode()) <= MAX_PATH_BYTES


def _is_operand(value: Any) -> bool:
    if not isinstance(value, dict) or len(value) != 1:
        return False
    if "path" in value:
        return _is_path(value["path"])
    literal = value.get("literal", ...)
    if isinstance(literal, str):
        return len(literal.encode()) <= MAX_STRING_BYTES
    return literal is None or isinstance(literal, bool | int | float)


def _op_path(path: list[Any]) -> list[Any]:
    """The ``op`` beside the offending field path (``[..., "left", "path"]`` → ``[..., "op"]``)."""
    for suffix in (["left", "path"], ["value", "path"], ["path"]):
        if path[-len(suffix) :] == suffix:
            return [*path[: -len(suffix)], "op"]
    return path


def _normalize(path: str) -> str:
    """Mastra's ``normalizePath``: ``${field}`` unwrapped, spaces trimmed."""
    stripped = path.strip()
    if stripped.startswith("${") and stripped.endswith("}") and "}" not in stripped[2:-1]:
        return stripped[2:-1].strip()
    return stripped


def _literal(value: Any, kind: str, op: str | None) -> Any:
    """The literal as the field's kind wants it (None when it does not fit)."""
    number = (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and value == value
        and abs(value) != float("inf")
    )
    if kind == "number" or (kind == "stringOrNumber" and op is not None and op not in STRING_OPS):
        return value if number else None
    if kind == "stringOrNumber":
        return value if number or isinstance(value, str) else None
    if kind == "timestamp":
        moment = _moment(value) if isinstance(value, str) else None
        return _iso(moment) if moment is not None else None
    if kind == "string":
        return value if isinstance(value, str) else None
    return None


def input_preview(value: object, max_length: int = 100) -> str | None:
    """Mastra's ``buildInputPreview``: the user messages' text (OTel message parts included),
    or the input as text, cut at ``max_length``."""
    if value is None:
        return None
    messages = (
        value
        if isinstance(value, list)
        else value.get("messages")
        if isinstance(value, dict) and isinstance(value.get("messages"), list)
        else None
    )
    if messages is not None:
        text = " | ".join(
            t for m in messages if isinstance(m, dict) and m.get("role") == "user" if (t := _message_text(m))
        )
    elif isinstance(value, str):
        text = value.strip()
    else:
        text = orjson.dumps(value, default=str).decode()
    if not text:
        return None
    return text[:max_length] + "…" if len(text) > max_length else text


def _message_text(message: Mapping[str, Any]) -> str:
    content = message.get("content", message.get("parts"))
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    texts = []
    for part in content:
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, dict) and part.get("type") == "text":
            text = part.get("text", part.get("content"))
            if isinstance(text, str) and text:
                texts.append(text)
    return " ".join(texts)


def trace_row(record: Mapping[str, object]) -> dict[str, object]:
    """A root span as a trace-query result row (Mastra's ``traceQueryTraceSchema``)."""
    error = record.get("error")
    return {
        "traceId": record["traceId"],
        "rootSpanId": record["spanId"],
        "name": record["name"],
        "entityId": record.get("entityId"),
        "parentSpanId": None,
        "createdAt": record.get("createdAt") or record["startedAt"],
        "metadata": record.get("metadata"),
        "inputPreview": input_preview(record.get("input")),
        "threadId": record.get("threadId"),
        "resourceId": record.get("resourceId"),
        "startedAt": record["startedAt"],
        "endedAt": record["endedAt"],
        "entityName": record.get("entityName"),
        "entityType": record.get("entityType"),
        "environment": record.get("environment"),
        "status": "error" if error else "success",
    }
