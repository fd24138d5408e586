"""The small helpers the hot path uses instead of slower library calls give the same values."""

from __future__ import annotations

import copy
import os
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta, timezone

import pytest

from runstream._clock import iso_datetime, iso_now, now_utc
from runstream._ids import new_id
from runstream._messages import copy_json
from runstream.run._step_results import content_blocks as _content_blocks


def test_new_id_is_a_version_4_uuid_string_and_unique() -> None:
    ids = [new_id() for _ in range(2_000)]
    assert len(set(ids)) == len(ids)
    for text in ids:
        parsed = uuid.UUID(text)
        assert parsed.version == 4
        assert parsed.variant == uuid.RFC_4122
        assert str(parsed) == text
    assert {text[19] for text in ids} == set("89ab")  # the variant keeps its two random bits


def test_new_ids_are_unique_across_threads() -> None:
    with ThreadPoolExecutor(4) as pool:
        batches = list(pool.map(lambda _: [new_id() for _ in range(500)], range(8)))
    ids = [text for batch in batches for text in batch]
    assert len(set(ids)) == len(ids) == 4_000


def test_a_forked_child_does_not_repeat_its_parents_ids() -> None:
    new_id()  # the parent holds a draw of ids not handed out yet
    reader, writer = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child's side
        os.close(reader)
        os.write(writer, " ".join(new_id() for _ in range(10)).encode())
        os._exit(0)
    os.close(writer)
    with os.fdopen(reader) as pipe:
        childs = set(pipe.read().split())
    os.waitpid(child, 0)
    parents = {new_id() for _ in range(10)}
    assert len(childs) == 10
    assert not childs & parents


def test_copy_json_equals_deepcopy_and_shares_nothing_mutable() -> None:
    value = {"a": [1, 2.5, {"b": None, "c": True}], "d": "text", "e": (1, 2), "f": datetime(2020, 1, 1)}
    copied = copy_json(value)
    assert copied == copy.deepcopy(value)
    assert copied["a"] is not value["a"] and copied["a"][2] is not value["a"][2]


def test_iso_datetime_is_javascripts_to_iso_string() -> None:
    assert iso_datetime(datetime(2020, 1, 2, 3, 4, 5, 6_789)) == "2020-01-02T03:04:05.006Z"
    assert iso_datetime(datetime(7, 1, 2, 3, 4, 5, 999_999, tzinfo=UTC)) == "0007-01-02T03:04:05.999Z"
    plus_two = timezone(timedelta(hours=2))
    assert iso_datetime(datetime(2020, 1, 2, 3, 4, 5, tzinfo=plus_two)) == "2020-01-02T01:04:05.000Z"


@pytest.mark.parametrize(
    ("starts", "text", "reasoning", "expected"),
    [
        ([], [], [], []),
        ([("text", 0)], ["a", "b"], [], [{"type": "text", "text": "ab"}]),
        ([], ["a"], [], [{"type": "text", "text": "a"}]),  # deltas without a start
        ([("text", 0)], ["", ""], [], []),  # an empty text block is dropped
        # an empty reasoning block is kept (OpenAI's encrypted reasoning has no summary text)
        ([("reasoning", 0)], ["a"], [], [{"type": "reasoning", "text": ""}, {"type": "text", "text": "a"}]),
        (
            [("reasoning", 0), ("text", 0)],
            ["t"],
            ["r"],
            [{"type": "reasoning", "text": "r"}, {"type": "text", "text": "t"}],
        ),
        (
            [("text", 0), ("text", 1)],
            ["a", "b"],
            [],
            [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
        ),
    ],
)
def test_a_steps_content_blocks_one_part_per_block(
    starts: list[tuple[str, int]], text: list[str], reasoning: list[str], expected: list[dict[str, str]]
) -> None:
    assert [p for p in _content_blocks(starts, text, reasoning, None) if p is not None] == expected


def test_a_steps_content_blocks_carry_their_provider_metadata() -> None:
    signature = {"anthropic": {"signature": "sig"}}
    parts = _content_blocks([("reasoning", 0), ("text", 0)], ["t"], ["r"], {0: signature})
    assert parts == [
        {"type": "reasoning", "text": "r", "providerOptions": signature},
        {"type": "text", "text": "t"},
    ]


def test_iso_now_is_iso_datetime_of_now() -> None:
    before = iso_datetime(now_utc())
    made = iso_now()
    after = iso_datetime(now_utc())
    assert before <= made <= after
    assert datetime.fromisoformat(made.replace("Z", "+00:00")).tzinfo is not None
