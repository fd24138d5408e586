"""The ``runstream`` command: ``demo``, ``serve``, ``studio``, ``mcp``, ``worker`` and ``replay``
(a conformance scenario)."""

from __future__ import annotations

import argparse
import asyncio
import sys


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] in (["serve"], ["studio"]):
        from runstream.server.cli import serve_command

        return serve_command(argv[1:] + (["--studio"] if argv[0] == "studio" else []))
    if argv[:1] == ["mcp"]:
        from runstream.mcp.cli import mcp_command

        return mcp_command(argv[1:])
    if argv[:1] == ["worker"]:
        from runstream._worker_cli import worker_command

        return worker_command(argv[1:])
    from runstream import __version__

    parser = argparse.ArgumentParser(prog="runstream")
    parser.add_argument("--version", action="version", version=f"runstream {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("demo", help="stream a research agent with background tasks live in the terminal")
    commands.add_parser(
        "serve", help="serve agents over HTTP: runstream serve module:attr [--host --port ...]"
    )
    commands.add_parser(
        "studio", help="serve agents and open them in Mastra Studio: runstream studio module:attr"
    )
    commands.add_parser("mcp", help="serve agents and tools over MCP: runstream mcp module:attr [--http ...]")
    commands.add_parser(
        "worker", help="run a Runstream's background tools on Temporal: runstream worker module:attr"
    )
    replay = commands.add_parser("replay", help="run a conformance scenario, chunks as JSONL on stdout")
    replay.add_argument("scenario")
    args = parser.parse_args(argv)
    if args.command == "demo":
        from runstream.demo.research import run_demo

        asyncio.run(run_demo())
        return 0
    from runstream.conformance.__main__ import main as replay_main

    return replay_main([args.scenario])


if __name__ == "__main__":
    sys.exit(main())
