"""Socket limits of ``runstream serve``: read timeouts against slowloris, the concurrency limit."""

from __future__ import annotations

import http.client
import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import httpx2 as httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from runstream.server import cli
from runstream.server.socket_limits import SocketLimits
from tests.server.conftest import serve


async def ok(request: Request) -> PlainTextResponse:
    return PlainTextResponse(f"ok {len(await request.body())}")


APP = Starlette(routes=[Route("/ok", ok, methods=["GET", "POST"])])


@contextmanager
def opened(url: str, count: int, first_bytes: bytes) -> Iterator[list[socket.socket]]:
    """``count`` connections to ``url``'s server, each having sent ``first_bytes`` and no more."""
    host, port = url.removeprefix("http://").split(":")
    with ExitStack() as stack:
        socks = []
        for _ in range(count):
            sock = stack.enter_context(socket.create_connection((host, int(port)), timeout=10))
            sock.sendall(first_bytes)
            socks.append(sock)
        yield socks


def closed_after(sock: socket.socket, started: float) -> float:
    """Seconds from ``started`` until the server closed ``sock`` (it must send nothing first)."""
    try:
        data = sock.recv(1024)
    except ConnectionResetError:
        data = b""
    assert data == b"", data
    return time.monotonic() - started


def answer(sock: socket.socket) -> bytes:
    """The body of the next response on ``sock`` (parsed by ``http.client``; the socket stays open)."""
    response = http.client.HTTPResponse(sock)
    response.begin()
    return response.read()


HALF_HEAD = b"GET /ok HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "
HALF_BODY = b"POST /ok HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n0123456789"


def test_half_sent_requests_are_closed_within_the_read_timeouts() -> None:
    limits = SocketLimits(header_timeout=1, body_timeout=1, limit_concurrency=200)
    with serve(APP, **limits.uvicorn_options()) as url:
        started = time.monotonic()
        with opened(url, 25, HALF_HEAD) as heads, opened(url, 25, HALF_BODY) as bodies:
            # 50 slow clients hold connections: a normal request is still served meanwhile.
            assert httpx.post(f"{url}/ok", content=b"x" * 10).text == "ok 10"
            waits = [closed_after(sock, started) for sock in heads + bodies]
        assert min(waits) >= 0.9 and max(waits) < 4, waits
        # A body that keeps coming (a gap shorter than body_timeout) is not cut however long it takes.
        with opened(url, 1, HALF_BODY[:-10]) as (sock,):
            for _ in range(5):
                time.sleep(0.4)  # pacing a slow but live client, not waiting for the server
                sock.sendall(b"x" * 20)
            assert answer(sock) == b"ok 100"
        # A kept-alive connection whose next request stops half way is closed too.
        with opened(url, 1, b"GET /ok HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n") as (sock,):
            assert answer(sock) == b"ok 0"
            sock.sendall(HALF_HEAD)
            assert closed_after(sock, time.monotonic()) < 4


def test_connections_past_the_concurrency_limit_get_503() -> None:
    limits = SocketLimits(header_timeout=30, limit_concurrency=5)
    with serve(APP, **limits.uvicorn_options()) as url:
        with opened(url, 5, HALF_HEAD):
            answer = httpx.get(f"{url}/ok")
            assert answer.status_code == 503
        deadline = time.monotonic() + 10
        while (answer := httpx.get(f"{url}/ok")).status_code == 503 and time.monotonic() < deadline:
            time.sleep(0.05)  # the server notices the closed connections on its own loop
        assert answer.text == "ok 0"


def test_serve_flags_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUNSTREAM_SERVE_HEADER_TIMEOUT", "3")
    args = cli._parser().parse_args(["m:app", "--limit-concurrency", "50", "--keep-alive", "2"])
    limits = cli.from_arguments(args)
    assert (limits.header_timeout, limits.limit_concurrency, limits.keep_alive) == (3, 50, 2)
    options = limits.uvicorn_options()
    assert options["http"].header_timeout == 3 and options["timeout_keep_alive"] == 2
    with pytest.raises(SystemExit, match="--body-timeout must be positive"):
        cli.from_arguments(cli._parser().parse_args(["m:app", "--body-timeout", "0"]))
