"""``POST /ag-ui/{agentId}``: events valid for the ``ag-ui-protocol`` models, auth, ownership, bad input."""

from __future__ import annotations

import json
from typing import Any

import httpx2
from ag_ui.core import (
    Event,
    RunAgentInput,
    RunErrorEvent,
    RunStartedEvent,
    StateDeltaEvent,
    StateSnapshotEvent,
)
from pydantic import TypeAdapter

from runstream.agui import EventMapper, prompt_messages
from runstream.chunks import DataChunk
from tests.agui.conftest import CONFINED_TOKEN, TOKEN
from tests.server.conftest import sse_events

EVENTS: TypeAdapter[Any] = TypeAdapter(Event)


def run_input(thread: str, *messages: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"threadId": thread, "runId": "r1", "messages": list(messages), **extra}


def user(text: str, message_id: str = "u1") -> dict[str, Any]:
    return {"id": message_id, "role": "user", "content": text}


def post(url: str, body: Any, token: str | None = TOKEN, agent: str = "calc") -> httpx2.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx2.post(f"{url}/ag-ui/{agent}", json=body, headers=headers, timeout=20)


def events(response: httpx2.Response) -> list[Any]:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    return [EVENTS.validate_json(data) for data in sse_events(response.content)]


def test_every_event_is_a_valid_ag_ui_event(agui_url: str) -> None:
    parsed = events(post(agui_url, run_input("t-valid", user("divide 1 4"), state={"page": "home"})))
    kinds = [e.type.value for e in parsed]
    assert kinds[0] == "RUN_STARTED" and kinds[-1] == "RUN_FINISHED"
    assert parsed[1].snapshot == {"page": "home"}
    result = next(e for e in parsed if e.type.value == "TOOL_CALL_RESULT")
    assert json.loads(result.content) == 0.25
    starts = [e.message_id for e in parsed if e.type.value == "TEXT_MESSAGE_START"]
    ends = [e.message_id for e in parsed if e.type.value == "TEXT_MESSAGE_END"]
    assert starts == ends and len(starts) == 1


def test_a_tool_error_is_a_tool_result_with_the_error(agui_url: str) -> None:
    parsed = events(post(agui_url, run_input("t-error", user("divide 1 0"))))
    result = next(e for e in parsed if e.type.value == "TOOL_CALL_RESULT")
    # the tool's own exception text stays in the server's log (docs/security.md: a tool raises
    # runstream.ToolError for a message meant for the caller)
    assert result.content.startswith("Error: Tool ") and result.content.endswith(" failed")
    assert "division by zero" not in result.content


def test_auth_and_unknown_agents(agui_url: str) -> None:
    assert post(agui_url, run_input("t", user("hi")), token=None).status_code == 401
    assert post(agui_url, run_input("t", user("hi")), token="wrong").status_code == 401
    missing = post(agui_url, run_input("t", user("hi")), agent="nope")
    assert missing.status_code == 404 and "nope" in missing.json()["error"]


def test_bad_input_is_a_400(agui_url: str) -> None:
    for body in [
        {"runId": "r", "messages": []},
        run_input("", user("hi")),
        run_input("t", {"id": "x", "role": "wizard", "content": "hi"}),
        run_input("t", user("hi"), tools=[{"name": "t", "description": "d", "parameters": {"type": 5}}]),
        run_input("t", *[user("hi", f"m{i}") for i in range(1001)]),
        run_input("t", user("hi"), forwardedProps={"resourceId": 7}),
        [1, 2],
    ]:
        response = post(agui_url, body)
        assert response.status_code == 400, (body, response.text)


def test_another_resources_thread_is_a_404(agui_url: str) -> None:
    owned = run_input("t-bob", user("hello"), forwardedProps={"resourceId": "bob"})
    events(post(agui_url, owned))
    assert post(agui_url, run_input("t-bob", user("hi")), token=CONFINED_TOKEN).status_code == 404
    # The unconfined caller names the resource; naming another one than bob is the same 404.
    assert (
        post(agui_url, run_input("t-bob", user("hi"), forwardedProps={"resourceId": "eve"})).status_code
        == 404
    )
    # A confined caller cannot borrow another resource.
    borrowed = run_input("t-alice", user("hi"), forwardedProps={"resourceId": "bob"})
    assert post(agui_url, borrowed, token=CONFINED_TOKEN).status_code == 403
    events(post(agui_url, run_input("t-alice", user("hi")), token=CONFINED_TOKEN))


