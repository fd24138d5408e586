"""The vendor-stream kit: every case of cases/*.json through runstream, against real Mastra's recording.

Each case replays its vendor fixtures on loopback (server.py) to the reference agent (kit.py); the chunks must
match Mastra's golden/<case>.jsonl at level 2, and at level 3 unless deviations.json allow-lists a named Mastra
bug; the provider metadata of every chunk and the request bodies sent to the vendor must match too.
``test_kit_summary`` prints the counts per vendor (run ``pytest tests/vendor_kit -s -k summary`` to see them).
No node at test time: the goldens are recorded by record.sh and committed.
"""

from __future__ import annotations

import compare  # type: ignore[import-not-found]
import pytest

from .kit import GOLDEN, Outcome, load_cases, run_cases

pytest.importorskip("openai")
pytest.importorskip("anthropic")

CASES = load_cases()
NAMES = [case["name"] for case in CASES]


def test_every_case_has_its_recording() -> None:
    assert len(set(NAMES)) == len(NAMES), "case names must be unique across the cases files"
    for name in NAMES:
        assert (GOLDEN / f"{name}.jsonl").is_file(), f"{name}: no golden; run record.sh"
        assert (GOLDEN / f"{name}.requests.json").is_file(), f"{name}: no recorded requests; run record.sh"


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Outcome]:
    return run_cases(CASES, tmp_path_factory.mktemp("vendor_kit")) if CASES else {}


def _where(outcome: Outcome) -> str:
    threw = f"\n  runstream threw {outcome.threw}" if outcome.threw else ""
    return f"(runstream's chunks: {outcome.chunks_file}){threw}"


@pytest.mark.parametrize("name", NAMES)
def test_chunks_level_2(name: str, outcomes: dict[str, Outcome]) -> None:
    result = outcomes[name].level[2]
    assert result["passed"], f"{compare.format_divergence(result['divergence'])}\n{_where(outcomes[name])}"


@pytest.mark.parametrize("name", NAMES)
def test_chunks_level_3(name: str, outcomes: dict[str, Outcome]) -> None:
    result = outcomes[name].level[3]
    assert result["passed"], f"{compare.format_divergence(result['divergence'])}\n{_where(outcomes[name])}"


@pytest.mark.parametrize("name", NAMES)
def test_provider_metadata(name: str, outcomes: dict[str, Outcome]) -> None:
    assert outcomes[name].metadata is None, f"{outcomes[name].metadata}\n{_where(outcomes[name])}"


@pytest.mark.parametrize("name", NAMES)
def test_requests(name: str, outcomes: dict[str, Outcome]) -> None:
    assert outcomes[name].request is None, outcomes[name].request


def summary(outcomes: dict[str, Outcome]) -> tuple[str, bool]:
    rows: dict[str, list[int]] = {}
    for outcome in outcomes.values():
        row = rows.setdefault(outcome.vendor, [0, 0, 0, 0, 0])
        checks = (
            True,
            outcome.level[2]["passed"],
            outcome.level[3]["passed"],
            outcome.metadata is None,
            outcome.request is None,
        )
        for index, passed in enumerate(checks):
            row[index] += passed
    total = [sum(column) for column in zip(*rows.values(), strict=True)] if rows else [0] * 5
    lines = ["vendor kit: cases, level 2, level 3, providerMetadata, requests matched"]
    for vendor, row in [*sorted(rows.items()), ("total", total)]:
        cases, level2, level3, meta, requests = row
        lines.append(
            f"  {vendor:<10} {cases:>3} cases  level 2 {level2}/{cases}  level 3 {level3}/{cases}"
            f"  metadata {meta}/{cases}  requests {requests}/{cases}"
        )
    allowed = sorted({d for o in outcomes.values() for d in o.level[3]["deviationsUsed"]})
    lines.append(f"  allow-listed Mastra bugs used at level 3: {', '.join(allowed) or 'none'}")
    return "\n".join(lines), all(value == total[0] for value in total)


def test_kit_summary(outcomes: dict[str, Outcome], capsys: pytest.CaptureFixture[str]) -> None:
    text, all_matched = summary(outcomes)
    with capsys.disabled():
        print("\n" + text)
    assert all_matched, text
