"""Vendor state through the loop (issue 24): provider metadata on chunks, steps and finish;
reasoning blocks (OpenAI item ids and encrypted content, Anthropic signatures and redacted
thinking) into step content, the next request and memory, and back from memory in a new
process; provider-executed tools; usage and raw finish reasons.

The expected values are what real Mastra 1.71 did with the same scripted parts: the
``x-v24-*`` scenarios of ``tests/conformance_extra`` (their goldens hold the chunks, and their
meta files the prompts Mastra sent and the messages it stored). ``compare.py`` drops
``providerMetadata``/``providerOptions`` when it compares, so this file compares them, with only
Mastra's own ``mastra.createdAt`` stamps left out (runstream does not stamp message parts).
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from runstream import Runstream
from runstream.conformance.runner import ScenarioRunner, ToolExecutionLog, build_agent
from runstream.storage.sqlite import SqliteStorage
from runstream.testing import ScriptedModel

EXTRA = Path(__file__).parent / "conformance_extra"
V24 = sorted(p.stem for p in (EXTRA / "scenarios").glob("x-v24-*.json"))
MEMORY = ["x-v24-openai-reasoning-memory", "x-v24-anthropic-thinking-memory", "x-v24-provider-executed-only"]
METADATA_CHUNKS = {
    "text-start",
    "text-delta",
    "text-end",
    "reasoning-start",
    "reasoning-delta",
    "reasoning-end",
    "tool-call-input-streaming-start",
    "tool-call-delta",
    "tool-call-input-streaming-end",
    "tool-call",
    "tool-result",
    "source",
    "file",
}


def _scenario(name: str) -> dict[str, Any]:
    return json.loads((EXTRA / "scenarios" / f"{name}.json").read_text())


def _golden(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (EXTRA / "golden" / f"{name}.jsonl").read_text().splitlines()]


def _meta(name: str) -> dict[str, Any]:
    return json.loads((EXTRA / "golden" / f"{name}.meta.json").read_text())  # type: ignore[no-any-return]


def _vendor(value: Any) -> Any:
    """``value`` without Mastra's own ``mastra.createdAt`` stamps (and the ``createdAt`` of
    stored parts): what is left is the vendors' state."""
    if isinstance(value, list):
        return [_vendor(item) for item in value]
    if not isinstance(value, dict):
        return value
    out = {}
    for key, item in value.items():
        if key == "createdAt":
            continue
        if key in ("providerOptions", "providerMetadata", "callProviderMetadata") and isinstance(item, dict):
            item = {k: v for k, v in item.items() if k != "mastra"}
            if not item:
                continue
        out[key] = _vendor(item)
    return out


async def _run_scenario(name: str) -> list[dict[str, Any]]:
    out = io.StringIO()
    await ScenarioRunner(_scenario(name), out).run()
    return [json.loads(line) for line in out.getvalue().splitlines()]


def _metadata_view(chunks: list[dict[str, Any]]) -> list[tuple[str, Any, Any, Any]]:
    return [
        (
            c["type"],
            c["payload"].get("providerMetadata"),
            c["payload"].get("providerExecuted"),
            c["payload"].get("isError"),
        )
        for c in chunks
        if c["type"] in METADATA_CHUNKS
    ]


def _step_view(chunk: dict[str, Any]) -> dict[str, Any]:
    payload = chunk["payload"]
    return _vendor(
        {
            "providerMetadata": payload["metadata"].get("providerMetadata"),
            "stepResult": payload["stepResult"],
            "usage": payload["output"]["usage"],
            "toolCalls": payload["output"]["toolCalls"],
            "steps": [
                {
                    "providerMetadata": step.get("providerMetadata"),
                    "content": [p for p in step["content"] if p["type"] != "tool-result"],
                }
                for step in payload["output"]["steps"]
            ],
            "nonUser": payload["messages"]["nonUser"],
        }
    )


@pytest.mark.parametrize("name", V24)
async def test_chunks_carry_the_provider_metadata_mastra_streams(name: str) -> None:
    golden, ours = _golden(name), await _run_scenario(name)
    assert _metadata_view(ours) == _metadata_view(golden)


# Mastra splits a message where text follows a provider-executed tool's result (its merge opens
# a step there), which drops that text from the step's content and halves the response: a data
# loss we do not copy (one step, one assistant message, the text kept).
SPLIT_BY_MASTRA = {"x-v24-provider-executed-only", "x-v24-provider-executed-tool-calls"}


@pytest.mark.parametrize("name", sorted(set(V24) - SPLIT_BY_MASTRA))
async def test_step_and_finish_metadata_content_and_usage_are_mastras(name: str) -> None:
    golden, ours = _golden(name), await _run_scenario(name)
    finishes = [_step_view(c) for c in golden if c["type"] in ("step-finish", "finish")]
    assert [_step_view(c) for c in ours if c["type"] in ("step-finish", "finish")] == finishes


