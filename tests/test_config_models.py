"""Configuration dataclasses read by pydantic (``runstream._config_mapping.read_dataclass``):
both spellings of each option, and errors in runstream's words naming the option."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from runstream._config_mapping import ConfigKeyError, read_dataclass
from runstream.delegation import DelegationConfig
from runstream.errors import InvalidInputError, InvalidTypeError
from runstream.memory import MemoryScope, memory_options
from runstream.memory.semantic import SemanticRecall
from runstream.memory.titles import TitleGeneration
from runstream.scoring import TaskCompletion
from runstream.tasks.config import BackgroundTaskConfig, CleanupConfig, RetryConfig
from runstream.tasks.policy import ToolBackgroundEntry
from runstream.tools import BackgroundToolConfig
from runstream.vector.base import IndexConfig


@pytest.mark.parametrize(
    ("cls", "camel", "snake"),
    [
        (RetryConfig, {"maxRetryDelayMs": 5}, {"max_retry_delay_ms": 5}),
        (CleanupConfig, {"completedTtlMs": 0}, {"completed_ttl_ms": 0}),
        (ToolBackgroundEntry, {"defaultDisposition": "foreground"}, {"default_disposition": "foreground"}),
        (BackgroundToolConfig, {"timeoutMs": 9}, {"timeout_ms": 9}),
        (DelegationConfig, {"hookErrorStrategy": "throw"}, {"hook_error_strategy": "throw"}),
    ],
)
def test_either_spelling_gives_the_same_config(
    cls: type[Any], camel: dict[str, Any], snake: dict[str, Any]
) -> None:
    assert read_dataclass(cls, camel, where="x") == read_dataclass(cls, snake, where="x") == cls(**snake)


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        ({"maxRetrys": 1}, ConfigKeyError, "retries: unknown option 'maxRetrys'; did you mean 'maxRetries'?"),
        ({"max_retries": 1, "maxRetries": 2}, ConfigKeyError, "'maxRetries' is given twice"),
        ({"max_retries": -1}, InvalidInputError, "retries.max_retries must be a number >= 0, got -1"),
        ({"maxRetries": 1.5}, InvalidInputError, "retries.maxRetries must be a whole number, got 1.5"),
        ({"maxRetries": True}, InvalidInputError, "retries.maxRetries must be a number >= 0, got True"),
        ({"backoffMultiplier": float("nan")}, InvalidInputError, "backoffMultiplier must be a number >= 0"),
        ({"retryableErrors": 3}, InvalidTypeError, "retries.retryableErrors must be a function, got int"),
        ([1], InvalidTypeError, "retries must be a mapping, not list"),
    ],
)
def test_errors_name_the_option_as_spelt(value: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error) as info:
        read_dataclass(RetryConfig, value, where="retries")
    assert message in str(info.value)


def test_an_error_in_a_nested_config_names_its_path() -> None:
    with pytest.raises(ConfigKeyError, match=r"background_tasks.defaultRetries: unknown option 'maxRetry'"):
        BackgroundTaskConfig.coerce({"defaultRetries": {"maxRetry": 1}})
    with pytest.raises(
        InvalidInputError, match=r"background_tasks.cleanup.cleanup_interval_ms must be at least 1"
    ):
        BackgroundTaskConfig.coerce({"cleanup": {"cleanup_interval_ms": 0}})
    with pytest.raises(
        InvalidTypeError, match=r"background_tasks.cleanup must be a CleanupConfig or a mapping"
    ):
        BackgroundTaskConfig.coerce({"cleanup": 5})


def test_a_value_of_none_of_an_options_types_names_them() -> None:
    with pytest.raises(
        InvalidTypeError, match=r"generateTitle.instructions must be a string or a function, got int"
    ):
        TitleGeneration.coerce({"instructions": 3}, where="generateTitle")
    with pytest.raises(InvalidInputError, match=r"is_task_complete needs 'scorers'"):
        TaskCompletion.coerce({"strategy": "any"})


def test_a_union_option_reports_the_error_of_the_type_the_value_has() -> None:
    with pytest.raises(
        InvalidInputError, match=r"semantic_recall.messageRange.before must be at most 100, got 200"
    ):
        SemanticRecall.coerce({"messageRange": {"before": 200}})
    with pytest.raises(
        ConfigKeyError, match=r"semantic_recall.messageRange: unknown option 'befor'; did you mean"
    ):
        SemanticRecall.coerce({"messageRange": {"befor": 2}})
    with pytest.raises(InvalidTypeError, match=r"messageRange must be a whole number or a mapping, got str"):
        SemanticRecall.coerce({"messageRange": "x"})
    made = SemanticRecall.coerce({"topK": 3, "messageRange": {"before": 2, "after": 1}, "index_name": "i"})
    assert made == SemanticRecall(top_k=3, before=2, after=1, index_name="i")


def test_a_memory_scope_reads_its_thread_as_an_id_or_a_mapping() -> None:
    scope = MemoryScope.coerce({"thread": {"id": "t", "title": "T"}, "resourceId": "r"})
    assert scope is not None and (scope.thread_id, scope.resource_id, scope.title) == ("t", "r", "T")
    with pytest.raises(ConfigKeyError, match=r"memory.thread: unknown option 'titel'; did you mean 'title'"):
        MemoryScope.coerce({"thread": {"id": "t", "titel": "T"}, "resource": "r"})
    with pytest.raises(InvalidTypeError, match=r"memory.thread.title must be a string, got int"):
        MemoryScope.coerce({"thread": {"id": "t", "title": 5}, "resource": "r"})
    with pytest.raises(InvalidTypeError, match=r"memory.thread must be a string or a mapping, got int"):
        MemoryScope.coerce({"thread": 5, "resource": "r"})


def test_an_index_config_reads_mastras_nested_and_the_flat_settings() -> None:
    nested = IndexConfig.coerce({"type": "hnsw", "hnsw": {"m": 8, "efConstruction": 32}, "filterKeys": ["t"]})
    assert nested == IndexConfig("hnsw", m=8, ef_construction=32, filter_keys=("t",))
    assert IndexConfig.coerce({"type": "ivfflat", "ivf": {"lists": 7}}) == IndexConfig("ivfflat", lists=7)
    assert IndexConfig.coerce({"m": 4, "ef_construction": 5, "lists": 6}) == IndexConfig("hnsw", 4, 5, 6)
    assert IndexConfig.coerce({"m": 4, "hnsw": {"m": 9}}).m == 9  # Mastra's section first
    assert IndexConfig.coerce(None) == IndexConfig.coerce({}) == IndexConfig()


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        (
            {"type": "btree"},
            InvalidInputError,
            "index_config.type must be one of 'hnsw', 'ivfflat' or 'flat'",
        ),
        ({"hnsw": {"m": 0}}, InvalidInputError, "index_config.hnsw.m must be at least 1, got 0"),
        ({"lists": 20_000}, InvalidInputError, "index_config.lists must be at most 10000, got 20000"),
        ({"hnsw": {"efConstrution": 9}}, ConfigKeyError, "did you mean 'efConstruction'?"),
        ({"metric": "cosine"}, ConfigKeyError, "index_config: unknown option 'metric'"),
        ({"filterKeys": "tenant"}, InvalidTypeError, "index_config.filterKeys must be a list"),
        (
            {"filter_keys": ["a", "b", "c", "d", "e"]},
            InvalidInputError,
            "index_config.filter_keys: at most 4",
        ),
    ],
)
def test_a_bad_index_config_names_the_option(value: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error) as info:
        IndexConfig.coerce(value)
    assert message in str(info.value)


def test_a_typed_dict_reads_every_order_of_its_keys_alike() -> None:
    """A ``TypedDict`` model keeps a validator per set of keys given (for the first 64 sets,
    then the whole model's): the same values and errors either way."""
    given = {"lastMessages": 3, "read_only": True, "generateTitle": False, "semanticRecall": False}
    first = [dict(order) for order in itertools.permutations(given.items())]  # 24 sets of keys
    orders = [
        *first,
        *({**order, "workingMemory": None} for order in first),
        *({"working_memory": {"enabled": True}, **order} for order in first),
    ]
    for order in orders:
        assert memory_options(order, where="memory") == {_SNAKE[key]: value for key, value in order.items()}
        with pytest.raises(InvalidTypeError, match=r"^memory.read_only must be true or false, got 3$"):
            memory_options({**order, "read_only": 3}, where="memory")
        with pytest.raises(ConfigKeyError, match=r"memory: unknown option 'lastMessage'; did you mean"):
            memory_options({"lastMessage": 1, **order}, where="memory")


_SNAKE = {
    "lastMessages": "last_messages",
    "read_only": "read_only",
    "generateTitle": "generate_title",
    "semanticRecall": "semantic_recall",
    "workingMemory": "working_memory",
    "working_memory": "working_memory",
}
