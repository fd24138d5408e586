"""Timeouts and limits at the socket for ``runstream serve`` (uvicorn, h11).

uvicorn bounds keep-alive idleness, concurrent connections, the accept backlog, header size
(h11's incomplete-event size) and graceful shutdown, but has no read timeout: a client that
sends half a request line, half its headers or half its body holds a connection for ever
(slowloris). :class:`ReadTimeoutProtocol`, uvicorn's h11 protocol with one timer per connection,
closes such connections:

- the request head (request line and headers) must arrive within ``header_timeout`` seconds of
  the connection opening, or of the first byte of a later request on a kept-alive connection;
- while a request body is incomplete, a gap of ``body_timeout`` seconds without a byte closes
  the connection (the app's receive then gets ``http.disconnect``); a gap caused by the server
  itself (reading paused because the app has not read the body yet) does not count.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from dataclasses import dataclass
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

HEADER_TIMEOUT_ENV = "RUNSTREAM_SERVE_HEADER_TIMEOUT"
BODY_TIMEOUT_ENV = "RUNSTREAM_SERVE_BODY_TIMEOUT"
KEEP_ALIVE_ENV = "RUNSTREAM_SERVE_KEEP_ALIVE"
LIMIT_CONCURRENCY_ENV = "RUNSTREAM_SERVE_LIMIT_CONCURRENCY"
BACKLOG_ENV = "RUNSTREAM_SERVE_BACKLOG"
GRACEFUL_SHUTDOWN_ENV = "RUNSTREAM_SERVE_GRACEFUL_SHUTDOWN"
MAX_HEADER_BYTES_ENV = "RUNSTREAM_SERVE_MAX_HEADER_BYTES"


@dataclass(frozen=True)
class SocketLimits:
    """The socket limits of ``runstream serve`` (seconds, counts, bytes) and their defaults."""

    header_timeout: float = 10.0
    body_timeout: float = 30.0
    keep_alive: float = 5.0
    limit_concurrency: int = 1000
    backlog: int = 2048
    graceful_shutdown: float = 8.0  # under `docker stop`'s 10 s before SIGKILL
    max_header_bytes: int = 16 * 1024

    def uvicorn_options(self, *, by_name: bool = False) -> dict[str, Any]:
        """``uvicorn.run``/``uvicorn.Config`` keyword arguments enforcing these limits.

        ``by_name`` names the protocol by import path (for the reloader's fresh process, which
        then reads the read timeouts from the environment: see :meth:`export`).
        """
        http: Any = (
            "runstream.server.socket_limits:ReadTimeoutProtocol"
            if by_name
            else type(
                "ReadTimeoutProtocol",
                (ReadTimeoutProtocol,),
                {"header_timeout": self.header_timeout, "body_timeout": self.body_timeout},
            )
        )
        return {
            "http": http,
            "timeout_keep_alive": self.keep_alive,
            "limit_concurrency": self.limit_concurrency,
            "backlog": self.backlog,
            "timeout_graceful_shutdown": self.graceful_shutdown,
            "h11_max_incomplete_event_size": self.max_header_bytes,
        }

    def export(self) -> None:
        """Put the read timeouts in the environment (read by a reloader's fresh process)."""
        os.environ[HEADER_TIMEOUT_ENV] = str(self.header_timeout)
        os.environ[BODY_TIMEOUT_ENV] = str(self.body_timeout)


def _env(name: str, default: float) -> float:
    return float(os.environ.get(name) or default)


class ReadTimeoutProtocol(H11Protocol):
    """uvicorn's h11 protocol with header and body read timeouts (see the module docstring)."""

    header_timeout: float = _env(HEADER_TIMEOUT_ENV, SocketLimits.header_timeout)
    body_timeout: float = _env(BODY_TIMEOUT_ENV, SocketLimits.body_timeout)

    _read_timer: asyncio.TimerHandle | None = None
    _reading: str = ""  # "head" or "body": what the armed timer waits for

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm("head", self.header_timeout)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._watch()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._watch()  # a pipelined request may be half received

    def _watch(self) -> None:
        if self.transport.is_closing():
            self._disarm()
            return
        state = self.conn.their_state
        if state is h11.IDLE:
            # A new request's first bytes: its head has header_timeout from now. An idle kept-alive
            # connection (no bytes) is uvicorn's keep-alive timer's.
            if self._reading != "head" and self.conn.trailing_data[0]:
                self._arm("head", self.header_timeout)
        elif state is h11.SEND_BODY:
            self._arm("body", self.body_timeout)  # an idle gap: restarted by every byte
        else:
            self._disarm()

    def _arm(self, reading: str, seconds: float) -> None:
        self._disarm()
        self._reading = reading
        self._read_timer = self.loop.call_later(seconds, self._timed_out)

    def _disarm(self) -> None:
        if self._read_timer is not None:
            self._read_timer.cancel()
        self._read_timer = None
        self._reading = ""

    def _timed_out(self) -> None:
        self._read_timer = None
        if self._reading == "body" and self.flow.read_paused:
            self._arm("body", self.body_timeout)  # the server paused reading, not the client
            return
        self.logger.debug("Request %s not received in time; closing the connection.", self._reading)
        self._reading = ""
        self.transport.close()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``runstream serve``'s socket-limit flags (each defaults to its environment variable)."""
    d = SocketLimits()
    group = parser.add_argument_group("socket limits")

    def flag(name: str, kind: type, env: str, default: float, help: str) -> None:
        group.add_argument(
            name, type=kind, default=kind(os.environ.get(env) or default), help=f"{help} (${env})"
        )

    flag(
        "--header-timeout",
        float,
        HEADER_TIMEOUT_ENV,
        d.header_timeout,
        f"seconds to receive a request's head; default {d.header_timeout:g}",
    )
    flag(
        "--body-timeout",
        float,
        BODY_TIMEOUT_ENV,
        d.body_timeout,
        f"seconds without a byte of an incomplete request body; default {d.body_timeout:g}",
    )
    flag(
        "--keep-alive",
        float,
        KEEP_ALIVE_ENV,
        d.keep_alive,
        f"seconds an idle kept-alive connection stays open; default {d.keep_alive:g}",
    )
    flag(
        "--limit-concurrency",
        int,
        LIMIT_CONCURRENCY_ENV,
        d.limit_concurrency,
        f"open connections (and running requests) past which requests get 503; default {d.limit_concurrency}",
    )
    flag("--backlog", int, BACKLOG_ENV, d.backlog, f"connections waiting to be accepted; default {d.backlog}")
    flag(
        "--graceful-shutdown",
        float,
        GRACEFUL_SHUTDOWN_ENV,
        d.graceful_shutdown,
        f"seconds open requests get to finish on shutdown; default {d.graceful_shutdown:g}",
    )
    flag(
        "--max-header-bytes",
        int,
        MAX_HEADER_BYTES_ENV,
        d.max_header_bytes,
        f"bytes of a request's head (larger: 400); default {d.max_header_bytes}",
    )


def from_arguments(args: argparse.Namespace) -> SocketLimits:
    """The limits the parsed flags name (each must be positive)."""
    limits = SocketLimits(
        header_timeout=args.header_timeout,
        body_timeout=args.body_timeout,
        keep_alive=args.keep_alive,
        limit_concurrency=args.limit_concurrency,
        backlog=args.backlog,
        graceful_shutdown=args.graceful_shutdown,
        max_header_bytes=args.max_header_bytes,
    )
    for name, value in vars(limits).items():
        if not value > 0:
            raise SystemExit(f"runstream serve: --{name.replace('_', '-')} must be positive, got {value}")
    return limits