def test_memory_keeps_the_conversation(agui_url: str) -> None:
    first = events(post(agui_url, run_input("t-memory", user("divide 8 2"))))
    answer = "".join(e.delta for e in first if e.type.value == "TEXT_MESSAGE_CONTENT")
    history = [
        user("divide 8 2"),
        {"id": "a1", "role": "assistant", "content": answer},
        user("thanks", "u2"),
    ]
    second = events(post(agui_url, run_input("t-memory", *history)))
    assert "".join(e.delta for e in second if e.type.value == "TEXT_MESSAGE_CONTENT") == "You said: thanks"


def test_prompt_messages_pair_tool_results_with_their_calls() -> None:
    parsed = RunAgentInput.model_validate(
        run_input(
            "t",
            {"id": "s", "role": "system", "content": "Be brief."},
            user("confirm?"),
            {
                "id": "a",
                "role": "assistant",
                "toolCalls": [
                    {"id": "c1", "type": "function", "function": {"name": "confirm", "arguments": "{}"}}
                ],
            },
            {"id": "t1", "role": "tool", "toolCallId": "c1", "content": '{"ok": true}'},
            {"id": "t2", "role": "tool", "toolCallId": "c1", "content": "", "error": "declined"},
        )
    )
    prompt = prompt_messages(parsed)
    assert [m["role"] for m in prompt] == ["system", "user", "assistant", "tool", "tool"]
    assert prompt[2]["content"] == [
        {"type": "tool-call", "toolCallId": "c1", "toolName": "confirm", "input": {}}
    ]
    assert prompt[3]["content"][0]["output"] == {"type": "json", "value": {"ok": True}}
    assert prompt[4]["content"][0]["output"] == {"type": "error-text", "value": "declined"}
    assert [m["role"] for m in prompt_messages(parsed, only_new=True)] == ["tool", "tool"]


def test_a_tools_state_chunk_is_a_state_snapshot() -> None:
    mapper = EventMapper(RunAgentInput.model_validate(run_input("t", user("hi"))))
    (event,) = mapper.map(DataChunk("data-state", {"count": 2}))
    assert isinstance(event, StateSnapshotEvent) and event.snapshot == {"count": 2}


def test_state_updates_become_json_patch_deltas() -> None:
    """After the client's state, a tool's new state is a JSON Patch from it when that is smaller,
    an unchanged state sends nothing, and a tool's own patch goes out as it is once it applies."""
    mapper = EventMapper(
        RunAgentInput.model_validate(run_input("t", user("hi"), state={"items": ["a"] * 20}))
    )
    assert [type(e) for e in mapper.start()] == [RunStartedEvent, StateSnapshotEvent]
    (delta,) = mapper.map(DataChunk("data-state", {"items": ["a"] * 20, "count": 1}))
    assert isinstance(delta, StateDeltaEvent)
    assert [op.model_dump() for op in delta.delta] == [{"op": "add", "path": "/count", "value": 1}]
    assert mapper.map(DataChunk("data-state", {"items": ["a"] * 20, "count": 1})) == []
    other = {"other": True, "text": "x" * 60}
    (whole,) = mapper.map(DataChunk("data-state", other))  # a patch would be longer
    assert isinstance(whole, StateSnapshotEvent) and whole.snapshot == other
    (own,) = mapper.map(DataChunk("data-state-delta", [{"op": "add", "path": "/n", "value": 2}]))
    assert isinstance(own, StateDeltaEvent)
    (after,) = mapper.map(DataChunk("data-state", {**other, "n": 3}))
    assert isinstance(after, StateDeltaEvent)
    assert [op.model_dump() for op in after.delta] == [{"op": "replace", "path": "/n", "value": 3}]


def test_a_state_patch_that_does_not_apply_ends_the_run() -> None:
    mapper = EventMapper(RunAgentInput.model_validate(run_input("t", user("hi"))))
    mapper.start()
    (error,) = mapper.map(DataChunk("data-state-delta", [{"op": "replace", "path": "/missing", "value": 1}]))
    assert isinstance(error, RunErrorEvent) and error.code == "INVALID_STATE_DELTA"
    assert "not a JSON Patch of the client's state" in error.message
    assert mapper.map(DataChunk("data-state", {"a": 1})) == [] and mapper.finish() == []
    other = EventMapper(RunAgentInput.model_validate(run_input("t", user("hi"))))
    (bad,) = other.map(DataChunk("data-state-delta", [{"op": "explode", "path": "/x"}]))
    assert isinstance(bad, RunErrorEvent) and bad.code == "INVALID_STATE_DELTA"
