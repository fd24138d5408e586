"""Chunk payloads from provider parts that carry provider metadata: the metadata goes along
(text and reasoning bounds, tool input, sources, files), each payload typed as its chunk's."""

from __future__ import annotations

import base64
from typing import TypeVar

from runstream.chunks import (
    FilePayload,
    ReasoningPayload,
    SourcePayload,
    TextPayload,
    ToolCallDeltaPayload,
    ToolInputEndPayload,
)
from runstream.models import parts

WithMetadata = TypeVar(
    "WithMetadata",
    TextPayload,
    ReasoningPayload,
    ToolCallDeltaPayload,
    ToolInputEndPayload,
    SourcePayload,
    FilePayload,
)


def with_metadata(payload: WithMetadata, part: parts.MetadataPart) -> WithMetadata:
    """``payload`` with the part's provider metadata, if it has some."""
    pm = part.get("providerMetadata")
    if pm:
        payload["providerMetadata"] = pm
    return payload


def source_payload(part: parts.SourcePart) -> SourcePayload:
    """A ``source`` chunk's payload (the part's ``mediaType`` is Mastra's ``mimeType``)."""
    payload: SourcePayload = {"id": part.get("id", ""), "sourceType": part.get("sourceType", "url")}
    if (title := part.get("title")) is not None:
        payload["title"] = title
    if (media_type := part.get("mediaType")) is not None:
        payload["mimeType"] = media_type
    if (filename := part.get("filename")) is not None:
        payload["filename"] = filename
    if (url := part.get("url")) is not None:
        payload["url"] = url
    return with_metadata(payload, part)


def file_payload(part: parts.FileStreamPart) -> FilePayload:
    """A ``file`` chunk's payload: the data as base64 (twice, as Mastra sends it)."""
    data = part.get("data", "")
    b64 = base64.b64encode(data).decode("ascii") if isinstance(data, bytes | bytearray) else str(data)
    payload: FilePayload = {"data": b64, "base64": b64, "mimeType": part.get("mediaType", "")}
    return with_metadata(payload, part)
