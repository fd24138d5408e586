"""Server-sent events framing, exactly as Mastra's client-js and the AI SDK parse it.

Every event is ``data: <one-line JSON>\\n\\n`` (LF only, a space after the colon); a stream ends
with ``data: [DONE]\\n\\n``. Heartbeats are SSE comments, which every parser skips. ``id:`` lines
are written only on routes that opt in (client-js drops any block that does not start with
``data: ``). :class:`SSEResponse` sends frames as they come, adds heartbeats when the stream is
quiet, and stops reading its frames as soon as the client disconnects.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Callable, Mapping

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

logger = logging.getLogger("runstream.server")

DONE = b"data: [DONE]\n\n"
HEARTBEAT = b": keepalive\n\n"

SSE_HEADERS: dict[str, str] = {
    "content-type": "text/event-stream",
    "cache-control": "no-cache",
    "connection": "keep-alive",
    "x-accel-buffering": "no",
}
UI_STREAM_HEADERS: dict[str, str] = {**SSE_HEADERS, "x-vercel-ai-ui-message-stream": "v1"}


def data_frame(json_text: str, event_id: str | None = None) -> bytes:
    """One event: ``[id: <id>\\n]data: <json>\\n\\n``. ``json_text`` must be one line.

    A lone surrogate (invalid in UTF-8) becomes ``?`` rather than breaking the stream.
    """
    if event_id is None:
        return b"data: " + json_text.encode("utf-8", "replace") + b"\n\n"
    if not event_id.isprintable():  # (ids are checked at the edge; a run id made in code is not)
        event_id = event_id.encode("unicode_escape").decode("ascii")
    return f"id: {event_id}\ndata: {json_text}\n\n".encode("utf-8", "replace")


MAX_BATCH_BYTES = 64 * 1024
"""Frames that are ready together go out in one write, up to this many bytes (then the run waits
for the socket: backpressure)."""


class SSEResponse(Response):
    """Streams ``frames`` (already framed bytes) with heartbeats; a disconnect stops the reading.

    Workflow streams (JSON records, not SSE) use it too, with their own headers and no heartbeats.

    One task reads ``frames`` into a buffer; this coroutine writes the buffer out. A frame is
    written as soon as the reader has to wait for the next one, so a run that streams token by
    token sends each token at once, while frames produced together (a fast model, a replayed log,
    a step's closing chunks) leave in one write instead of one each: the bytes on the wire are the
    same, the writes and the per-write work of the ASGI stack are fewer. ``heartbeat_s`` of
    silence sends a comment. When the client goes away, the reading task is cancelled,
    ``on_disconnect`` runs (a directly streamed run is aborted there) and ``frames`` is closed;
    so they do when writing fails or the response is cancelled.
    """

    def __init__(
        self,
        frames: AsyncGenerator[bytes, None],
        *,
        heartbeat_s: float | None = 15.0,
        headers: Mapping[str, str] = SSE_HEADERS,
        on_disconnect: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(status_code=200, headers=dict(headers))
        self.raw_headers = [(k, v) for k, v in self.raw_headers if k != b"content-length"]
        self.frames = frames
        self.heartbeat_s = heartbeat_s
        self.on_disconnect = on_disconnect

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self._stream(receive, send)
        except BaseException:
            # The socket failed or the request was cancelled: the client is gone all the same.
            if self.on_disconnect is not None:
                self.on_disconnect()
            await self.frames.aclose()
            raise

    async def _stream(self, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        outbox = _Outbox()

        async def read() -> None:
            try:
                async for frame in self.frames:
                    if outbox.put(frame):
                        await outbox.taken()
            finally:
                outbox.close()

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            outbox.client_gone = True
            outbox.wake.set()

        reading = asyncio.create_task(read())
        watcher = asyncio.create_task(watch())
        try:
            await self._write(outbox, send)
        finally:
            for task in (reading, watcher):
                task.cancel()
            await asyncio.gather(reading, watcher, return_exceptions=True)
        if not reading.cancelled() and reading.exception() is not None:
            logger.error("SSE stream failed", exc_info=reading.exception())
        if outbox.client_gone and self.on_disconnect is not None:
            on_disconnect, self.on_disconnect = self.on_disconnect, None
            on_disconnect()
        await self.frames.aclose()
        if not outbox.client_gone:
            with contextlib.suppress(OSError):
                await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _write(self, outbox: _Outbox, send: Send) -> None:
        """Write what the reader buffered until it is done or the client is gone."""
        while not outbox.client_gone:
            if not outbox.frames:
                if outbox.closed:
                    return
                outbox.wake.clear()
                try:
                    async with asyncio.timeout(self.heartbeat_s):
                        await outbox.wake.wait()
                except TimeoutError:
                    await send({"type": "http.response.body", "body": HEARTBEAT, "more_body": True})
                continue
            await send({"type": "http.response.body", "body": outbox.take(), "more_body": True})


class _Outbox:
    """Frames read but not yet written, and the signals between the reader and the writer."""

    __slots__ = ("client_gone", "closed", "frames", "room", "sent_first", "size", "wake")

    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self.size = 0
        self.closed = False
        self.client_gone = False
        self.sent_first = False
        self.wake = asyncio.Event()
        self.room = asyncio.Event()
        self.room.set()

    def put(self, frame: bytes) -> bool:
        """Buffer ``frame``; ``True`` when the reader must wait until the writer has taken the
        buffer (:meth:`taken`): after the first frame, so that it leaves before the reader goes
        on with the stream (the client sees the run start even when the server is busy with
        other streams), and when the buffer is full (backpressure)."""
        self.frames.append(frame)
        self.size += len(frame)
        self.wake.set()
        if self.sent_first:
            return self.size >= MAX_BATCH_BYTES
        self.sent_first = True
        return True

    async def taken(self) -> None:
        self.room.clear()
        await self.room.wait()

    def take(self) -> bytes:
        batch = self.frames[0] if len(self.frames) == 1 else b"".join(self.frames)
        self.frames.clear()
        self.size = 0
        self.room.set()
        return batch

    def close(self) -> None:
        self.closed = True
        self.wake.set()