def test_the_recordings_hold_what_issue_24_is_about() -> None:
    """The goldens these tests compare with show the vendor state (so the comparisons above
    are not vacuous)."""
    openai = [c for c in _golden("x-v24-openai-reasoning-memory") if c["type"] == "step-finish"]
    content = openai[0]["payload"]["output"]["steps"][0]["content"]
    assert _vendor(content[1]) == {
        "type": "reasoning",
        "text": "",
        "providerOptions": {"openai": {"itemId": "rs_2", "reasoningEncryptedContent": "enc-2"}},
    }
    assert openai[0]["payload"]["metadata"]["providerMetadata"] == {
        "openai": {"responseId": "resp-0", "serviceTier": "default"}
    }
    anthropic = [c for c in _golden("x-v24-anthropic-thinking-memory") if c["type"] == "step-finish"]
    first = anthropic[0]["payload"]
    assert first["stepResult"]["rawReason"] == "tool_use"
    assert first["output"]["usage"]["cacheCreationInputTokens"] == 3
    assert first["output"]["usage"]["cacheCreationInputTokens5m"] == 3
    assert "cachedInputTokens" not in _golden("x-v24-delta-metadata-usage")[-1]["payload"]["output"]["usage"]


async def _run_in(storage_path: Path, scenario: dict[str, Any], runs: list[dict[str, Any]]) -> ScriptedModel:
    agent = build_agent(scenario, ToolExecutionLog())
    runtime = Runstream(agents=[agent], storage=SqliteStorage(str(storage_path)))
    try:
        for run in runs:
            out = await agent.stream(run["messages"], memory=run["memory"], max_steps=5)
            await out.text
    finally:
        await runtime.close()
    model = agent.model
    assert isinstance(model, ScriptedModel)
    return model


@pytest.mark.parametrize("name", MEMORY)
async def test_prompts_and_memory_are_mastras(name: str, tmp_path: Path) -> None:
    scenario, meta = _scenario(name), _meta(name)
    model = await _run_in(tmp_path / "memory.db", scenario, scenario["runs"])
    expected = [_joined(_vendor(call["prompt"])) for call in meta["modelCalls"]["main"]]
    assert [_joined(_vendor(call.prompt)) for call in model.recorded] == expected
    storage = SqliteStorage(str(tmp_path / "memory.db"))
    try:
        thread = scenario["runs"][0]["memory"]["thread"]
        stored = await storage.latest_messages(thread, 50)
    finally:
        await storage.close()
    # Mastra's messages in format 2 (text/reasoning/tool parts with their metadata)
    assert [_unsplit(_vendor(m.content["parts"])) for m in stored] == [
        _unsplit(_vendor(m["content"]["parts"])) for m in meta["memory"]
    ]


def _joined(prompt: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Consecutive assistant messages as one (Mastra splits one where text follows a
    provider-executed tool's result; providers send them as one turn either way)."""
    joined: list[dict[str, Any]] = []
    for message in prompt:
        if joined and message["role"] == joined[-1]["role"] == "assistant":
            joined[-1] = {**joined[-1], "content": [*joined[-1]["content"], *message["content"]]}
        else:
            joined.append(message)
    return joined


def _unsplit(parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Stored parts without the step boundary Mastra's split opens after a provider-executed
    tool's result, and without sources (runstream's memory keeps the model's message, sources
    stream as chunks)."""
    kept: list[dict[str, Any]] = []
    for part in parts:
        if part["type"] == "source":
            continue
        after_provider_tool = kept and kept[-1].get("providerExecuted")
        if part["type"] == "step-start" and after_provider_tool:
            continue
        kept.append(part)
    return kept


CHILD = """
import asyncio, json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from test_vendor_state import _run_in
scenario = json.loads(Path(sys.argv[2]).read_text())
runs = json.loads(sys.argv[4])
model = asyncio.run(_run_in(Path(sys.argv[3]), scenario, runs))
print(json.dumps([call.prompt for call in model.recorded]))
"""


def _child(scenario: dict[str, Any], db: Path, runs: list[dict[str, Any]], tmp_path: Path) -> list[Any]:
    """Run ``runs`` with a fresh agent and runtime in a new Python process on the SQLite file
    ``db``; the prompts its model got."""
    path = tmp_path / f"scenario-{len(list(tmp_path.iterdir()))}.json"
    path.write_text(json.dumps(scenario))
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(Path(__file__).parent), str(path), str(db), json.dumps(runs)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return json.loads(done.stdout)  # type: ignore[no-any-return]


@pytest.mark.parametrize("name", ["x-v24-openai-reasoning-memory", "x-v24-anthropic-thinking-memory"])
def test_a_thread_continued_in_a_new_process_resends_the_reasoning(name: str, tmp_path: Path) -> None:
    """A reasoning + tool step saved by one process; a fresh agent in another process continues
    the thread and sends the model the reasoning exactly as Mastra did (its recorded prompt):
    OpenAI's item id and encrypted content (an empty block too), Anthropic's signature and
    redacted thinking."""
    scenario, meta = _scenario(name), _meta(name)
    db = tmp_path / "thread.db"
    first, second = scenario["runs"]
    calls = scenario["model"]["calls"]
    _child({**scenario, "model": {**scenario["model"], "calls": calls[:2]}}, db, [first], tmp_path)
    prompts = _child({**scenario, "model": {**scenario["model"], "calls": calls[2:]}}, db, [second], tmp_path)
    expected = _vendor(meta["modelCalls"]["main"][2]["prompt"])
    assert _vendor(prompts[0]) == expected
    reasoning = [
        p for m in expected if m["role"] == "assistant" for p in m["content"] if p["type"] == "reasoning"
    ]
    assert reasoning and all("providerOptions" in p for p in reasoning)  # (the point of the test)
