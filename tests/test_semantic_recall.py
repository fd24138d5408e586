"""Semantic recall (Mastra's ``semanticRecall``): messages embedded off the response path,
recalled by similarity with their neighbours, placed in the prompt as Mastra places them."""

from __future__ import annotations

import asyncio
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest

from runstream import Agent
from runstream.conformance.runner import ScenarioRunner
from runstream.errors import ConfigurationError, InvalidInputError
from runstream.memory import Memory, SemanticRecall
from runstream.memory.semantic import EmbeddingQueue, other_threads_message
from runstream.runtime import Runstream
from runstream.storage import InMemoryStorage, SqliteStorage, StoredMessage
from runstream.testing import HashEmbedder, ScriptedModel, Text
from runstream.vector import SqliteVector

TOPICS = [
    "My cat Tom likes sleeping on the sofa",
    "The weather in Paris was rainy all week",
    "I am learning to play the violin",
    "Our garden has tomatoes and basil",
    "The train to Berlin leaves at nine",
]


def texts(prompt: list[dict[str, Any]]) -> list[tuple[str, str]]:
    out = []
    for message in prompt:
        content = message["content"]
        text = content if isinstance(content, str) else " ".join(p.get("text", "") for p in content)
        out.append((message["role"], text))
    return out


async def converse(agent: Agent, memory: Memory, thread: str, resource: str, said: list[str]) -> None:
    for text in said:
        out = await agent.stream(text, memory={"thread": thread, "resource": resource})
        await out.get_full_output()
    await memory.flush_embeddings()


def replies(count: int) -> ScriptedModel:
    return ScriptedModel.turns(*[Text(f"reply {i}") for i in range(count)])


async def test_thread_scope_recalls_old_messages_with_their_range_before_the_last_messages(
    tmp_path: Path,
) -> None:
    storage = SqliteStorage(tmp_path / "db.sqlite")
    memory = Memory(
        last_messages=2,
        semantic_recall={"topK": 1, "messageRange": {"before": 0, "after": 1}, "scope": "thread"},
        embedder=HashEmbedder(),
    )
    model = replies(len(TOPICS) + 1)
    agent = Agent("a", model=model, instructions="Be brief.", memory=memory)
    async with Runstream(agents=[agent], storage=storage):
        await converse(agent, memory, "t1", "u1", TOPICS)
        out = await agent.stream("What does my cat Tom like?", memory={"thread": "t1", "resource": "u1"})
        await out.get_full_output()
        prompt = texts(model.recorded[-1].prompt)
    assert prompt == [
        ("system", "Be brief."),
        ("user", TOPICS[0]),  # the hit, and the message after it (messageRange.after = 1)
        ("assistant", "reply 0"),
        ("user", TOPICS[-1]),  # the last 2 messages
        ("assistant", f"reply {len(TOPICS) - 1}"),
        ("user", "What does my cat Tom like?"),
    ]
    # the vectors are in the storage's own file
    vectors = SqliteVector(storage.path)
    try:
        stats = await vectors.describe_index("mastra_memory_hash_256")
        assert (stats.count, stats.dimension) == (2 * len(TOPICS) + 2, 256)
    finally:
        await vectors.close()


async def test_recalled_messages_already_in_the_prompt_are_not_repeated() -> None:
    memory = Memory(last_messages=10, semantic_recall={"scope": "thread"}, embedder=HashEmbedder())
    model = replies(3)
    agent = Agent("a", model=model, memory=memory)
    async with Runstream(agents=[agent]):
        await converse(agent, memory, "t1", "u1", TOPICS[:2])
        out = await agent.stream("Tell me about my cat", memory={"thread": "t1", "resource": "u1"})
        await out.get_full_output()
    assert texts(model.recorded[-1].prompt) == [
        ("user", TOPICS[0]),
        ("assistant", "reply 0"),
        ("user", TOPICS[1]),
        ("assistant", "reply 1"),
        ("user", "Tell me about my cat"),
    ]


