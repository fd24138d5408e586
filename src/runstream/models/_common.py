"""Failure handling shared by the SDK-backed providers, plus the few request helpers they share.

Retries are Mastra's (``@mastra/core`` 1.71 retries a model call with p-retry around the provider's
``doStream``): ``max_retries`` more attempts (per call ``ModelSettings.max_retries``, else the
model's own ``max_retries``, default 2; an agent passes 0 unless told otherwise, as Mastra's does),
exponential backoff from 1 s by a factor of 2, and a vendor's ``retry-after-ms`` / ``retry-after``
honoured up to 30 s (the wait is the longer of the two). Only retryable failures are retried:
408/409/429/5xx and connection errors, never another 4xx. They happen before the first part is
yielded; the vendor SDKs' own retries are switched off so this is the only policy. Each retry is an
event on the current span (the model call's ``chat`` span) and a warning on the ``runstream``
logger. This module also adds what the SDKs lack: abort that cancels a pending read (or a backoff)
at once, vendor errors as :class:`ModelCallError`, and a part stream that always ends, with an
``error`` part when the vendor stream fails or stops before its terminal event.
"""

from __future__ import annotations

import asyncio
import base64
import email.utils
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, Self, TypedDict, TypeVar

from opentelemetry import trace
from opentelemetry.util.types import AttributeValue
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt

from runstream.abort import AbortError, AbortSignal
from runstream.models.base import ModelCallError, ModelRequest, StreamPart
from runstream.models.parts import CallWarning, ErrorPart

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
E_contra = TypeVar("E_contra", contravariant=True)

DEFAULT_MAX_RETRIES = 2
"""Retries of a model used on its own (Mastra's model-call default; an agent passes 0 unless set)."""

logger = logging.getLogger("runstream")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How long to wait between attempts (Mastra 1.71: p-retry's 1 s, factor 2; retry-after up to 30 s).

    ``sleep`` is what waits: tests pass one that records the delays instead of sleeping.
    """

    initial_delay: float = 1.0
    factor: float = 2.0
    max_retry_after: float = 30.0
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep

    def delay(self, attempt: int, error: BaseException | None) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        backoff = self.initial_delay * self.factor ** (attempt - 1)
        retry_after = getattr(error, "retry_after", None)
        if retry_after is None:
            return backoff
        return float(max(min(retry_after, self.max_retry_after), backoff))


DEFAULT_RETRY_POLICY = RetryPolicy()


class ClientOptions(TypedDict, total=False):
    """The keywords every provider model takes besides its id and ``client``."""

    api_key: str | None
    base_url: str | None
    timeout: float | None
    """Seconds, for each request of the SDK's client."""
    max_retries: int
    """Retries of a call whose settings name none (runstream's; the SDK's own are off)."""
    headers: Mapping[str, str] | None
    retry: RetryPolicy


ClientT = TypeVar("ClientT")


class ProviderModel(Generic[ClientT]):
    """What the vendors' models share: the model id and provider, runstream's retries, and the
    vendor SDK's client, made from :class:`ClientOptions` unless one is given (its own retries off)."""

    specification_version = "v2"

    def __init__(self, model_id: str, provider: str, client: ClientT | None, options: ClientOptions) -> None:
        self.model_id = model_id
        self.provider = provider
        self.max_retries = options.get("max_retries", DEFAULT_MAX_RETRIES)
        self.retry = options.get("retry", DEFAULT_RETRY_POLICY)
        self.client = self._new_client(options) if client is None else self._without_sdk_retries(client)

    def _new_client(self, options: ClientOptions) -> ClientT:
        raise NotImplementedError

    def _without_sdk_retries(self, client: ClientT) -> ClientT:
        return client


class _RetryingClient(Protocol):
    """OpenAI's and Anthropic's SDK clients, as far as their retries go."""

    @property
    def max_retries(self) -> int: ...

    def with_options(self, *, max_retries: int) -> Self: ...


RetryingClient = TypeVar("RetryingClient", bound=_RetryingClient)


def without_sdk_retries(client: RetryingClient) -> RetryingClient:
    """OpenAI's or Anthropic's client with its own retries off (runstream's retry instead)."""
    return client.with_options(max_retries=0) if client.max_retries else client


class SdkClientArguments(TypedDict, total=False):
    """The keywords OpenAI's and Anthropic's SDK clients take alike."""

    api_key: str | None
    base_url: str | None
    max_retries: int
    default_headers: Mapping[str, str] | None
    timeout: float


def sdk_client_arguments(options: ClientOptions) -> SdkClientArguments:
    """An OpenAI or Anthropic SDK client's arguments from a model's options (its retries off)."""
    arguments: SdkClientArguments = {
        "api_key": options.get("api_key"),
        "base_url": options.get("base_url"),
        "max_retries": 0,
        "default_headers": options.get("headers"),
    }
    timeout = options.get("timeout")
    if timeout is not None:
        arguments["timeout"] = timeout
    return arguments


def is_retryable(error: BaseException) -> bool:
    """Mastra's rule: a vendor error when the vendor says it may pass (408/409/429/5xx, a lost
    connection); any other exception too; never an abort."""
    if isinstance(error, ModelCallError):
        return error.retryable
    return isinstance(error, Exception) and not isinstance(error, AbortError)


def retries_for(request: ModelRequest, default: int) -> int:
    """The call's ``max_retries`` setting, else the model's."""
    retries = request.settings.max_retries
    return default if retries is None else max(0, retries)


async def with_retries(
    call: Callable[[], Awaitable[T]],
    max_retries: int,
    policy: RetryPolicy = DEFAULT_RETRY_POLICY,
    *,
    what: str = "model call",
) -> T:
    """``call()``, again after each retryable failure, at most ``max_retries`` more times; the
    last failure is raised as it is. Every retry is a span event and a log warning."""
    if max_retries <= 0:
        return await call()

    def wait(state: RetryCallState) -> float:
        error = state.outcome.exception() if state.outcome is not None else None
        return policy.delay(state.attempt_number, error)

    def report(state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome is not None else None
        delay = state.next_action.sleep if state.next_action is not None else 0.0
        status = getattr(error, "status_code", None)
        attributes: dict[str, AttributeValue] = {
            "runstream.retry.attempt": state.attempt_number,
            "runstream.retry.max_retries": max_retries,
            "runstream.retry.delay_ms": round(delay * 1000),
            "error.type": type(error).__name__,
            "exception.message": str(error),
        }
        if status is not None:
            attributes["http.response.status_code"] = status
        trace.get_current_span().add_event("runstream.model.retry", attributes)
        logger.warning(
            "%s failed (attempt %d of %d%s): %s; retrying in %.3g s",
            what,
            state.attempt_number,
            max_retries + 1,
            f", status {status}" if status is not None else "",
            error,
            delay,
        )

    async def attempt() -> T:  # (tenacity awaits only coroutine functions' results)
        return await call()

    retrying = AsyncRetrying(
        stop=stop_after_attempt(max_retries + 1),
        retry=retry_if_exception(is_retryable),
        wait=wait,
        sleep=policy.sleep,
        before_sleep=report,
        reraise=True,
    )
    return await retrying(attempt)


def retry_after(headers: Mapping[str, str] | None, now: float | None = None) -> float | None:
    """Seconds a vendor asks to wait (``retry-after-ms``, else ``retry-after`` in seconds or as an
    HTTP date), or None; read as Mastra reads them."""
    if not headers:
        return None
    lower = {key.lower(): value for key, value in headers.items()}
    millis = lower.get("retry-after-ms", "").strip()
    if millis.isdigit():
        return int(millis) / 1000
    value = lower.get("retry-after", "").strip()
    if value.isdigit():
        return float(value)
    if not value or value[0] in "+-.0123456789":
        return None
    try:
        when = email.utils.parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError):
        return None
    wait = when - (time.time() if now is None else now)
    return wait if wait > 0 else None


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
    scope: AbortScope,
    call: Callable[[], Awaitable[T]],
    translate: Callable[[Exception], ModelCallError],
    *,
    max_retries: int = 0,
    policy: RetryPolicy = DEFAULT_RETRY_POLICY,
    what: str = "model call",
) -> T:
    """Make the vendor request, retried as the module doc says; failures raise
    :class:`ModelCallError`. An abort ends it at once, during a request or a backoff alike."""

    async def attempt() -> T:
        try:
            return await call()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            raise translate(exc) from exc

    try:
        return await scope.run(lambda: with_retries(attempt, max_retries, policy, what=what))
    except BaseException:
        scope.close()
        raise


