"""The official AG-UI client (``@ag-ui/client``, pinned in tests/js) drives ``/ag-ui/{agentId}``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.agui.conftest import TOKEN, agui_server

JS = Path(__file__).parents[1] / "js"


def _missing() -> str | None:
    if shutil.which("node") is None:
        return "node is not installed"
    if not (JS / "node_modules" / "@ag-ui" / "client").is_dir():
        return "tests/js/node_modules is missing: run sh tests/js/setup.sh"
    return None


if _missing() and os.environ.get("CI") == "true":
    raise RuntimeError(f"JS interop tests cannot run under CI: {_missing()}")
pytestmark = pytest.mark.skipif(_missing() is not None, reason=str(_missing()))


def run_script(base: str) -> Any:
    result = subprocess.run(
        ["node", "scripts/ag-ui.mjs"],
        cwd=JS,
        env={**os.environ, "BASE": base, "TOKEN": TOKEN},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, f"ag-ui.mjs failed:\n{result.stdout}\n{result.stderr}"
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def out() -> Any:
    with agui_server() as url:
        return run_script(url)


def test_text_run(out: Any) -> None:
    run = out["text"]
    assert run["events"] == [
        "RUN_STARTED",
        "STATE_SNAPSHOT",
        "CUSTOM",
        "STEP_STARTED",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "STEP_FINISHED",
        "RUN_FINISHED",
    ]
    assert run["messages"] == [
        {"role": "user", "content": "hello there"},
        {"role": "assistant", "content": "You said: hello there"},
    ]


def test_tool_run(out: Any) -> None:
    run = out["tool"]
    calls = run["events"][run["events"].index("TOOL_CALL_START") :][:4]
    assert calls == ["TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "TOOL_CALL_RESULT"]
    assert run["events"].count("STEP_STARTED") == 2
    asked, call, result, answer = run["messages"]
    assert asked == {"role": "user", "content": "divide 6 3"}
    assert call == {"role": "assistant", "toolCalls": [["divide", {"a": 6, "b": 3}]]}
    assert result == {"role": "tool", "content": "2.0", "toolCallId": result["toolCallId"]}
    assert answer == {"role": "assistant", "content": "The result is 2.0."}


def test_background_task_and_its_follow_up_turn(out: Any) -> None:
    run = out["background"]
    assert run["custom"] == [
        "runstream.turn",
        "background-task-started",
        "background-task-running",
        "background-task-output",
        "background-task-completed",
        "runstream.turn",
    ]
    assert run["events"][-1] == "RUN_FINISHED" and run["events"].count("RUN_FINISHED") == 1
    contents = [m.get("content") for m in run["messages"] if m["role"] == "assistant"]
    assert contents[-2:] == [
        "Started in the background.",
        'Follow-up: {"topic": "sol", "summary": "sol is well studied"}.',
    ]
    placeholder = next(m for m in run["messages"] if m["role"] == "tool")
    assert placeholder["content"].startswith("Background task started. Task ID: ")


def test_client_side_tool_round_trip(out: Any) -> None:
    tool = out["clientTool"]
    assert tool["firstNewMessages"] == [
        {"role": "assistant", "toolCalls": [["confirm", {"question": "Proceed?"}]]}
    ]
    assert tool["pending"] == [tool["callId"]]
    second = tool["second"]
    assert "TOOL_CALL_START" not in second["events"]
    assert second["messages"][-2:] == [
        {"role": "tool", "content": '"yes"', "toolCallId": tool["callId"]},
        {"role": "assistant", "content": 'The result is "yes".'},
    ]


def test_state_snapshot_then_deltas(out: Any) -> None:
    """``plan 3``: the client's state echoed, the tool's first state as a snapshot (a patch from
    the client's state would be longer), each step as a JSON Patch delta, then the tool's own
    patch; ``HttpAgent`` applies them all."""
    run = out["state"]
    kinds = [event["type"] for event in run["stateEvents"]]
    assert kinds == ["STATE_SNAPSHOT", "STATE_SNAPSHOT", *["STATE_DELTA"] * 4]
    assert run["stateEvents"][0]["snapshot"] == {"page": "plan"}
    assert run["stateEvents"][2]["delta"] == [
        {"op": "replace", "path": "/plan/0/status", "value": "done"},
        {"op": "replace", "path": "/done", "value": 1},
    ]
    assert run["stateEvents"][-1]["delta"] == [{"op": "add", "path": "/finished", "value": True}]
    assert run["finalState"] == {
        "plan": [{"step": n, "title": f"Step {n} of the plan", "status": "done"} for n in (1, 2, 3)],
        "done": 3,
        "finished": True,
    }
    assert run["newMessages"][-1] == {"role": "assistant", "content": 'The result is "3 steps done".'}
