"""Loopback replay server for vendor streams (fixtures/<vendor>/<name>.chunks.txt, one event JSON per line).

A copy of the shared kit's server (tools/vendor-streams/server.py), extended for errors and cut streams;
the reference side (record.sh) and runstream's side (test_vendor_kit.py) both replay through it.

POST /v1/responses, /v1/chat/completions, /v1/messages, /v1beta/models/<model>:streamGenerateContent?alt=sse
(Google Generative Language API; any prefix before /models/ is accepted): replays the next fixture of the
queue as SSE.
  Framing follows the real APIs:
    responses  -> "event: <type>\\ndata: <line>\\n\\n"          (OpenAI Responses)
    chat       -> "data: <line>\\n\\n" ... "data: [DONE]\\n\\n"   (Chat Completions)
    anthropic  -> "event: <type>\\ndata: <line>\\n\\n"          (Anthropic Messages)
    google     -> "data: <line>\\r\\n\\r\\n"                    (Gemini streamGenerateContent, alt=sse; no [DONE])
  Each fixture line is sent byte-for-byte (never re-serialised); a fixture line recorded with its own
  "data: " prefix (some Google recordings) has that prefix dropped before framing.
A queue entry is a fixture name, or an object {"fixture": name, "status"?, "headers"?, "cut"?}:
  - a fixture ending in ".json" is a recorded error body, answered as JSON with the HTTP status of its
    error.code (or "status" when given, e.g. Anthropic's 529 overloaded_error, whose body has no code);
  - "headers" are added to the response (e.g. {"retry-after": "0"} with a 429 error body);
  - "cut": n sends only the first n events of the stream and closes the connection (no terminal event,
    no "data: [DONE]"): a stream cut before its end.
Once the queue is used up, the last entry is served again.
POST /_ctl/queue {"queue": [...]} resets the queue and the request log.
GET  /_ctl/log   the requests received since the last reset (path + fixture + JSON body).
Binds 127.0.0.1 only. Standard library only: `python3 server.py [PORT]` prints the port it listens on.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))


def is_google(route: str) -> bool:
    return "/models/" in route and route.endswith(":streamGenerateContent")


def entry_spec(entry: Any) -> dict[str, Any]:
    """A queue entry as {"fixture", "status"?, "headers"?, "cut"?}."""
    return dict(entry) if isinstance(entry, dict) else {"fixture": entry}


def frame(fixtures: str, route: str, fixture: str, cut: int | None = None) -> list[bytes]:
    with open(os.path.join(fixtures, fixture + ".chunks.txt"), encoding="utf-8") as fh:
        lines = [line.rstrip("\n") for line in fh if line.strip()]
    out: list[bytes] = []
    chat = route.endswith("/chat/completions")
    for line in lines:
        if is_google(route):
            out.append(f"data: {line.removeprefix('data: ')}\r\n\r\n".encode())
        elif chat:
            out.append(f"data: {line}\n\n".encode())
        else:
            kind = json.loads(line).get("type", "message")
            out.append(f"event: {kind}\ndata: {line}\n\n".encode())
    if cut is not None:
        return out[:cut]
    if chat:
        out.append(b"data: [DONE]\n\n")
    return out


class ReplayServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, fixtures: str, port: int = 0) -> None:
        super().__init__(("127.0.0.1", port), Handler)
        self.fixtures = fixtures
        self.lock = threading.Lock()
        self.queue: list[Any] = []
        self.served = 0
        self.log: list[dict[str, Any]] = []

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def reset(self, queue: list[Any]) -> None:
        with self.lock:
            self.queue, self.served, self.log = list(queue), 0, []

    def requests(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.log)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: ReplayServer

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass

    def _json(self, code: int, value: object) -> None:
        body = json.dumps(value).encode()
        self.send_response(code)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path == "/_ctl/log":
            self._json(200, self.server.requests())
            return
        self._json(404, {"error": {"message": f"no route {self.path}"}})

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        if self.path == "/_ctl/queue":
            self.server.reset(json.loads(raw or b"{}")["queue"])
            self._json(200, {"ok": True})
            return
        route = self.path.split("?", 1)[0]
        if not (route.endswith(("/responses", "/chat/completions", "/messages")) or is_google(route)):
            self._json(404, {"error": {"message": f"no route {self.path}"}})
            return
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        srv = self.server
        with srv.lock:
            if not srv.queue:
                self._json(500, {"error": {"message": "replay queue is empty"}})
                return
            spec = entry_spec(srv.queue[min(srv.served, len(srv.queue) - 1)])
            srv.served += 1
            srv.log.append({"path": self.path, "fixture": spec["fixture"], "body": body})
        fixture = spec["fixture"]
        extra_headers = dict(spec.get("headers") or {})
        if fixture.endswith(".json"):  # a recorded error response, sent as recorded
            with open(os.path.join(srv.fixtures, fixture), "rb") as fh:
                data = fh.read()
            err = json.loads(data)
            code = (err.get("error") or {}).get("code") if isinstance(err, dict) else None
            status = spec.get("status", code if isinstance(code, int) else 200)
            self.send_response(status)
            self.send_header("content-type", "application/json; charset=UTF-8")
            self.send_header("content-length", str(len(data)))
            for key, value in extra_headers.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)
            return
        events = frame(srv.fixtures, route, fixture, spec.get("cut"))
        self.send_response(spec.get("status", 200))
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("x-request-id", "req_replay")
        self.send_header("connection", "close")
        for key, value in extra_headers.items():
            self.send_header(key, value)
        self.end_headers()
        try:
            for event in events:
                self.wfile.write(event)
                self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass
        self.close_connection = True


def start(fixtures: str, port: int = 0) -> ReplayServer:
    """A server answering on a daemon thread (stop it with ``shutdown()`` then ``server_close()``)."""
    server = ReplayServer(fixtures, port)
    threading.Thread(target=server.serve_forever, name="vendor-replay", daemon=True).start()
    return server


def main() -> None:
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    fixtures = os.environ.get("VENDOR_FIXTURES", os.path.join(HERE, "fixtures"))
    server = ReplayServer(fixtures, port)
    print(server.port, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
