"""Conversation memory: threads of messages in storage, loaded into prompts and saved after runs.

Messages are stored in Mastra's DB format 2 (``{"format": 2, "parts": [...]}``): one user message
per input, and one assistant message per run whose parts are the run's steps (``step-start``,
``text``, ``reasoning``, ``tool-invocation`` with its result, ``file``, ``source``). Loading turns
them back into model-prompt messages (assistant + tool message per step).

A background task's outcome is written in place when the task settles
(:meth:`Memory.apply_task_outcome`): the result over its placeholder, or a suspension in the
message's metadata. The message is found through the storage's tool-call index
(:meth:`~runstream.storage.Storage.find_tool_call_message`), not by reading the thread, and
matched by tool-call id *and* task id, so the next turn sees the real result.

The formats themselves (prompt, stored, UI) are pure functions in :mod:`runstream._messages`.

A run without new input whose thread ends with an assistant message (an until-idle
continuation) does not start a new assistant message: as Mastra's message list, it appends its
response to the stored one (:class:`ContinuedMessage`, :func:`merge_parts`), so its payloads show
that whole message and memory keeps one assistant message per user turn.
"""

from __future__ import annotations

import asyncio
import copy
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from runstream._config_mapping import Check, non_negative_int, read_config
from runstream._messages import (
    ContinuedMessage,
    db_to_prompt,
    input_parts,
    is_task_part,
    merge_metadata,
    merge_parts,
    plain_text,
    record_suspension,
    responses_to_parts,
    rewrite_task_result,
    suspension_record,
)
from runstream.models.base import PromptMessage
from runstream.storage import Storage, StoredMessage, TaskRecord, Thread, ThreadResourceMismatchError

DEFAULT_LAST_MESSAGES = 40


_MILLISECOND = timedelta(milliseconds=1)


@dataclass(slots=True, frozen=True)
class MemoryScope:
    """The thread and resource of one run (``memory={"thread": ..., "resource": ...}``)."""

    thread_id: str
    resource_id: str

    @classmethod
    def coerce(cls, value: MemoryScope | Mapping[str, Any] | None) -> MemoryScope | None:
        if value is None or isinstance(value, MemoryScope):
            return value
        options = read_config(value, _SCOPE_FIELDS, where="memory", unsupported=_UNSUPPORTED_SCOPE)
        thread = options.get("thread", options.get("thread_id"))
        if isinstance(thread, Mapping):
            thread = read_config(thread, {"id": None}, where="memory.thread", unsupported=_THREAD_EXTRAS).get(
                "id"
            )
        resource = options.get("resource", options.get("resource_id"))
        if not isinstance(thread, str) or not thread:
            raise ValueError("memory needs a thread id: memory={'thread': ..., 'resource': ...}")
        if not isinstance(resource, str) or not resource:
            raise ValueError("memory needs a resource id: memory={'thread': ..., 'resource': ...}")
        return cls(thread, resource)


_SCOPE_FIELDS: dict[str, Check | None] = {
    "thread": None,
    "resource": None,
    "thread_id": None,
    "resource_id": None,
}
_UNSUPPORTED_SCOPE = {
    "options": "per-call memory options are not implemented",
    "onTitleGenerated": "thread titles are not generated",
}
_THREAD_EXTRAS = {
    "title": "a thread's title cannot be passed with a run yet",
    "metadata": "a thread's metadata cannot be passed with a run yet",
}
_UNSUPPORTED_MEMORY = {
    name: "only lastMessages is implemented"
    for name in (
        "readOnly",
        "messageHistory",
        "semanticRecall",
        "workingMemory",
        "observationalMemory",
        "generateTitle",
        "filterIncompleteToolCalls",
        "retainFullInput",
        "threads",
    )
}


def _last_messages(where: str, value: Any) -> int:
    """Mastra's ``lastMessages``: a count, or ``false`` for no history."""
    return 0 if value is False else non_negative_int(where, value)


