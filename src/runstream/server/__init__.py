"""runstream's HTTP server: Mastra's REST + SSE surface, the AI SDK UI message stream, a playground.

    from runstream.server import create_app
    app = create_app(Runstream(agents=[...]))   # any ASGI server: uvicorn module:app

or from the command line: ``runstream serve module:attr``.
"""

from runstream.server.app import create_app
from runstream.server.auth import AuthHook, Principal, bearer_auth, default_auth, open_access
from runstream.server.resumable import InMemoryReplayLog, ReplayLog, RunInfo

__all__ = [
    "AuthHook",
    "InMemoryReplayLog",
    "Principal",
    "ReplayLog",
    "RunInfo",
    "bearer_auth",
    "create_app",
    "default_auth",
    "open_access",
]
