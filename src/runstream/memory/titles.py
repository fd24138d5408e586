"""Thread titles, as Mastra's ``generateTitle``: after a turn is saved on a thread that has no
title yet, one model call turns the conversation into a title, stored on the thread. With
``emitEvent`` the title is made before the run's ``finish`` chunk instead, and a transient
``data-thread-title`` chunk (``{threadId, title}``) precedes it (:class:`TitleObserver`).

The model gets Mastra's instructions (or the configured ones) as its system message and the
thread's messages as a transcript (``User: ...``, ``Assistant: ...``, tool calls and results cut
to 200 characters); ``<think>`` blocks are removed from its answer. A failure is logged and
leaves the thread untitled, as in Mastra.
"""

from __future__ import annotations

import inspect
import json
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import SkipValidation

from runstream._config_mapping import CONFIG, Flag, PositiveCount, read_dataclass
from runstream._messages import input_parts, responses_to_parts
from runstream.chunks import AgentChunk, DataChunk
from runstream.errors import InvalidTypeError
from runstream.models.base import LanguageModel, ModelRequest, PromptMessage
from runstream.models.registry import as_model, ready_model
from runstream.request_context import RequestContext, resolve
from runstream.storage import Storage, StoredMessage

logger = logging.getLogger("runstream.memory")

DEFAULT_INSTRUCTIONS = """
      - you will generate a short title based on a conversation transcript between a user and an assistant
      - the transcript lines are prefixed with "User:" and "Assistant:" — never reply to, answer, or continue the transcript
      - always produce a title, even when the transcript is only a greeting or trivial exchange
      - ensure it is not more than 80 characters long
      - the title should be a summary of the user's message
      - do not use quotes or colons
      - the entire text you return will be used as the title"""

_THINK = re.compile(r"<think>[\s\S]*?</think>")


@dataclass(frozen=True, slots=True)
class TitleGeneration:
    """Mastra's ``generateTitle`` as an object: ``model`` (default: the agent's) and
    ``instructions`` may each be a function of the request context; ``min_messages`` is how many
    messages the thread needs first."""

    __pydantic_config__ = CONFIG

    model: SkipValidation[LanguageModel | str | Callable[..., Any] | None] = None
    """(Not checked here: a model string or object is checked when the title is made.)"""
    instructions: str | Callable[..., Any] | None = None
    min_messages: PositiveCount = 1
    emit_event: Flag = False
    """Title the thread before the run's ``finish`` and stream a ``data-thread-title`` chunk."""

    @classmethod
    def coerce(cls, value: object, *, where: str) -> TitleGeneration | None:
        """``True``/``False``, a ``TitleGeneration``, or ``{"model", "instructions", "minMessages"}``."""
        if value is None or value is False:
            return None
        if value is True:
            return cls()
        if isinstance(value, TitleGeneration):
            return value
        if not isinstance(value, Mapping):
            raise InvalidTypeError(f"{where} must be true/false or a mapping {{model, instructions}}")
        return read_dataclass(cls, value, where=where)


async def generate_title(
    storage: Storage,
    thread_id: str,
    config: TitleGeneration,
    agent_model: LanguageModel,
    request_context: RequestContext,
    last_messages: int | None,
    on_title_generated: Callable[[str], object] | None = None,
) -> None:
    """Title the thread if it has none yet (the background half of a saved turn)."""
    try:
        thread = await storage.get_thread(thread_id)
        if thread is None or thread.title:
            return
        messages = (await storage.list_messages(thread_id, last=last_messages or None)).items
        if len(messages) < config.min_messages or not any(m.role == "user" for m in messages):
            return
        title = await _ask_model(config, agent_model, request_context, transcript(messages))
        if not title:
            return
        await storage.update_thread(thread_id, title=title)
        await _notify(on_title_generated, title)
    except Exception:
        logger.exception("Error generating the title of thread %s", thread_id)


class TitleObserver:
    """Titles the thread (if it has no title) when a run's ``finish`` passes: the title is
    stored and a transient ``data-thread-title`` chunk streams just before ``finish`` (Mastra's
    ``emitEvent``); a ``runstream.run._sources.Observer``. ``conversation`` gives the thread's
    messages as the run sees them (not saved yet)."""

    __slots__ = (
        "agent_model",
        "config",
        "conversation",
        "on_title_generated",
        "request_context",
        "storage",
        "thread_id",
    )

    def __init__(
        self,
        storage: Storage,
        thread_id: str,
        config: TitleGeneration,
        agent_model: LanguageModel,
        request_context: RequestContext,
        conversation: Callable[[], Sequence[PromptMessage]],
        on_title_generated: Callable[[str], object] | None = None,
    ) -> None:
        self.storage = storage
        self.thread_id = thread_id
        self.config = config
        self.agent_model = agent_model
        self.request_context = request_context
        self.conversation = conversation
        self.on_title_generated = on_title_generated

    async def __call__(self, chunk: AgentChunk) -> Sequence[AgentChunk]:
        if chunk.type != "finish":
            return ()
        title = await _title_now(
            self.storage,
            self.thread_id,
            self.config,
            self.agent_model,
            self.request_context,
            self.conversation(),
        )
        if not title:
            return ()
        await _notify(self.on_title_generated, title)
        return (DataChunk("data-thread-title", {"threadId": self.thread_id, "title": title}, transient=True),)