@dataclass
class Memory:
    """An agent's memory: which storage, and how much history goes into the prompt."""

    storage: Storage | None = None
    last_messages: int | None = DEFAULT_LAST_MESSAGES
    _locks: dict[str, asyncio.Lock] = field(default_factory=dict, repr=False)

    @classmethod
    def coerce(cls, value: Memory | Mapping[str, Any] | bool | None) -> Memory | None:
        """Accept a Memory, ``True``, or Mastra's options (``{"lastMessages": 50}``)."""
        if value is None or value is False:
            return None
        if value is True:
            return cls()
        if isinstance(value, Memory):
            return value
        options = read_config(
            value, {"last_messages": _last_messages}, where="memory", unsupported=_UNSUPPORTED_MEMORY
        )
        return cls(last_messages=options.get("last_messages", DEFAULT_LAST_MESSAGES))

    def _storage(self) -> Storage:
        if self.storage is None:
            raise RuntimeError(
                "this memory has no storage: pass Memory(storage=...) or use Runstream(storage=...)"
            )
        return self.storage

    def _lock(self, thread_id: str) -> asyncio.Lock:
        lock = self._locks.get(thread_id)
        if lock is None:
            lock = self._locks[thread_id] = asyncio.Lock()
        return lock

    # -- threads ---------------------------------------------------------------------------------
    async def ensure_thread(self, scope: MemoryScope) -> Thread:
        """Get the thread, creating it on first use; a thread belongs to exactly one resource."""
        storage = self._storage()
        thread = await storage.get_thread(scope.thread_id)
        if thread is None:
            thread = Thread(id=scope.thread_id, resource_id=scope.resource_id)
            await storage.save_thread(thread)
        elif thread.resource_id != scope.resource_id:
            raise ThreadResourceMismatchError(scope.thread_id, thread.resource_id, scope.resource_id)
        return thread

    # -- prompt history ----------------------------------------------------------------------------
    async def load_prompt(self, scope: MemoryScope) -> list[PromptMessage]:
        """The last N stored messages of the thread as model-prompt messages."""
        stored = (await self._storage().list_messages(scope.thread_id, last=self.last_messages)).items
        prompt: list[PromptMessage] = []
        for message in stored:
            prompt.extend(db_to_prompt(message))
        return prompt

    async def continuable_message(self, scope: MemoryScope) -> ContinuedMessage | None:
        """The thread's last message if it is an assistant one (a run without input continues it)."""
        stored = (await self._storage().list_messages(scope.thread_id, last=1)).items
        if not stored or stored[-1].role != "assistant":
            return None
        last = stored[-1]
        return ContinuedMessage(
            id=last.id,
            parts=copy.deepcopy(last.content.get("parts", [])),
            metadata=copy.deepcopy(last.content.get("metadata") or {}),
            prompt_count=len(db_to_prompt(last)),
        )

    async def save_turn(
        self,
        scope: MemoryScope,
        inputs: Sequence[PromptMessage],
        responses: Sequence[PromptMessage],
        response_id: str,
        *,
        metadata: Mapping[str, Any] | None = None,
        model: str | None = None,
        continued: ContinuedMessage | None = None,
    ) -> None:
        """Save a run's new input messages and its response (one assistant message).

        ``model`` (``provider/model-id``) labels the response's step boundaries; ``continued``
        is the stored message a run without input appends its response to (Mastra 1.71 appends
        even a response that opens with tool calls).
        """
        if continued is not None and not inputs:
            await self._append_to(scope, continued.id, responses, metadata or {}, model)
            return
        messages = [
            StoredMessage(
                id=str(uuid.uuid4()),
                thread_id=scope.thread_id,
                resource_id=scope.resource_id,
                role=m["role"],
                content={"format": 2, "parts": input_parts(m), "content": plain_text(m)},
            )
            for m in inputs
            if m["role"] in ("user", "assistant")
        ]
        parts = responses_to_parts(responses, model)
        if parts:
            content: dict[str, Any] = {"format": 2, "parts": parts}
            if metadata:
                content["metadata"] = copy.deepcopy(dict(metadata))
            messages.append(
                StoredMessage(
                    id=response_id,
                    thread_id=scope.thread_id,
                    resource_id=scope.resource_id,
                    role="assistant",
                    content=content,
                )
            )
        if not messages:
            return
        async with self._lock(scope.thread_id):
            stamps = await self._next_stamps(scope.thread_id, len(messages))
            for message, stamp in zip(messages, stamps, strict=True):
                message.created_at = stamp
            await self._storage().save_messages(messages)

    async def save_message(self, scope: MemoryScope, message_id: str, message: PromptMessage) -> None:
        """Save one input message now, under ``message_id``: a message accepted before its run
        starts (Mastra's thread signals store it on acceptance; the run then has no input)."""
        await self.ensure_thread(scope)
        stored = StoredMessage(
            id=message_id,
            thread_id=scope.thread_id,
            resource_id=scope.resource_id,
            role=message["role"],
            content={"format": 2, "parts": input_parts(message), "content": plain_text(message)},
        )
        async with self._lock(scope.thread_id):
            stored.created_at = (await self._next_stamps(scope.thread_id, 1))[0]
            await self._storage().save_messages([stored])

    async def _next_stamps(self, thread_id: str, count: int) -> list[datetime]:
        """``count`` creation times a millisecond apart, after the thread's last message.

        Clients order a conversation by ``createdAt`` at JavaScript's millisecond precision, so
        a turn's user and assistant messages (saved together) must not share one.
        """
        now = datetime.now(UTC)
        start = now.replace(microsecond=now.microsecond // 1000 * 1000)
        last = (await self._storage().list_messages(thread_id, last=1)).items
        if last:
            previous = last[0].created_at
            previous = previous.replace(microsecond=previous.microsecond // 1000 * 1000)
            start = max(start, previous + _MILLISECOND)
        return [start + i * _MILLISECOND for i in range(count)]

    async def _append_to(
        self,
        scope: MemoryScope,
        message_id: str,
        responses: Sequence[PromptMessage],
        metadata: Mapping[str, Any],
        model: str | None,
    ) -> None:
        """Append a run's response to a stored message (re-read under the lock: a task may have
        rewritten it meanwhile)."""
        new_parts = responses_to_parts(responses, model)

        def append(message: StoredMessage) -> StoredMessage:
            content = message.content
            content["parts"] = merge_parts(content.get("parts", []), new_parts)
            content["metadata"] = merge_metadata(content.get("metadata") or {}, metadata)
            return message

        async with self._lock(scope.thread_id):
            await self._storage().update_message(message_id, append)

    async def apply_task_outcome(self, task: TaskRecord, resume_schema: str | None = None) -> bool:
        """Write a settled background task into its message: a suspension (``resume_schema``:
        the tool's, as a JSON string) into the message's metadata (``suspendedTools``, which the
        UI message shows as a ``data-tool-call-suspended`` part), any other outcome over the
        call's placeholder result. Every task manager writes outcomes with this. True if the
        message was found."""
        if task.status == "suspended":
            record = suspension_record(task, resume_schema)
            return await self._update_task_message(task, lambda m: record_suspension(m, task, record))
        return await self._update_task_message(task, lambda m: rewrite_task_result(m, task))

    async def _update_task_message(
        self, task: TaskRecord, mutate: Callable[[StoredMessage], StoredMessage]
    ) -> bool:
        """Apply ``mutate`` to the message holding the task's call, found by the storage's
        tool-call index; only when that message holds the call of another task (a model that
        reuses call ids) are the thread's messages read, newest first."""
        if task.thread_id is None:
            return False
        storage = self._storage()
        async with self._lock(task.thread_id):
            found = await storage.find_tool_call_message(task.thread_id, task.tool_call_id)
            if found is None:
                return False
            if not _holds_task(found, task):
                older = reversed((await storage.list_messages(task.thread_id)).items)
                found = next((m for m in older if _holds_task(m, task)), None)
                if found is None:
                    return False
            await storage.update_message(found.id, mutate)
            return True


def _holds_task(message: StoredMessage, task: TaskRecord) -> bool:
    return message.role == "assistant" and any(
        is_task_part(p, task) for p in message.content.get("parts", [])
    )
