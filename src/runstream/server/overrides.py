"""Client tool results sent back in a request.

Client tools go to ``Agent.stream(client_tools=...)``, which ends the run with reason
``tool-calls`` once the model calls one; client-js runs the tool and posts its result in a new
request. :func:`absorb_tool_results` writes those results into the stored assistant message, as
Mastra's memory does, so the history the model sees is complete. (Per-request ``activeTools``,
``instructions`` and ``requireToolApproval`` are run options like any other: see ``body.py``.)
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from functools import partial
from typing import Any

from runstream.agent import Agent
from runstream.memory import MemoryScope
from runstream.models.base import PromptMessage
from runstream.models.prompt import ToolResultPart
from runstream.storage import MessageContent, Storage, StoredMessage

Originals = list[tuple[str, MessageContent]]
"""The stored messages :func:`absorb_tool_results` changed: (id, content before)."""


def _results(messages: list[PromptMessage]) -> dict[str, ToolResultPart]:
    return {
        str(part.get("toolCallId")): part
        for message in messages
        if message["role"] == "tool"
        for part in message["content"]
        if part["type"] == "tool-result"
    }


def _apply(message: StoredMessage, results: dict[str, ToolResultPart]) -> StoredMessage:
    for part in message.content.get("parts", []):
        inv = part.get("toolInvocation") if part.get("type") == "tool-invocation" else None
        result = results.get(str(inv.get("toolCallId"))) if inv else None
        if inv is None or result is None or inv.get("state") != "call":
            continue
        output: Mapping[str, Any] = result.get("output") or {}
        if output.get("type") in ("error-text", "error-json"):
            inv.update(state="output-error", errorText=output.get("value"))
        else:
            inv.update(state="result", result=output.get("value"))
    return message


async def absorb_tool_results(
    agent: Agent, scope: MemoryScope, messages: list[PromptMessage], originals: Originals | None = None
) -> list[PromptMessage]:
    """Write tool results for calls stored in the thread into memory; return the other messages.

    ``originals`` collects what was changed, for :func:`restore_messages` when the run then
    cannot start (a refused request leaves the thread as it was)."""
    results = _results(messages)
    storage = agent.memory.storage if agent.memory is not None else None
    if not results or storage is None:
        return messages
    absorbed: set[str] = set()
    for stored in reversed(await storage.latest_messages(scope.thread_id, 20)):
        if stored.role != "assistant":
            continue
        waiting = {
            str(part["toolInvocation"].get("toolCallId"))
            for part in stored.content.get("parts", [])
            if part.get("type") == "tool-invocation" and part["toolInvocation"].get("state") == "call"
        } & (results.keys() - absorbed)
        if waiting:
            wanted = {call_id: results[call_id] for call_id in waiting}
            if originals is not None:
                originals.append((stored.id, copy.deepcopy(stored.content)))
            await storage.update_message(stored.id, partial(_apply, results=wanted))
            absorbed |= waiting
    out: list[PromptMessage] = []
    for message in messages:
        if message["role"] == "tool":
            content = [p for p in message["content"] if str(p.get("toolCallId")) not in absorbed]
            if not content:
                continue
            message = {**message, "content": content}
        out.append(message)
    return out


async def restore_messages(storage: Storage, originals: Originals) -> None:
    """Put back the contents :func:`absorb_tool_results` replaced."""
    for message_id, content in reversed(originals):
        await storage.update_message(message_id, partial(_with_content, content=content))


def _with_content(message: StoredMessage, content: MessageContent) -> StoredMessage:
    return dataclasses.replace(message, content=content)
