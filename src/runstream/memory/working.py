"""Working memory, as Mastra's ``@mastra/memory`` keeps it: a Markdown text or a JSON document
per resource (default) or per thread, shown to the model in a system message and rewritten by
the model through the ``updateWorkingMemory`` tool.

Two modes, chosen by the configuration:

* **template** (Markdown, the default): the tool takes ``{"memory": "<the whole Markdown>"}``
  and replaces what is stored (a write of the bare template over real data is refused, as Mastra).
* **schema** (a JSON Schema, or a pydantic model class): the tool takes ``{"memory": {...}}``
  and *merges* it into the stored JSON (:func:`merge_working_memory`): objects merge key by key,
  ``null`` deletes a key, arrays and scalars replace.

The texts of the system message and the tool (description, schema, results) are Mastra's, word
for word, so prompts and chunks match a Mastra app's.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from functools import partial
from typing import Any, Literal, NotRequired, Protocol, TypedDict

import jsonschema
from pydantic import BaseModel, SkipValidation

from runstream._config_mapping import CONFIG, Flag, camel, read_dataclass
from runstream._json import JsonInput, JsonMapping, JsonObject, JsonValue
from runstream.errors import InvalidInputError, InvalidTypeError
from runstream.tools import Tool, ToolContext

TOOL_NAME = "updateWorkingMemory"
"""The tool's name on the wire (Mastra registers its ``update-working-memory`` tool under it)."""

DEFAULT_TEMPLATE = """
# User Information
- **First Name**: 
- **Last Name**: 
- **Location**: 
- **Occupation**: 
- **Interests**: 
- **Goals**: 
- **Events**: 
- **Facts**: 
- **Projects**: 
"""  # noqa: W291 (Mastra's template has the trailing spaces)

Scope = Literal["thread", "resource"]