async def test_resource_scope_brings_other_threads_as_one_system_message() -> None:
    memory = Memory(last_messages=2, semantic_recall={"topK": 1, "messageRange": 0}, embedder=HashEmbedder())
    model = replies(3)
    agent = Agent("a", model=model, instructions="Hi.", memory=memory)
    async with Runstream(agents=[agent]) as runtime:
        await converse(agent, memory, "old", "u1", [TOPICS[0]])
        await converse(agent, memory, "other-user", "u2", ["My cat Tom is grey"])
        out = await agent.stream(
            "Remind me: what does my cat Tom like?", memory={"thread": "new", "resource": "u1"}
        )
        await out.get_full_output()
        [hit] = (await runtime.storage.list_messages("old")).items[:1]
    prompt = model.recorded[-1].prompt
    assert [m["role"] for m in prompt] == ["system", "system", "user"]
    assert prompt[1]["content"] == other_threads_message([hit], "new")
    stamp = hit.created_at
    hour = f"{stamp.hour % 12 or 12}:{stamp.minute:02d} {'AM' if stamp.hour < 12 else 'PM'}"
    month = stamp.strftime("%b")
    assert prompt[1]["content"] == (
        "The following messages were remembered from a different conversation:\n"
        "<remembered_from_other_conversation>\n"
        f"\nthe following messages are from {stamp.year}, {month}, {stamp.day}\n"
        f"Message from previous conversation at {hour}: User: {TOPICS[0]}\n"
        "<end_remembered_from_other_conversation>"
    )


async def test_threshold_drops_weak_hits_and_per_call_options_apply() -> None:
    memory = Memory(
        last_messages=0, semantic_recall={"threshold": 0.99, "scope": "thread"}, embedder=HashEmbedder()
    )
    model = replies(4)
    agent = Agent("a", model=model, memory=memory)
    async with Runstream(agents=[agent]):
        await converse(agent, memory, "t1", "u1", TOPICS[:2])
        out = await agent.stream("cat", memory={"thread": "t1", "resource": "u1"})
        await out.get_full_output()
        assert texts(model.recorded[-1].prompt) == [("user", "cat")]
        options = {"semanticRecall": {"topK": 1, "messageRange": 0, "scope": "thread", "threshold": 0.1}}
        out = await agent.stream(
            "my cat Tom likes the sofa", memory={"thread": "t1", "resource": "u1", "options": options}
        )
        await out.get_full_output()
        assert texts(model.recorded[-1].prompt) == [
            ("user", TOPICS[0]),
            ("user", "my cat Tom likes the sofa"),
        ]


async def test_read_only_memory_embeds_nothing() -> None:
    embedder = HashEmbedder()
    memory = Memory(read_only=True, semantic_recall=True, embedder=embedder)
    agent = Agent("a", model=replies(2), memory=memory)
    async with Runstream(agents=[agent]):
        await converse(agent, memory, "t1", "u1", ["hello there"])
    assert embedder.calls == [["hello there"]]  # the recall query only: nothing saved, nothing embedded


