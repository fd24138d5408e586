"""The runstream side of the vendor-stream kit, and the comparisons the kit adds to compare.py.

``run_cases`` replays every case of ``cases/*.json`` through ``server.py`` on loopback and runs the reference
agent on it (the one ``mastra_run.mjs`` builds: instructions "You are a helpful assistant.", six pass-through
tools answering ``{"ok": true, "tool": <name>}``, max_steps 5, prompt "Hello"), with each provider's model
string and its base URL pointed at the loopback, the way a user points runstream at a vendor:

    responses  "openai/gpt-5"                  OPENAI_BASE_URL
    anthropic  "anthropic/claude-sonnet-4-5"   ANTHROPIC_BASE_URL
    google     "google/gemini-2.5-flash"       GOOGLE_GEMINI_BASE_URL
    chat       "openai-compatible/gpt-4o"      base_url=... (the reference: Mastra's {id, url} model config)

The comparisons (each a first difference or None):

- chunks: compare.py at level 2 and 3 with ``deviations.json`` (compare.py drops providerMetadata and
  providerOptions while normalising);
- ``metadata_difference``: every ``providerMetadata`` / ``providerOptions`` object of every chunk, at the
  same path in the aligned chunk of the other side, equal after compare.py's normalisation (ids by a
  one-to-one renaming, times as ``<time>``), in both directions: metadata runstream adds to an object that
  Mastra's chunk has too is a difference (inside an object Mastra's chunk lacks altogether, which level 3
  allows as an extra field, it is not looked at). Mastra's own namespace ``mastra`` (``createdAt`` of each message part) is left
  out: it is bookkeeping of Mastra's message list, not vendor state;
- ``request_difference``: the bodies each side sent to the vendor, request by request (same count, same
  path, equal bodies). Only two things are normalised: the ``$schema`` key of JSON schemas (zod's
  draft-07 marker), and ids made at random: a value under an id key (``id``, ``call_id``, ``tool_call_id``,
  ``tool_use_id``, ``toolCallId``) that appears in none of the case's fixtures is matched by a one-to-one
  renaming; ids that come from the fixtures must be sent back exactly.

``deviations.json`` is compare.py's allow-list (``dropGolden``, ``candidateMayAdd``, ``ignoreFields``) plus
two keys of the kit's own: ``ignoreMetadata`` [{type, path}] drops a provider-metadata object (path from the
chunk, e.g. ``payload.providerMetadata``) from both sides' chunks of that type, and ``ignoreRequest``
[{path}] drops a dotted path (``*`` matches every list index) from both sides' request bodies.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import compare  # type: ignore[import-not-found]
from pydantic import BaseModel, ConfigDict

from runstream.agent import Agent
from runstream.chunks import dumps
from runstream.models._common import RetryPolicy
from runstream.models.base import ModelSettings
from runstream.models.registry import ModelString
from runstream.tools import Tool, ToolContext

from . import server as replay

HERE = Path(__file__).parent
CASES_DIR = HERE / "cases"
FIXTURES = HERE / "fixtures"
GOLDEN = HERE / "golden"
DEVIATIONS_FILE = HERE / "deviations.json"

TOOL_NAMES = ("calculator", "weather", "get_weather", "lookupVerificationCode", "updateIssueList", "parallel")
PASS_THROUGH_SCHEMA = {"type": "object", "properties": {}, "additionalProperties": False, "required": []}
"""What Mastra sends for ``z.object({}).passthrough()`` (less zod's ``$schema``) to OpenAI; to Anthropic
it sends zod's schema as it is, ``additionalProperties: true`` (golden/anthropic-*.requests.json)."""
SCHEMAS = {"anthropic": {**PASS_THROUGH_SCHEMA, "additionalProperties": True}}

ID_KEYS = {"id", "call_id", "tool_call_id", "tool_use_id", "toolCallId"}
PROVIDER_KEYS = {"providerMetadata", "providerOptions"}
KEPT = {key: f"${key}" for key in PROVIDER_KEYS}  # renamed so that compare.py's normaliser keeps them


def load_cases() -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = []
    for path in sorted(CASES_DIR.glob("*.json")):
        for case in json.loads(path.read_text()):
            cases.append({**case, "vendor": path.stem})
    return cases


def load_deviations() -> list[dict[str, Any]]:
    devs: list[dict[str, Any]] = compare.load_deviations(str(DEVIATIONS_FILE))
    return devs


def applicable(devs: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [d for d in devs if name in d.get("scenarios", []) or "*" in d.get("scenarios", [])]


# ------------------------------------------------------------------------------------------ the runstream side


class _PassThrough(BaseModel):
    """``z.object({}).passthrough()``: any object is valid (the schema sent says no properties)."""

    model_config = ConfigDict(extra="allow")


def _pass_through(name: str, provider: str = "") -> Tool:
    async def execute(args: dict[str, Any], ctx: ToolContext) -> Any:
        return {"ok": True, "tool": name}

    return Tool(
        name,
        execute,
        description=f"{name} tool",
        input_schema=SCHEMAS.get(provider, PASS_THROUGH_SCHEMA),
        args_model=_PassThrough,
    )


async def _no_wait(seconds: float) -> None:
    """Backoffs are not waited out here (Mastra waited them while recording; timing is not compared)."""


NO_WAIT = RetryPolicy(sleep=_no_wait)


def _model(provider: str, base: str) -> str | ModelString:
    if provider == "responses":
        return "openai/gpt-5"
    if provider == "anthropic":
        return "anthropic/claude-sonnet-4-5"
    if provider == "google":
        return "google/gemini-2.5-flash"
    if provider == "chat":
        return ModelString(
            "openai-compatible/gpt-4o", base_url=f"{base}/v1", api_key="sk-dummy-loopback", retry=NO_WAIT
        )
    raise ValueError(f"unknown provider {provider!r}")


def loopback_env(base: str) -> dict[str, str]:
    """The variables that point each vendor's SDK at the loopback (and give it a dummy key)."""
    return {
        "OPENAI_BASE_URL": f"{base}/v1",
        "OPENAI_API_KEY": "sk-dummy-loopback",
        "ANTHROPIC_BASE_URL": base,
        "ANTHROPIC_API_KEY": "sk-ant-dummy-loopback",
        "GOOGLE_GEMINI_BASE_URL": base,
        "GOOGLE_API_KEY": "google-dummy-loopback",
        "GEMINI_API_KEY": "google-dummy-loopback",
    }


@dataclass
class Outcome:
    name: str
    vendor: str
    chunks_file: Path
    requests: list[dict[str, Any]]
    threw: str | None = None
    level: dict[int, dict[str, Any]] = field(default_factory=dict)
    metadata: str | None = None
    request: str | None = None


async def run_case(case: dict[str, Any], server: replay.ReplayServer, out_dir: Path) -> Outcome:
    server.reset(case["queue"])
    base = f"http://127.0.0.1:{server.port}"
    agent = Agent(
        "agent",
        name="Agent",
        instructions="You are a helpful assistant.",
        model=_model(case["provider"], base),
        tools=[_pass_through(name, case["provider"]) for name in TOOL_NAMES],
        max_steps=5,
    )
    path = out_dir / f"{case['name']}.jsonl"
    threw = None
    with path.open("w") as fh:
        try:
            options = case.get("providerOptions")  # a case's providerOptions (Mastra's stream option)
            retries = case.get("modelSettings", {}).get("maxRetries")  # Mastra's modelSettings.maxRetries
            settings = {}
            if options or retries is not None:
                model_settings = ModelSettings(provider_options=options or {}, max_retries=retries)
                settings = {"model_settings": model_settings}
            out = await agent.stream("Hello", **settings)
            async for chunk in out.full_stream:
                fh.write(dumps(chunk.to_wire()) + "\n")
        except Exception as exc:  # what the reference records as "$threw"
            threw = f"{type(exc).__name__}: {exc}"
            fh.write(
                dumps({"type": "$threw", "error": {"message": str(exc), "name": type(exc).__name__}}) + "\n"
            )
    return Outcome(case["name"], case["vendor"], path, server.requests(), threw)


def run_cases(cases: list[dict[str, Any]], out_dir: Path) -> dict[str, Outcome]:
    """Run every case (one loopback server, one event loop) and compare it with its golden recording."""
    server = replay.start(str(FIXTURES))
    saved = {key: os.environ.get(key) for key in loopback_env("")}
    os.environ.update(loopback_env(f"http://127.0.0.1:{server.port}"))
    devs = load_deviations()

    async def all_cases() -> dict[str, Outcome]:
        return {case["name"]: await run_case(case, server, out_dir) for case in cases}

    try:
        outcomes = asyncio.run(all_cases())
    finally:
        server.shutdown()
        server.server_close()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    for case in cases:
        judge(case, outcomes[case["name"]], devs)
    return outcomes


# ------------------------------------------------------------------------------------------ comparisons


def judge(case: dict[str, Any], outcome: Outcome, devs: list[dict[str, Any]]) -> None:
    name = case["name"]
    fixtures = fixture_text(case)
    candidate = outcome.chunks_file
    golden = opaque_random_ids(GOLDEN / f"{name}.jsonl", fixtures, candidate.with_suffix(".golden.jsonl"))
    candidate = opaque_random_ids(candidate, fixtures, candidate.with_suffix(".opaque.jsonl"))
    for level in (2, 3):
        outcome.level[level] = compare.compare(str(golden), str(candidate), level, devs, name)
    mine = applicable(devs, name)
    outcome.metadata = metadata_difference(
        compare.load_jsonl(str(golden)), compare.load_jsonl(str(candidate)), mine
    )
    sent = json.loads((GOLDEN / f"{name}.requests.json").read_text())
    outcome.request = request_difference(sent, outcome.requests, fixtures, mine)


def opaque_random_ids(path: Path, fixtures: str, out: Path) -> Path:
    """A copy of a chunks file in which every tool call and source id made at random (one in none of the case's
    fixtures: Gemini sends no ids, the AI SDK makes them) is a UUID, which compare.py matches by its one-to-one
    renaming."""
    text = path.read_text()
    ids = re.findall(r'"toolCallId": ?"([^"]+)"', text)
    ids += [c["payload"]["id"] for c in compare.load_jsonl(str(path)) if c.get("type") == "source"]
    for value in dict.fromkeys(ids):
        if value not in fixtures and not compare.UUID_RE.fullmatch(value):
            text = text.replace(f'"{value}"', f'"{uuid.uuid5(uuid.NAMESPACE_OID, value)}"')
    out.write_text(text)
    return out


def _rename_provider_keys(value: Any, drop: bool = False) -> Any:
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if key in KEPT:
                vendor_only = (
                    {k: v for k, v in item.items() if k != "mastra"} if isinstance(item, dict) else item
                )
                out[KEPT[key]] = _rename_provider_keys(vendor_only)
            else:
                out[key] = _rename_provider_keys(item)
        return out
    if isinstance(value, list):
        return [_rename_provider_keys(item) for item in value]
    return value


def _metadata_paths(value: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for key, item in value.items():
            here = f"{path}.{key}" if path else key
            if key in KEPT.values():
                yield here, item
            else:
                yield from _metadata_paths(item, here)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _metadata_paths(item, f"{path}.{index}")


def _drop_metadata(chunks: list[dict[str, Any]], devs: list[dict[str, Any]]) -> None:
    for dev in devs:
        for rule in dev.get("ignoreMetadata", []):
            parts = rule["path"].split(".")
            parts[-1] = KEPT.get(parts[-1], parts[-1])
            for chunk in chunks:
                if chunk.get("type") == rule["type"]:
                    compare.del_path(chunk, ".".join(parts))


def metadata_difference(
    golden: list[dict[str, Any]], candidate: list[dict[str, Any]], devs: list[dict[str, Any]]
) -> str | None:
    """The first provider-metadata difference between aligned chunks (see the module docstring)."""
    for dev in devs:  # chunks an allow-listed bug drops or adds are not aligned with the other side
        moved = {key: dev[key] for key in ("dropGolden", "candidateMayAdd") if key in dev}
        golden, candidate = (
            compare.apply_deviation(moved, golden, candidate) if moved else (golden, candidate)
        )
    plain_g, _ = compare.normalize_stream(golden)
    plain_c, _ = compare.normalize_stream(candidate)
    kept_g, gnz = compare.normalize_stream(_rename_provider_keys(copy.deepcopy(golden)))
    kept_c, cnz = compare.normalize_stream(_rename_provider_keys(copy.deepcopy(candidate)))
    for dev in devs:  # the case's allow-listed chunks (dropped or added) align the same way here
        plain_g, plain_c = compare.apply_deviation(dev, plain_g, plain_c)
        kept_g, kept_c = compare.apply_deviation(dev, kept_g, kept_c)
    ok, _, pairs = compare.level1(plain_g, plain_c)
    if not ok:
        return "the chunk types differ (level 1), so no chunks to compare metadata on"
    _drop_metadata(kept_g, devs)
    _drop_metadata(kept_c, devs)
    bij = compare.Bijection()
    for gi, ci in pairs:
        g, c = kept_g[gi], kept_c[ci]
        for one, other, side in ((g, c, "golden"), (c, g, "candidate")):
            for path, value in _metadata_paths(one):
                mine = value if value else None
                parent = path.rpartition(".")[0]
                if side == "candidate" and parent and compare.get_path(g, parent) is compare._MISSING:
                    continue  # inside an extra object of runstream's (level 3 allows it)
                theirs = compare.get_path(other, path)
                theirs = None if theirs is compare._MISSING or not theirs else theirs
                if mine is None and theirs is None:
                    continue
                pair = (mine, theirs) if side == "golden" else (theirs, mine)
                if pair[0] is None or pair[1] is None or not compare.deep_equal(pair[0], pair[1], bij):
                    where = path.replace("$", "")
                    return (
                        f"{g['type']} (golden line {g['__line']}, candidate line {c['__line']}): {where}\n"
                        f"  golden   : {compare.short(pair[0], gnz, 400)}\n"
                        f"  candidate: {compare.short(pair[1], cnz, 400)}"
                    )
    return None


def fixture_text(case: dict[str, Any]) -> str:
    """Every fixture the case replays, as one text (to tell vendor ids from ids made at random)."""
    texts = []
    for entry in case["queue"]:
        name = replay.entry_spec(entry)["fixture"]
        path = FIXTURES / (name if name.endswith(".json") else f"{name}.chunks.txt")
        texts.append(path.read_text())
    return "\n".join(texts)


def _normalise_body(value: Any, fixtures: str, key: str | None = None) -> Any:
    if isinstance(value, dict):
        return {k: _normalise_body(v, fixtures, k) for k, v in value.items() if k != "$schema"}
    if isinstance(value, list):
        return [_normalise_body(item, fixtures) for item in value]
    if key in ID_KEYS and isinstance(value, str) and value and value not in fixtures:
        return f"{compare.ID_OPEN}random:{value}{compare.ID_CLOSE}"
    return value


def _drop_request_path(body: Any, parts: list[str]) -> None:
    if not parts:
        return
    head, rest = parts[0], parts[1:]
    if head == "*" and isinstance(body, list):
        targets = list(body)
    elif isinstance(body, dict) and head in body:
        if not rest:
            del body[head]
            return
        targets = [body[head]]
    elif isinstance(body, list) and head.isdigit() and int(head) < len(body):
        if not rest:
            del body[int(head)]
            return
        targets = [body[int(head)]]
    else:
        return
    for target in targets:
        _drop_request_path(target, rest)


def request_difference(
    golden: list[dict[str, Any]], candidate: list[dict[str, Any]], fixtures: str, devs: list[dict[str, Any]]
) -> str | None:
    """The first difference between the request bodies each side sent (see the module docstring)."""
    if len(golden) != len(candidate):
        return f"{len(golden)} request(s) from Mastra, {len(candidate)} from runstream"
    bij = compare.Bijection()
    for number, (g, c) in enumerate(zip(golden, candidate, strict=True), 1):
        if g["path"] != c["path"]:
            return f"request {number}: path {g['path']!r} vs {c['path']!r}"
        gb, cb = _normalise_body(g["body"], fixtures), _normalise_body(c["body"], fixtures)
        for dev in devs:
            for rule in dev.get("ignoreRequest", []):
                _drop_request_path(gb, rule["path"].split("."))
                _drop_request_path(cb, rule["path"].split("."))
        diff = compare.first_difference(gb, cb, bij)
        if diff is None:  # everything Mastra sent is there: does runstream send more?
            extra = compare.first_difference(cb, gb, bij)
            diff = None if extra is None else (extra[0], extra[2], extra[1])
        if diff is not None:
            path, gv, cv = diff
            return (
                f"request {number} ({g['path']}): {path or '<body>'}\n"
                f"  mastra   : {compare.short(gv, None, 600)}\n"
                f"  runstream: {compare.short(cv, None, 600)}"
            )
    return None