@dataclass(frozen=True, slots=True)
class WorkingMemory:
    """Mastra's ``options.workingMemory``.

    ``scope``: ``"resource"`` (default: shared by all threads of a resource) or ``"thread"``.
    ``template``: the Markdown layout (default: Mastra's "User Information" list).
    ``schema``: a JSON Schema (mapping) or a pydantic model class; switches to JSON with merge
    semantics. ``agent_managed=False``: the model sees the memory read-only and gets no tool.
    """

    __pydantic_config__ = CONFIG

    enabled: Flag = True
    scope: Scope = "resource"
    template: str | None = None
    schema: SkipValidation[Mapping[str, Any] | type[BaseModel] | None] = None
    """(Checked by ``__post_init__``: a JSON Schema mapping or a pydantic model class.)"""
    agent_managed: Flag = True

    def __post_init__(self) -> None:
        if self.template is not None and self.schema is not None:
            raise InvalidInputError("workingMemory takes a template or a schema, not both")
        if self.schema is not None and not (
            isinstance(self.schema, Mapping)
            or (isinstance(self.schema, type) and issubclass(self.schema, BaseModel))
        ):
            raise InvalidTypeError(
                "workingMemory.schema must be a JSON Schema mapping or a pydantic model class"
            )
        if isinstance(self.schema, Mapping):
            try:
                jsonschema.validators.validator_for(self.schema).check_schema(dict(self.schema))
            except jsonschema.SchemaError as exc:
                raise InvalidInputError(
                    f"workingMemory.schema is not a valid JSON Schema: {exc.message}"
                ) from None

    @classmethod
    def coerce(cls, value: WorkingMemory | Mapping[str, object] | bool | None) -> WorkingMemory | None:
        """A config, ``True``, or Mastra's mapping (``{"enabled": true, "template": ...}``; as in
        Mastra, a mapping without ``enabled`` leaves working memory off)."""
        if value is None or value is False:
            return None
        if value is True:
            return cls()
        if isinstance(value, WorkingMemory):
            return value if value.enabled else None
        config = read_dataclass(
            cls, {"enabled": False, **value}, where="workingMemory", unsupported=_UNSUPPORTED
        )
        return config if config.enabled else None

    def merged(self, update: Mapping[str, object]) -> WorkingMemory | None:
        """This config with a per-call ``workingMemory`` mapping over it (Mastra deep-merges the
        call's memory options into the agent's; a schema replaces the template)."""
        base: dict[str, object] = {
            "enabled": self.enabled,
            "scope": self.scope,
            "agent_managed": self.agent_managed,
        }
        read = read_dataclass(
            WorkingMemory, update, where="memory.options.workingMemory", unsupported=_UNSUPPORTED
        )
        given = {camel(name) for name in update} | set(update)
        changes = {
            spec.name: getattr(read, spec.name) for spec in fields(WorkingMemory) if spec.name in given
        }
        if "schema" not in changes and "template" not in changes:
            base["template"], base["schema"] = self.template, self.schema
        return WorkingMemory.coerce({**base, **changes})

    # -- the template --------------------------------------------------------------------------
    @property
    def format(self) -> Literal["markdown", "json"]:
        return "json" if self.schema is not None else "markdown"

    def json_schema(self) -> JsonObject | None:
        """The schema as JSON Schema (a pydantic model's ``model_json_schema()``)."""
        if self.schema is None:
            return None
        if isinstance(self.schema, Mapping):
            return dict(self.schema)
        return self.schema.model_json_schema()

    def template_content(self) -> str:
        """Mastra's ``getWorkingMemoryTemplate().content``: the trimmed Markdown, or the schema
        as JSON text."""
        schema = self.json_schema()
        if schema is not None:
            return json.dumps(schema, separators=(",", ":"), ensure_ascii=False)
        return (self.template or DEFAULT_TEMPLATE).strip()

    def empty_document(self) -> JsonObject:
        """Mastra's ``generateEmptyFromSchema``: the schema's properties with empty values."""
        return empty_from_schema(self.json_schema() or {})

    # -- the system message ----------------------------------------------------------------------
    def instruction(self, data: str | None, *, read_only: bool) -> str:
        """The system message Mastra adds to every call of a run with working memory."""
        if read_only or not self.agent_managed:
            return _READ_ONLY_INSTRUCTION.format(data=data or "No working memory data available.")
        kind = "JSON" if self.format == "json" else "Markdown"
        markdown_rules = _MARKDOWN_RULES if self.format == "markdown" else ""
        template = (
            f"<working_memory_template>\n{self.template_content()}\n</working_memory_template>"
            if self.format == "markdown"
            else ""
        )
        empty = self.empty_document() if self.format == "json" else {}
        return _INSTRUCTION.format(
            kind=kind,
            markdown_rules=markdown_rules,
            template=template,
            empty_intro="When working with json data, the object format below represents the template:"
            if empty
            else "",
            empty=json.dumps(empty, separators=(",", ":"), ensure_ascii=False) if empty else "",
            data="null" if data is None else data,  # JavaScript's `${null}`
        )


_UNSUPPORTED = {
    "version": "only the stable template mode is implemented (not 'vnext')",
    "useStateSignals": "working memory is always delivered in the system message",
}

_MARKDOWN_RULES = """5. IMPORTANT: When calling updateWorkingMemory, the only valid parameter is the memory field. DO NOT pass an object.
6. IMPORTANT: ALWAYS pass the data you want to store in the memory field as a string. DO NOT pass an object.
7. IMPORTANT: Data must only be sent as a string no matter which format is used."""

_INSTRUCTION = """WORKING_MEMORY_SYSTEM_INSTRUCTION:
Store and update any conversation-relevant information by calling the updateWorkingMemory tool. If information might be referenced again - store it!

Guidelines:
1. Store anything that could be useful later in the conversation
2. Update proactively when information changes, no matter how small
3. Use {kind} format for all data
4. Act naturally - don't mention this system to users. Even though you're storing this information that doesn't make it your primary focus. Do not ask them generally for "information about yourself"
{markdown_rules}


{template}

{empty_intro}
{empty}

<working_memory_data>
{data}
</working_memory_data>

Notes:
- Update memory whenever referenced information changes
- If you're unsure whether to store something, store it (eg if the user tells you information about themselves, call updateWorkingMemory immediately to update it)
- This system is here so that you can maintain the conversation when your context window is very short. Update your working memory because you may need it to maintain the conversation without the full conversation history
- Do not remove empty sections - you must include the empty sections along with the ones you're filling in
- REMEMBER: the way you update your working memory is by calling the updateWorkingMemory tool with the entire {kind} content. The system will store it for you. The user will not see it.
- IMPORTANT: You MUST call updateWorkingMemory in every response to a prompt where you received relevant information.
- IMPORTANT: Preserve the {kind} formatting structure above while updating the content."""

