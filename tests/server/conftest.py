"""A real uvicorn server on 127.0.0.1 (random port) in a background thread, plus helpers."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
import uvicorn
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from runstream.server import create_app
from runstream.server.auth import open_access
from runstream.storage import PostgresStorage, SqliteStorage, Storage
from tests.conftest import POSTGRES_URL
from tests.server.agents import Gates, build_runstream
from tests.storage.postgres_testkit import drop_schema, fresh_schema, require_postgres, unreachable_reason


@dataclass
class RecordedRequest:
    method: str
    path: str
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class RequestLog:
    """Every request the app received (method, path, body), for assertions."""

    requests: list[RecordedRequest] = field(default_factory=list)

    def matching(self, method: str, suffix: str) -> list[RecordedRequest]:
        return [r for r in self.requests if r.method == method and r.path.endswith(suffix)]


class Recorder:
    def __init__(self, app: ASGIApp, log: RequestLog) -> None:
        self.app = app
        self.log = log

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        entry = RecordedRequest(scope["method"], scope["path"], b"")
        self.log.requests.append(entry)

        async def recording() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                entry.body += message.get("body", b"")
            return message

        await self.app(scope, recording, send)


class _Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, ready: threading.Event) -> None:
        super().__init__(config)
        self.ready = ready

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        self.ready.set()


@dataclass
class Live:
    url: str
    log: RequestLog
    gates: Gates
    events: LogWatch


class LogWatch(logging.Handler):
    """Collects ``runstream.server`` log messages; tests wait for one with :meth:`wait_for`."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.messages: list[str] = []
        self._cond = threading.Condition()

    def emit(self, record: logging.LogRecord) -> None:
        with self._cond:
            self.messages.append(record.getMessage())
            self._cond.notify_all()

    def wait_for(self, needle: str, timeout: float = 10) -> str:
        with self._cond:
            found = self._cond.wait_for(
                lambda: next((m for m in self.messages if needle in m), None), timeout
            )
        assert found, f"no server log message containing {needle!r}; got {self.messages}"
        return found


@contextmanager
def serve(app: ASGIApp, **options: Any) -> Iterator[str]:
    """Run ``app`` on a free loopback port for the duration of the block; yields its base URL.

    ``options`` are more ``uvicorn.Config`` arguments (e.g. ``SocketLimits().uvicorn_options()``).
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    ready = threading.Event()
    server = _Server(uvicorn.Config(app, log_level="warning", lifespan="on", **options), ready)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    assert ready.wait(10), "the server did not start"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


BACKENDS = ["sqlite", "postgres"]


@contextmanager
def backend_storage(backend: str, tmp_path: Path) -> Iterator[Storage]:
    """A fresh SQLite file or a fresh PostgreSQL schema (dropped at the end of the block)."""
    if backend != "postgres":
        yield SqliteStorage(tmp_path / "runstream.db")
        return
    require_postgres(unreachable_reason())
    schema = fresh_schema()
    try:
        yield PostgresStorage(POSTGRES_URL, schema=schema)
    finally:
        asyncio.run(drop_schema(schema))


@pytest.fixture(params=BACKENDS)
def backend_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Storage]:
    """:func:`backend_storage` on each backend, for tests that build their own server (list it
    before ``app_factory``, so that the server stops before the schema is dropped)."""
    with backend_storage(request.param, tmp_path) as storage:
        yield storage


@pytest.fixture(scope="session")
def live() -> Iterator[Live]:
    """The shared server: open access, agents ``assistant`` and ``plain``, short heartbeats."""
    gates = Gates()
    log = RequestLog()
    watch = LogWatch()
    logger = logging.getLogger("runstream.server")
    logger.addHandler(watch)
    logger.setLevel(logging.INFO)
    app = create_app(build_runstream(gates), auth=open_access, heartbeat_s=0.5)
    with serve(Recorder(app, log)) as url:
        yield Live(url, log, gates, watch)
    logger.removeHandler(watch)


@pytest.fixture
def app_factory() -> Iterator[Callable[..., str]]:
    """Serve a fresh app (own runtime, on ``storage`` when given, in memory otherwise) with the
    given ``create_app`` options; returns its URL."""
    stack: list[Any] = []

    def start(storage: Storage | None = None, **options: Any) -> str:
        manager = serve(create_app(build_runstream(Gates(), storage), **options))
        stack.append(manager)
        return manager.__enter__()

    yield start
    for manager in reversed(stack):
        manager.__exit__(None, None, None)


def sse_events(raw: bytes) -> list[str]:
    """The ``data:`` payloads of a complete SSE body (strict: LF-only blocks)."""
    assert b"\r" not in raw
    return [block[len("data: ") :] for block in raw.decode().split("\n\n") if block.startswith("data: ")]


def chunks_of(raw: bytes) -> list[dict[str, Any]]:
    return [json.loads(e) for e in sse_events(raw) if e != "[DONE]"]


@pytest.fixture
def client(live: Live) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=live.url, timeout=20) as c:
        yield c


def blocks(response: httpx.Response) -> Iterator[str]:
    """The SSE blocks of a streaming response as they arrive (comments included)."""
    buffer = b""
    for data in response.iter_raw():
        buffer += data
        while b"\n\n" in buffer:
            block, buffer = buffer.split(b"\n\n", 1)
            yield block.decode()


def parse_block(block: str) -> tuple[str | None, str | None]:
    """``(id, data)`` of an SSE block (``None`` where absent)."""
    event_id = data = None
    for line in block.split("\n"):
        if line.startswith("id: "):
            event_id = line[4:]
        elif line.startswith("data: "):
            data = line[6:]
    return event_id, data
