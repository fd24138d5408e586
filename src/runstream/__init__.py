"""runstream: an agent runtime whose every step streams out as typed chunks (Mastra's wire format).

The names here are the public surface: everything the quick start and a typical application
needs. Deeper modules hold more specialised parts (``runstream.storage``, ``runstream.tasks``,
``runstream.workflows``, ``runstream.server``, ``runstream.testing``). Modules whose name starts
with an underscore (``runstream.run._loop``, ``runstream.run._run_state``, ...) are internal, as in httpx:
they may change in any release.
"""

import logging
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version

from runstream.abort import AbortController, AbortError, AbortSignal
from runstream.agent import Agent, RunNotFoundError, client_tool
from runstream.agent.run_options import RunOptions, StreamOptions
from runstream.chunks import AgentChunk, Chunk, DataChunk, StreamChunk, UnknownChunk, chunk_from_wire, dumps
from runstream.console import ConsoleRenderer
from runstream.errors import (
    ConfigurationError,
    ConfigurationTypeError,
    InvalidInputError,
    InvalidTypeError,
    NotFoundError,
    RunFailedError,
    RunstreamError,
    StateConflictError,
    ToolError,
)
from runstream.memory import Memory, MemoryScope
from runstream.models.base import LanguageModel, ModelRequest, ModelSettings, ModelStream
from runstream.processors import ProcessorContext, StepView, TripWire
from runstream.request_context import RequestContext
from runstream.run.output import RunOutput
from runstream.runtime import Runstream
from runstream.storage import InMemoryStorage, SqliteStorage, Storage
from runstream.structured import StructuredOutput, StructuredOutputError
from runstream.tools import BackgroundToolConfig, Tool, ToolContext, ToolWriter, tool

try:
    __version__ = _version("runstream")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"

# A library logs, the application decides where to (``logging.basicConfig()`` shows it all):
# model errors and task failures at ERROR, tool exceptions and task retries at WARNING.
logging.getLogger("runstream").addHandler(logging.NullHandler())

__all__ = [
    "AbortController",
    "AbortError",
    "AbortSignal",
    "Agent",
    "AgentChunk",
    "BackgroundToolConfig",
    "Chunk",
    "ConfigurationError",
    "ConfigurationTypeError",
    "ConsoleRenderer",
    "DataChunk",
    "InMemoryStorage",
    "InvalidInputError",
    "InvalidTypeError",
    "LanguageModel",
    "Memory",
    "MemoryScope",
    "ModelRequest",
    "ModelSettings",
    "ModelStream",
    "NotFoundError",
    "ProcessorContext",
    "RequestContext",
    "RunFailedError",
    "RunNotFoundError",
    "RunOptions",
    "RunOutput",
    "Runstream",
    "RunstreamError",
    "SqliteStorage",
    "StateConflictError",
    "StepView",
    "Storage",
    "StreamChunk",
    "StreamOptions",
    "StructuredOutput",
    "StructuredOutputError",
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolWriter",
    "TripWire",
    "UnknownChunk",
    "__version__",
    "chunk_from_wire",
    "client_tool",
    "dumps",
    "tool",
]
