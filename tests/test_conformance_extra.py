"""Scenarios we recorded ourselves from the real Mastra 1.71 (its Node runner in
``../shared/conformance/mastra-runner``) to pin behaviours the public traces leave open: tool
arguments (streamed, unreadable) and outputs against their schemas, approvals, processors, step limits, parallel tool
calls, tools that start while the model still streams, reasoning blocks, structured output, finish reasons, model stream failures,
aborts, sub-agents, workflows as tools, goals and completion checks, durable agents, and many
background-task and until-idle cases (suspend/resume/cancel, backpressure, retries, timeouts,
chained continuations), working memory (Markdown and schema mode, a read-only call), a thread title streamed before finish,
vendor state (``x-v24-*``: provider metadata, reasoning through tool steps and memory,
provider-executed tools, raw finish reasons, cache usage; ``test_vendor_state.py`` compares the
metadata ``compare.py`` leaves out). Each scenario's ``description`` says what it pins.

All must match at level 2. Those in ``LEVEL_3`` match at level 3 too; the others differ in
payload details: where Mastra loses data (step content after a step limit or an abort), where we
keep more information (an error's class name), or in details not matched yet."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import compare  # type: ignore[import-not-found]
import pytest

from tests.conformance_replay import replay

EXTRA = Path(__file__).parent / "conformance_extra"
SCENARIOS = sorted(p.stem for p in (EXTRA / "scenarios").glob("*.json"))
Replays = dict[str, tuple[Path, "Future[tuple[int, str]]"]]
LEVEL_3 = {
    "x-n01-empty-reasoning-delta",
    "x-n02-reasoning-only",
    "x-n03-two-reasoning-blocks",
    "x-m01-tool-call-bad-json",
    "x-m02-tool-call-empty-input",
    "x-m03-empty-text-delta",
    "x-m04-tool-call-input-differs",
    "x-m05-tool-call-bad-json-unstreamed",
    "x-o01-structured-with-reasoning",
    "x-o02-structured-with-memory",
    "x-o03-structured-fenced",
    "x-d01-durable-task-fails",
    "x-d02-durable-fast-task",
    "x-d03-durable-plain-text",
    "x-f01-content-filter",
    "x-f02-usage-details",
    "x-f05-finish-error-reason",
    "x-p01-decline",
    "x-p02-drop-replace",
    "x-p03-tool-choice-required",
    "x-p06-bg-timeout",
    "x-p07-watch-cancel",
    "x-p09-structured-invalid",
    "x-pt01-durable-wait-timeout-manager",
    "x-pt02-durable-wait-timeout-agent",
    "x-pt03-durable-task-outlasts-wait",
    "x-pt04-durable-tool-wait-timeout",
    "x-pt07-tool-call-concurrency-one",
    "x-pt08-suspendable-tool-serializes",
    "x-pt09-tool-calls-concurrent",
    "x-pt11-structured-fallback",
    "x-pt12-structured-warn",
    "x-pt15-delegation-inputs",
    "x-pt16-delegation-own-memory",
    "x-pt17-delegation-rejected",
    "x-pt18-delegation-modified",
    "x-pt20-structured-separate-model",
    "x-pt21-structured-json-prompt-injection",
    "x-pt22-structured-separate-model-invalid",
    "x-q01-bg-concurrency-one",
    "x-q02-bg-retries-exhausted",
    "x-q03-until-idle-abort",
    "x-q04-second-run-sees-result",
    "x-q05-two-approvals",
    "x-q08-bg-awaited-fails",
    "x-r02-tool-choice-tool",
    "x-r03-second-call-throws",
    "x-r04-error-after-tool-call",
    "x-r06-two-text-blocks",
    "x-r08-reasoning-signature",
    "x-r10-string-result",
    "x-s01-bg-resume-after-close",
    "x-s02-bg-cancel-suspended",
    "x-s03-bg-suspend-while-other-runs",
    "x-s05-bg-suspend-plain-stream",
    "x-s09-bg-after-foreground-step",
    "x-s10-bg-awaited-until-idle",
    "x-s11-bg-timeout-retry-until-idle",
    "x-s12-until-idle-no-task",
    "x-s13-bg-two-steps",
    "x-s14-until-idle-two-runs",
    "x-t01-parallel-completion-order",
    "x-t02-parallel-error-first",
    "x-t03-parallel-late-error",
    "x-u03-tool-call-before-slow-finish",
    "x-v01-goal-max-runs",
    "x-v03-itc-never-passes",
    "x-v04-itc-two-scorers-any",
    "x-v07-goal-judge-waiting",
    "x-w03-abort-before-start",
    "x-wt01-workflow-tool-suspend-resume",
    "x-wt02-workflow-tool-plain",
    "x-wm01-working-memory-markdown",
    "x-wm02-working-memory-schema",
    "x-wm03-read-only-call",
    "x-wm04-title-event",
    "x-y01-subagent-model-throws",
    "x-y02-approval-background-tool",
    "x-y03-approval-with-memory",
    "x-z01-tool-output-schema-mismatch",
    "x-z03-tool-output-schema-ok",
    "x24-invalid-tool-args",
    "x25-structured-brace",
    "x-v24-anthropic-thinking-memory",
    "x-v24-delta-metadata-usage",
    "x-v24-openai-reasoning-memory",
    "x-v24-provider-executed-mixed",
    "x-v24-tool-error-class",
}


REPLAYS_AT_ONCE = 3
"""Replays mostly wait (on their scripted sleeps and settle times), so several run at once."""


@pytest.fixture(scope="module")
def replays(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replays]:
    """The selected scenarios' replays, started in the tests' order, ``REPLAYS_AT_ONCE`` at a
    time; each test waits for its own (its output file, exit code and stderr)."""
    out_dir = tmp_path_factory.mktemp("conformance-extra")
    selected = [
        item.callspec.params["name"] for item in request.session.items if item.module is request.module
    ]
    pool = ThreadPoolExecutor(max_workers=REPLAYS_AT_ONCE)
    yield {
        name: (
            out_dir / f"{name}.jsonl",
            pool.submit(replay, EXTRA / "scenarios" / f"{name}.json", out_dir / f"{name}.jsonl", 60),
        )
        for name in selected
    }
    pool.shutdown(cancel_futures=True)


@pytest.mark.parametrize("name", SCENARIOS)
def test_matches_mastra(name: str, replays: Replays) -> None:
    out, replayed = replays[name]
    code, stderr = replayed.result()
    assert code == 0, f"runner exited {code}: {stderr[-2000:]}"
    level = 3 if name in LEVEL_3 else 2
    deviations = compare.load_deviations(str(EXTRA.parent / "conformance_data" / "deviations.json"))
    result = compare.compare(
        str(EXTRA / "golden" / f"{name}.jsonl"), str(out), level=level, devs=deviations, scenario=name
    )
    assert result["passed"], compare.format_divergence(result["divergence"])
