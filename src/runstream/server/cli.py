"""``runstream serve module:attr``: run the HTTP server with uvicorn.

``attr`` names a :class:`~runstream.Runstream`, an ASGI app (e.g. from ``create_app``), or a
function with no arguments returning either. The current directory is importable.
``--cors-origin`` (repeatable) names the browser origins allowed to call (default: pages served
from this machine, see :mod:`runstream.server.cors`);
the socket limits (read timeouts, keep-alive, connections) are :mod:`runstream.server.socket_limits`'s;
``--studio`` also starts Mastra Studio next to the server (``runstream studio`` is the same).
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

import uvicorn
from starlette.applications import Starlette

from runstream._telemetry import setup_from_environment
from runstream.runtime import Runstream
from runstream.server.app import create_app
from runstream.server.auth import TOKEN_ENV, AuthMiddleware, open_access
from runstream.server.cors import LOCAL_ORIGINS, allows
from runstream.server.socket_limits import add_arguments, from_arguments
from runstream.server.studio_launcher import StudioCommand, exit_on_signals, start_studio

TARGET_ENV = "RUNSTREAM_SERVE_TARGET"
CORS_ENV = "RUNSTREAM_SERVE_CORS_ORIGINS"
DEFAULT_STUDIO_PORT = 3000


def import_target(target: str, command: str) -> Any:
    """The object ``module:attr`` names (the current directory importable)."""
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise SystemExit(f"runstream {command}: expected 'module:attr', got {target!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        obj: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name != module_name:  # an import inside the module failed: its traceback helps
            raise
        raise SystemExit(f"runstream {command}: no module {module_name!r} (from {os.getcwd()})") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            names = sorted(n for n in vars(obj) if not n.startswith("_")) if hasattr(obj, "__dict__") else []
            raise SystemExit(
                f"runstream {command}: {module_name!r} has no attribute {attr!r}"
                + (f" (it has: {', '.join(names[:12])})" if names else "")
            )
        obj = getattr(obj, part)
    return obj


def load_app(target: str, cors_origins: Sequence[str] | None = LOCAL_ORIGINS) -> Any:
    """The ASGI app named by ``module:attr`` (a Runstream is wrapped with ``create_app``).

    ``cors_origins`` applies to a Runstream target; an app made by ``create_app`` has its own.
    """
    obj = import_target(target, "serve")
    if callable(obj) and not isinstance(obj, Starlette | Runstream) and not _is_asgi_app(obj):
        obj = obj()
    return create_app(obj, cors_origins=cors_origins) if isinstance(obj, Runstream) else obj


def _is_asgi_app(obj: Any) -> bool:
    call = getattr(obj, "__call__", None)  # noqa: B004 - an instance with __call__(scope, receive, send)
    code = getattr(call, "__code__", None)
    return code is not None and code.co_argcount >= 3


LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1"}


def announce(app: Any, host: str, port: int) -> None:
    """Say where the playground is, and warn when the API is open to other machines."""
    shown = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    shown = f"[{shown}]" if ":" in shown else shown
    print(f"runstream: playground at http://{shown}:{port}/playground", file=sys.stderr, flush=True)
    if host not in LOOPBACK_HOSTS and _open_access(app):
        print(
            f"runstream: WARNING: serving on {host} without authentication: anyone who can reach "
            f"port {port} can run your agents and read every thread. Set {TOKEN_ENV} (callers then "
            "send 'Authorization: Bearer <token>') or pass create_app(..., auth=...).",
            file=sys.stderr,
            flush=True,
        )


def _open_access(app: Any) -> bool:
    """Whether ``app`` (from ``create_app``) lets every caller in."""
    for middleware in getattr(app, "user_middleware", []):
        if getattr(middleware, "cls", None) is AuthMiddleware:
            return middleware.kwargs.get("hook") is open_access
    return False


def reload_factory() -> Any:
    """The app for uvicorn's reloader (which imports by name in a fresh process)."""
    setup_from_environment()
    return load_app(os.environ[TARGET_ENV], json.loads(os.environ.get(CORS_ENV, json.dumps(LOCAL_ORIGINS))))


def serve_command(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    cors = _cors_origins(args)
    if not args.studio:
        _run(args, cors)
        return 0
    command = StudioCommand(args.host, args.port, args.studio_port)
    if cors is not None and not allows(cors, command.studio_url):
        cors.append(command.studio_url)
    load_app(args.target, cors)  # fail fast, before Studio starts
    with exit_on_signals():
        studio = start_studio(command, args.target, verbose=args.verbose)
        try:
            _run(args, cors)
        finally:
            studio.stop()
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="runstream serve", description="Serve agents over HTTP.")
    parser.add_argument("target", help="module:attr naming a Runstream, an ASGI app, or a factory")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=4111)
    parser.add_argument("--reload", action="store_true", help="restart when Python files change")
    parser.add_argument(
        "--log-level", default="info", choices=["critical", "error", "warning", "info", "debug", "trace"]
    )
    parser.add_argument(
        "--cors-origin",
        action="append",
        dest="cors_origins",
        metavar="ORIGIN",
        help=(
            "a browser origin allowed to call, e.g. https://studio.example.com, http://localhost:*"
            " (any port) or * (any origin); repeatable; default: localhost and loopback pages"
        ),
    )
    parser.add_argument("--no-cors", action="store_true", help="no CORS headers: same-origin browsers only")
    parser.add_argument("--studio", action="store_true", help="also start Mastra Studio (needs Node.js)")
    parser.add_argument("--studio-port", type=int, default=DEFAULT_STUDIO_PORT, help="Studio's port")
    parser.add_argument(
        "--verbose", action="store_true", help="with --studio: show Studio's output and the access log"
    )
    add_arguments(parser)
    return parser


def _cors_origins(args: argparse.Namespace) -> list[str] | None:
    if args.no_cors and args.cors_origins:
        raise SystemExit("runstream serve: --no-cors and --cors-origin exclude each other")
    if args.no_cors:
        return None
    return list(args.cors_origins) if args.cors_origins else list(LOCAL_ORIGINS)


def _run(args: argparse.Namespace, cors: list[str] | None) -> None:
    limits = from_arguments(args)
    access_log = not args.studio or args.verbose  # Studio's many requests drown the rest
    app = load_app(args.target, cors)  # with --reload: fail fast, before the reloader starts
    announce(app, args.host, args.port)
    if args.reload:
        os.environ[TARGET_ENV] = args.target
        os.environ[CORS_ENV] = json.dumps(cors)
        limits.export()
        uvicorn.run(
            "runstream.server.cli:reload_factory",
            factory=True,
            reload=True,
            reload_dirs=[os.getcwd()],
            host=args.host,
            port=args.port,
            log_level=args.log_level,
            access_log=access_log,
            **limits.uvicorn_options(by_name=True),
        )
    else:
        provider = setup_from_environment()  # OTLP export when OTEL_* asks for it
        # What is loaded now (modules, the app, its agents) lives as long as the process: moved
        # out of the collector's generations, full collections stop rescanning it (bench_server:
        # garbage collection was a third of the server's CPU at 1,000 streams, ~40% less after).
        gc.collect()
        gc.freeze()
        try:
            uvicorn.run(
                app,
                host=args.host,
                port=args.port,
                log_level=args.log_level,
                access_log=access_log,
                **limits.uvicorn_options(),
            )
        finally:
            if provider is not None:
                provider.shutdown()  # flush the spans still batched
