"""runstream: an agent runtime whose every step streams out as typed chunks (Mastra's wire format)."""

from runstream.abort import AbortController, AbortError, AbortSignal
from runstream.agent import Agent, RunNotFoundError
from runstream.chunks import Chunk, DataChunk, UnknownChunk, chunk_from_wire, dumps
from runstream.models.base import LanguageModel, ModelRequest, ModelSettings, ModelStream
from runstream.output import RunOutput
from runstream.processors import ProcessorContext, StepView, TripWire
from runstream.request_context import RequestContext
from runstream.structured import StructuredOutput, StructuredOutputError
from runstream.tools import BackgroundToolConfig, Tool, ToolContext, ToolWriter, tool

__all__ = [
    "AbortController",
    "AbortError",
    "AbortSignal",
    "Agent",
    "BackgroundToolConfig",
    "Chunk",
    "DataChunk",
    "LanguageModel",
    "ModelRequest",
    "ModelSettings",
    "ModelStream",
    "ProcessorContext",
    "RequestContext",
    "RunNotFoundError",
    "RunOutput",
    "StepView",
    "StructuredOutput",
    "StructuredOutputError",
    "Tool",
    "ToolContext",
    "ToolWriter",
    "TripWire",
    "UnknownChunk",
    "chunk_from_wire",
    "dumps",
    "tool",
]
