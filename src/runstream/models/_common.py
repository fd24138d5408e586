"""Failure handling shared by the SDK-backed providers, plus the few request helpers they share.

Retries are the vendor SDKs' own (429/408/409/5xx, ``retry-after``/``retry-after-ms`` honoured,
exponential backoff with jitter); they happen inside the request call, so they can only happen
before the first part is yielded. This module adds what the SDKs lack: abort that cancels a
pending read at once, vendor errors as :class:`ModelCallError`, and a part stream that always
ends, with an ``error`` part when the vendor stream fails or stops before its terminal event.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Protocol, TypeVar

from runstream.abort import AbortError, AbortSignal
from runstream.models.base import ModelCallError, ModelRequest, StreamPart

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
E_contra = TypeVar("E_contra", contravariant=True)

DEFAULT_MAX_RETRIES = 2


class AbortScope:
    """Turns an abort signal into cancellation of the vendor call it guards.

    One listener per call cancels the task while it awaits the vendor (the way ``asyncio.timeout``
    does, with ``uncancel`` to tell our cancel from anyone else's). That costs nothing per token,
    unlike racing every read against ``signal.wait()``.
    """

    __slots__ = ("_cancelling", "_remove", "_task", "aborted", "reason")

    def __init__(self, signal: AbortSignal | None) -> None:
        self.aborted = False
        self.reason: object = None
        self._task: asyncio.Task[Any] | None = None
        self._cancelling = False
        self._remove = signal.add_listener(self._fire) if signal is not None else None

    def _fire(self, reason: object) -> None:
        self.aborted, self.reason = True, reason
        if self._task is not None:
            self._cancelling = True
            self._task.cancel()

    def close(self) -> None:
        if self._remove is not None:
            self._remove()
            self._remove = None

    def enter(self) -> None:
        """Mark the current task as awaiting the vendor: an abort now cancels it."""
        self._task = asyncio.current_task()

    def leave(self) -> bool:
        """Leave a guarded await; True when our abort cancelled it (the cancel is then undone)."""
        task, self._task = self._task, None
        if not self._cancelling:
            return False
        self._cancelling = False
        return task is not None and task.uncancel() == 0

    async def run(self, call: Callable[[], Awaitable[T]]) -> T:
        """Await ``call()``; raise :class:`AbortError` if the signal fires first or meanwhile."""
        if self.aborted:
            raise AbortError(self.reason)
        self.enter()
        try:
            result = await call()
        except asyncio.CancelledError:
            if self.leave():
                raise AbortError(self.reason) from None
            raise
        if self.leave() or self.aborted:
            raise AbortError(self.reason)
        return result


async def open_stream(
    scope: AbortScope, call: Callable[[], Awaitable[T]], translate: Callable[[Exception], ModelCallError]
) -> T:
    """Make the vendor request (the SDK retries inside it); failures raise :class:`ModelCallError`."""
    try:
        return await scope.run(call)
    except AbortError:
        scope.close()
        raise
    except Exception as exc:
        scope.close()
        raise translate(exc) from exc


class SdkStream(Protocol[T_co]):
    """What both SDKs' ``AsyncStream`` offer."""

    def __anext__(self) -> Awaitable[T_co]: ...

    async def close(self) -> None: ...


class EventMapper(Protocol[E_contra]):
    """Maps one vendor event to parts; ``done`` once a terminal or error event was mapped."""

    done: bool

    def map(self, event: E_contra) -> list[StreamPart]: ...

    def end(self) -> StreamPart | None:
        """The ``finish`` part, or None when the stream ended without its terminal event."""
        ...


async def stream_parts(
    source: SdkStream[T],
    mapper: EventMapper[T],
    scope: AbortScope,
    *,
    warnings: list[dict[str, Any]],
    raw: Callable[[T], object] | None,
    translate: Callable[[Exception], ModelCallError],
    vendor: str,
) -> AsyncIterator[StreamPart]:
    """Drive ``source`` through ``mapper``: ``stream-start``, the mapped parts, then ``finish``.

    Ends quietly on abort; ends with one ``error`` part when the vendor stream fails, is
    malformed or stops before its terminal event. The HTTP stream is closed in every case.
    """
    next_event = source.__anext__
    try:
        yield {"type": "stream-start", "warnings": warnings}
        while not scope.aborted:
            scope.enter()
            try:
                event = await next_event()
            except StopAsyncIteration:
                scope.leave()
                break
            except asyncio.CancelledError:
                if scope.leave():
                    return
                raise
            if scope.leave():
                return
            if raw is not None:
                yield {"type": "raw", "rawValue": raw(event)}
            parts = mapper.map(event)
            for part in parts:
                yield part
            if mapper.done:
                if parts and parts[-1]["type"] == "error":
                    return
                break
        if scope.aborted:
            return
        finish = mapper.end()
        if finish is None:
            finish = error_part(
                ModelCallError(f"{vendor} stream ended before its terminal event", retryable=True)
            )
        yield finish
    except Exception as exc:
        yield error_part(translate(exc), exc)
    finally:
        scope.close()
        await source.close()


def error_part(error: ModelCallError, cause: Exception | None = None) -> StreamPart:
    if cause is not None:
        error.__cause__ = cause
    return {"type": "error", "error": error}


def call_error(
    message: str, *, status_code: int | None = None, body: object = None, retryable: bool | None = None
) -> ModelCallError:
    """A :class:`ModelCallError`; retryable by default for the statuses the SDKs retry."""
    if retryable is None:
        retryable = status_code is not None and (status_code in (408, 409, 429) or status_code >= 500)
    return ModelCallError(message, status_code=status_code, retryable=retryable, body=body)


def connection_error(exc: BaseException) -> ModelCallError:
    """The connection failed, timed out or dropped mid-stream: worth retrying. When the server
    could not be reached at all, the message names the request (``POST
    http://localhost:11434/v1/chat/completions``), so a wrong base URL or a server that is not
    running shows at once."""
    import httpx2  # both SDKs' HTTP client

    cause = exc.__cause__ or exc
    message = f"Connection error: {str(cause) or type(cause).__name__}"
    unreachable = isinstance(cause, httpx2.ConnectError | httpx2.ConnectTimeout)
    where = (_request_line(exc) or _request_line(cause)) if unreachable else None
    return call_error(f"{message} ({where})" if where else message, retryable=True)


def _request_line(exc: BaseException) -> str | None:
    try:  # httpx raises RuntimeError when an exception carries no request
        request = getattr(exc, "request", None)
    except RuntimeError:
        return None
    url = getattr(request, "url", None)
    return f"{request.method} {url}" if url is not None else None  # type: ignore[union-attr]


def vendor_message(body: object, fallback: str) -> str:
    """The human message inside a vendor error body (``{"error": {"message"}}`` or ``{"message"}``)."""
    if isinstance(body, Mapping):
        inner = body.get("error")
        if isinstance(inner, Mapping) and isinstance(inner.get("message"), str):
            return str(inner["message"])
        if isinstance(body.get("message"), str):
            return str(body["message"])
    return fallback


def merge_options(body: dict[str, Any], options: Mapping[str, Any] | None) -> dict[str, Any]:
    """Merge vendor-native ``provider_options`` into a request body, recursing into objects."""
    for key, value in (options or {}).items():
        current = body.get(key)
        if isinstance(current, dict) and isinstance(value, Mapping):
            merge_options(current, value)
        else:
            body[key] = value
    return body


_SETTING_NAMES = {
    "temperature": "temperature",
    "top_p": "topP",
    "top_k": "topK",
    "seed": "seed",
    "stop_sequences": "stopSequences",
    "presence_penalty": "presencePenalty",
    "frequency_penalty": "frequencyPenalty",
}


def unsupported(request: ModelRequest, *settings: str) -> list[dict[str, Any]]:
    """``unsupported-setting`` warnings (AI SDK names) for those of ``settings`` that are set."""
    return [
        {"type": "unsupported-setting", "setting": _SETTING_NAMES[name]}
        for name in settings
        if getattr(request.settings, name) is not None
    ]


def file_data(part: Mapping[str, Any]) -> tuple[str, str]:
    """A prompt file part's data as ``("url", url)`` or ``("base64", data)``."""
    data = part["data"]
    if isinstance(data, bytes | bytearray):
        return "base64", base64.b64encode(data).decode("ascii")
    text = str(data)
    if text.startswith(("http://", "https://")):
        return "url", text
    if text.startswith("data:") and ";base64," in text:
        return "base64", text.split(";base64,", 1)[1]
    return "base64", text


def data_url(part: Mapping[str, Any]) -> str:
    kind, value = file_data(part)
    return value if kind == "url" else f"data:{part['mediaType']};base64,{value}"


def tool_output_text(output: Mapping[str, Any]) -> str:
    """A ``tool-result`` output as the string vendors take (JSON outputs serialised)."""
    value = output.get("value")
    if output.get("type") in ("text", "error-text") and isinstance(value, str):
        return value
    return json.dumps(value)


def part_metadata(part: Mapping[str, Any], vendor: str) -> Mapping[str, Any]:
    """Vendor metadata a prompt part carries back (``providerOptions``, as the AI SDK names it)."""
    meta = part.get("providerOptions") or part.get("providerMetadata") or {}
    vendor_meta = meta.get(vendor) if isinstance(meta, Mapping) else None
    return vendor_meta if isinstance(vendor_meta, Mapping) else {}
