"""The examples in examples/ run as documented (scripted models, no network)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent


def test_goal_agent_example_reaches_done() -> None:
    out = subprocess.run(
        [sys.executable, "examples/goal_agent.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    assert "[goal] attempt 1/5: active - The haiku has no title: add one." in out
    assert out.strip().endswith("objective: done after 2 judgements")


def test_workflow_approval_example_publishes_or_not() -> None:
    def run(*args: str) -> str:
        return subprocess.run(
            [sys.executable, "examples/workflow_approval.py", *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
            stdin=subprocess.DEVNULL,  # not a terminal: the reviewer approves
        ).stdout

    assert (
        run().strip().endswith("result: {'published': True, 'url': 'https://blog.example/rust-in-one-line'}")
    )
    assert run("--reject").strip().endswith("result: {'published': False, 'reason': 'too short'}")


def test_rag_example_retrieves_the_right_chunk() -> None:
    out = subprocess.run(
        [sys.executable, "examples/rag.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env={k: v for k, v in __import__("os").environ.items() if k != "OPENAI_API_KEY"},
    ).stdout
    assert out.splitlines() == [
        "indexed 4 chunks",
        "retrieved: Background tasks run tools without blocking the conversation. A task can be cancelled or resumed.",
        "answer: A background task can be cancelled or resumed.",
    ]
