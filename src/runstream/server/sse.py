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
    return f"id: {event_id}\ndata: {json_text}\n\n".encode("utf-8", "replace")


class SSEResponse(Response):
    """Streams ``frames`` (already framed bytes) with heartbeats; a disconnect stops the reading.

    Workflow streams (JSON records, not SSE) use it too, with their own headers and no heartbeats.

    When the client goes away, the task reading ``frames`` is cancelled, ``on_disconnect`` runs
    (a directly streamed run is aborted there) and ``frames`` is closed.
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
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        loop = asyncio.get_running_loop()
        lock = asyncio.Lock()
        last_sent = loop.time()

        async def pump() -> None:
            nonlocal last_sent
            async for frame in self.frames:
                async with lock:
                    await send({"type": "http.response.body", "body": frame, "more_body": True})
                last_sent = loop.time()

        async def heartbeat(interval: float) -> None:
            nonlocal last_sent
            while True:
                await asyncio.sleep(max(0.0, last_sent + interval - loop.time()))
                if loop.time() - last_sent >= interval:
                    async with lock:
                        await send({"type": "http.response.body", "body": HEARTBEAT, "more_body": True})
                    last_sent = loop.time()

        async def disconnected() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass

        streaming = asyncio.create_task(pump())
        watcher = asyncio.create_task(disconnected())
        beats = asyncio.create_task(heartbeat(self.heartbeat_s)) if self.heartbeat_s else None
        client_gone = False
        try:
            await asyncio.wait({streaming, watcher}, return_when=asyncio.FIRST_COMPLETED)
            client_gone = watcher.done()
        finally:
            for task in (streaming, watcher, beats):
                if task is not None and not task.done():
                    task.cancel()
            await asyncio.gather(
                *(t for t in (streaming, watcher, beats) if t is not None), return_exceptions=True
            )
        if not streaming.cancelled() and streaming.exception() is not None:
            logger.error("SSE stream failed", exc_info=streaming.exception())
        if client_gone and self.on_disconnect is not None:
            self.on_disconnect()
        await self.frames.aclose()
        if not client_gone:
            with contextlib.suppress(OSError):
                await send({"type": "http.response.body", "body": b"", "more_body": False})
