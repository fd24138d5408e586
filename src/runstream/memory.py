"""Conversation memory: threads of messages in storage, loaded into prompts and saved after runs.

Messages are stored in Mastra's DB format 2 (``{"format": 2, "parts": [...]}``): one user message
per input, and one assistant message per run whose parts are the run's steps (``step-start``,
``text``, ``reasoning``, ``tool-invocation`` with its result, ``file``, ``source``). Loading turns
them back into model-prompt messages (assistant + tool message per step).

A background task's placeholder result is rewritten in place when the task ends
(:meth:`Memory.apply_task_result`), matched by tool-call id *and* task id, so the next turn sees
the real result.

A run without new input whose thread ends with an assistant message (an until-idle
continuation) does not start a new assistant message: as Mastra's message list, it appends its
response to the stored one (:class:`ContinuedMessage`, :func:`merge_parts`), so its payloads show
that whole message and memory keeps one assistant message per user turn.
"""

from __future__ import annotations

import asyncio
import copy
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from runstream.chunks import iso_datetime
from runstream.config_mapping import Check, non_negative_int, read_config
from runstream.models.base import PromptMessage, tool_result_output
from runstream.storage import Storage, StoredMessage, TaskRecord, Thread, ThreadResourceMismatchError

DEFAULT_LAST_MESSAGES = 40

BACKGROUND_FAILED_PREFIX = "Background task failed: "

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


@dataclass(slots=True)
class ContinuedMessage:
    """The thread's last stored message, an assistant one, that a run without new input continues."""

    id: str
    parts: list[dict[str, Any]]
    metadata: dict[str, Any]
    prompt_count: int
    """How many of the run's history prompt messages this message makes up (the last ones)."""

    def merged_parts(
        self, responses: Sequence[PromptMessage], model: str | None = None
    ) -> list[dict[str, Any]]:
        """This message's parts with the run's responses appended (see :func:`merge_parts`)."""
        return merge_parts(copy.deepcopy(self.parts), responses_to_parts(responses, model))


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
                content={"format": 2, "parts": _input_parts(m), "content": _plain_text(m)},
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
            content={"format": 2, "parts": _input_parts(message), "content": _plain_text(message)},
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

    async def apply_task_result(self, task: TaskRecord) -> bool:
        """Write a finished background task's result over its placeholder. True if found."""
        return await self._update_task_message(task, lambda m: _rewrite_message(m, task))

    async def apply_task_suspension(self, task: TaskRecord, resume_schema: str | None) -> bool:
        """Record a suspended background task in its message's metadata (``suspendedTools``),
        which the UI message shows as a ``data-tool-call-suspended`` part. True if found."""
        record = suspension_record(task, resume_schema)
        return await self._update_task_message(task, lambda m: _record_suspension(m, task, record))

    async def _update_task_message(
        self, task: TaskRecord, mutate: Callable[[StoredMessage], StoredMessage]
    ) -> bool:
        if task.thread_id is None:
            return False
        storage = self._storage()
        async with self._lock(task.thread_id):
            for message in reversed((await storage.list_messages(task.thread_id)).items):
                if message.role != "assistant":
                    continue
                if any(_is_task_part(p, task) for p in message.content.get("parts", [])):
                    await storage.update_message(message.id, mutate)
                    return True
        return False


# -- format conversion ------------------------------------------------------------------------------


def _input_parts(message: PromptMessage) -> list[dict[str, Any]]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [copy.deepcopy(p) for p in content or []]


def _plain_text(message: PromptMessage) -> str:
    return "".join(p.get("text", "") for p in _input_parts(message) if p.get("type") == "text")


