"""``runstream serve module:attr``: run the HTTP server with uvicorn.

``attr`` names a :class:`~runstream.Runstream`, an ASGI app (e.g. from ``create_app``), or a
function with no arguments returning either. The current directory is importable.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Any

import uvicorn
from starlette.applications import Starlette

from runstream.runtime import Runstream
from runstream.server.app import create_app
from runstream.telemetry import setup_from_environment

TARGET_ENV = "RUNSTREAM_SERVE_TARGET"


def import_target(target: str, command: str) -> Any:
    """The object ``module:attr`` names (the current directory importable)."""
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise SystemExit(f"runstream {command}: expected 'module:attr', got {target!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def load_app(target: str) -> Any:
    """The ASGI app named by ``module:attr`` (a Runstream is wrapped with ``create_app``)."""
    obj = import_target(target, "serve")
    if callable(obj) and not isinstance(obj, Starlette | Runstream) and not _is_asgi_app(obj):
        obj = obj()
    return create_app(obj) if isinstance(obj, Runstream) else obj


def _is_asgi_app(obj: Any) -> bool:
    call = getattr(obj, "__call__", None)  # noqa: B004 - an instance with __call__(scope, receive, send)
    code = getattr(call, "__code__", None)
    return code is not None and code.co_argcount >= 3


def reload_factory() -> Any:
    """The app for uvicorn's reloader (which imports by name in a fresh process)."""
    setup_from_environment()
    return load_app(os.environ[TARGET_ENV])


def serve_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="runstream serve", description="Serve agents over HTTP.")
    parser.add_argument("target", help="module:attr naming a Runstream, an ASGI app, or a factory")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=4111)
    parser.add_argument("--reload", action="store_true", help="restart when Python files change")
    parser.add_argument(
        "--log-level", default="info", choices=["critical", "error", "warning", "info", "debug", "trace"]
    )
    args = parser.parse_args(argv)
    if args.reload:
        os.environ[TARGET_ENV] = args.target
        load_app(args.target)  # fail fast, before the reloader starts
        uvicorn.run(
            "runstream.server.cli:reload_factory",
            factory=True,
            reload=True,
            reload_dirs=[os.getcwd()],
            host=args.host,
            port=args.port,
            log_level=args.log_level,
        )
    else:
        provider = setup_from_environment()  # OTLP export when OTEL_* asks for it
        try:
            uvicorn.run(load_app(args.target), host=args.host, port=args.port, log_level=args.log_level)
        finally:
            if provider is not None:
                provider.shutdown()  # flush the spans still batched
    return 0