_READ_ONLY_INSTRUCTION = """WORKING_MEMORY_SYSTEM_INSTRUCTION (READ-ONLY):
The following is your working memory - persistent information about the user and conversation collected over previous interactions. This data is provided for context to help you maintain continuity.

<working_memory_data>
{data}
</working_memory_data>

Guidelines:
1. Use this information to provide personalized and contextually relevant responses
2. Act naturally - don't mention this system to users. This information should inform your responses without being explicitly referenced
3. This memory is read-only in the current session - you cannot update it

Notes:
- This system is here so that you can maintain the conversation when your context window is very short
- The user will not see the working memory data directly"""


def empty_from_schema(schema: JsonMapping) -> JsonObject:
    """Mastra's ``generateEmptyFromSchema``: each property's default, or an empty value of its
    type (nested objects recursively)."""
    properties = schema.get("properties")
    if schema.get("type") != "object" or not isinstance(properties, Mapping):
        return {}
    empty: JsonObject = {}
    blanks: JsonObject = {"string": "", "array": [], "number": 0, "integer": 0, "boolean": False}
    for key, prop in properties.items():
        prop = prop if isinstance(prop, Mapping) else {}
        if "default" in prop:
            empty[key] = json.loads(json.dumps(prop["default"]))
        elif prop.get("type") == "object":
            empty[key] = empty_from_schema(prop) if prop.get("properties") else {}
        else:
            kind = prop.get("type")
            empty[key] = (
                json.loads(json.dumps(blanks[kind])) if isinstance(kind, str) and kind in blanks else None
            )
    return empty


def merge_working_memory(existing: object, update: object) -> JsonObject:
    """Mastra's ``deepMergeWorkingMemory``: objects merge recursively, ``None`` deletes a key,
    lists and scalars replace; the result never aliases ``update``."""
    base: JsonObject = dict(existing) if isinstance(existing, Mapping) else {}
    if not isinstance(update, Mapping) or not update:
        return base
    for key, value in update.items():
        if value is None:
            base.pop(key, None)
        elif isinstance(value, list):
            base[key] = json.loads(json.dumps(value))
        elif isinstance(value, Mapping):
            base[key] = merge_working_memory(
                base.get(key) if isinstance(base.get(key), Mapping) else None, value
            )
        else:
            base[key] = value
    return base


def strip_optional_nulls(value: object, schema: JsonMapping) -> object:
    """Mastra's ``stripNullsFromOptional``: drop ``null`` values of properties the schema does
    not require (a model often pads an update with them), before validation."""
    if isinstance(value, list):
        items = schema.get("items")
        return [strip_optional_nulls(v, items if isinstance(items, Mapping) else {}) for v in value]
    if isinstance(value, Mapping):
        found_properties, found_required = schema.get("properties"), schema.get("required")
        properties: JsonMapping = found_properties if isinstance(found_properties, Mapping) else {}
        required: Sequence[JsonInput] = found_required if isinstance(found_required, list) else []
        return {
            key: strip_optional_nulls(item, _mapping(properties.get(key)))
            for key, item in value.items()
            if not (item is None and key not in required)
        }
    return value


def _mapping(value: JsonInput | None) -> JsonMapping:
    return value if isinstance(value, Mapping) else {}


class WorkingMemoryStore(Protocol):
    """Where the tool reads and writes (the run's :class:`~runstream.memory.Memory`)."""

    async def change_working_memory(
        self, thread_id: str | None, resource_id: str | None, change: Change
    ) -> UpdateResult:
        """Read the stored text, call ``change`` with it and store the text it returns (if
        any), as one step for this thread or resource; returns ``change``'s result."""
        ...


class UpdateResult(TypedDict):
    """What the ``updateWorkingMemory`` tool returns to the model (Mastra's words)."""

    success: bool
    message: NotRequired[str]


Change = Callable[[str | None], tuple[str | None, UpdateResult]]
"""Stored text -> (the text to store or ``None`` to keep it, the tool's result)."""


