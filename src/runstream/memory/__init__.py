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

Beyond the last messages, as Mastra's ``Memory`` options: working memory
(:mod:`runstream.memory.working`: the system message and the ``updateWorkingMemory`` tool, whose
calls are not stored), thread titles (:mod:`runstream.memory.titles`), ``read_only`` (history is
read, nothing is written), and per-call options (``stream(memory={"options": {...}})``, applied
by :meth:`Memory.with_options`; :func:`run_memory` builds a run's memory, also from a function
of the request context).

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
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal, cast

from pydantic import SkipValidation, with_config
from typing_extensions import TypedDict

from runstream._config_mapping import (
    CONFIG,
    boolean,
    checked,
    non_negative_int,
    read_dataclass,
    read_typed_dict,
)
from runstream._json import JsonObject, JsonValue
from runstream._messages import (
    ContinuedMessage,
    StoredPart,
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
from runstream.errors import ConfigurationError, InvalidInputError, InvalidTypeError
from runstream.memory.semantic import (
    EmbeddingQueue,
    SemanticRecall,
    other_threads_message,
    query_text,
    recall,
)
from runstream.memory.titles import TitleGeneration, TitleObserver, generate_title
from runstream.memory.working import TOOL_NAME, Change, UpdateResult, WorkingMemory, WorkingMemoryTool
from runstream.models.base import LanguageModel, PromptMessage
from runstream.request_context import RequestContext, resolve
from runstream.storage import (
    InMemoryStorage,
    MessageContent,
    SqliteStorage,
    Storage,
    StoredMessage,
    TaskRecord,
    Thread,
    ThreadResourceMismatchError,
)
from runstream.tools import Tool
from runstream.vector.base import VectorStore
from runstream.vector.embedders import Embedder, resolve_embedder

DEFAULT_LAST_MESSAGES = 40


_MILLISECOND = timedelta(milliseconds=1)


class MissingStorageError(ConfigurationError, RuntimeError):
    """A memory used without storage: neither ``Memory(storage=...)`` nor a runtime's (also the
    ``RuntimeError`` it was before the error tree)."""


@dataclass(slots=True, frozen=True)
class MemoryScope:
    """The thread and resource of one run, as Mastra's ``memory`` option of ``stream()``:
    ``{"thread": "t1" | {"id", "title"?, "metadata"?}, "resource": "u1", "options"?: {...},
    "onTitleGenerated"?: fn}``.

    A new thread is created with the given ``title`` and ``metadata``; an existing one gets the
    ``metadata`` merged in. ``options`` (Mastra's memory options: ``lastMessages``, ``readOnly``,
    ``workingMemory``, ``generateTitle``) apply to this call over the agent's memory.
    """

    thread_id: str
    resource_id: str
    title: str | None = None
    metadata: Mapping[str, Any] | None = None
    options: MemoryOptions = field(default_factory=lambda: MemoryOptions())
    """The call's memory options by their snake_case names (validated)."""
    on_title_generated: Callable[[str], Any] | None = None

    @classmethod
    def coerce(cls, value: MemoryScope | Mapping[str, object] | None) -> MemoryScope | None:
        if value is None or isinstance(value, MemoryScope):
            return value
        given = read_dataclass(_ScopeOptions, value, where="memory")
        thread = given.thread if given.thread is not None else given.thread_id
        details = thread if isinstance(thread, _ThreadOptions) else _ThreadOptions(id=thread)
        resource = given.resource if given.resource is not None else given.resource_id
        if not details.id:
            raise InvalidInputError("memory needs a thread id: memory={'thread': ..., 'resource': ...}")
        if not resource:
            raise InvalidInputError("memory needs a resource id: memory={'thread': ..., 'resource': ...}")
        return cls(
            details.id,
            resource,
            title=details.title,
            metadata=details.metadata,
            options=memory_options(given.options or {}, where="memory.options"),
            on_title_generated=given.on_title_generated,
        )

    def to_json(self) -> JsonObject:
        """The scope as a restored run gets it back (only the JSON-valued options are kept)."""
        data: JsonObject = {"thread": self.thread_id, "resource": self.resource_id}
        if self.title is not None or self.metadata is not None:
            metadata = None if self.metadata is None else dict(self.metadata)
            data["thread"] = {"id": self.thread_id, "title": self.title, "metadata": metadata}
        kept: JsonObject = {}
        if "last_messages" in self.options:
            kept["lastMessages"] = self.options["last_messages"]
        if "read_only" in self.options:
            kept["readOnly"] = self.options["read_only"]
        working = self.options.get("working_memory")
        if isinstance(working, Mapping) and not isinstance(working.get("schema"), type):
            # Mastra's JSON mapping (a pydantic schema is not kept)
            kept["workingMemory"] = cast(JsonObject, dict(working))
        if kept:
            data["options"] = kept
        return data


@dataclass(frozen=True, slots=True)
class _ThreadOptions:
    """Mastra's ``memory.thread`` given as a mapping (the thread's stored fields are ignored)."""

    __pydantic_config__ = CONFIG

    id: str | None = None
    title: str | None = None
    metadata: Mapping[str, Any] | None = None
    resource_id: SkipValidation[object] = None
    created_at: SkipValidation[object] = None
    updated_at: SkipValidation[object] = None


@dataclass(frozen=True, slots=True)
class _ScopeOptions:
    """The mapping form of :class:`MemoryScope` (Mastra's names, and ours)."""

    __pydantic_config__ = CONFIG

    thread: str | _ThreadOptions | None = None
    resource: str | None = None
    thread_id: str | None = None
    resource_id: str | None = None
    options: Mapping[str, Any] | None = None
    on_title_generated: Callable[[str], Any] | None = None


_UNSUPPORTED_MEMORY = {
    "messageHistory": "only lastMessages is implemented",
    "observationalMemory": "observational memory is not implemented",
    "filterIncompleteToolCalls": "incomplete tool calls are always kept",
    "retainFullInput": "the input is always used in full",
    "threads": "use generateTitle",
}


def _last_messages(where: str, value: object) -> int:
    """Mastra's ``lastMessages``: a count, or ``false`` for no history."""
    return 0 if value is False else non_negative_int(where, value)


def _working_memory(where: str, value: object) -> WorkingMemory | Mapping[str, object] | bool:
    if not isinstance(value, WorkingMemory | Mapping | bool):
        raise InvalidTypeError(f"{where} must be a mapping such as {{'enabled': True, 'template': ...}}")
    return value


def _generate_title(where: str, value: object) -> TitleGeneration | Literal[False]:
    return TitleGeneration.coerce(value, where=where) or False


def _semantic_recall(where: str, value: object) -> SemanticRecall | Literal[False]:
    return SemanticRecall.coerce(value, where=where) or False


@with_config(CONFIG)
class MemoryOptions(TypedDict, total=False):
    """Mastra's memory options (``{"lastMessages": 20, "readOnly": true, ...}``) by their
    snake_case names, only those given, checked (``None`` is kept: "as the memory has it")."""

    semantic_recall: Annotated[SemanticRecall | Literal[False] | None, checked(_semantic_recall)]
    last_messages: Annotated[int | None, checked(_last_messages)]
    read_only: Annotated[bool | None, checked(boolean)]
    working_memory: Annotated[WorkingMemory | Mapping[str, object] | bool | None, checked(_working_memory)]
    generate_title: Annotated[TitleGeneration | Literal[False] | None, checked(_generate_title)]


class _Shared(TypedDict, total=False):
    """What a :class:`Memory` and its copies (:meth:`Memory.with_options`) make once, on first use."""

    embedder: Embedder
    embedder_source: Embedder | str | None
    """The ``Memory.embedder`` the ``embedder`` was resolved from."""
    vector: VectorStore
    queue: EmbeddingQueue


class _Changes(TypedDict, total=False):
    """What a call's :class:`MemoryOptions` change in a :class:`Memory`."""

    last_messages: int | None
    read_only: bool
    generate_title: TitleGeneration | None
    semantic_recall: SemanticRecall | None
    working_memory: WorkingMemory | None


def memory_options(value: Mapping[str, object], *, where: str) -> MemoryOptions:
    """Mastra's memory options, read by :class:`MemoryOptions` (an unknown or unsupported option
    is an error naming it)."""
    return read_typed_dict(MemoryOptions, value, where=where, unsupported=_UNSUPPORTED_MEMORY)


@dataclass
class Memory:
    """An agent's memory: its storage, how much history goes into the prompt, and Mastra's
    options: ``read_only`` (history is read, nothing is written), ``working_memory`` (see
    :mod:`runstream.memory.working`) and ``generate_title`` (see :mod:`runstream.memory.titles`).

    A run's ``memory={"options": {...}}`` applies over these for that call (:meth:`with_options`).
    """

    storage: Storage | None = None
    last_messages: int | None = DEFAULT_LAST_MESSAGES
    read_only: bool = False
    working_memory: WorkingMemory | None = None
    generate_title: TitleGeneration | None = None
    semantic_recall: SemanticRecall | None = None
    """Mastra's ``semanticRecall`` (:mod:`runstream.memory.semantic`): needs an ``embedder``."""
    vector: VectorStore | None = None
    """Where messages are embedded for semantic recall; by default a :class:`SqliteVector` in the
    storage's SQLite file (in memory for an in-memory storage)."""
    embedder: Embedder | str | None = None
    """An :class:`~runstream.vector.embedders.Embedder` or a model string
    (``"openai/text-embedding-3-small"``)."""
    embedding_queue_limit: int = 10_000
    _locks: dict[str, asyncio.Lock] = field(default_factory=dict, repr=False, compare=False)
    _shared: _Shared = field(default_factory=lambda: _Shared(), repr=False, compare=False)
    _titles: set[asyncio.Task[None]] = field(default_factory=set, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.working_memory = WorkingMemory.coerce(self.working_memory)
        self.generate_title = TitleGeneration.coerce(self.generate_title, where="generate_title")
        self.semantic_recall = SemanticRecall.coerce(self.semantic_recall)
        if self.semantic_recall is not None and self.embedder is None:
            raise ConfigurationError(
                "semantic recall needs an embedder: Memory(embedder='openai/text-embedding-3-small', ...)"
            )

    @classmethod
    def coerce(cls, value: Memory | Mapping[str, object] | bool | None) -> Memory | None:
        """Accept a Memory, ``True``, or Mastra's options (``{"lastMessages": 50, ...}``)."""
        if value is None or value is False:
            return None
        if value is True:
            return cls()
        if isinstance(value, Memory):
            return value
        return cls().with_options(memory_options(value, where="memory"))

    def with_options(self, options: MemoryOptions) -> Memory:
        """A copy with Mastra's memory options (snake_case, as :func:`memory_options` returns
        them) applied; it shares this memory's storage and locks. ``working_memory`` given as a
        mapping merges into the current one, as Mastra deep-merges a call's options."""
        if not options:
            return self
        changes: _Changes = {}
        if "last_messages" in options:
            changes["last_messages"] = options["last_messages"]
        if "read_only" in options:
            changes["read_only"] = options["read_only"] is True
        if "generate_title" in options:
            changes["generate_title"] = options["generate_title"] or None
        if "semantic_recall" in options:
            changes["semantic_recall"] = options["semantic_recall"] or None
        if "working_memory" in options:
            given = options["working_memory"]
            if isinstance(given, Mapping) and self.working_memory is not None:
                changes["working_memory"] = self.working_memory.merged(given)
            else:
                changes["working_memory"] = WorkingMemory.coerce(given)
        return replace(self, **changes)

    def _storage(self) -> Storage:
        if self.storage is None:
            raise MissingStorageError(
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
        """Get the thread, creating it on first use (with the scope's ``title`` and
        ``metadata``); a thread belongs to exactly one resource. An existing thread gets the
        scope's metadata merged in. As in Mastra, this happens for a read-only memory too (it
        writes no messages, title or working memory)."""
        storage = self._storage()
        thread = await storage.get_thread(scope.thread_id)
        if thread is None:
            thread = Thread(
                id=scope.thread_id,
                resource_id=scope.resource_id,
                title=scope.title,
                metadata=dict(scope.metadata or {}),
            )
            await storage.save_thread(thread)
        elif thread.resource_id != scope.resource_id:
            raise ThreadResourceMismatchError(scope.thread_id, thread.resource_id, scope.resource_id)
        elif (
            scope.metadata
            and not self.read_only
            and any(thread.metadata.get(k) != v for k, v in scope.metadata.items())
        ):
            thread = await storage.update_thread(thread.id, metadata=scope.metadata)
        return thread

    # -- working memory ----------------------------------------------------------------------------
    async def get_working_memory(self, thread_id: str | None, resource_id: str | None) -> str | None:
        """The stored working memory (Mastra's ``getWorkingMemory``): the resource's record, or
        the thread's ``metadata.workingMemory`` for thread scope. ``None`` without any."""
        config = self.working_memory
        if config is None:
            return None
        if config.scope == "resource":
            if not resource_id:
                raise InvalidInputError("resource-scoped working memory needs a resource id")
            resource = await self._storage().get_resource(resource_id)
            return resource.working_memory if resource is not None else None
        thread = await self._storage().get_thread(thread_id) if thread_id else None
        text = thread.metadata.get("workingMemory") if thread is not None else None
        return text if isinstance(text, str) and text else None

    async def set_working_memory(self, thread_id: str | None, resource_id: str | None, text: str) -> None:
        """Store working memory (Mastra's ``updateWorkingMemory``) in the configured scope."""
        if not isinstance(text, str):
            raise InvalidTypeError("working memory must be a string (JSON text in schema mode)")
        await self.change_working_memory(thread_id, resource_id, lambda _: (text, {"success": True}))

    async def change_working_memory(
        self, thread_id: str | None, resource_id: str | None, change: Change
    ) -> UpdateResult:
        """Read, change and store the working memory as one step for its thread or resource
        (the tool's merge in schema mode must not lose a concurrent update)."""
        config = self.working_memory
        if config is None:
            raise ConfigurationError("Working memory is not enabled for this memory instance")
        key = thread_id if config.scope == "thread" else resource_id
        if not key:
            raise InvalidInputError(f"{config.scope}-scoped working memory needs a {config.scope} id")
        async with self._lock(f"working-memory:{config.scope}:{key}"):
            text, result = change(await self.get_working_memory(thread_id, resource_id))
            if text is None:
                return result
            if config.scope == "resource":
                await self._storage().update_resource(key, working_memory=text)
            else:
                await self._storage().update_thread(key, metadata={"workingMemory": text})
        return result

    async def system_messages(self, scope: MemoryScope) -> list[str]:
        """The system messages memory adds to a run's prompt: the working-memory instruction
        with the stored data (read-only wording for a read-only memory)."""
        config = self.working_memory
        if config is None:
            return []
        data = await self.get_working_memory(scope.thread_id, scope.resource_id)
        return [config.instruction(data, read_only=self.read_only)]

    def tools(self) -> dict[str, Tool]:
        """The tools memory offers the model: ``updateWorkingMemory`` when working memory is on,
        managed by the agent and the memory is not read-only."""
        config = self.working_memory
        if config is None or not config.agent_managed or self.read_only:
            return {}
        return {TOOL_NAME: WorkingMemoryTool(config, self)}

    # -- thread titles ----------------------------------------------------------------------------
    def title_after_turn(
        self, scope: MemoryScope, model: LanguageModel, request_context: RequestContext
    ) -> None:
        """Start generating the thread's title after a saved turn, as Mastra: in the background,
        when ``generate_title`` is on and the thread has none (see :meth:`wait_for_titles`)."""
        if self.generate_title is None or self.generate_title.emit_event or self.read_only:
            return
        task = asyncio.create_task(
            generate_title(
                self._storage(),
                scope.thread_id,
                self.generate_title,
                model,
                request_context,
                self.last_messages,
                scope.on_title_generated,
            )
        )
        self._titles.add(task)
        task.add_done_callback(self._titles.discard)

    @property
    def emits_title_events(self) -> bool:
        """Whether a run's stream carries its thread's title (:meth:`title_observer` adds it)."""
        config = self.generate_title
        return config is not None and config.emit_event and not self.read_only

    def title_observer(
        self,
        scope: MemoryScope,
        model: LanguageModel,
        request_context: RequestContext,
        conversation: Callable[[], Sequence[PromptMessage]],
    ) -> TitleObserver | None:
        """The observer of a run's chunks that titles the thread before its ``finish`` when
        ``generate_title`` has ``emit_event`` (see :class:`~runstream.memory.titles.TitleObserver`);
        ``None`` otherwise."""
        config = self.generate_title
        if config is None or not self.emits_title_events:
            return None
        return TitleObserver(
            self._storage(),
            scope.thread_id,
            config,
            model,
            request_context,
            conversation,
            scope.on_title_generated,
        )

    async def wait_for_titles(self) -> None:
        """Wait until the titles being generated are stored (tests, and a clean shutdown)."""
        while self._titles:
            await asyncio.gather(*list(self._titles), return_exceptions=True)

    # -- prompt history ----------------------------------------------------------------------------
    async def load_prompt(
        self, scope: MemoryScope, inputs: Sequence[PromptMessage] = ()
    ) -> list[PromptMessage]:
        """The last N stored messages of the thread as model-prompt messages; with semantic
        recall, the messages recalled for the last user message of ``inputs`` too: this
        thread's among them in time order, other threads' as a system message first."""
        storage, last = self._storage(), self.last_messages
        if last is None:  # the whole thread
            stored = (await storage.list_messages(scope.thread_id)).items
        else:
            stored = await storage.latest_messages(scope.thread_id, last)
        prompt: list[PromptMessage] = []
        query = query_text(inputs) if self.semantic_recall is not None else None
        if query:
            present = {m.id for m in stored}
            recalled = [m for m in await self._recall(scope, query) if m.id not in present]
            other = [m for m in recalled if m.thread_id != scope.thread_id]
            if other:
                prompt.append({"role": "system", "content": other_threads_message(other, scope.thread_id)})
            same = [m for m in recalled if m.thread_id == scope.thread_id]
            if same:
                stored = sorted([*same, *stored], key=lambda m: m.created_at)
        for message in stored:
            prompt.extend(db_to_prompt(message))
        first = next((m for m in prompt if m["role"] != "system"), None)
        if first is not None and first["role"] == "assistant":
            # Mastra's provider-compat rule: the first non-system message must be the user's
            at = prompt.index(first)
            prompt.insert(at, {"role": "user", "content": [{"type": "text", "text": "."}]})
        return prompt

    # -- semantic recall ---------------------------------------------------------------------------
    def _embedder(self) -> Embedder:
        embedder = self._shared.get("embedder")
        if embedder is None or self._shared.get("embedder_source") is not self.embedder:
            if self.embedder is None:
                raise ConfigurationError("semantic recall needs an embedder")
            embedder = self._shared["embedder"] = resolve_embedder(self.embedder)
            self._shared["embedder_source"] = self.embedder
        return embedder

    def _vector_store(self) -> VectorStore:
        """The memory's vector store, or the default one made on first use (closed by :meth:`close`)."""
        if self.vector is not None:
            return self.vector
        made = self._shared.get("vector")
        if made is None:
            from runstream.vector.sqlite import SqliteVector

            storage = self._storage()
            if isinstance(storage, SqliteStorage):
                made = SqliteVector(storage)
            elif isinstance(storage, InMemoryStorage):
                made = SqliteVector(":memory:")
            else:
                raise ConfigurationError(
                    "semantic recall on this storage needs a vector store: Memory(vector=PgVector(...), ...)"
                )
            self._shared["vector"] = made
        return made

    def _queue(self) -> EmbeddingQueue:
        queue = self._shared.get("queue")
        if queue is None:
            queue = self._shared["queue"] = EmbeddingQueue(self.embedding_queue_limit)
        return queue

    async def _recall(self, scope: MemoryScope, query: str) -> list[StoredMessage]:
        assert self.semantic_recall is not None
        return await recall(
            self._storage(),
            self._vector_store(),
            self._embedder(),
            self.semantic_recall,
            scope.thread_id,
            scope.resource_id,
            query,
            self._queue().known,
        )

    def _embed_later(self, messages: Sequence[StoredMessage]) -> None:
        """Hand saved messages to the embedding queue (never awaited by the turn)."""
        if self.semantic_recall is None or self.read_only or not messages:
            return
        self._queue().put(self._vector_store(), self._embedder(), self.semantic_recall, messages)

    async def flush_embeddings(self) -> None:
        """Wait until every saved message is embedded (tests, and a clean shutdown)."""
        queue = self._shared.get("queue")
        if queue is not None:
            await queue.flush()

    async def close(self) -> None:
        """Embed what is waiting, then close the vector store this memory made for itself."""
        await self.flush_embeddings()
        made = self._shared.pop("vector", None)
        if made is not None:
            await made.close()

    async def continuable_message(self, scope: MemoryScope) -> ContinuedMessage | None:
        """The thread's last message if it is an assistant one (a run without input continues it)."""
        stored = await self._storage().latest_messages(scope.thread_id, 1)
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
        metadata: Mapping[str, JsonValue] | None = None,
        model: str | None = None,
        continued: ContinuedMessage | None = None,
    ) -> None:
        """Save a run's new input messages and its response (one assistant message).

        ``model`` (``provider/model-id``) labels the response's step boundaries; ``continued``
        is the stored message a run without input appends its response to (Mastra 1.71 appends
        even a response that opens with tool calls).
        """
        if self.read_only:
            return
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
        parts = _without_working_memory_calls(responses_to_parts(responses, model))
        if parts:
            content: MessageContent = {"format": 2, "parts": parts}
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
        self._embed_later(messages)

    async def save_message(self, scope: MemoryScope, message_id: str, message: PromptMessage) -> None:
        """Save one input message now, under ``message_id``: a message accepted before its run
        starts (Mastra's thread signals store it on acceptance; the run then has no input)."""
        if self.read_only:
            return
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
        self._embed_later([stored])

    async def _next_stamps(self, thread_id: str, count: int) -> list[datetime]:
        """``count`` creation times a millisecond apart, after the thread's last message.

        Clients order a conversation by ``createdAt`` at JavaScript's millisecond precision, so
        a turn's user and assistant messages (saved together) must not share one.
        """
        now = datetime.now(UTC)
        start = now.replace(microsecond=now.microsecond // 1000 * 1000)
        last = await self._storage().latest_messages(thread_id, 1)
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
        metadata: Mapping[str, JsonValue],
        model: str | None,
    ) -> None:
        """Append a run's response to a stored message (re-read under the lock: a task may have
        rewritten it meanwhile)."""
        new_parts = _without_working_memory_calls(responses_to_parts(responses, model))

        def append(message: StoredMessage) -> StoredMessage:
            content = message.content
            content["parts"] = merge_parts(content.get("parts", []), new_parts)
            content["metadata"] = merge_metadata(content.get("metadata") or {}, dict(metadata))
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


MemoryInput = Memory | Mapping[str, Any] | bool | None
"""What ``Agent(memory=...)`` takes: a Memory, ``True``, Mastra's options, or (see
:func:`run_memory`) a function of the request context returning one of these."""


async def run_memory(
    memory: MemoryInput | Callable[[RequestContext], Any],
    scope: MemoryScope,
    request_context: RequestContext,
    storage: Storage | None,
) -> Memory:
    """The memory of one run: the agent's (or what its memory function returns for the request
    context, Mastra's dynamic memory), with the call's ``memory.options`` applied and
    ``storage`` (the runtime's) where it has none."""
    value: Any = memory
    if callable(value):
        value = await resolve(value, request_context)
    resolved = Memory.coerce(value)
    if resolved is None:
        raise ConfigurationError("this agent has no memory: pass Agent(..., memory=Memory(...))")
    if resolved.storage is None:
        resolved.storage = storage
    return resolved.with_options(scope.options)


def _without_working_memory_calls(parts: list[StoredPart]) -> list[StoredPart]:
    """The parts without the ``updateWorkingMemory`` calls: Mastra does not store them (the
    memory they wrote is shown in the system message instead)."""
    return [
        part
        for part in parts
        if not (part["type"] == "tool-invocation" and part["toolInvocation"].get("toolName") == TOOL_NAME)
    ]


def _holds_task(message: StoredMessage, task: TaskRecord) -> bool:
    return message.role == "assistant" and any(
        is_task_part(p, task) for p in message.content.get("parts", [])
    )


__all__ = [
    "DEFAULT_LAST_MESSAGES",
    "Memory",
    "MemoryInput",
    "MemoryOptions",
    "MemoryScope",
    "MissingStorageError",
    "SemanticRecall",
    "TitleGeneration",
    "WorkingMemory",
    "memory_options",
    "run_memory",
]