class SdkStream(Protocol[T_co]):
    """What both SDKs' ``AsyncStream`` offer."""

    def __anext__(self) -> Awaitable[T_co]: ...

    async def close(self) -> None: ...


class EventMapper(Protocol[E_contra]):
    """Maps one vendor event to parts; ``done`` once a terminal or error event was mapped."""

    done: bool

    def map(self, event: E_contra) -> list[StreamPart]: ...

    def end(self) -> StreamPart | list[StreamPart] | None:
        """The ``finish`` part (or the parts that close the stream, ``finish`` last), or None when
        the stream ended without its terminal event."""
        ...


async def stream_parts(
    source: SdkStream[T],
    mapper: EventMapper[T],
    scope: AbortScope,
    *,
    warnings: list[CallWarning],
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
        if isinstance(finish, list):
            for part in finish:
                yield part
        else:
            yield finish
    except Exception as exc:
        yield error_part(translate(exc), exc)
    finally:
        scope.close()
        await source.close()


def error_part(error: ModelCallError, cause: Exception | None = None) -> ErrorPart:
    if cause is not None:
        error.__cause__ = cause
    return {"type": "error", "error": error}


def call_error(
    message: str,
    *,
    status_code: int | None = None,
    body: object = None,
    retryable: bool | None = None,
    headers: Mapping[str, str] | None = None,
) -> ModelCallError:
    """A :class:`ModelCallError`; retryable by default for 408, 409, 429 and 5xx (the AI SDK's
    ``APICallError.isRetryable``); ``headers`` of the response give its ``retry_after``."""
    if retryable is None:
        retryable = status_code is not None and (status_code in (408, 409, 429) or status_code >= 500)
    return ModelCallError(
        message, status_code=status_code, retryable=retryable, body=body, retry_after=retry_after(headers)
    )


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


def unsupported(request: ModelRequest, *settings: str) -> list[CallWarning]:
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
