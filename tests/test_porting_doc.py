"""docs/porting-from-mastra.md stays true: every runstream name its tables list exists, a
mapping key is Mastra's name in camelCase, and its example runs as written."""

from __future__ import annotations

import dataclasses
import inspect
import re
import subprocess
import sys
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runstream import Agent, RequestContext, Tool, ToolContext, tool
from runstream._config_mapping import camel
from runstream.delegation import DelegationConfig
from runstream.memory import Memory, MemoryScope, SemanticRecall, TitleGeneration, WorkingMemory
from runstream.models.base import ModelSettings
from runstream.models.fallback import FallbackModel, ModelChoice
from runstream.output import RunOutput
from runstream.runtime import Runstream
from runstream.stop_conditions import has_tool_call, step_count_is
from runstream.structured import StructuredOutput
from runstream.tasks.adoption import BackgroundTaskAdoption, BackgroundTaskOperation
from runstream.tasks.config import BackgroundTaskConfig, CleanupConfig, RetryConfig
from runstream.tasks.manager import BackgroundTaskManager
from runstream.tasks.policy import AgentBackgroundConfig, ToolBackgroundEntry
from runstream.testing import ScriptedModel
from runstream.tools import BackgroundToolConfig

ROOT = Path(__file__).parent.parent
DOC = ROOT / "docs" / "porting-from-mastra.md"
STATUSES = {"done", "partial", "as Mastra", "not yet"}
CONFIGS: dict[str, Any] = {
    "BackgroundTaskConfig": BackgroundTaskConfig,
    "RetryConfig": RetryConfig,
    "CleanupConfig": CleanupConfig,
    "AgentBackgroundConfig": AgentBackgroundConfig,
    "ToolBackgroundEntry": ToolBackgroundEntry,
    "BackgroundToolConfig": BackgroundToolConfig,
    "Memory": Memory,
    "SemanticRecall": SemanticRecall,
    "DelegationConfig": DelegationConfig,
    "WorkingMemory": WorkingMemory,
    "TitleGeneration": TitleGeneration,
}
NAMES: dict[str, Any] = {
    **CONFIGS,
    "Agent": Agent,
    "Tool": Tool,
    "tool": tool,
    "ToolContext": ToolContext,
    "RequestContext": RequestContext,
    "MemoryScope": MemoryScope,
    "ModelSettings": ModelSettings,
    "FallbackModel": FallbackModel,
    "ModelChoice": ModelChoice,
    "BackgroundTaskManager": BackgroundTaskManager,
    "BackgroundTaskAdoption": BackgroundTaskAdoption,
    "BackgroundTaskOperation": BackgroundTaskOperation,
    "Runstream": Runstream,
    "RunOutput": RunOutput,
    "StructuredOutput": StructuredOutput,
    "step_count_is": step_count_is,
    "has_tool_call": has_tool_call,
}
INSTANCES: dict[str, Callable[[], Any]] = {"Agent": lambda: Agent("a", model=ScriptedModel.text("hi"))}


def rows() -> list[tuple[str, str, str]]:
    """(mastra, runstream, status) of every table row."""
    found = []
    for line in DOC.read_text().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not line.startswith("|") or len(cells) != 4 or cells[0] in ("Mastra", "---"):
            continue
        found.append((cells[0], cells[1], cells[2]))
    return found


ROWS = rows()


def exists(name: str) -> bool:
    """``X(param=)``, ``X.method()``, ``X.method(param=)`` or ``X.attribute``."""
    match = re.fullmatch(r"(\w+)(?:\.(\w+))?(?:\((?:(\w+)=)?\))?", name)
    assert match, f"cannot read the runstream name {name!r}"
    owner_name, attribute, parameter = match.groups()
    owner = NAMES[owner_name]
    target = owner
    if attribute is not None:
        instance = INSTANCES.get(owner_name, lambda: None)()
        fields = {f.name for f in dataclasses.fields(owner)} if dataclasses.is_dataclass(owner) else set()
        if not (hasattr(owner, attribute) or attribute in fields or hasattr(instance, attribute)):
            return False
        target = getattr(owner, attribute, None)
        if name.endswith(")") and not callable(target):
            return False
    if parameter is not None:
        function = target.__init__ if inspect.isclass(target) else target
        return parameter in parameters(function)
    return True


def parameters(function: Callable[..., Any]) -> set[str]:
    """The keyword names ``function`` takes, including those of ``**options: Unpack[SomeTypedDict]``."""
    signature = inspect.signature(function)
    names = set(signature.parameters)
    for parameter in signature.parameters.values():
        if parameter.kind is parameter.VAR_KEYWORD:
            hint = typing.get_type_hints(function).get(parameter.name)
            if typing.get_origin(hint) is typing.Unpack:
                names |= set(typing.get_args(hint)[0].__annotations__)
    return names


def test_the_tables_are_there() -> None:
    assert len(ROWS) > 100
    assert {status for _, _, status in ROWS} == STATUSES


@pytest.mark.parametrize(("mastra", "runstream", "status"), ROWS, ids=[row[0] for row in ROWS])
def test_every_listed_name_exists(mastra: str, runstream: str, status: str) -> None:
    assert status in STATUSES
    assert (runstream == "—") == (status == "not yet"), "only a 'not yet' row has no runstream name"
    names = re.findall(r"`([^`]+)`", runstream)
    assert names or runstream == "—"
    for name in names:
        assert exists(name), f"{name} (for Mastra's {mastra}) does not exist"
    mastra_key = re.fullmatch(r"`(?:[\w<>]+\.)*(\w+)`", mastra)
    config = re.fullmatch(r"(\w+)\.(\w+)", names[0]) if names else None
    if mastra_key and config and config.group(1) in CONFIGS:  # a mapping key: Mastra's name
        assert camel(config.group(2)) == mastra_key.group(1)


def test_the_example_runs_as_written(tmp_path: Path) -> None:
    (block,) = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    script = tmp_path / "example.py"
    script.write_text(block)
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert "background-task-started" in out.splitlines()
    assert "finished: Research started." in out
    assert "done: {'topic': 'solana', 'summary': 'solana is fast'}" in out
