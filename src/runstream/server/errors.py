"""HTTP errors as Mastra answers them: ``{"error": "<message>"}`` with the status.

Errors of runstream's tree map by class (:func:`status_of`); caller mistakes are 4xx (client-js never retries those); 5xx is only for real server faults,
because client-js re-sends a request that got a 5xx, which for ``/stream`` means another run.
Bodies over the size limit are refused with 413 before or while they are read.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from runstream.errors import InvalidInputError, NotFoundError, RunstreamError, StateConflictError

logger = logging.getLogger("runstream.server")


class ApiError(RunstreamError):
    """An error answered as ``{"error": message, ...extra}`` with ``status``."""

    def __init__(
        self, status: int, message: str, *, headers: Mapping[str, str] | None = None, **extra: object
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers
        self.extra = extra


def not_found(what: str) -> ApiError:
    return ApiError(404, f"{what} not found")


def error_response(
    status: int, message: str, headers: Mapping[str, str] | None = None, **extra: object
) -> Response:
    return JSONResponse({"error": message, **extra}, status_code=status, headers=headers)


async def handle_api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return error_response(exc.status, exc.message, exc.headers, **exc.extra)


async def handle_http_exception(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return error_response(exc.status_code, str(exc.detail), headers=exc.headers)


def status_of(exc: RunstreamError) -> int:
    """The HTTP status of an error of runstream's tree, by its class (500: not the caller's doing)."""
    if isinstance(exc, ApiError):
        return exc.status
    if isinstance(exc, InvalidInputError):
        return 400
    if isinstance(exc, NotFoundError):
        return 404
    if isinstance(exc, StateConflictError):
        return 409
    return 500


async def handle_runstream_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RunstreamError)
    status = status_of(exc)
    if status == 500:
        return await handle_unexpected(request, exc)
    return error_response(status, str(exc))


async def handle_unexpected(request: Request, exc: Exception) -> Response:
    logger.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return error_response(500, "Internal server error")


EXCEPTION_HANDLERS: dict[Any, Any] = {
    ApiError: handle_api_error,
    HTTPException: handle_http_exception,
    RunstreamError: handle_runstream_error,
    Exception: handle_unexpected,
}


class BodyLimitMiddleware:
    """Refuse request bodies larger than ``max_bytes`` with 413 (by header, or while reading)."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._too_large(scope, receive, send)
            return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise self.error()
            return message

        await self.app(scope, limited, send)

    def error(self) -> ApiError:
        return ApiError(413, f"Request body too large: the limit is {self.max_bytes} bytes")

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        exc = self.error()
        await error_response(exc.status, exc.message)(scope, receive, send)