def responses_to_parts(responses: Sequence[PromptMessage], model: str | None = None) -> list[dict[str, Any]]:
    """A run's assistant/tool prompt messages as the parts of one stored assistant message.

    Steps after the first open with a ``step-start`` part (labelled with ``model``, as Mastra
    stores them); the first step has none.
    """
    parts: list[dict[str, Any]] = []
    invocations: dict[str, dict[str, Any]] = {}
    steps = 0
    for message in responses:
        if message["role"] == "assistant":
            if steps:
                parts.append(_step_start(model))
            steps += 1
            for part in message["content"]:
                kind = part.get("type")
                if kind == "text":
                    parts.append({"type": "text", "text": part["text"]})
                elif kind == "reasoning":
                    parts.append(
                        {
                            "type": "reasoning",
                            "reasoning": "",
                            "details": [{"type": "text", "text": part["text"]}],
                        }
                    )
                elif kind == "tool-call":
                    invocation: dict[str, Any] = {
                        "type": "tool-invocation",
                        "toolInvocation": {
                            "state": "call",
                            "toolCallId": part["toolCallId"],
                            "toolName": part["toolName"],
                            "args": part.get("input", {}),
                        },
                    }
                    invocations[part["toolCallId"]] = invocation
                    parts.append(invocation)
                else:
                    parts.append(copy.deepcopy(part))
        elif message["role"] == "tool":
            for part in message["content"]:
                found = invocations.get(part.get("toolCallId", ""))
                if found is None:
                    continue
                invocation = found
                output = part.get("output") or {}
                inv = invocation["toolInvocation"]
                if output.get("type") in ("error-text", "error-json"):
                    inv["state"] = "output-error"
                    inv["errorText"] = output.get("value")
                else:
                    inv["state"] = "result"
                    inv["result"] = output.get("value")
                # Mastra stamps a result's time here unless it carries other metadata (a task link).
                invocation["providerMetadata"] = copy.deepcopy(part.get("providerOptions")) or {
                    "mastra": {"createdAt": int(time.time() * 1000)}
                }
    return parts


def _step_start(model: str | None) -> dict[str, Any]:
    if model is None:
        return {"type": "step-start"}
    return {"type": "step-start", "createdAt": int(time.time() * 1000), "model": model}