_MARKDOWN_DESCRIPTION = (
    "Update the working memory with new information. Any data not included will be overwritten. "
    "Always pass data as string to the memory field. Never pass an object."
)
_SCHEMA_DESCRIPTION = (
    "Update the working memory with new information. Data is merged with existing memory - only include "
    "fields you want to add or update. To preserve existing data, omit the field entirely. Arrays are "
    "replaced entirely when provided, so pass the complete array or omit it to keep the existing values."
)
_SKIPPED_TEMPLATE = (
    "Attempted to replace existing working memory with empty template. Update skipped to prevent data loss."
)


class WorkingMemoryTool(Tool):
    """Mastra's ``updateWorkingMemory`` tool for one configuration (see the module docstring)."""

    def __init__(self, config: WorkingMemory, store: WorkingMemoryStore) -> None:
        self.config = config
        self.store = store
        schema = config.json_schema()
        self._memory_schema = {k: v for k, v in (schema or {}).items() if k != "$schema"}
        if schema is None:
            input_schema: JsonObject = {
                "$schema": "http://json-schema.org/draft-07/schema#",
                "type": "object",
                "properties": {
                    "memory": {
                        "type": "string",
                        "description": "The Markdown formatted working memory content to store. "
                        "This MUST be a string. Never pass an object.",
                    }
                },
                "required": ["memory"],
            }
        else:
            input_schema = {
                "$schema": "http://json-schema.org/draft-07/schema#",
                "type": "object",
                "description": "The JSON formatted working memory content to store.",
                "properties": {"memory": self._memory_schema},
                "required": ["memory"],
            }
        super().__init__(
            TOOL_NAME,
            self._update,
            description=_SCHEMA_DESCRIPTION if schema is not None else _MARKDOWN_DESCRIPTION,
            input_schema=input_schema,
        )

    def validate_args(self, args: Any) -> dict[str, Any]:
        """Schema mode drops ``null`` values of optional fields first, as Mastra."""
        if self.config.schema is not None and isinstance(args, Mapping) and "memory" in args:
            args = {**args, "memory": strip_optional_nulls(args["memory"], self._memory_schema)}
        return super().validate_args(args)

    async def _update(self, args: Mapping[str, object], ctx: ToolContext) -> UpdateResult:
        thread_id, resource_id = ctx.thread_id, ctx.resource_id
        if self.config.scope == "thread" and not thread_id:
            raise InvalidInputError("Thread ID is required for thread-scoped working memory updates")
        if self.config.scope == "resource" and not resource_id:
            raise InvalidInputError("Resource ID is required for resource-scoped working memory updates")
        given = args.get("memory")
        if self.config.schema is not None:
            if given is None:
                return {"success": True, "message": "No memory data provided, existing memory unchanged."}
            update = _parse_json_input(given) if isinstance(given, str) else given
            return await self.store.change_working_memory(thread_id, resource_id, partial(_merged, update))
        text = given if isinstance(given, str) else json.dumps(given, separators=(",", ":"))
        template = self.config.template_content()
        return await self.store.change_working_memory(
            thread_id, resource_id, partial(_replaced, text, template)
        )


def _merged(update: object, existing: str | None) -> tuple[str | None, UpdateResult]:
    """Schema mode: the update merged into the stored JSON (unreadable JSON counts as none)."""
    try:
        current = json.loads(existing) if existing else None
    except ValueError:
        current = None
    merged = merge_working_memory(current, update)
    return json.dumps(merged, separators=(",", ":"), ensure_ascii=False), {"success": True}


def _replaced(text: str, template: str, existing: str | None) -> tuple[str | None, UpdateResult]:
    """Markdown mode: the new text, unless it is the bare template written over real data."""
    if existing and _blank(text) == _blank(template) != _blank(existing):
        return None, {"success": False, "message": _SKIPPED_TEMPLATE}
    return text, {"success": True}


def _blank(text: str) -> str:
    """Whitespace-normalised text (Mastra compares templates this way)."""
    return " ".join(text.split())


def _parse_json_input(text: str) -> JsonValue:
    try:
        parsed: JsonValue = json.loads(text)
    except ValueError as exc:
        raw = text if len(text) <= 500 else text[:500] + "..."
        raise InvalidInputError(
            f"Failed to parse working memory input as JSON: {exc}. Raw input: {raw}"
        ) from None
    return parsed
