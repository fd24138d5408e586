"""Chunk wire JSON: property round-trips for every chunk type, encoding rules, decoding errors,
and the golden traces recorded from Mastra."""

from __future__ import annotations

import base64
import json
import re
import types
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Literal, NotRequired, Union, get_args, get_origin, get_type_hints

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typing_extensions import is_typeddict

from runstream._clock import iso_datetime
from runstream._json import JsonValue
from runstream.chunks import (
    CHUNK_CLASSES,
    WORKFLOW_CHUNK_TYPES,
    AnyChunk,
    ChunkDecodeError,
    ChunkFrom,
    DataChunk,
    ErrorChunk,
    FileChunk,
    ObjectChunk,
    ObjectResultChunk,
    UnknownChunk,
    WorkflowChunk,
    chunk_from_wire,
)

GOLDEN = Path(__file__).parent / "conformance_data" / "golden"
JS_ISO = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")
PROPERTY = settings(max_examples=25, deadline=None, derandomize=True, database=None)


class NamedError(Exception):
    """An error with its own ``name``, like the errors a scripted model or a vendor raises."""

    def __init__(self, message: str, name: str) -> None:
        super().__init__(message)
        self.name = name


# ---------------------------------------------------------------------------------------------
# Strategies
# ---------------------------------------------------------------------------------------------

small_text = st.text(max_size=8)
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53), max_value=2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | small_text
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(small_text, inner, max_size=3),
    max_leaves=8,
)
datetimes = st.datetimes(
    min_value=datetime(1001, 1, 1),
    max_value=datetime(9998, 12, 31),
    timezones=st.none()
    | st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=30)), timezone(-timedelta(hours=7))]),
)
errors = st.builds(ValueError, small_text) | st.builds(
    NamedError, small_text, st.sampled_from(["APICallError", "Boom"])
)
# What a payload's open (``Any``) fields may hold: JSON plus the Python values the encoder converts.
wire_values = st.recursive(
    json_scalars | datetimes | st.binary(max_size=8) | errors,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(small_text, inner, max_size=3),
    max_leaves=8,
)
from_values: st.SearchStrategy[ChunkFrom] = st.sampled_from(
    ["AGENT", "USER", "SYSTEM", "WORKFLOW", "NETWORK"]
)


def strategy_for(hint: Any) -> st.SearchStrategy[Any]:
    """Values of a payload field's declared type."""
    origin = get_origin(hint)
    if hint is Any or hint is object:
        return wire_values
    if hint is JsonValue:
        return json_values
    if hint is type(None):
        return st.none()
    if hint is bool:
        return st.booleans()
    if hint is int:
        return st.integers(min_value=-(2**53), max_value=2**53)
    if hint is float:
        return st.floats(allow_nan=False, allow_infinity=False)
    if hint is str:
        return small_text
    if hint is bytes:
        return st.binary(max_size=8)
    if hint is datetime:
        return datetimes
    if origin is Literal:
        return st.sampled_from(get_args(hint))
    if origin is list:
        return st.lists(strategy_for(get_args(hint)[0]), max_size=3)
    if origin is dict or origin is Mapping:
        return st.dictionaries(small_text, strategy_for(get_args(hint)[1]), max_size=3)
    if origin in (Union, types.UnionType):
        return st.one_of(*(strategy_for(arg) for arg in get_args(hint)))
    if is_typeddict(hint):
        return payloads(hint)
    raise TypeError(f"no strategy for {hint!r}")


def payloads(payload_type: Any) -> st.SearchStrategy[dict[str, Any]]:
    """Payloads of a TypedDict: its required fields, any of its optional ones, and extra keys."""
    required: dict[str, st.SearchStrategy[Any]] = {}
    optional: dict[str, st.SearchStrategy[Any]] = {}
    for name, hint in get_type_hints(payload_type, include_extras=True).items():
        if get_origin(hint) is NotRequired:
            optional[name] = strategy_for(get_args(hint)[0])
        elif payload_type.__total__:
            required[name] = strategy_for(hint)
        else:
            optional[name] = strategy_for(hint)
    known = set(required) | set(optional)
    extra = st.dictionaries(
        st.text(min_size=1, max_size=8).filter(lambda k: k not in known), json_values, max_size=2
    )
    return st.tuples(st.fixed_dictionaries(required, optional=optional), extra).map(
        lambda p: {**p[1], **p[0]}
    )


def typed_chunks(type_: str) -> st.SearchStrategy[AnyChunk]:
    cls = CHUNK_CLASSES[type_]
    if cls in (ObjectChunk, ObjectResultChunk):
        return st.builds(cls, small_text, wire_values, from_values)
    payload = wire_values if cls.PAYLOAD is Any else strategy_for(cls.PAYLOAD)
    return st.builds(cls, small_text, payload, from_values)