class GatedEmbedder(HashEmbedder):
    """Waits for a gate before embedding saved messages (queries go through)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.waiting = asyncio.Event()

    async def _call(self, texts: list[str]) -> list[list[float]]:
        if len(texts) > 1:
            self.waiting.set()
            await self.gate.wait()
        return await super()._call(texts)


async def test_a_turn_never_waits_for_embedding_and_close_flushes(tmp_path: Path) -> None:
    embedder = GatedEmbedder()
    memory = Memory(semantic_recall={"scope": "thread"}, embedder=embedder)
    agent = Agent("a", model=replies(2), memory=memory)
    storage = SqliteStorage(tmp_path / "db.sqlite")
    runtime = Runstream(agents=[agent], storage=storage)
    await runtime.start()
    out = await agent.stream("first message", memory={"thread": "t1", "resource": "u1"})
    assert (await out.get_full_output())["text"] == "reply 0"  # the turn is over ...
    await embedder.waiting.wait()  # ... while its messages wait to be embedded
    closing = asyncio.create_task(runtime.close())
    await asyncio.sleep(0)
    assert not closing.done()
    embedder.gate.set()
    await closing
    vectors = SqliteVector(tmp_path / "db.sqlite")
    try:
        assert (await vectors.describe_index("mastra_memory_hash_256")).count == 2
    finally:
        await vectors.close()


async def test_the_embedding_queue_is_bounded() -> None:
    embedder = GatedEmbedder()
    queue = EmbeddingQueue(limit=3)
    vectors = SqliteVector(":memory:")
    config = SemanticRecall()
    messages = [
        StoredMessage(
            id=f"m{i}", thread_id="t", resource_id="r", role="user", content={"content": f"text {i}"}
        )
        for i in range(6)
    ]
    try:
        queue.put(vectors, embedder, config, messages[:2])
        await embedder.waiting.wait()  # the worker holds m0, m1
        queue.put(vectors, embedder, config, messages[2:])  # m2..m5: one too many
        assert (len(queue), queue.dropped) == (3, 1)
        embedder.gate.set()
        await queue.flush()
        hits = await vectors.query("mastra_memory_hash_256", embedder.vector("text"), top_k=10)
        assert sorted(h.id for h in hits) == ["m0", "m1", "m3", "m4", "m5"]
    finally:
        await vectors.close()


def test_settings_are_checked() -> None:
    with pytest.raises(ConfigurationError, match="embedder"):
        Memory(semantic_recall=True)
    with pytest.raises(InvalidInputError):
        SemanticRecall.coerce({"topK": 0})
    with pytest.raises(InvalidInputError):
        SemanticRecall.coerce({"scope": "everywhere"})
    with pytest.raises(InvalidInputError):
        SemanticRecall.coerce({"topk": 3})
    assert SemanticRecall.coerce({"messageRange": {"before": 2}}) == SemanticRecall(before=2, after=0)
    assert InMemoryStorage  # the default runtime storage works too (see the tests above)


# -- against the real Mastra ----------------------------------------------------------------------

EXTRA = Path(__file__).parent / "conformance_extra"
_WHEN = re.compile(r"(the following messages are from )\d{4}, \w{3}, \d{1,2}|( at )\d{1,2}:\d{2} [AP]M")


def _normalised(prompt: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """Role and text of each message; dates and times (the recording's clock) left out."""
    return [
        (role, _WHEN.sub(lambda m: (m.group(1) or m.group(2)) + "<when>", text))
        for role, text in texts(prompt)
    ]


@pytest.mark.parametrize("name", ["x-sr01-semantic-recall-thread", "x-sr02-semantic-recall-resource"])
async def test_every_prompt_matches_the_recorded_mastra_calls(name: str) -> None:
    """The scenarios recorded from Mastra 1.71 (LibSQLVector, the same deterministic embedder,
    tests/conformance_extra/mastra-runner-semantic-recall.patch): each model call's prompt,
    recalled messages and their placement included, equals Mastra's (the chunk streams match at
    level 2 in test_conformance_extra.py)."""
    scenario = json.loads((EXTRA / "scenarios" / f"{name}.json").read_text())
    meta = json.loads((EXTRA / "golden" / f"{name}.meta.json").read_text())
    runner = ScenarioRunner(scenario, io.StringIO())
    await runner.run()
    model = runner.runtime.agents[scenario["agent"]["id"]].model
    assert isinstance(model, ScriptedModel)
    expected = meta["modelCalls"]["main"]
    assert len(model.recorded) == len(expected)
    for got, want in zip(model.recorded, expected, strict=True):
        assert _normalised(got.prompt) == _normalised(want["prompt"]), f"call {got.index}"
