"""The ecosystem runtime served over HTTP (bearer token) for the AG-UI tests."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from examples.ecosystem import build
from runstream.server import create_app
from runstream.server.auth import Principal, bearer_auth
from tests.server.conftest import serve

TOKEN = "agui-test-token"
CONFINED_TOKEN = "agui-confined-token"


@contextmanager
def agui_server() -> Iterator[str]:
    """A fresh server; ``TOKEN`` is unconfined, ``CONFINED_TOKEN`` confined to resource ``alice``."""
    open_hook = bearer_auth(TOKEN)
    confined_hook = bearer_auth(CONFINED_TOKEN, Principal("alice", resource_id="alice"))

    async def either(request):  # type: ignore[no-untyped-def]
        return await open_hook(request) or await confined_hook(request)

    with serve(create_app(build(), auth=either, heartbeat_s=None)) as url:
        yield url


@pytest.fixture
def agui_url() -> Iterator[str]:
    with agui_server() as url:
        yield url