data_chunks = st.builds(
    DataChunk,
    st.text(min_size=1, max_size=8).map(lambda name: f"data-{name}"),
    wire_values,
    run_id=small_text,
    from_=from_values,
    id=st.none() | small_text,
    transient=st.none() | st.booleans(),
)
workflow_chunks = st.builds(
    WorkflowChunk,
    st.sampled_from(WORKFLOW_CHUNK_TYPES),
    small_text,
    st.dictionaries(small_text, wire_values, max_size=4),
    from_values,
)
KNOWN_TYPES = {*CHUNK_CLASSES, *WORKFLOW_CHUNK_TYPES}
unknown_types = st.text(min_size=1, max_size=12).filter(
    lambda t: t not in KNOWN_TYPES and not t.startswith("data-")
)
unknown_wire = st.tuples(unknown_types, st.dictionaries(small_text, json_values, max_size=4)).map(
    lambda t: {**t[1], "type": t[0]}
)


def expected_wire(value: Any) -> Any:
    """The JSON a value must become, computed independently of the encoder."""
    if isinstance(value, datetime):
        utc = value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)
        return utc.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, NamedError):
        return {"message": str(value), "name": value.name}
    if isinstance(value, Exception):
        return {"message": str(value), "name": type(value).__name__}
    if isinstance(value, dict):
        return {k: expected_wire(v) for k, v in value.items()}
    if isinstance(value, list):
        return [expected_wire(v) for v in value]
    return value


def assert_round_trips(chunk: AnyChunk) -> dict[str, Any]:
    wire: dict[str, Any] = json.loads(chunk.to_json())
    for raw in (wire, chunk.to_json()):
        decoded = chunk_from_wire(raw)
        assert type(decoded) is type(chunk)
        assert decoded.type == chunk.type
        assert json.loads(decoded.to_json()) == wire
    return wire


# ---------------------------------------------------------------------------------------------
# Round-trips
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("type_", sorted(CHUNK_CLASSES))
@PROPERTY
@given(data=st.data())
def test_every_chunk_type_round_trips(type_: str, data: st.DataObject) -> None:
    chunk = data.draw(typed_chunks(type_))
    wire = assert_round_trips(chunk)
    assert wire["type"] == type_
    if chunk.run_id:
        assert wire["runId"] == chunk.run_id
        assert wire["from"] == chunk.from_
    else:  # a chunk without a run id (as Mastra sends some) is written without the envelope
        assert "runId" not in wire and "from" not in wire
    if isinstance(chunk, ObjectChunk | ObjectResultChunk):
        assert "payload" not in wire
        assert wire["object"] == expected_wire(chunk.object)
    else:
        assert wire["payload"] == expected_wire(chunk.payload)


@PROPERTY
@given(chunk=data_chunks)
def test_data_chunks_round_trip(chunk: DataChunk) -> None:
    wire = assert_round_trips(chunk)
    assert wire["data"] == expected_wire(chunk.data)
    assert "payload" not in wire
    assert ("id" in wire) == (chunk.id is not None)
    assert ("transient" in wire) == (chunk.transient is not None)
    assert ("runId" in wire) == bool(chunk.run_id)


@PROPERTY
@given(chunk=workflow_chunks)
def test_workflow_chunks_round_trip(chunk: WorkflowChunk) -> None:
    wire = assert_round_trips(chunk)
    assert wire["payload"] == expected_wire(chunk.payload)


@PROPERTY
@given(raw=unknown_wire)
def test_unknown_types_are_kept_verbatim(raw: dict[str, Any]) -> None:
    chunk = chunk_from_wire(raw)
    assert isinstance(chunk, UnknownChunk)
    assert chunk.type == raw["type"]
    assert json.loads(chunk.to_json()) == raw


def test_dates_encode_as_javascript_iso() -> None:
    naive = datetime(2026, 1, 1, 0, 0, 0, 123456)
    aware = datetime(2026, 1, 1, 2, 0, 0, 123999, tzinfo=timezone(timedelta(hours=2)))
    assert iso_datetime(naive) == "2026-01-01T00:00:00.123Z"
    assert iso_datetime(aware) == "2026-01-01T00:00:00.123Z"
    chunk = chunk_from_wire(
        {
            "type": "background-task-running",
            "runId": "r",
            "from": "AGENT",
            "payload": {
                "taskId": "t",
                "toolName": "slow",
                "toolCallId": "c",
                "runId": "r",
                "agentId": "a",
                "startedAt": "2026-01-01T00:00:00.123Z",
                "args": {},
            },
        }
    )
    assert chunk.payload["startedAt"] == datetime(2026, 1, 1, 0, 0, 0, 123000, tzinfo=UTC)
    assert JS_ISO.match(json.loads(chunk.to_json())["payload"]["startedAt"])


