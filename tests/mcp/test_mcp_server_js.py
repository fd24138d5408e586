"""``runstream mcp`` driven by the official MCP TypeScript SDK (@modelcontextprotocol/sdk, pinned
in tests/js), over stdio and streamable HTTP."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.mcp.conftest import ROOT, start_http_server
from tests.mcp.test_mcp_server import SERVE, TOKEN

JS = Path(__file__).parents[1] / "js"


def _missing() -> str | None:
    if shutil.which("node") is None:
        return "node is not installed"
    if not (JS / "node_modules" / "@modelcontextprotocol" / "sdk").is_dir():
        return "tests/js/node_modules is missing: run sh tests/js/setup.sh"
    return None


if _missing() and os.environ.get("CI") == "true":
    raise RuntimeError(f"JS interop tests cannot run under CI: {_missing()}")
pytestmark = pytest.mark.skipif(_missing() is not None, reason=str(_missing()))


def run_node(env: dict[str, str]) -> Any:
    result = subprocess.run(
        ["node", "scripts/mcp-client.mjs"],
        cwd=JS,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, f"mcp-client failed:\n{result.stdout}\n{result.stderr}"
    return json.loads(result.stdout.strip().splitlines()[-1])


def check(out: Any) -> None:
    assert out["protocol"]["name"] == "runstream"
    assert out["tools"] == [
        {"name": "ask_calc", "required": ["message"]},
        {"name": "divide", "required": ["a", "b"]},
    ]
    assert out["asked"] == {"text": "The result is 4.0.", "isError": False}
    # Every note reaches the client, in order, before the call's response; the SDK passes on the
    # ones that did not arrive in the same read as the response (see mcp-client.mjs), in order.
    notes = [[1, "calling divide"], [2, "divide done"]]
    assert out["sent"] == notes
    assert out["progress"] == notes[: len(out["progress"])]
    assert out["divided"]["isError"] is True and "division by zero" in out["divided"]["text"]


def test_node_client_over_stdio() -> None:
    check(run_node({"PYTHON": sys.executable, "MCP_ARGS": json.dumps(SERVE), "MCP_CWD": str(ROOT)}))


def test_node_client_over_streamable_http() -> None:
    process, base = start_http_server(*SERVE, "--http", "--port", "0", env={"RUNSTREAM_API_TOKEN": TOKEN})
    try:
        check(run_node({"MCP_URL": f"{base}/mcp", "MCP_TOKEN": TOKEN}))
    finally:
        process.terminate()
        process.wait(10)
