"""runstream: an agent runtime whose every step streams out as typed chunks (Mastra's wire format).

The names here are the public surface: everything the quick start and a typical application
needs. Deeper modules hold more specialised parts (``runstream.storage``, ``runstream.tasks``,
``runstream.workflows``, ``runstream.server``, ``runstream.testing``). Modules whose name starts
with an underscore (``runstream._loop``, ``runstream._run_state``, ...) are internal, as in httpx:
they may change in any release.
"""

from runstream.abort import AbortController, AbortError, AbortSignal
from runstream.agent import Agent, RunNotFoundError, client_tool
from runstream.chunks import AgentChunk, Chunk, DataChunk, StreamChunk, UnknownChunk, chunk_from_wire, dumps
from runstream.errors import (
    ConfigurationError,
    ConfigurationTypeError,
    InvalidInputError,
    InvalidTypeError,
    NotFoundError,
    RunstreamError,
    StateConflictError,
)
from runstream.memory import Memory, MemoryScope
from runstream.models.base import LanguageModel, ModelRequest, ModelSettings, ModelStream
from runstream.output import RunOutput
from runstream.processors import ProcessorContext, StepView, TripWire
from runstream.request_context import RequestContext
from runstream.run_options import RunOptions, StreamOptions
from runstream.runtime import Runstream
from runstream.storage import InMemoryStorage, SqliteStorage, Storage
from runstream.structured import StructuredOutput, StructuredOutputError
from runstream.tools import BackgroundToolConfig, Tool, ToolContext, ToolWriter, tool

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
    "ToolWriter",
    "TripWire",
    "UnknownChunk",
    "chunk_from_wire",
    "client_tool",
    "dumps",
    "tool",
]
