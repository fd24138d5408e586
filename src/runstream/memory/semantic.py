"""Semantic recall, as Mastra's ``semanticRecall`` memory option (``SemanticRecall`` processor).

* **Saving**: every new user and assistant message with text is embedded and upserted into the
  vector index ``mastra_memory_<embedder model id>`` (cosine; created on first use with the
  embedder's dimension), id = message id, metadata ``{message_id, thread_id, resource_id, role,
  content, created_at}``, as Mastra. This happens off the response path: the turn hands its
  messages to an :class:`EmbeddingQueue` (bounded: past ``queue_limit`` waiting messages the
  oldest are dropped with a warning) and returns; ``Memory.flush_embeddings()`` (called by the
  runtime's ``close``) waits until it is drained. Read-only memory embeds nothing.
* **Recalling**: the text of the run's last user message is embedded, the index queried for the
  ``top_k`` nearest messages of the thread (``scope="thread"``) or of all the resource's threads
  (``scope="resource"``, Mastra's default), hits under ``threshold`` dropped, and each hit read
  from storage with ``message_range`` messages before and after it in its own thread
  (:meth:`~runstream.storage.Storage.messages_around`).
* **Placing** (Mastra's ``processInput``): recalled messages already in the prompt are dropped;
  those of this thread join the history in time order (so, being older than the last messages,
  before them); those of other threads become one system message, Mastra's
  ``<remembered_from_other_conversation>`` text with dates and times.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC
from typing import Annotated, Any, Literal

from pydantic import Field, StrictStr

from runstream._config_mapping import CONFIG, read_dataclass
from runstream.errors import ConfigurationError, InvalidTypeError
from runstream.models.base import PromptMessage
from runstream.storage import Storage, StoredMessage
from runstream.vector.base import IndexConfig, VectorIndexNotFoundError, VectorStore
from runstream.vector.embedders import Embedder

logger = logging.getLogger("runstream")

DEFAULT_TOP_K = 4
DEFAULT_MESSAGE_RANGE = 1
DEFAULT_QUEUE_LIMIT = 10_000
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_ROLE_ORDER = {"system": 0, "user": 1, "assistant": 2, "tool": 3}


@dataclass(frozen=True, slots=True)
class SemanticRecall:
    """Mastra's ``semanticRecall`` options: ``SemanticRecall(top_k=4, message_range=1,
    scope="resource", threshold=None, index_name=None)`` or the mapping
    ``{"topK", "messageRange": n | {"before", "after"}, "scope", "threshold", "indexName"}``."""

    top_k: int = DEFAULT_TOP_K
    before: int = DEFAULT_MESSAGE_RANGE
    after: int = DEFAULT_MESSAGE_RANGE
    scope: Literal["thread", "resource"] = "resource"
    threshold: float | None = None
    index_name: str | None = None

    @classmethod
    def coerce(cls, value: object, *, where: str = "semantic_recall") -> SemanticRecall | None:
        if value is None or value is False:
            return None
        if value is True:
            return cls()
        if isinstance(value, SemanticRecall):
            return value
        if not isinstance(value, Mapping):
            raise InvalidTypeError(
                f"{where} must be True or a mapping such as {{'topK': 3, 'messageRange': 2}}"
            )
        options = read_dataclass(_SemanticRecallOptions, value, where=where)
        span = options.message_range
        before, after = (span, span) if isinstance(span, int) else (span.before, span.after)
        threshold = None if options.threshold is None else float(options.threshold)
        return cls(options.top_k, before, after, options.scope, threshold, options.index_name)


_Range = Annotated[int, Field(ge=0, le=100, strict=True)]


@dataclass(frozen=True, slots=True)
class _MessageRange:
    """Mastra's ``messageRange: {before, after}``."""

    __pydantic_config__ = CONFIG

    before: _Range = 0
    after: _Range = 0


