"""A newcomer's first real call with a wrong key (issue 26): the awaited text raises with the
vendor's error as its cause, and the ``runstream`` logger says what happened."""

from __future__ import annotations

import logging

import pytest

from runstream import Agent, RunFailedError
from runstream.models.base import ModelCallError
from runstream.models.openai import OpenAIChatModel

from .loopback import LoopbackServer, json_reply

UNAUTHORIZED = {
    "error": {
        "message": "Incorrect API key provided",
        "type": "invalid_request_error",
        "code": "invalid_api_key",
    }
}


async def test_a_wrong_key_raises_at_await_and_logs(
    loopback: LoopbackServer, caplog: pytest.LogCaptureFixture
) -> None:
    loopback.queue(json_reply(401, UNAUTHORIZED))
    model = OpenAIChatModel("gpt-4.1-mini", api_key="sk-wrong", base_url=loopback.url("/v1"))
    agent = Agent("first", instructions="Be brief.", model=model)
    with caplog.at_level(logging.INFO, logger="runstream"):
        out = await agent.stream("Hello?")
        with pytest.raises(RunFailedError) as caught:
            await out.text
    cause = caught.value.cause
    assert isinstance(cause, ModelCallError) and cause.status_code == 401
    assert "Incorrect API key provided" in str(caught.value)
    [record] = [r for r in caplog.records if r.name == "runstream.run"]
    assert record.levelno == logging.ERROR and "Incorrect API key provided" in record.getMessage()
