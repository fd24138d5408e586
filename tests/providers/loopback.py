"""A loopback HTTP/1.1 server that replays recorded vendor responses byte for byte.

Each request gets the next queued :class:`Reply` (the last one repeats). An SSE body goes out
one event per write (one HTTP chunk each), the way vendors stream. A reply can stop early:
``complete=False`` drops the connection mid-body, ``stall_after=n`` sends ``n`` events and then
holds the connection open until the client hangs up. Tests wait on ``stalled`` and
``disconnected`` rather than sleeping.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from runstream.models.base import ModelCallError

FIXTURES = Path(__file__).parent / "fixtures"


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


@dataclass
class Reply:
    body: bytes = b""
    status: int = 200
    headers: dict[str, str] = field(default_factory=lambda: {"content-type": "text/event-stream"})
    framing: Literal["chunked", "length", "eof"] = "chunked"
    """``eof``: no length and no chunks, the body ends when the connection closes."""
    complete: bool = True
    """False: close the connection without finishing the chunked body (a dropped connection)."""
    stall_after: int | None = None
    """Send this many events (0: not even the headers), then wait for the client to hang up."""


def json_reply(status: int, payload: object, **headers: str) -> Reply:
    return Reply(
        json.dumps(payload).encode(),
        status=status,
        headers={"content-type": "application/json", **headers},
        framing="length",
    )


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


_REASONS = {
    200: "OK",
    400: "Bad Request",
    429: "Too Many Requests",
    500: "Internal Server Error",
    529: "Overloaded",
}


class LoopbackServer:
    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.requests: list[Recorded] = []
        self.stalled = asyncio.Event()
        self.disconnected = asyncio.Event()
        self._request_seen = asyncio.Condition()
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        self.port = 0

    def url(self, path: str = "") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def queue(self, *replies: Reply) -> None:
        self.replies.extend(replies)

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._handlers):
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def wait_requests(self, count: int) -> None:
        async with self._request_seen:
            await self._request_seen.wait_for(lambda: len(self.requests) >= count)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            await self._serve(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            self.disconnected.set()
        finally:
            self._handlers.discard(task)
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        method, path, _ = head[0].split(" ", 2)
        headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in head[1:] if line)}
        raw = await reader.readexactly(int(headers.get("content-length", "0")))
        async with self._request_seen:
            self.requests.append(Recorded(method, path, headers, json.loads(raw) if raw else None))
            self._request_seen.notify_all()
        reply = self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]
        if reply.stall_after == 0:
            return await self._stall(reader)
        await self._send(reply, reader, writer)

    async def _send(self, reply: Reply, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        lines = [f"HTTP/1.1 {reply.status} {_REASONS.get(reply.status, 'Status')}", "connection: close"]
        lines += [f"{k}: {v}" for k, v in reply.headers.items()]
        if reply.framing == "chunked":
            lines.append("transfer-encoding: chunked")
        elif reply.framing == "length":
            lines.append(f"content-length: {len(reply.body)}")
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        events = [e for e in re.split(rb"(?<=\n\n)", reply.body) if e]
        for number, event in enumerate(events):
            if reply.stall_after is not None and number == reply.stall_after:
                await writer.drain()
                return await self._stall(reader)
            writer.write(b"%x\r\n%s\r\n" % (len(event), event) if reply.framing == "chunked" else event)
            await writer.drain()
        if reply.framing == "chunked" and reply.complete:
            writer.write(b"0\r\n\r\n")
        await writer.drain()

    async def _stall(self, reader: asyncio.StreamReader) -> None:
        self.stalled.set()
        await reader.read()  # returns once the client closes the connection
        self.disconnected.set()


async def collect(parts: Any) -> list[dict[str, Any]]:
    return [part async for part in parts]


def error_of(part: dict[str, Any]) -> tuple[int | None, str, bool]:
    """An ``error`` part's ModelCallError as (status, message, retryable), for exact asserts."""
    assert part["type"] == "error", part
    error = part["error"]
    assert isinstance(error, ModelCallError), error
    return error.status_code, str(error), error.retryable