@dataclass(frozen=True, slots=True)
class _SemanticRecallOptions:
    """The mapping form of :class:`SemanticRecall` (Mastra's ``semanticRecall``)."""

    __pydantic_config__ = CONFIG

    top_k: Annotated[int, Field(ge=1, le=100, strict=True)] = DEFAULT_TOP_K
    message_range: _Range | _MessageRange = DEFAULT_MESSAGE_RANGE
    scope: Literal["thread", "resource"] = "resource"
    threshold: Annotated[float, Field(strict=True)] | None = None
    index_name: StrictStr | None = None


def index_name(config: SemanticRecall, embedder: Embedder) -> str:
    """Mastra's default index: ``mastra_memory_`` + the model id with other characters as ``_``."""
    if config.index_name:
        return config.index_name
    model = "".join(
        c if c.isascii() and (c.isalnum() or c == "_") else "_" for c in embedder.model_id or "default"
    )
    return f"mastra_memory_{model}"[:63]


def message_text(message: StoredMessage) -> str:
    """The text Mastra embeds: the message's ``content`` string, else its text parts joined."""
    content = message.content.get("content")
    if isinstance(content, str) and content:
        return content
    parts = message.content.get("parts") or []
    return "\n".join(p.get("text") or "" for p in parts if isinstance(p, Mapping) and p.get("type") == "text")


def query_text(inputs: Sequence[PromptMessage]) -> str | None:
    """The last user message's text (Mastra's ``extractUserQuery``)."""
    for message in reversed(inputs):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            if content:
                return content
            continue
        texts = [
            p.get("text", "") for p in content or [] if isinstance(p, Mapping) and p.get("type") == "text"
        ]
        joined = " ".join(t for t in texts if t)
        if joined:
            return joined
    return None


MEMORY_INDEX_CONFIG = IndexConfig(filter_keys=("resource_id", "thread_id"))
"""Recall filters by one of these by equality: SQLite answers such a query from a ``vec0`` KNN
over the resource's (or thread's) vectors (:mod:`runstream.vector._sqlite_keys`); an index made
before gets them on the first ``ensure_index`` of a process."""


async def ensure_index(vector: VectorStore, name: str, dimension: int, known: dict[str, int]) -> None:
    if known.get(name) == dimension:
        return
    await vector.create_index(name, dimension, "cosine", index_config=MEMORY_INDEX_CONFIG)
    known[name] = dimension


async def embed_messages(
    vector: VectorStore,
    embedder: Embedder,
    config: SemanticRecall,
    messages: Sequence[StoredMessage],
    known: dict[str, int],
) -> int:
    """Embed and upsert the messages with text (Mastra's ``processOutputResult``); how many."""
    chosen = [(m, message_text(m)) for m in messages if m.role in ("user", "assistant")]
    chosen = [(m, text) for m, text in chosen if text]
    if not chosen:
        return 0
    vectors = await embedder.embed([text for _, text in chosen])
    name = index_name(config, embedder)
    await ensure_index(vector, name, len(vectors[0]), known)
    metadata = [
        {
            "message_id": m.id,
            "thread_id": m.thread_id,
            "resource_id": m.resource_id or "",
            "role": m.role,
            "content": text,
            "created_at": _iso(m),
        }
        for m, text in chosen
    ]
    await vector.upsert(name, vectors, metadata, [m.id for m, _ in chosen])
    return len(chosen)


