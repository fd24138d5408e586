"""The Storage contract, run against every backend (see the ``storage`` fixture)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from storage_testkit import at, message, task, text_content, thread, tool_call_message

from runstream.storage import (
    InvalidArgumentError,
    NotFoundError,
    Storage,
    StorageClosedError,
    StoredMessage,
    TaskFilter,
    Thread,
    ThreadResourceMismatchError,
)

UNICODE_PAYLOAD: dict[str, Any] = {
    "greeting": "héllo wörld — 你好 🌍",
    "nested": {"list": [1, 2.5, None, True, {"deep": ["ß", "\u0000", "line\nbreak"]}], "empty": {}},
    "big": 2**63 + 1,
}


# -- resources -------------------------------------------------------------------------------


async def test_a_resource_is_created_by_its_first_update(storage: Storage) -> None:
    assert await storage.get_resource("alice") is None

    created = await storage.update_resource("alice", working_memory="# Alice\n- City: Paris")

    assert created.id == "alice" and created.working_memory == "# Alice\n- City: Paris"
    assert created.metadata == {}
    assert await storage.get_resource("alice") == created
    assert await storage.get_resource("bob") is None


async def test_update_resource_replaces_working_memory_and_merges_metadata(storage: Storage) -> None:
    first = await storage.update_resource("alice", working_memory="v1", metadata={"a": 1, "b": 2})
    second = await storage.update_resource("alice", metadata={"b": 3, "u": UNICODE_PAYLOAD})
    third = await storage.update_resource("alice", working_memory="v2")

    assert (second.working_memory, second.metadata) == ("v1", {"a": 1, "b": 3, "u": UNICODE_PAYLOAD})
    assert (third.working_memory, third.metadata) == ("v2", {"a": 1, "b": 3, "u": UNICODE_PAYLOAD})
    assert third.created_at == first.created_at and third.updated_at >= second.updated_at
    assert await storage.get_resource("alice") == third


async def test_resource_records_are_copies(storage: Storage) -> None:
    returned = await storage.update_resource("alice", working_memory="v1", metadata={"k": [1]})
    returned.metadata["k"].append(2)
    returned.working_memory = "changed"

    stored = await storage.get_resource("alice")
    assert stored is not None and (stored.working_memory, stored.metadata) == ("v1", {"k": [1]})


async def test_update_resource_refuses_a_non_string_working_memory(storage: Storage) -> None:
    with pytest.raises(InvalidArgumentError, match="must be a string"):
        await storage.update_resource("alice", working_memory={"name": "Ada"})  # type: ignore[arg-type]
    assert await storage.get_resource("alice") is None


async def test_concurrent_resource_updates_all_land(storage: Storage) -> None:
    await asyncio.gather(*(storage.update_resource("alice", metadata={f"k{i}": i}) for i in range(8)))

    stored = await storage.get_resource("alice")
    assert stored is not None and stored.metadata == {f"k{i}": i for i in range(8)}


# -- threads ---------------------------------------------------------------------------------


async def test_thread_round_trip(storage: Storage) -> None:
    saved = thread(title="Planning", metadata=UNICODE_PAYLOAD, created=1, updated=2)
    await storage.save_thread(saved)

    assert await storage.get_thread("t1") == saved
    assert await storage.get_thread("missing") is None


async def test_save_thread_upserts(storage: Storage) -> None:
    await storage.save_thread(thread(title="old", metadata={"a": 1}))
    await storage.save_thread(thread(title="new", metadata={"b": 2}, updated=5))

    stored = await storage.get_thread("t1")
    assert stored is not None
    assert (stored.title, stored.metadata, stored.updated_at) == ("new", {"b": 2}, at(5))
    assert (await storage.list_threads("r1")).total == 1


async def test_save_thread_refuses_another_resources_thread(storage: Storage) -> None:
    await storage.save_thread(thread("t1", "alice", title="alice's"))

    with pytest.raises(ThreadResourceMismatchError) as caught:
        await storage.save_thread(thread("t1", "bob", title="bob's"))

    assert "t1" in str(caught.value) and "alice" in str(caught.value) and "bob" in str(caught.value)
    assert (caught.value.owner_resource_id, caught.value.requested_resource_id) == ("alice", "bob")
    stored = await storage.get_thread("t1")
    assert stored is not None and stored.title == "alice's"


async def test_list_threads_only_returns_the_resources_threads(storage: Storage) -> None:
    await storage.save_thread(thread("a1", "alice"))
    await storage.save_thread(thread("b1", "bob"))
    await storage.save_thread(thread("a2", "alice", created=1))

    alice = await storage.list_threads("alice")
    bob = await storage.list_threads("bob")
    nobody = await storage.list_threads("carol")

    assert {t.id for t in alice.items} == {"a1", "a2"} and alice.total == 2
    assert [t.id for t in bob.items] == ["b1"]
    assert nobody.items == [] and nobody.total == 0 and not nobody.has_more


async def test_list_threads_ordering(storage: Storage) -> None:
    await storage.save_thread(thread("old", created=0, updated=30))
    await storage.save_thread(thread("mid", created=10, updated=10))
    await storage.save_thread(thread("new", created=20, updated=20))

    by_updated_desc = await storage.list_threads("r1")
    by_updated_asc = await storage.list_threads("r1", order="asc")
    by_created_desc = await storage.list_threads("r1", order_by="created_at")

    assert [t.id for t in by_updated_desc.items] == ["old", "new", "mid"]
    assert [t.id for t in by_updated_asc.items] == ["mid", "new", "old"]
    assert [t.id for t in by_created_desc.items] == ["new", "mid", "old"]


async def test_list_threads_pagination(storage: Storage) -> None:
    for i in range(17):
        await storage.save_thread(thread(f"t{i:02}", created=i, updated=i))

    first = await storage.list_threads("r1", page=0, per_page=7, order="asc")
    last = await storage.list_threads("r1", page=2, per_page=7, order="asc")
    beyond = await storage.list_threads("r1", page=5, per_page=7, order="asc")

    assert [t.id for t in first.items] == [f"t{i:02}" for i in range(7)]
    assert (first.total, first.page, first.per_page, first.has_more) == (17, 0, 7, True)
    assert [t.id for t in last.items] == ["t14", "t15", "t16"]
    assert (last.total, last.has_more) == (17, False)
    assert beyond.items == [] and beyond.total == 17 and not beyond.has_more


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"page": -1}, "page"),
        ({"per_page": 0}, "per_page"),
        ({"order": "sideways"}, "order"),
        ({"order_by": "title"}, "title"),
    ],
)
async def test_list_threads_rejects_bad_arguments(
    storage: Storage, kwargs: dict[str, Any], fragment: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=fragment):
        await storage.list_threads("r1", **kwargs)


async def test_update_thread_sets_title_merges_metadata_and_bumps_updated_at(storage: Storage) -> None:
    await storage.save_thread(thread(title="old", metadata={"keep": 1, "change": "a"}))
    before = datetime.now(UTC)

    updated = await storage.update_thread("t1", title="new", metadata={"change": "b", "add": [1]})

    assert updated.title == "new"
    assert updated.metadata == {"keep": 1, "change": "b", "add": [1]}
    assert updated.updated_at >= before and updated.created_at == at(0)
    assert await storage.get_thread("t1") == updated


async def test_update_thread_without_title_keeps_it(storage: Storage) -> None:
    await storage.save_thread(thread(title="kept"))

    updated = await storage.update_thread("t1", metadata={"x": 1})

    assert updated.title == "kept"


async def test_update_missing_thread_raises(storage: Storage) -> None:
    with pytest.raises(NotFoundError, match="Thread not found: nope"):
        await storage.update_thread("nope", title="x")


async def test_delete_thread_cascades_to_messages_and_state(storage: Storage) -> None:
    await storage.save_thread(thread("t1"))
    await storage.save_thread(thread("t2"))
    await storage.save_messages([message("m1", "t1"), message("m2", "t2")])
    await storage.set_thread_state("t1", "goal", {"objective": "x"})
    await storage.set_thread_state("t2", "goal", {"objective": "y"})

    assert await storage.delete_thread("t1") is True
    assert await storage.delete_thread("t1") is False

    assert await storage.get_thread("t1") is None
    assert await storage.get_messages(["m1", "m2"]) == [message("m2", "t2")]
    assert (await storage.list_messages("t1")).total == 0
    assert await storage.get_thread_state("t1", "goal") is None
    assert await storage.get_thread_state("t2", "goal") == {"objective": "y"}


async def test_delete_thread_clears_state_of_a_thread_that_was_never_saved(storage: Storage) -> None:
    await storage.set_thread_state("judge-thread", "goal", {"objective": "x"})

    assert await storage.delete_thread("judge-thread") is False
    assert await storage.get_thread_state("judge-thread", "goal") is None


async def test_datetimes_come_back_as_utc(storage: Storage) -> None:
    plus_two = timezone(timedelta(hours=2))
    local = datetime(2024, 5, 1, 12, 30, 15, 123456, tzinfo=plus_two)
    await storage.save_thread(Thread("t1", "r1", created_at=local, updated_at=local))

    stored = await storage.get_thread("t1")

    assert stored is not None
    assert stored.created_at == local
    assert stored.created_at.tzinfo == UTC
    assert stored.created_at == datetime(2024, 5, 1, 10, 30, 15, 123456, tzinfo=UTC)


async def test_naive_datetimes_are_refused(storage: Storage) -> None:
    naive = datetime(2024, 1, 1)
    with pytest.raises(InvalidArgumentError, match="naive"):
        await storage.save_thread(Thread("t1", "r1", created_at=naive, updated_at=naive))
    assert await storage.get_thread("t1") is None


# -- messages --------------------------------------------------------------------------------


async def test_messages_are_listed_chronologically(storage: Storage) -> None:
    await storage.save_thread(thread())
    await storage.save_messages([message("c", created=3), message("a", created=1)])
    await storage.save_messages([message("b", created=2)])

    page = await storage.list_messages("t1")

    assert [m.id for m in page.items] == ["a", "b", "c"]
    assert (page.total, page.has_more) == (3, False)


async def test_equal_timestamps_keep_save_order(storage: Storage) -> None:
    await storage.save_thread(thread())
    await storage.save_messages([message(name, created=5) for name in ["z", "y", "x"]])

    assert [m.id for m in (await storage.list_messages("t1")).items] == ["z", "y", "x"]
    assert [m.id for m in (await storage.list_messages("t1", last=2)).items] == ["y", "x"]


async def test_resaving_a_message_replaces_it_in_place(storage: Storage) -> None:
    """A background-task result rewrites the tool invocation by re-saving the message."""
    await storage.save_thread(thread())
    placeholder = tool_call_message("m2", "call-1", created=5)
    await storage.save_messages([message("m1", created=5), placeholder, message("m3", created=5)])

    result = tool_call_message("m2", "call-1", created=5)
    invocation = result.content["parts"][1]["toolInvocation"]
    invocation.update(state="result", result={"answer": "42 ✓"})
    result.content["parts"][1]["providerMetadata"] = {"mastra": {"backgroundTask": {"taskId": "k1"}}}
    await storage.save_messages([result])

    page = await storage.list_messages("t1")
    assert [m.id for m in page.items] == ["m1", "m2", "m3"]
    assert page.items[1] == result


async def test_resaving_a_message_can_move_it_to_another_thread(storage: Storage) -> None:
    await storage.save_thread(thread("t1"))
    await storage.save_thread(thread("t2"))
    await storage.save_messages([message("m1", "t1", text="first")])

    await storage.save_messages([message("m1", "t2", text="moved")])

    assert (await storage.list_messages("t1")).items == []
    assert (await storage.list_messages("t2")).items == [message("m1", "t2", text="moved")]


async def test_list_messages_last_n(storage: Storage) -> None:
    await storage.save_thread(thread())
    await storage.save_messages([message(f"m{i}", created=i) for i in range(10)])

    last_three = await storage.list_messages("t1", last=3)
    more_than_all = await storage.list_messages("t1", last=50)
    none = await storage.list_messages("t1", last=0)

    assert [m.id for m in last_three.items] == ["m7", "m8", "m9"]
    assert (last_three.total, last_three.has_more) == (10, True)
    assert len(more_than_all.items) == 10 and not more_than_all.has_more
    assert none.items == [] and none.total == 10


async def test_latest_messages_are_the_last_n_without_a_count(storage: Storage) -> None:
    await storage.save_thread(thread())
    await storage.save_thread(thread("t2"))
    await storage.save_messages([message(f"m{i}", created=i) for i in range(10)])
    await storage.save_messages([message("other", "t2", created=20)])

    for count in (0, 1, 3, 10, 50):
        expected = (await storage.list_messages("t1", last=count)).items
        assert await storage.latest_messages("t1", count) == expected
    assert [m.id for m in await storage.latest_messages("t1", 2)] == ["m8", "m9"]
    assert await storage.latest_messages("nope", 5) == []
    with pytest.raises(InvalidArgumentError, match="last"):
        await storage.latest_messages("t1", -1)


async def test_messages_around_give_each_hit_with_its_neighbours_in_its_thread(storage: Storage) -> None:
    await storage.save_thread(thread())
    await storage.save_thread(thread("t2"))
    await storage.save_messages([message(f"m{i}", created=i) for i in range(10)])
    await storage.save_messages([message(f"o{i}", "t2", created=i + 0.5) for i in range(3)])
    await storage.save_messages([message("tie", created=5)])  # same time as m5, saved later

    around = await storage.messages_around(["m2", "m5", "o1", "nope"], before=1, after=1)
    assert [m.id for m in around] == ["o0", "m1", "o1", "m2", "o2", "m3", "m4", "m5", "tie"]
    assert [m.id for m in await storage.messages_around(["m9", "m0"], before=2, after=2)] == [
        "m0",
        "m1",
        "m2",
        "m7",
        "m8",
        "m9",
    ]
    assert [m.id for m in await storage.messages_around(["m4"])] == ["m4"]
    assert await storage.messages_around([]) == []


async def test_list_messages_pagination(storage: Storage) -> None:
    await storage.save_thread(thread())
    await storage.save_messages([message(f"m{i:02}", created=i) for i in range(15)])

    first = await storage.list_messages("t1", page=0, per_page=5)
    third = await storage.list_messages("t1", page=2, per_page=5)

    assert [m.id for m in first.items] == [f"m{i:02}" for i in range(5)]
    assert (first.total, first.page, first.per_page, first.has_more) == (15, 0, 5, True)
    assert [m.id for m in third.items] == [f"m{i:02}" for i in range(10, 15)]
    assert not third.has_more


async def test_list_messages_rejects_last_with_paging(storage: Storage) -> None:
    with pytest.raises(InvalidArgumentError, match="last"):
        await storage.list_messages("t1", last=2, per_page=5)
    with pytest.raises(InvalidArgumentError, match="last"):
        await storage.list_messages("t1", last=-1)


async def test_list_messages_of_unknown_thread_is_empty(storage: Storage) -> None:
    page = await storage.list_messages("nope")
    assert (page.items, page.total) == ([], 0)


async def test_list_messages_checks_the_resource_when_given(storage: Storage) -> None:
    await storage.save_thread(thread("t1", "alice"))
    await storage.save_messages([message("m1", "t1", "alice")])

    assert [m.id for m in (await storage.list_messages("t1", resource_id="alice")).items] == ["m1"]
    with pytest.raises(ThreadResourceMismatchError, match=r"alice.*bob"):
        await storage.list_messages("t1", resource_id="bob")
    with pytest.raises(NotFoundError):
        await storage.list_messages("nope", resource_id="alice")


async def test_save_messages_needs_an_existing_thread_and_is_atomic(storage: Storage) -> None:
    await storage.save_thread(thread("t1"))

    with pytest.raises(NotFoundError, match="Thread not found: ghost"):
        await storage.save_messages([message("m1", "t1"), message("m2", "ghost")])

    assert await storage.get_messages(["m1", "m2"]) == []


async def test_save_messages_refuses_another_resources_thread(storage: Storage) -> None:
    await storage.save_thread(thread("t1", "alice"))

    with pytest.raises(ThreadResourceMismatchError) as caught:
        await storage.save_messages([message("ok", "t1", "alice"), message("evil", "t1", "bob")])

    assert "alice" in str(caught.value) and "bob" in str(caught.value)
    assert (await storage.list_messages("t1")).items == []


async def test_save_messages_bumps_thread_updated_at(storage: Storage) -> None:
    await storage.save_thread(thread(updated=0))
    before = datetime.now(UTC)

    await storage.save_messages([message("m1")])

    stored = await storage.get_thread("t1")
    assert stored is not None and stored.updated_at >= before


async def test_save_no_messages_is_a_no_op(storage: Storage) -> None:
    await storage.save_messages([])


async def test_get_messages_by_id(storage: Storage) -> None:
    await storage.save_thread(thread("t1", "alice"))
    await storage.save_thread(thread("t2", "bob"))
    await storage.save_messages(
        [message("b", "t2", "bob", created=2), message("a", "t1", "alice", created=1)]
    )
    await storage.save_messages([message("c", "t1", "alice", created=3)])

    found = await storage.get_messages(["c", "unknown", "b", "a"])

    assert [m.id for m in found] == ["a", "b", "c"]
    assert await storage.get_messages([]) == []


async def test_delete_messages(storage: Storage) -> None:
    await storage.save_thread(thread())
    await storage.save_messages([message("m1"), message("m2"), message("m3")])

    assert await storage.delete_messages(["m1", "m3", "unknown"]) == 2
    assert await storage.delete_messages([]) == 0
    assert [m.id for m in (await storage.list_messages("t1")).items] == ["m2"]


async def test_update_message_rewrites_a_tool_invocation(storage: Storage) -> None:
    await storage.save_thread(thread())
    await storage.save_messages([tool_call_message("m1", "call-1")])

    def complete(stored: StoredMessage) -> StoredMessage:
        stored.content["parts"][1]["toolInvocation"].update(state="result", result={"rows": 3})
        stored.content["metadata"] = {"backgroundTasks": {"call-1": {"taskId": "k1"}}}
        return stored

    updated = await storage.update_message("m1", complete)

    assert updated.content["parts"][1]["toolInvocation"]["state"] == "result"
    assert (await storage.get_messages(["m1"])) == [updated]


async def test_concurrent_update_message_calls_do_not_lose_updates(storage: Storage) -> None:
    """Two background tasks of one assistant message finishing together both land."""
    await storage.save_thread(thread())
    await storage.save_messages([tool_call_message("m1", "call-0")])

    def add_part(index: int) -> Any:
        def mutate(stored: StoredMessage) -> StoredMessage:
            stored.content["parts"].append({"type": "text", "text": f"done {index}"})
            return stored

        return mutate

    await asyncio.gather(*(storage.update_message("m1", add_part(i)) for i in range(20)))

    [stored] = await storage.get_messages(["m1"])
    texts = {part["text"] for part in stored.content["parts"] if part["type"] == "text"}
    assert texts == {f"done {i}" for i in range(20)}


async def test_update_message_errors(storage: Storage) -> None:
    await storage.save_thread(thread())
    await storage.save_messages([message("m1")])

    def rename(stored: StoredMessage) -> StoredMessage:
        stored.id = "other"
        return stored

    def fail(stored: StoredMessage) -> StoredMessage:
        stored.content["parts"] = []
        raise RuntimeError("mutator failed")

    with pytest.raises(NotFoundError, match="Message not found: nope"):
        await storage.update_message("nope", lambda m: m)
    with pytest.raises(InvalidArgumentError, match="id"):
        await storage.update_message("m1", rename)
    with pytest.raises(RuntimeError, match="mutator failed"):
        await storage.update_message("m1", fail)
    assert await storage.get_messages(["m1"]) == [message("m1")]


async def test_message_parts_round_trip(storage: Storage) -> None:
    await storage.save_thread(thread())
    content = {
        "format": 2,
        "content": "Sources: ✓",
        "parts": [
            {"type": "step-start"},
            {"type": "reasoning", "reasoning": "", "details": [{"type": "text", "text": "think… 🤔"}]},
            {
                "type": "tool-invocation",
                "toolInvocation": {
                    "state": "result",
                    "toolCallId": "call_0",
                    "toolName": "search",
                    "args": {"q": "Zürich", "filters": {"year": [2023, 2024]}},
                    "result": {"hits": [{"title": "日本", "score": 0.5}]},
                },
                "providerMetadata": {"mastra": {"modelOutput": None}},
            },
            {"type": "file", "mimeType": "image/png", "data": "iVBORw0KGgo="},
            {
                "type": "source",
                "source": {"sourceType": "url", "id": "s1", "url": "https://e.x/ü", "title": "T"},
            },
            {"type": "text", "text": "done"},
        ],
        "metadata": UNICODE_PAYLOAD,
    }
    saved = StoredMessage("m1", "t1", "r1", "assistant", content, created_at=at(1), type="text")
    await storage.save_messages([saved])

    assert await storage.get_messages(["m1"]) == [saved]


async def test_message_validation(storage: Storage) -> None:
    await storage.save_thread(thread())
    bad_role = StoredMessage("m1", "t1", "r1", "robot", text_content("x"))  # type: ignore[arg-type]
    not_json = StoredMessage("m2", "t1", "r1", "user", {"format": 2, "parts": [{"when": datetime.now(UTC)}]})
    nan = StoredMessage("m3", "t1", "r1", "user", {"format": 2, "score": float("nan")})

    with pytest.raises(InvalidArgumentError, match="role"):
        await storage.save_messages([bad_role])
    with pytest.raises(InvalidArgumentError, match="JSON"):
        await storage.save_messages([not_json])
    with pytest.raises(InvalidArgumentError, match="JSON"):
        await storage.save_messages([nan])
    assert (await storage.list_messages("t1")).total == 0


async def test_records_are_copies(storage: Storage) -> None:
    await storage.save_thread(thread(metadata={"tags": ["a"]}))
    saved = message("m1")
    await storage.save_messages([saved])

    saved.content["parts"].append({"type": "text", "text": "mutated after save"})
    [read] = await storage.get_messages(["m1"])
    read.content["parts"].clear()
    stored_thread = await storage.get_thread("t1")
    assert stored_thread is not None
    stored_thread.metadata["tags"].append("b")

    assert await storage.get_messages(["m1"]) == [message("m1")]
    again = await storage.get_thread("t1")
    assert again is not None and again.metadata == {"tags": ["a"]}


# -- background tasks ------------------------------------------------------------------------


async def test_task_round_trip(storage: Storage) -> None:
    full = task(
        "k1",
        status="failed",
        thread_id="t1",
        resource_id="r1",
        result={"partial": [1, 2]},
        error={"message": "boom ✗", "stack": "Traceback…"},
        started_at=at(1),
        suspended_at=at(2),
        completed_at=at(3),
        retry_count=2,
        max_retries=3,
        timeout_ms=1_000,
        suspend_payload={"ask": "approve?"},
        resume_data=False,
        metadata=UNICODE_PAYLOAD,
    )
    await storage.save_task(full)

    assert await storage.get_task("k1") == full
    assert await storage.get_task("missing") is None


async def test_task_defaults_round_trip(storage: Storage) -> None:
    minimal = task("k1")
    await storage.save_task(minimal)

    stored = await storage.get_task("k1")
    assert stored == minimal
    assert stored is not None and (stored.result, stored.error, stored.metadata) == (None, None, {})


async def test_save_task_upserts(storage: Storage) -> None:
    await storage.save_task(task("k1", created=5))
    await storage.save_task(task("k2", created=5))
    await storage.save_task(task("k1", status="running", created=5, started_at=at(6)))

    page = await storage.list_tasks()
    assert [t.id for t in page.items] == ["k1", "k2"]
    assert page.items[0].status == "running" and page.items[0].started_at == at(6)


@pytest.mark.parametrize(
    ("task_filter", "expected"),
    [
        (TaskFilter(), ["a", "b", "c", "d"]),
        (TaskFilter(status="running"), ["b"]),
        (TaskFilter(status=["pending", "completed"]), ["a", "c"]),
        (TaskFilter(status=[]), []),
        (TaskFilter(agent_id="agent-2"), ["c", "d"]),
        (TaskFilter(run_id="run-2"), ["d"]),
        (TaskFilter(thread_id="t1"), ["a", "b"]),
        (TaskFilter(resource_id="r2"), ["c"]),
        (TaskFilter(tool_call_id="call-x"), ["b"]),
        (TaskFilter(tool_name="lookup"), ["d"]),
        (TaskFilter(agent_id="agent-2", status="completed"), ["c"]),
        (TaskFilter(from_date=at(1), to_date=at(3)), ["b", "c"]),
        (TaskFilter(date_field="completed_at", to_date=at(100)), ["c"]),
        (TaskFilter(date_field="started_at", from_date=at(0)), ["b", "c"]),
        (TaskFilter(order="desc"), ["d", "c", "b", "a"]),
    ],
)
async def test_list_tasks_filters(storage: Storage, task_filter: TaskFilter, expected: list[str]) -> None:
    await storage.save_task(task("a", status="pending", created=0, thread_id="t1", resource_id="r1"))
    await storage.save_task(
        task("b", status="running", created=1, thread_id="t1", tool_call_id="call-x", started_at=at(1))
    )
    await storage.save_task(
        task(
            "c",
            status="completed",
            created=2,
            agent_id="agent-2",
            resource_id="r2",
            started_at=at(2),
            completed_at=at(50),
        )
    )
    await storage.save_task(
        task("d", status="failed", created=3, agent_id="agent-2", run_id="run-2", tool_name="lookup")
    )

    page = await storage.list_tasks(task_filter)

    assert [t.id for t in page.items] == expected
    assert page.total == len(expected)
    assert await storage.count_tasks(task_filter) == len(expected)


async def test_list_tasks_pagination_and_order(storage: Storage) -> None:
    for i in range(5):
        await storage.save_task(task(f"k{i}", created=i, status="running" if i % 2 else "pending"))

    second = await storage.list_tasks(TaskFilter(page=1, per_page=2))
    newest_first = await storage.list_tasks(TaskFilter(order="desc", per_page=2))
    running = await storage.list_tasks(TaskFilter(status="running", per_page=1))

    assert [t.id for t in second.items] == ["k2", "k3"]
    assert (second.total, second.page, second.per_page, second.has_more) == (5, 1, 2, True)
    assert [t.id for t in newest_first.items] == ["k4", "k3"]
    assert ([t.id for t in running.items], running.total, running.has_more) == (["k1"], 2, True)


async def test_list_tasks_ties_follow_save_order(storage: Storage) -> None:
    for name in ["z", "x", "y"]:
        await storage.save_task(task(name, created=7))

    assert [t.id for t in (await storage.list_tasks()).items] == ["z", "x", "y"]
    assert [t.id for t in (await storage.list_tasks(TaskFilter(order="desc"))).items] == ["y", "x", "z"]


async def test_list_tasks_rejects_bad_filters(storage: Storage) -> None:
    with pytest.raises(InvalidArgumentError, match="status"):
        await storage.list_tasks(TaskFilter(status="exploded"))  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="per_page"):
        await storage.list_tasks(TaskFilter(per_page=0))
    with pytest.raises(InvalidArgumentError, match="date field"):
        await storage.list_tasks(TaskFilter(date_field="updated_at", from_date=at(0)))  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="naive"):
        await storage.list_tasks(TaskFilter(from_date=datetime(2024, 1, 1)))


async def test_update_task_changes_only_given_fields(storage: Storage) -> None:
    await storage.save_task(task("k1", suspend_payload={"ask": "?"}, suspended_at=at(1), status="suspended"))

    updated = await storage.update_task(
        "k1",
        status="running",
        started_at=at(2),
        suspend_payload=None,
        suspended_at=None,
        resume_data={"ok": True},
    )

    assert updated is not None
    assert (updated.status, updated.started_at, updated.suspend_payload, updated.suspended_at) == (
        "running",
        at(2),
        None,
        None,
    )
    assert updated.resume_data == {"ok": True} and updated.tool_name == "research"
    assert await storage.get_task("k1") == updated


async def test_update_missing_task_is_a_no_op(storage: Storage) -> None:
    assert await storage.update_task("nope", status="running") is None
    assert await storage.get_task("nope") is None


async def test_update_task_compare_and_set(storage: Storage) -> None:
    await storage.save_task(task("k1", status="completed", result="final"))

    stale = await storage.update_task(
        "k1", expected_status="running", status="failed", error={"message": "late"}
    )
    applied = await storage.update_task("k1", expected_status=["completed", "failed"], status="cancelled")

    assert stale is None
    assert applied is not None and applied.status == "cancelled" and applied.result == "final"


async def test_update_task_compares_metadata_keys(storage: Storage) -> None:
    await storage.save_task(task("k1", status="running", metadata={"lease": "a", "n": 1, "gone": None}))

    wrong_lease = await storage.update_task("k1", expected_metadata={"lease": "b"}, status="completed")
    number_is_not_a_string = await storage.update_task("k1", expected_metadata={"n": "1"}, result=0)
    absent_key_is_none = await storage.update_task(
        "k1",
        expected_status="running",
        expected_metadata={"lease": "a", "gone": None, "other": None},
        result=1,
    )
    none_is_not_a_value = await storage.update_task("k1", expected_metadata={"lease": None}, result=2)

    assert wrong_lease is None and number_is_not_a_string is None and none_is_not_a_value is None
    assert absent_key_is_none is not None and absent_key_is_none.result == 1
    stored = await storage.get_task("k1")
    assert stored is not None and (stored.status, stored.result) == ("running", 1)


async def test_update_task_refuses_bad_metadata_conditions(storage: Storage) -> None:
    await storage.save_task(task("k1"))

    with pytest.raises(InvalidArgumentError, match="identifier"):
        await storage.update_task("k1", expected_metadata={"a.b": "x"}, status="running")
    with pytest.raises(InvalidArgumentError, match="string"):
        await storage.update_task("k1", expected_metadata={"n": 1}, status="running")  # type: ignore[dict-item]
    assert await storage.get_task("k1") == task("k1")


async def test_concurrent_fenced_updates_have_one_winner(storage: Storage) -> None:
    """Twenty writers race to move the same lease on: exactly one compare-and-set succeeds."""
    await storage.save_task(task("k1", status="running", metadata={"lease": "old"}))

    results = await asyncio.gather(
        *(
            storage.update_task(
                "k1",
                expected_status="running",
                expected_metadata={"lease": "old"},
                metadata={"lease": f"new{i}"},
            )
            for i in range(20)
        )
    )

    winners = [r for r in results if r is not None]
    assert len(winners) == 1
    assert await storage.get_task("k1") == winners[0]


async def test_update_task_rejects_bad_fields(storage: Storage) -> None:
    await storage.save_task(task("k1"))

    with pytest.raises(InvalidArgumentError, match="colour"):
        await storage.update_task("k1", colour="red")  # type: ignore[call-arg]
    with pytest.raises(InvalidArgumentError, match="id"):
        await storage.update_task("k1", id="k2")  # type: ignore[call-arg]
    with pytest.raises(InvalidArgumentError, match="status"):
        await storage.update_task("k1", status="exploded")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="naive"):
        await storage.update_task("k1", started_at=datetime(2024, 1, 1))
    assert await storage.get_task("k1") == task("k1")


async def test_delete_tasks(storage: Storage) -> None:
    for name in ["k1", "k2", "k3"]:
        await storage.save_task(task(name))

    assert await storage.delete_tasks(["k1", "k3", "unknown"]) == 2
    assert await storage.delete_tasks([]) == 0
    assert [t.id for t in (await storage.list_tasks()).items] == ["k2"]


async def test_delete_tasks_older_than(storage: Storage) -> None:
    await storage.save_task(task("old-done", status="completed", created=0, completed_at=at(10)))
    await storage.save_task(task("new-done", status="completed", created=0, completed_at=at(100)))
    await storage.save_task(task("old-failed", status="failed", created=0, completed_at=at(10)))
    await storage.save_task(task("old-pending", status="pending", created=0))
    await storage.save_task(task("old-cancelled-no-date", status="cancelled", created=5))

    assert await storage.delete_tasks_older_than("completed", at(50)) == 1
    assert await storage.delete_tasks_older_than(["failed", "cancelled"], at(50)) == 2
    assert await storage.delete_tasks_older_than([], at(500)) == 0

    remaining = {t.id for t in (await storage.list_tasks()).items}
    assert remaining == {"new-done", "old-pending"}


# -- thread state and snapshots --------------------------------------------------------------


async def test_thread_state(storage: Storage) -> None:
    goal = {"objective": "ship it 🚀", "status": "active", "runsUsed": 0, "startedAt": 1_700_000_000_000}
    await storage.set_thread_state("t1", "goal", goal)
    await storage.set_thread_state("t1", "other", {"x": 1})
    await storage.set_thread_state("t2", "goal", {"objective": "other thread"})

    assert await storage.get_thread_state("t1", "goal") == goal
    assert await storage.get_thread_state("t1", "missing") is None

    await storage.set_thread_state("t1", "goal", {"objective": "replaced"})
    assert await storage.get_thread_state("t1", "goal") == {"objective": "replaced"}

    assert await storage.delete_thread_state("t1", "goal") is True
    assert await storage.delete_thread_state("t1", "goal") is False
    assert await storage.get_thread_state("t1", "goal") is None
    assert await storage.get_thread_state("t1", "other") == {"x": 1}
    assert await storage.get_thread_state("t2", "goal") == {"objective": "other thread"}


async def test_claim_snapshot_keeps_the_first_claim(storage: Storage) -> None:
    first = {"principalId": "alice", "resourceId": "u1", "note": UNICODE_PAYLOAD}
    assert await storage.claim_snapshot("owners", "run-1", first) == first
    assert await storage.claim_snapshot("owners", "run-1", {"principalId": "bob"}) == first
    assert await storage.load_snapshot("owners", "run-1") == first
    claims = await asyncio.gather(
        *(storage.claim_snapshot("owners", "run-2", {"principalId": f"p{i}"}) for i in range(8))
    )
    assert len({claim["principalId"] for claim in claims}) == 1  # one winner, seen by every caller
    assert await storage.load_snapshot("owners", "run-2") == claims[0]


async def test_snapshots(storage: Storage) -> None:
    await storage.save_snapshot("workflow", "run-1", {"step": 1, "state": UNICODE_PAYLOAD})
    await storage.save_snapshot("other", "run-1", {"step": 9})

    assert await storage.load_snapshot("workflow", "run-1") == {"step": 1, "state": UNICODE_PAYLOAD}
    await storage.save_snapshot("workflow", "run-1", {"step": 2})
    assert await storage.load_snapshot("workflow", "run-1") == {"step": 2}

    assert await storage.delete_snapshot("workflow", "run-1") is True
    assert await storage.delete_snapshot("workflow", "run-1") is False
    assert await storage.load_snapshot("workflow", "run-1") is None
    assert await storage.load_snapshot("other", "run-1") == {"step": 9}


async def test_list_snapshots_of_a_namespace_in_save_order(storage: Storage) -> None:
    for snapshot_id in ("b", "a", "c"):
        await storage.save_snapshot("runs", snapshot_id, {"id": snapshot_id})
    await storage.save_snapshot("other", "x", {})
    await storage.save_snapshot("runs", "b", {"again": True})  # an update keeps its place
    assert await storage.list_snapshots("runs") == ["b", "a", "c"]
    await storage.delete_snapshot("runs", "a")
    assert await storage.list_snapshots("runs") == ["b", "c"]
    assert await storage.list_snapshots("empty") == []


async def test_state_and_snapshot_values_must_be_json_objects(storage: Storage) -> None:
    with pytest.raises(InvalidArgumentError):
        await storage.set_thread_state("t1", "goal", ["not", "a", "mapping"])  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="JSON"):
        await storage.save_snapshot("workflow", "run-1", {"fn": print})


# -- lifecycle and concurrency ---------------------------------------------------------------


async def test_init_is_idempotent_and_optional(storage: Storage) -> None:
    await storage.init()
    await storage.init()
    await storage.save_thread(thread())
    assert await storage.get_thread("t1") is not None


async def test_closed_storage_refuses_calls(storage: Storage) -> None:
    await storage.save_thread(thread())
    await storage.close()
    await storage.close()

    with pytest.raises(StorageClosedError):
        await storage.get_thread("t1")
    with pytest.raises(StorageClosedError):
        await storage.init()


async def test_concurrent_writers(storage: Storage) -> None:
    await storage.save_thread(thread())

    async def writer(i: int) -> None:
        await storage.save_messages([message(f"m{i:02}", created=i)])
        await storage.save_task(task(f"k{i:02}", created=i))
        await storage.update_task(f"k{i:02}", expected_status="pending", status="running")

    await asyncio.gather(*(writer(i) for i in range(30)))

    assert [m.id for m in (await storage.list_messages("t1")).items] == [f"m{i:02}" for i in range(30)]
    assert await storage.count_tasks(TaskFilter(status="running")) == 30


async def test_find_tool_call_message_through_the_index(storage: Storage) -> None:
    await storage.save_thread(thread())
    await storage.save_thread(thread("t2"))
    await storage.save_messages([message("u1"), tool_call_message("m1", "call-1", created=1)])

    found = await storage.find_tool_call_message("t1", "call-1")
    assert found is not None and found == (await storage.get_messages(["m1"]))[0]
    assert await storage.find_tool_call_message("t1", "unknown") is None
    assert await storage.find_tool_call_message("t2", "call-1") is None  # another thread's call

    # A later message holding the same call id is the one found; a rewrite keeps the pointer.
    await storage.save_messages([tool_call_message("m2", "call-1", created=2)])
    await storage.update_message("m2", lambda stored: stored)
    assert (found := await storage.find_tool_call_message("t1", "call-1")) is not None and found.id == "m2"

    # Deleting the message, or its thread, drops it from the index.
    await storage.delete_messages(["m2"])
    assert await storage.find_tool_call_message("t1", "call-1") is None
    await storage.delete_thread("t1")
    assert await storage.find_tool_call_message("t1", "call-1") is None


async def test_a_rewrite_without_the_call_drops_it_from_the_index(storage: Storage) -> None:
    await storage.save_thread(thread())
    await storage.save_messages([tool_call_message("m1", "call-1")])

    def drop_invocation(stored: StoredMessage) -> StoredMessage:
        stored.content["parts"] = [p for p in stored.content["parts"] if p["type"] != "tool-invocation"]
        return stored

    await storage.update_message("m1", drop_invocation)
    assert await storage.find_tool_call_message("t1", "call-1") is None