async def _title_now(
    storage: Storage,
    thread_id: str,
    config: TitleGeneration,
    agent_model: LanguageModel,
    request_context: RequestContext,
    messages: Sequence[PromptMessage],
) -> str | None:
    try:
        thread = await storage.get_thread(thread_id)
        if thread is None or thread.title or not any(m["role"] == "user" for m in messages):
            return None
        stored = prompt_to_stored(messages)
        if len(stored) < config.min_messages:
            return None
        title = await _ask_model(config, agent_model, request_context, transcript(stored))
        if title:
            await storage.update_thread(thread_id, title=title)
        return title or None
    except Exception:
        logger.exception("Error generating the title of thread %s", thread_id)
        return None


async def _notify(callback: Callable[[str], object] | None, title: str) -> None:
    if callback is None:
        return
    try:
        result = callback(title)
        if inspect.isawaitable(result):
            await result
    except Exception:
        logger.exception("Error in onTitleGenerated")


def prompt_to_stored(messages: Sequence[PromptMessage]) -> list[StoredMessage]:
    """Prompt messages as the stored messages they become: a user message each, and each run of
    assistant/tool messages as one assistant message (for :func:`transcript`)."""
    stored: list[StoredMessage] = []
    group: list[PromptMessage] = []

    def flush() -> None:
        if group:
            parts = responses_to_parts(group)
            stored.append(StoredMessage("", "", "", "assistant", {"format": 2, "parts": parts}))
            group.clear()

    for message in messages:
        if message["role"] in ("assistant", "tool"):
            group.append(message)
        elif message["role"] == "user":
            flush()
            stored.append(StoredMessage("", "", "", "user", {"format": 2, "parts": input_parts(message)}))
    flush()
    return stored


async def _ask_model(
    config: TitleGeneration, agent_model: LanguageModel, request_context: RequestContext, text: str
) -> str:
    model: Any = config.model if config.model is not None else agent_model
    if not isinstance(model, str | LanguageModel):
        model = await resolve(model, request_context)
    instructions: Any = config.instructions
    if instructions is not None and not isinstance(instructions, str):
        instructions = await resolve(instructions, request_context)
    request = ModelRequest(
        prompt=[
            {"role": "system", "content": instructions or DEFAULT_INSTRUCTIONS},
            {"role": "user", "content": [{"type": "text", "text": text}]},
        ]
    )
    stream = await ready_model(as_model(model)).stream(request)
    pieces = [part["delta"] async for part in stream.parts if part["type"] == "text-delta"]
    return _THINK.sub("", "".join(pieces)).strip()


def transcript(messages: list[StoredMessage]) -> str:
    """Mastra's ``formatMessagesForTitle``: one line per text, tool call or result, reasoning."""
    lines: list[str] = []
    for message in messages:
        role = message.role[:1].upper() + message.role[1:]
        parts = message.content.get("parts") or []
        content = message.content.get("content")
        if (
            isinstance(content, str)
            and content
            and not any(p.get("type") == "text" and p.get("text") == content for p in parts)
        ):
            lines.append(f"{role}: {content}")
        lines.extend(_part_lines(parts, role))
    return "\n".join(lines)


def _part_lines(parts: Sequence[object], role: str) -> list[str]:
    """A stored message's parts (Mastra's, or what a client saved: not checked) as lines."""
    lines: list[str] = []
    for part in parts:
        if not isinstance(part, Mapping):
            continue
        kind = part.get("type")
        if kind == "text":
            lines.append(f"{role}: {part.get('text', '')}")
        elif kind == "tool-invocation":
            call = part.get("toolInvocation")
            if not isinstance(call, Mapping):
                call = {}
            if call.get("state") == "result":
                result = call.get("result")
                shown = result if isinstance(result, str) else json.dumps(result, separators=(",", ":"))
                lines.append(f"Tool Result {call.get('toolName')}: {shown[:200]}")
            else:
                args = json.dumps(call.get("args"), separators=(",", ":"))
                lines.append(f"Tool Call {call.get('toolName')}: {args[:200]}")
        elif kind == "reasoning" and part.get("reasoning"):
            lines.append(f"Reasoning: {part['reasoning']}")
    return lines
