"""Every code block of docs/mcp.md, docs/ag-ui.md and docs/otel.md runs as written.

Python and JavaScript blocks run as programs and their output must equal the ``text`` block that
follows them. Commands run as written, except for what a test must change: fixed ports become
free ones (and URLs follow), ``npx @modelcontextprotocol/inspector`` is the copy pinned in
tests/js, and the OTLP endpoint is a receiver this test runs.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import mcp
import pytest

from tests.mcp.conftest import start_http_server

ROOT = Path(__file__).parents[1]
JS = ROOT / "tests" / "js"
BIN = Path(sys.executable).parent
ENV = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "PYTHONPATH": str(ROOT)}
ENV.pop("RUNSTREAM_API_TOKEN", None)
ENV["COPILOTKIT_TELEMETRY_DISABLED"] = "true"  # as the CopilotKit block of docs/ag-ui.md says
EXPECTED_TOOLS = {"ask_calc", "divide"}


def blocks(page: str) -> list[tuple[str, str]]:
    return re.findall(r"^```(\w+)\n(.*?)^```", (ROOT / "docs" / page).read_text(), re.S | re.M)


def run_program(command: list[str], cwd: Path) -> str:
    result = subprocess.run(command, cwd=cwd, env=ENV, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, f"{command} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def check_python(code: str, expected: str) -> None:
    assert run_program([sys.executable, "-c", code], ROOT) == expected


def argv(command: str) -> list[str]:
    """A documented command line, its fixed port made free (``--port 0``)."""
    return (
        re.sub(r"--port \d+", "--port 0", command.strip()).replace("runstream ", "-m runstream ", 1).split()
    )


@pytest.fixture(scope="module")
def served() -> Iterator[str]:
    """The server of docs/ag-ui.md's first block, on a free port."""
    (kind, command), *_ = blocks("ag-ui.md")
    assert kind == "sh"
    process, base = start_http_server(*argv(command), env={"RUNSTREAM_API_TOKEN": ""})
    try:
        yield base
    finally:
        process.terminate()
        process.wait(10)


async def list_tools(server: mcp.StdioServerParameters | str) -> set[str]:
    async with mcp.Client(server) as client:
        return {tool.name for tool in (await client.list_tools()).tools}


async def test_mcp_page() -> None:
    page = blocks("mcp.md")
    assert [kind for kind, _ in page] == ["python", "text", "sh", "sh", "json", "sh", "python", "text"]
    check_python(page[0][1], page[1][1])
    stdio = shlex.split(page[2][1])
    assert stdio[0] == "runstream"
    params = mcp.StdioServerParameters(command=str(BIN / "runstream"), args=stdio[1:], cwd=str(ROOT), env=ENV)
    assert await list_tools(params) == EXPECTED_TOOLS
    process, base = start_http_server(*argv(page[3][1]), env={"RUNSTREAM_API_TOKEN": ""})
    try:
        assert await list_tools(f"{base}/mcp") == EXPECTED_TOOLS
    finally:
        process.terminate()
        process.wait(10)
    (config,) = json.loads(page[4][1])["mcpServers"].values()
    desktop = mcp.StdioServerParameters(
        command=str(BIN / config["command"]), args=config["args"], cwd=str(ROOT / config["cwd"]), env=ENV
    )
    assert await list_tools(desktop) == EXPECTED_TOOLS
    inspector = (
        page[5][1]
        .strip()
        .replace("npx @modelcontextprotocol/inspector", str(JS / "node_modules/.bin/mcp-inspector"))
    )
    listed = json.loads(run_program(shlex.split(inspector), ROOT))
    assert {tool["name"] for tool in listed["tools"]} == EXPECTED_TOOLS
    check_python(page[6][1], page[7][1])


def test_ag_ui_page(served: str) -> None:
    page = blocks("ag-ui.md")
    assert [kind for kind, _ in page] == ["sh", "js", "text", "js", "text", "sh", "js", "text"]
    script = JS / "docs-ag-ui-client.mjs"  # inside tests/js, where @ag-ui/client resolves
    copilot_port = str(free_port())
    for code, expected in ((page[1][1], page[2][1]), (page[3][1], page[4][1]), (page[6][1], page[7][1])):
        script.write_text(code.replace("http://localhost:4111", served).replace("3001", copilot_port))
        try:
            assert run_program(["node", script.name], JS) == expected
        finally:
            script.unlink()
    curl = shlex.split(page[5][1].replace("http://localhost:4111", served))
    events = [
        json.loads(line[6:]) for line in run_program(curl, ROOT).splitlines() if line.startswith("data: ")
    ]
    assert events[0]["type"] == "RUN_STARTED" and events[-1]["type"] == "RUN_FINISHED"
    assert "You said: hello" in [e.get("delta") for e in events]


def test_otel_page() -> None:
    """The in-process example, then the documented receiver, server and request as processes:
    the receiver prints what the page says (ports made free, the export's batch delay short);
    the scorer registration and the scoring runner run as written (they print nothing), and the
    scorers examples print what the page shows."""
    page = blocks("otel.md")
    assert [kind for kind, _ in page] == [
        *("python", "text", "sh", "sh", "sh", "text"),
        *("python", "python", "python", "text", "python", "text"),
    ]
    check_python(page[0][1], page[1][1])
    check_python(page[6][1], "")
    check_python(page[7][1], "")  # the scoring runner's bounds
    check_python(page[8][1], page[9][1])  # an agent's own scorers
    check_python(page[10][1], page[11][1])  # a run's own scorers, by name
    port = free_port()
    receiver = subprocess.Popen(
        [sys.executable, *page[2][1].split()[1:-1], str(port)],
        cwd=ROOT,
        env=ENV,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert receiver.stdout is not None
        printed = [receiver.stdout.readline()]
        words = page[3][1].split()
        env = dict(word.split("=", 1) for word in words if "=" in word and not word.startswith("-"))
        assert env.pop("OTEL_EXPORTER_OTLP_ENDPOINT") == "http://127.0.0.1:4318"
        env |= {
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
            "OTEL_BSP_SCHEDULE_DELAY": "50",
            "RUNSTREAM_API_TOKEN": "",
        }
        command = " ".join(word for word in words if "=" not in word or word.startswith("-"))
        process, base = start_http_server(*argv(command), env=env)
        try:
            curl = shlex.split(page[4][1].replace("http://127.0.0.1:4111", base))
            assert json.loads(run_program(curl, ROOT))["text"] == "The result is 2.0."
            expected = page[5][1].replace(":4318", f":{port}").splitlines(keepends=True)
            printed += [receiver.stdout.readline() for _ in expected[1:]]  # blocks until printed
        finally:
            process.terminate()
            process.wait(10)
    finally:
        receiver.terminate()
        receiver.wait(10)
    assert printed == expected


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