def merge_parts(parts: list[dict[str, Any]], new_parts: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Append a response's parts to a stored assistant message's parts (in place), as Mastra's
    message merger: a result for a call already there updates that call; text right after a
    tool invocation opens a new step."""
    calls = {p["toolInvocation"]["toolCallId"]: p for p in parts if p.get("type") == "tool-invocation"}
    for part in new_parts:
        if part.get("type") == "tool-invocation":
            known = calls.get(part["toolInvocation"]["toolCallId"])
            if known is not None:
                known.update(copy.deepcopy(part))
                continue
        elif part.get("type") == "text" and parts and parts[-1].get("type") == "tool-invocation":
            parts.append({"type": "step-start"})
        parts.append(copy.deepcopy(part))
    return parts


def merge_metadata(stored: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The stored message's metadata with a later run's added (background tasks of both)."""
    merged = {**copy.deepcopy(dict(new)), **copy.deepcopy(dict(stored))}
    tasks = {**copy.deepcopy(new.get("backgroundTasks") or {}), **(merged.get("backgroundTasks") or {})}
    if tasks:
        merged["backgroundTasks"] = tasks
    return merged


def db_to_prompt(message: StoredMessage) -> list[PromptMessage]:
    """A stored message as prompt messages (an assistant message becomes one pair per step)."""
    parts = message.content.get("parts", [])
    if message.role != "assistant":
        return [{"role": message.role, "content": copy.deepcopy(parts)}]
    return [prompt for step in parts_to_steps(parts) for prompt in step]


def parts_to_steps(parts: Sequence[Mapping[str, Any]]) -> list[list[PromptMessage]]:
    """An assistant message's parts as prompt messages, grouped by step (split at ``step-start``).

    A tool invocation becomes a ``tool-call`` and, once it has one, a ``tool-result`` in the
    step's tool message; both carry the invocation's provider metadata (the task link).
    """
    steps: list[list[PromptMessage]] = []
    content: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []

    def flush() -> None:
        step: list[PromptMessage] = []
        if content:
            step.append({"role": "assistant", "content": list(content)})
        if results:
            step.append({"role": "tool", "content": list(results)})
        steps.append(step)
        content.clear()
        results.clear()

    for part in parts:
        kind = part.get("type")
        if kind == "step-start":
            flush()
        elif kind == "text":
            content.append({"type": "text", "text": part["text"]})
        elif kind == "reasoning":
            text = "".join(d.get("text", "") for d in part.get("details", [])) or part.get("reasoning", "")
            content.append({"type": "reasoning", "text": text})
        elif kind == "file":
            content.append({"type": "file", "data": part.get("data"), "mediaType": part.get("mediaType")})
        elif kind == "tool-invocation":
            inv = part["toolInvocation"]
            call: dict[str, Any] = {
                "type": "tool-call",
                "toolCallId": inv["toolCallId"],
                "toolName": inv["toolName"],
                "input": inv["args"],
            }
            if part.get("providerMetadata"):
                call["providerOptions"] = copy.deepcopy(part["providerMetadata"])
            content.append(call)
            if inv["state"] in ("result", "output-error"):
                output = (
                    tool_result_output(inv.get("errorText"), is_error=True)
                    if inv["state"] == "output-error"
                    else tool_result_output(inv.get("result"))
                )
                result = {
                    "type": "tool-result",
                    "toolCallId": inv["toolCallId"],
                    "toolName": inv["toolName"],
                    "output": output,
                    "input": inv["args"],
                }
                if part.get("providerMetadata"):
                    result["providerOptions"] = copy.deepcopy(part["providerMetadata"])
                results.append(result)
    flush()
    return [step for step in steps if step]


def parts_to_ui(
    parts: Sequence[Mapping[str, Any]], metadata: Mapping[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Stored parts as AI SDK UI message parts (what a ``useChat`` client holds); a call the
    metadata lists as suspended is followed by a ``data-tool-call-suspended`` part."""
    suspended = (metadata or {}).get("suspendedTools") or {}
    ui: list[dict[str, Any]] = []
    for part in parts:
        kind = part.get("type")
        if kind == "tool-invocation":
            ui.append(ui_tool_part(part))
            record = suspended.get(part["toolInvocation"]["toolCallId"])
            if record is not None:
                ui.append({"type": "data-tool-call-suspended", "data": copy.deepcopy(record)})
        elif kind == "reasoning":
            text = "".join(d.get("text", "") for d in part.get("details", [])) or part.get("reasoning", "")
            ui.append({"type": "reasoning", "text": text})
        elif kind == "text":
            ui.append({"type": "text", "text": part["text"]})
        elif kind == "file":
            ui.append({"type": "file", "mediaType": part.get("mediaType"), "url": part.get("data")})
        else:
            ui.append(copy.deepcopy(dict(part)))
    return ui


def ui_tool_part(part: Mapping[str, Any]) -> dict[str, Any]:
    """A stored tool invocation as an AI SDK v5 UI tool part."""
    inv = part["toolInvocation"]
    tool: dict[str, Any] = {
        "type": f"tool-{inv['toolName']}",
        "toolCallId": inv["toolCallId"],
        "input": inv.get("args", {}),
    }
    if inv["state"] == "result":
        tool.update(state="output-available", output=inv.get("result"))
    elif inv["state"] == "output-error":
        tool.update(state="output-error", errorText=inv.get("errorText"))
    else:
        tool["state"] = "input-available"
    if part.get("providerMetadata"):
        tool["callProviderMetadata"] = copy.deepcopy(part["providerMetadata"])
    return tool


def _task_link(metadata: Any) -> Mapping[str, Any] | None:
    if not isinstance(metadata, Mapping):
        return None
    mastra = metadata.get("mastra")
    link = mastra.get("backgroundTask") if isinstance(mastra, Mapping) else None
    return link if isinstance(link, Mapping) else None


def _is_task_part(part: Mapping[str, Any], task: TaskRecord) -> bool:
    if part.get("type") != "tool-invocation":
        return False
    link = _task_link(part.get("providerMetadata"))
    return (
        part["toolInvocation"].get("toolCallId") == task.tool_call_id
        and link is not None
        and link.get("taskId") == task.id
    )


def task_outcome(task: TaskRecord) -> tuple[str, Any]:
    """``("result", value)`` or ``("output-error", text)`` for a finished task."""
    if task.status == "completed":
        return "result", task.result
    if task.status == "cancelled":
        return "output-error", "Background task cancelled by the user: no result."
    message = (task.error or {}).get("message") or "Unknown error"
    return "output-error", BACKGROUND_FAILED_PREFIX + message


def link_status(task: TaskRecord) -> str:
    """The status a task link records: a timeout is a failure (as the task's lifecycle event)."""
    return "failed" if task.status == "timed_out" else task.status


def suspension_record(task: TaskRecord, resume_schema: str | None) -> dict[str, Any]:
    """What a stored message keeps about a suspended call (``metadata.suspendedTools``)."""
    record = {
        "toolCallId": task.tool_call_id,
        "toolName": task.tool_name,
        "args": copy.deepcopy(task.args),
        "type": "suspension",
        "runId": task.run_id,
        "suspendPayload": copy.deepcopy(task.suspend_payload),
    }
    if resume_schema is not None:
        record["resumeSchema"] = resume_schema
    return record


def _record_suspension(message: StoredMessage, task: TaskRecord, record: Mapping[str, Any]) -> StoredMessage:
    for part in message.content.get("parts", []):
        if _is_task_part(part, task):
            part["providerMetadata"]["mastra"].setdefault("createdAt", int(time.time() * 1000))
    metadata = message.content.setdefault("metadata", {})
    metadata.setdefault("suspendedTools", {})[task.tool_call_id] = copy.deepcopy(dict(record))
    timing = metadata.get("backgroundTasks", {}).get(task.tool_call_id)
    if timing is not None:
        timing["suspendedAt"] = iso_datetime(task.suspended_at or datetime.now(UTC))
    return message


def _rewrite_message(message: StoredMessage, task: TaskRecord) -> StoredMessage:
    state, value = task_outcome(task)
    for part in message.content.get("parts", []):
        if not _is_task_part(part, task):
            continue
        inv = part["toolInvocation"]
        inv["state"] = state
        inv.pop("result", None)
        inv.pop("errorText", None)
        inv["result" if state == "result" else "errorText"] = value
        mastra = part["providerMetadata"]["mastra"]
        mastra["backgroundTask"]["status"] = link_status(task)
        mastra["modelOutput"] = None  # as Mastra's rewrite: no model-output override for the result
        tasks = message.content.get("metadata", {}).get("backgroundTasks", {})
        if task.tool_call_id in tasks:
            tasks[task.tool_call_id]["completedAt"] = iso_datetime(task.completed_at or datetime.now(UTC))
    return message


def rewrite_prompt_result(messages: list[PromptMessage], task: TaskRecord) -> bool:
    """The same rewrite on a live run's prompt messages (before they are saved)."""
    state, value = task_outcome(task)
    for message in messages:
        if message["role"] != "tool":
            continue
        for part in message["content"]:
            link = _task_link(part.get("providerOptions"))
            if (
                part.get("toolCallId") == task.tool_call_id
                and link is not None
                and link.get("taskId") == task.id
            ):
                part["output"] = tool_result_output(value, is_error=state != "result")
                mastra = part["providerOptions"]["mastra"]
                mastra["backgroundTask"]["status"] = link_status(task)
                mastra["modelOutput"] = None
                return True
    return False