def test_dates_before_year_1000_are_zero_padded() -> None:
    assert iso_datetime(datetime(999, 1, 2, 3, 4, 5, 6000)) == "0999-01-02T03:04:05.006Z"


def test_exceptions_and_bytes_encode_as_mastra_does() -> None:
    error = ErrorChunk("r", {"error": NamedError("model exploded", "APICallError")})
    assert json.loads(error.to_json())["payload"] == {
        "error": {"message": "model exploded", "name": "APICallError"}
    }
    plain = ErrorChunk("r", {"error": KeyError("k")})
    assert json.loads(plain.to_json())["payload"]["error"] == {"message": "'k'", "name": "KeyError"}
    file = FileChunk("r", {"data": b"\x00\xffhi", "mimeType": "application/octet-stream"})
    wire = json.loads(file.to_json())
    assert wire["payload"]["data"] == "AP9oaQ=="
    assert chunk_from_wire(wire).payload["data"] == "AP9oaQ=="


def test_extra_payload_keys_are_kept() -> None:
    raw = {
        "type": "text-end",
        "runId": "r",
        "from": "AGENT",
        "payload": {"type": "text-end", "id": "t", "vendor": {"nested": [1, {"x": None}]}},
    }
    chunk = chunk_from_wire(raw)
    assert chunk.payload["vendor"] == {"nested": [1, {"x": None}]}
    assert json.loads(chunk.to_json()) == raw


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("[1, 2]", "JSON object with a string 'type'"),
        ("{not json", "not valid JSON"),
        (42, "JSON object with a string 'type'"),
        ({"payload": {}}, "JSON object with a string 'type'"),
        ({"type": 7, "payload": {}}, "JSON object with a string 'type'"),
        ({"type": "text-delta", "payload": {"id": "t"}}, "'text-delta'"),
        ({"type": "text-delta", "payload": "hello"}, "'text-delta'"),
        ({"type": "tool-call", "payload": {"toolCallId": 1, "toolName": "x"}}, "toolCallId"),
        ({"type": "source", "payload": {"id": "s", "sourceType": "video"}}, "sourceType"),
        ({"type": "background-task-completed", "payload": {"taskId": "t"}}, "completedAt"),
    ],
)
def test_malformed_chunks_raise_decode_errors(raw: Any, message: str) -> None:
    with pytest.raises(ChunkDecodeError, match=re.escape(message)):
        chunk_from_wire(raw)


def test_missing_required_field_is_named() -> None:
    with pytest.raises(ChunkDecodeError) as info:
        chunk_from_wire({"type": "text-delta", "runId": "r", "payload": {"id": "t"}})
    assert "text" in str(info.value)
    assert "Field required" in str(info.value)


@pytest.mark.parametrize("payload", ["abc", 5])
def test_malformed_workflow_payload_raises_decode_error(payload: Any) -> None:
    with pytest.raises(ChunkDecodeError):
        chunk_from_wire({"type": "workflow-start", "runId": "r", "payload": payload})


# ---------------------------------------------------------------------------------------------
# Golden traces
# ---------------------------------------------------------------------------------------------


def golden_lines(path: Path) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [line for line in lines if line["type"] != "$stream"]


def is_enveloped(line: dict[str, Any]) -> bool:
    """Mastra sends tripwire and most background-task chunks as bare ``{type, payload}``."""
    return line["type"].startswith("data-") or "runId" in line


GOLDEN_FILES = sorted(GOLDEN.glob("*.jsonl"))


def test_golden_traces_are_present() -> None:
    assert len(GOLDEN_FILES) >= 50


@pytest.mark.parametrize("path", GOLDEN_FILES, ids=lambda p: p.stem)
def test_golden_lines_decode_and_reencode(path: Path) -> None:
    for line in golden_lines(path):
        if not is_enveloped(line):
            continue
        chunk = chunk_from_wire(line)
        assert not isinstance(chunk, UnknownChunk) or line["type"] not in KNOWN_TYPES
        assert json.loads(chunk.to_json()) == line


def test_golden_lines_without_envelope_reencode_verbatim() -> None:
    bare = [line for path in GOLDEN_FILES for line in golden_lines(path) if not is_enveloped(line)]
    assert {line["type"] for line in bare} >= {"tripwire", "background-task-completed"}
    for line in bare:
        assert json.loads(chunk_from_wire(line).to_json()) == line
