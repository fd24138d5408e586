"""A small RAG agent: chunk a document, embed and store the chunks, answer from a retrieval tool.

Runs as is with a scripted model and the local HashEmbedder (no keys, no network); with
OPENAI_API_KEY set it uses "openai/gpt-4.1-mini" and "openai/text-embedding-3-small".

    python examples/rag.py
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path

from runstream import Agent, tool
from runstream.runtime import Runstream
from runstream.storage import SqliteStorage
from runstream.testing import HashEmbedder, ScriptedModel, Text, ToolCall
from runstream.vector import SqliteVector
from runstream.vector.embedders import Embedder, resolve_embedder

DOCUMENT = """\
Runstream keeps threads of messages in storage. SQLite is the default storage: one file.

Background tasks run tools without blocking the conversation. A task can be cancelled or resumed.

The vector store keeps embeddings next to the messages. Queries can filter on metadata such as
the section a chunk came from.

Workflows chain steps. A step can suspend and wait for a human to approve it.
"""


def chunk(text: str, size: int = 160) -> list[str]:
    """Paragraphs, each cut into pieces of at most ``size`` characters at word boundaries."""
    pieces: list[str] = []
    for paragraph in (p.strip() for p in text.split("\n\n")):
        current = ""
        for word in paragraph.split():
            if current and len(current) + 1 + len(word) > size:
                pieces.append(current)
                current = word
            else:
                current = f"{current} {word}".strip()
        if current:
            pieces.append(current)
    return pieces


async def build_index(store: SqliteVector, embedder: Embedder) -> int:
    chunks = chunk(DOCUMENT)
    vectors = await embedder.embed(chunks)
    await store.create_index("docs", len(vectors[0]))
    await store.upsert(
        "docs",
        vectors,
        [{"text": c, "section": i} for i, c in enumerate(chunks)],
        ids=[f"chunk-{i}" for i in range(len(chunks))],
    )
    return len(chunks)


def make_agent(store: SqliteVector, embedder: Embedder) -> Agent:
    @tool
    async def search_docs(question: str) -> list[str]:
        """Find the passages of the documentation that answer the question."""
        [vector] = await embedder.embed([question])
        hits = await store.query("docs", vector, top_k=2, min_score=0.1)
        return [hit.metadata["text"] for hit in hits]

    if os.environ.get("OPENAI_API_KEY"):
        model: object = "openai/gpt-4.1-mini"
    else:
        model = ScriptedModel.turns(
            ToolCall("search_docs", {"question": "How do I cancel a background task?"}),
            Text("A background task can be cancelled or resumed."),
        )
    return Agent(
        "docs",
        model=model,  # type: ignore[arg-type]
        instructions="Answer from the documentation only: call search_docs first.",
        tools=[search_docs],
    )


async def main() -> None:
    if os.environ.get("OPENAI_API_KEY"):
        embedder = resolve_embedder("openai/text-embedding-3-small")
    else:
        embedder = HashEmbedder()
    with tempfile.TemporaryDirectory() as folder:
        storage = SqliteStorage(Path(folder) / "rag.db")
        store = SqliteVector(storage)  # the vectors live in the storage's file
        try:
            print(f"indexed {await build_index(store, embedder)} chunks")
            agent = make_agent(store, embedder)
            async with Runstream(agents=[agent], storage=storage):
                out = await agent.stream("How do I cancel a background task?")
                async for part in out.full_stream:
                    if part.type == "tool-result":
                        print("retrieved:", part.payload["result"][0])
                print("answer:", (await out.get_full_output())["text"])
        finally:
            await store.close()


if __name__ == "__main__":
    asyncio.run(main())
