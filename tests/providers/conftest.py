from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from .loopback import LoopbackServer

pytest.importorskip("openai")
pytest.importorskip("anthropic")


@pytest.fixture
async def loopback() -> AsyncIterator[LoopbackServer]:
    server = LoopbackServer()
    await server.start()
    try:
        yield server
    finally:
        await server.stop()
