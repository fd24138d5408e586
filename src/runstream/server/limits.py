"""What the server accepts from outside: JSON bodies, query numbers, identifiers, and their bounds.

Every value a caller sends is checked here before anything runs, so a caller's mistake is a 400
naming the field and never a 500 (client-js re-sends a request that got a 5xx, which for
``generate`` would run the agent twice). JSON is parsed strictly (``NaN``, ``Infinity``,
numbers that overflow a double and lone surrogates are refused by orjson), nesting is limited,
and strings may not carry NUL characters (PostgreSQL cannot store them; no legitimate client
sends them). The ranges below are documented in ``docs/security.md``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import parse_qsl, unquote_to_bytes

import orjson
from starlette.types import ASGIApp, Receive, Scope, Send

from runstream._json import JsonObject, JsonValue
from runstream.agent import RunNotFoundError
from runstream.errors import StateConflictError
from runstream.server.errors import ApiError, error_response
from runstream.server.resumable import LiveSlot

MAX_JSON_DEPTH = 64
"""Nesting of a request body (objects and arrays); structured-output schemas need ~10."""
MAX_ID_LENGTH = 256
"""Thread, resource, run, task, message and tool call ids."""
MAX_PAGE = 1_000_000
MAX_PER_PAGE = 1_000
MAX_STEPS = 1_000
MAX_IDLE_MS = 3_600_000
"""``untilIdle.maxIdleMs``: at most an hour without events between turns (Mastra's default: 5 min)."""
MAX_RESUME_WINDOW_MS = 60_000
MAX_CONTINUATIONS = 100
MAX_OFFSET = 10_000_000
MAX_TITLE_LENGTH = 1_000
"""Characters of a thread's title (thread routes and the stream body's ``memory.thread``)."""
MAX_METADATA_BYTES = 64 * 1024
"""A thread's or a message's ``metadata`` object, as compact JSON (UTF-8 bytes)."""
MAX_WORKING_MEMORY = 1_000_000
"""Characters of working memory (or of a working-memory template) a request may store."""
MAX_MESSAGES = 10_000
"""Messages (and context messages) of one generate/stream body."""
MAX_TOOL_RESULT_MESSAGES = 100
"""Messages of client tool results in one ``send-tool-approval``."""
MAX_REASON_LENGTH = 10_000
"""Characters of the reason given when declining a tool call (it goes to the model)."""


@contextmanager
def continuation_start(slot: LiveSlot) -> Iterator[None]:
    """Around the start of a continuation (approve, decline, resume) that took ``slot``: if the
    start fails, the slot is released and the run's state answers as the caller's mistake (a
    run with nothing to continue is a 404, one already continued a 409), never a 500."""
    try:
        yield
    except BaseException as exc:
        slot.release()
        if isinstance(exc, RunNotFoundError):
            raise ApiError(404, str(exc)) from None
        if isinstance(exc, StateConflictError):
            raise ApiError(409, str(exc)) from None
        raise


def parse_json(raw: bytes) -> JsonValue:
    """Strict JSON, checked for depth and NUL characters (400 on any problem)."""
    try:
        value: JsonValue = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ApiError(400, f"Invalid JSON body: {exc}") from None
    check_json(value)
    return value


def check_json(value: JsonValue) -> None:
    """Refuse nesting deeper than :data:`MAX_JSON_DEPTH` and strings holding NUL (iteratively,
    so a hostile body cannot exhaust the stack here)."""
    stack: list[tuple[JsonValue, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                raise ApiError(400, "Invalid request body: strings must not contain NUL characters")
        elif isinstance(item, dict | list):
            if depth >= MAX_JSON_DEPTH:
                raise ApiError(400, f"Invalid request body: nested deeper than {MAX_JSON_DEPTH} levels")
            children = item.items() if isinstance(item, dict) else enumerate(item)
            for key, child in children:
                if isinstance(key, str) and "\x00" in key:
                    raise ApiError(400, "Invalid request body: keys must not contain NUL characters")
                stack.append((child, depth + 1))


def bounded_int(value: object, field: str, *, minimum: int, maximum: int) -> int:
    """An integer in ``[minimum, maximum]`` (booleans and floats with a fraction are refused)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise ApiError(400, f"Invalid request body: '{field}' must be an integer from {minimum} to {maximum}")
    return value


def bounded_number(
    value: object, field: str, *, minimum: float, maximum: float, exclusive_min: bool = False
) -> float:
    """A finite number in range (``exclusive_min``: strictly above ``minimum``)."""
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        low_ok = value > minimum if exclusive_min else value >= minimum
        if low_ok and value <= maximum:
            return float(value)
    low = "above" if exclusive_min else "from"
    raise ApiError(
        400,
        f"Invalid request body: '{field}' must be a number {low} {_plain(minimum)} up to {_plain(maximum)}",
    )


def _plain(number: float) -> str:
    return str(int(number)) if float(number).is_integer() else str(number)


def check_id(value: object, field: str) -> str:
    """A non-empty identifier of at most :data:`MAX_ID_LENGTH` characters."""
    if not isinstance(value, str) or not value or len(value) > MAX_ID_LENGTH:
        raise ApiError(
            400,
            f"Invalid request body: '{field}' must be a non-empty string of at most {MAX_ID_LENGTH} characters",
        )
    if not value.isprintable():  # NUL, CR/LF (a forged SSE event or log line), other controls
        raise ApiError(
            400,
            f"Invalid request body: '{field}' must be printable (no NUL, CR, LF or other control characters)",
        )
    return value


def check_title(value: object, field: str) -> str | None:
    """``None`` or a string of at most :data:`MAX_TITLE_LENGTH` characters."""
    if value is not None and (not isinstance(value, str) or len(value) > MAX_TITLE_LENGTH):
        raise ApiError(
            400, f"Invalid request body: '{field}' must be a string of at most {MAX_TITLE_LENGTH} characters"
        )
    return value


def check_reason(value: object) -> str | None:
    """``None`` or a decline reason of at most :data:`MAX_REASON_LENGTH` characters."""
    if value is not None and (not isinstance(value, str) or len(value) > MAX_REASON_LENGTH):
        raise ApiError(
            400, f"Invalid request body: 'reason' must be a string of at most {MAX_REASON_LENGTH} characters"
        )
    return value


def check_metadata(value: JsonValue, field: str) -> JsonObject | None:
    """``None`` or an object of at most :data:`MAX_METADATA_BYTES` as JSON (it is stored with the
    thread or message and sent back on every listing)."""
    if value is None:
        return None
    if not isinstance(value, dict) or len(orjson.dumps(value)) > MAX_METADATA_BYTES:
        raise ApiError(
            400,
            f"Invalid request body: '{field}' must be an object of at most {MAX_METADATA_BYTES} bytes as JSON",
        )
    return value


INVALID_URL = (
    "Invalid request: the URL contains NUL, control or non-UTF-8 characters, "
    f"or an id (a path segment, a query value named ...Id) longer than {MAX_ID_LENGTH} characters"
)


class UrlSafetyMiddleware:
    """400 for a path or query string that carries NUL characters or bytes that are not UTF-8.

    Path and query values become thread, run and task ids; PostgreSQL refuses NUL in text, so
    without this such a request would fail inside storage with a 500.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not _url_is_clean(scope):
            await error_response(400, INVALID_URL)(scope, receive, send)
            return
        await self.app(scope, receive, send)


def _url_is_clean(scope: Scope) -> bool:
    """No NUL, nothing but UTF-8; ids (every path segment, and query values named ``...Id``)
    printable and at most :data:`MAX_ID_LENGTH` characters: the id grammar, at the edge."""
    query: bytes = scope.get("query_string", b"")
    path: str = scope.get("path", "")
    if "\x00" in path or b"%00" in query:
        return False
    if not path.isprintable() or any(len(segment) > MAX_ID_LENGTH for segment in path.split("/")):
        return False
    try:
        for key, value in parse_qsl(query.decode("utf-8", "strict"), keep_blank_values=True):
            if key.lower().endswith("id") and (len(value) > MAX_ID_LENGTH or not value.isprintable()):
                return False
        unquote_to_bytes(query.replace(b"+", b" ")).decode("utf-8")
        raw_path = scope.get("raw_path")
        if raw_path is not None:
            unquote_to_bytes(raw_path).decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