def _iso(message: StoredMessage) -> str:
    stamp = message.created_at.astimezone(UTC)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{stamp.microsecond // 1000:03d}Z"


async def recall(
    storage: Storage,
    vector: VectorStore,
    embedder: Embedder,
    config: SemanticRecall,
    thread_id: str,
    resource_id: str,
    query: str,
    known: dict[str, int],
) -> list[StoredMessage]:
    """The recalled messages (hits with their ranges), chronological."""
    [embedding] = await embedder.embed([query])
    name = index_name(config, embedder)
    flt = {"resource_id": resource_id} if config.scope == "resource" else {"thread_id": thread_id}
    try:
        hits = await vector.query(name, embedding, top_k=config.top_k, filter=flt)
    except VectorIndexNotFoundError:  # nothing embedded yet
        return []
    if config.threshold is not None:
        hits = [h for h in hits if h.score >= config.threshold]
    if not hits:
        return []
    found = await storage.messages_around([h.id for h in hits], before=config.before, after=config.after)
    if config.scope == "thread":
        found = [m for m in found if m.thread_id == thread_id]
    else:
        found = [m for m in found if m.resource_id == resource_id]
    return found


def other_threads_message(messages: Sequence[StoredMessage], thread_id: str) -> str:
    """Mastra's system message for messages recalled from the resource's other threads."""

    def key(m: StoredMessage) -> tuple[Any, ...]:
        return (m.created_at, m.thread_id, _ROLE_ORDER.get(m.role, 99), m.id)

    result = ""
    last_day: str | None = None
    for message in sorted(messages, key=key):
        stamp = message.created_at.astimezone(UTC)
        day = f"{stamp.year}, {_MONTHS[stamp.month - 1]}, {stamp.day}"
        clock = f"{stamp.hour % 12 or 12}:{stamp.minute:02d} {'AM' if stamp.hour < 12 else 'PM'}"
        if last_day != day:
            result += f"\nthe following messages are from {day}\n"
        label = "from previous conversation" if message.thread_id != thread_id else ""
        parts = message.content.get("parts") or []
        text = " ".join(
            p.get("text") or "" for p in parts if isinstance(p, Mapping) and p.get("type") == "text"
        )
        result += f"Message {label} at {clock}: {message.role.capitalize()}: {text}"
        last_day = day
    return (
        "The following messages were remembered from a different conversation:\n"
        f"<remembered_from_other_conversation>\n{result}\n<end_remembered_from_other_conversation>"
    )


class EmbeddingQueue:
    """Messages waiting to be embedded, worked off by one background task (never the turn).

    Bounded: past ``limit`` waiting messages, the oldest are dropped (and counted in
    ``dropped``) so a slow embedder cannot grow memory without end; a dropped message is only
    missing from recall, never from the thread.
    """

    def __init__(self, limit: int = DEFAULT_QUEUE_LIMIT) -> None:
        if limit < 1:
            raise ConfigurationError("the embedding queue limit must be at least 1")
        self.limit = limit
        self.dropped = 0
        self.failed = 0
        self._waiting: deque[tuple[VectorStore, Embedder, SemanticRecall, StoredMessage]] = deque()
        self._worker: asyncio.Task[None] | None = None
        self.known: dict[str, int] = {}
        """Index name -> dimension of the indexes made (no create call per batch)."""

    def __len__(self) -> int:
        return len(self._waiting)

    def put(
        self,
        vector: VectorStore,
        embedder: Embedder,
        config: SemanticRecall,
        messages: Sequence[StoredMessage],
    ) -> None:
        for message in messages:
            if len(self._waiting) >= self.limit:
                self._waiting.popleft()
                self.dropped += 1
                logger.warning(
                    "semantic recall: embedding queue full (%d), oldest message dropped", self.limit
                )
            self._waiting.append((vector, embedder, config, message))
        if self._waiting and (self._worker is None or self._worker.done()):
            self._worker = asyncio.get_running_loop().create_task(self._work())

    async def _work(self) -> None:
        while self._waiting:
            vector, embedder, config, first = self._waiting.popleft()
            batch = [first]
            while (
                self._waiting
                and len(batch) < embedder.max_batch_size
                and self._waiting[0][:3] == (vector, embedder, config)
            ):
                batch.append(self._waiting.popleft()[3])
            try:
                await embed_messages(vector, embedder, config, batch, self.known)
            except Exception:
                self.failed += len(batch)
                logger.exception("semantic recall: embedding %d message(s) failed", len(batch))

    async def flush(self) -> None:
        """Wait until every waiting message is embedded (or failed)."""
        while self._worker is not None and not self._worker.done():
            await asyncio.shield(self._worker)
