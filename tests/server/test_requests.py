"""Caller mistakes are 4xx JSON errors raised before anything runs; bodies are size-limited."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import httpx2 as httpx
import pytest

from tests.server.conftest import Live

STREAM = "/api/agents/assistant/stream"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", "Invalid JSON body"),
        (b"[1, 2]", "Invalid request body: expected a JSON object"),
        (b"{}", "Invalid request body: 'messages' is required"),
        (b'{"messages": ""}', "Invalid request body: 'messages' is required"),
        (b'{"messages": 7}', "'messages' must be a string or an array of messages"),
        (b'{"messages": [{"role": "robot"}]}', "messages[0] must be a string or a message with a role"),
        (
            b'{"messages": [{"role": "assistant", "content": [{}], "toolInvocations": []}]}',
            "messages[0]: unsupported content part type None",
        ),
        (b'{"messages": "hi", "memory": "t1"}', "'memory' must be an object"),
        (b'{"messages": "hi", "memory": {"thread": "t1"}}', "A resource ID is required when using memory"),
        (b'{"messages": "hi", "maxSteps": 0}', "'maxSteps' must be an integer from 1 to 1000"),
        (b'{"messages": "hi", "toolChoice": "sometimes"}', "'toolChoice' must be"),
        (b'{"messages": "hi", "untilIdle": "yes"}', "'untilIdle' must be a boolean"),
        (
            b'{"messages": "hi", "maxIdleMs": -1, "untilIdle": true}',
            "'maxIdleMs' must be a number above 0 up to 3600000",
        ),
        (
            b'{"messages": "hi", "untilIdle": {"resumeWindowMs": "x"}}',
            "'resumeWindowMs' must be a number from 0 up to 60000",
        ),
        (b'{"messages": "hi", "clientTools": {"x": {"inputSchema": {"type": 5}}}}', "clientTools.x"),
        (b'{"messages": "hi", "activeTools": [1]}', "'activeTools' must be an array of tool names"),
        (b'{"messages": "hi", "structuredOutput": {"schema": {"type": "nonsense"}}}', "nonsense"),
        # valid JSON the run's options refuse (an InvalidInputError, mapped by its class)
        (
            b'{"messages": "hi", "activeTools": ["no_such_tool"]}',
            "active_tools names no tool: 'no_such_tool'",
        ),
    ],
)
def test_bad_bodies_are_400(client: httpx.Client, body: bytes, message: str) -> None:
    response = client.post(STREAM, content=body, headers={"content-type": "application/json"})
    assert response.status_code == 400, response.text
    assert message in response.json()["error"]


def test_unknown_things_are_404_json(client: httpx.Client) -> None:
    assert client.post("/api/agents/ghost/stream", json={"messages": "hi"}).json() == {
        "error": "Agent with id ghost not found"
    }
    missing = client.get("/api/nothing-here")
    assert missing.status_code == 404 and missing.json() == {"error": "Not Found"}
    assert client.get("/api/tools/nope").status_code == 404
    assert client.get("/api/background-tasks/nope").json() == {"error": "Background task not found"}
    assert client.post("/api/agents/assistant/approve-tool-call", json={"runId": "nope"}).status_code == 404


def test_the_server_saw_one_request_per_bad_body(live: Live, client: httpx.Client) -> None:
    before = len(live.log.requests)
    assert client.post(STREAM, json={"messages": "hi", "maxSteps": "x"}).status_code == 400
    assert len(live.log.requests) == before + 1


@pytest.fixture
def small(app_factory: Callable[..., str]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=app_factory(max_body_bytes=64), timeout=10) as client:
        yield client


def test_body_limit_by_declared_length(small: httpx.Client) -> None:
    response = small.post(STREAM, json={"messages": "x" * 100})
    assert response.status_code == 413
    assert response.json() == {"error": "Request body too large: the limit is 64 bytes"}
    assert small.post(STREAM, json={"messages": "hi"}).status_code == 200


def test_body_limit_while_reading_a_chunked_body(small: httpx.Client) -> None:
    def body() -> Iterator[bytes]:
        yield b'{"messages": "'
        yield b"x" * 100
        yield b'"}'

    response = small.post(STREAM, content=body(), headers={"content-type": "application/json"})
    assert "content-length" not in response.request.headers
    assert response.status_code == 413


def test_runstream_errors_map_to_statuses_by_class() -> None:
    """The server answers runstream's errors by their class, never by a builtin base."""
    from runstream.errors import InvalidInputError, NotFoundError, RunstreamError, StateConflictError
    from runstream.server.errors import status_of
    from runstream.server.resumable import RunAlreadyStreamingError
    from runstream.tasks.config import TaskStateError

    assert status_of(InvalidInputError("x")) == 400
    assert status_of(NotFoundError("x")) == 404
    assert status_of(StateConflictError("x")) == 409
    assert status_of(RunAlreadyStreamingError("x")) == status_of(TaskStateError("x")) == 409
    assert status_of(RunstreamError("x")) == 500  # not the caller's doing


def test_an_agent_set_up_wrongly_is_a_400_naming_the_mistake() -> None:
    """A configuration error found as a run starts (a model function that returns no model) is
    a 400 with its message, never a 500: client-js re-sends a 5xx, which would be another run."""
    from starlette.testclient import TestClient

    from runstream import Agent, Runstream
    from runstream.server import create_app
    from runstream.server.auth import open_access

    agent = Agent("broken", model=lambda rc: "openai/gpt-4.1")
    with TestClient(create_app(Runstream(agents=[agent]), auth=open_access)) as client:
        for route in ("stream", "generate"):
            response = client.post(f"/api/agents/broken/{route}", json={"messages": "hi"})
            assert response.status_code == 400, response.text
            assert response.json() == {
                "error": "agent 'broken': the model function returned str, not a model"
            }
