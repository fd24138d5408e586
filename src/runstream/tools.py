"""Tools: definitions from typed functions or JSON schemas, argument validation, and the
context a running tool sees (writer, abort signal, suspend/resume).

A tool's arguments are validated before it runs; invalid arguments raise
:class:`ToolArgumentsError`, which the loop turns into a ``tool-error`` chunk the model can
recover from. ``await ctx.suspend(payload)`` ends the execution without a result; the run (or
background task) can later be resumed, running the tool again with ``ctx.resume_data`` set.
"""

from __future__ import annotations

import inspect
import json
import warnings
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import (
    Any,
    Literal,
    NoReturn,
    NotRequired,
    Protocol,
    TypeAlias,
    TypedDict,
    cast,
    get_type_hints,
    overload,
)

import docstring_parser
import jsonschema
from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from runstream._config_mapping import CONFIG, Count, Flag, read_dataclass
from runstream._json import JsonObject, JsonValue
from runstream._schema import Schema
from runstream.abort import AbortSignal
from runstream.chunks import AgentChunk, DataChunk, ToolOutputChunk
from runstream.errors import (
    ConfigurationError,
    ConfigurationTypeError,
    InvalidInputError,
    NotFoundError,
    RunstreamError,
)
from runstream.models.base import FunctionToolSpec, PromptMessage
from runstream.storage.records import TaskRecord

Emit = Callable[[AgentChunk], None]
"""Where a tool's writer puts the chunks it makes (the loop's live output queue)."""


ToolArgs: TypeAlias = dict[str, object]
"""A call's arguments once validated: the model's JSON, or a typed function's parameters."""

ModelOutput: TypeAlias = Callable[[Any], Mapping[str, object]]
"""Mastra's ``toModelOutput``: what the model reads of a tool's result (the tool's own value)."""


class CustomData(TypedDict):
    """A tool's custom chunk: ``type`` is ``data-<name>``; ``transient`` ones are not saved."""

    type: str
    data: object
    id: NotRequired[str | None]
    transient: NotRequired[bool | None]


class ToolArgumentsError(RunstreamError, ValueError):
    """The model called a tool with arguments that do not match its input schema.

    Like Mastra, the loop hands it to the model as the tool's result (``as_result()``: ``error``,
    ``message`` and a tree of ``validationErrors``), so the model can fix its call.
    """

    name = "ToolArgumentsError"

    def __init__(self, message: str, validation_errors: ErrorTree | None = None) -> None:
        super().__init__(message)
        self.validation_errors: ErrorTree = validation_errors or {"errors": [], "fields": {}}

    def as_result(self) -> ValidationFailure:
        return {"error": True, "message": str(self), "validationErrors": self.validation_errors}


class ErrorTree(TypedDict):
    """zod's ``treeifyError`` shape: ``{errors: [...], fields: {name: {errors, fields}}}``."""

    errors: list[str]
    fields: dict[str, ErrorTree]


class ValidationFailure(TypedDict):
    """What the model gets back for a call (or a result) that fails its schema, as Mastra's."""

    error: bool
    message: str
    validationErrors: ErrorTree


def _error_tree(issues: list[tuple[str, str]]) -> ErrorTree:
    tree: ErrorTree = {"errors": [], "fields": {}}
    for path, message in issues:
        node = tree
        for part in [p for p in path.split(".") if p]:
            node = node["fields"].setdefault(part, {"errors": [], "fields": {}})
        node["errors"].append(message)
    return tree


class ToolInputNotJSONError(RunstreamError, ValueError):
    """The model's tool-call input is not JSON at all (named ``Error`` on the wire, as in Mastra)."""

    name = "Error"


class ToolExecutionError(RunstreamError):
    """A tool raised: Mastra wraps every error a tool throws, so the ``tool-error`` chunk names
    it ``Error`` whatever the tool raised. The tool's own exception is ``__cause__``."""

    name = "Error"

    @classmethod
    def wrapping(cls, exc: BaseException) -> ToolExecutionError:
        error = cls(str(exc))
        error.__cause__ = exc
        return error


def private_error_text(error: object, tool_name: str) -> str | None:
    """What is kept and shown outside the run of a tool's error, when not its text: "Tool
    <name> failed" for an exception the tool raised itself (its text may carry secrets or paths);
    ``None`` when the text is public: a :class:`~runstream.errors.ToolError` the tool raised, or
    runstream's own errors (an unknown tool, bad arguments, an abort), but not an MCP server's
    error an MCP tool relays. The model in the run gets the text either way; memory and HTTP
    callers get this."""
    raised = error.__cause__ if isinstance(error, ToolExecutionError) else error
    public = isinstance(raised, RunstreamError) and getattr(raised, "name", None) not in RELAYED_ERROR_NAMES
    return None if public else f"Tool {tool_name} failed"


def public_task_error(error: Mapping[str, object] | None, tool_name: str) -> Mapping[str, object]:
    """A failed background task's stored error as callers and memory may see it: whole when
    runstream marked its text public when storing it (a ``name``: a :class:`ToolError`, its own
    errors, a timeout), else "Tool <name> failed" only (the task manager's log keeps it whole)."""
    if error is not None and "name" in error:
        return error
    return {"message": f"Tool {tool_name} failed"}


RELAYED_ERROR_NAMES = frozenset({"MCPToolError"})
"""Errors of the tree that carry another server's text, private as a tool's own exception is
(named, not imported: ``runstream.mcp`` is an optional extra)."""


class ToolNotFoundError(NotFoundError):
    """The model called a tool the agent does not have."""

    name = "ToolNotFoundError"


class ToolSuspended(Exception):
    """Raised by :meth:`ToolContext.suspend` to end the tool's execution without a result."""

    def __init__(self, payload: object) -> None:
        super().__init__("tool execution suspended")
        self.payload = payload


class ToolWriter:
    """What a tool writes while it runs: ``write`` → ``tool-output``, ``custom`` → ``data-*``."""

    __slots__ = ("_emit", "run_id", "tool_call_id", "tool_name")

    def __init__(self, emit: Emit, run_id: str, tool_call_id: str, tool_name: str) -> None:
        self._emit = emit
        self.run_id = run_id
        self.tool_call_id = tool_call_id
        self.tool_name = tool_name

    async def write(self, value: object) -> None:
        self._emit(
            ToolOutputChunk(
                self.run_id,
                {"output": value, "toolCallId": self.tool_call_id, "toolName": self.tool_name},
                "USER",
            )
        )

    async def custom(self, chunk: CustomData) -> None:
        """Emit a custom ``data-<name>`` chunk: ``{"type": "data-x", "data": ..., "transient"?}``."""
        self._emit(
            DataChunk(
                str(chunk.get("type", "")),
                chunk.get("data"),
                id=chunk.get("id"),
                transient=chunk.get("transient"),
            )
        )


@dataclass(slots=True)
class ToolContext:
    """Everything a running tool can reach besides its arguments."""

    tool_call_id: str
    tool_name: str
    run_id: str
    agent_id: str
    writer: ToolWriter
    abort_signal: AbortSignal
    resume_data: Any = None
    suspend_payload: Any = None
    thread_id: str | None = None
    resource_id: str | None = None
    messages: list[PromptMessage] = field(default_factory=list)
    is_background_task: bool = False
    agent_name: str = ""
    attempt: int = 1
    suspended: bool = False
    suspended_with: Any = None
    suspend_resume_schema: JsonObject | None = None
    request_context: dict[str, Any] = field(default_factory=dict)
    """The run's :class:`~runstream.request_context.RequestContext` (Mastra's
    ``context.requestContext``): per-request values such as the user or the tenant."""
    background: Any = None
    """While the tool runs as a background task: its
    :class:`~runstream.tasks.adoption.BackgroundTaskAdoption` (``ctx.background.adopt(...)``)."""
    delegation: Any = None
    """The calling run's :class:`~runstream.delegation.DelegationRun` (a sub-agent tool runs
    its hooks)."""
    suspended_tool_run_id: str | None = None
    """On a resumed execution: the run id the suspension recorded (``suspend(run_id=)``), e.g.
    the sub-agent run to resume (Mastra's ``suspendedToolRunId``)."""
    suspend_run_id: str | None = None

    async def suspend(
        self,
        payload: object = None,
        *,
        resume_schema: Mapping[str, JsonValue] | None = None,
        run_id: str | None = None,
    ) -> None:
        """Suspend this execution: nothing after this call runs; resuming runs the tool again.

        ``resume_schema`` describes the data a resume must bring, when it differs per call
        (otherwise the tool's own ``resume_schema`` is shown). ``run_id`` is handed back to the
        resumed execution as ``suspended_tool_run_id`` (a delegated run the tool waits on).
        """
        self.suspended = True
        self.suspended_with = payload
        self.suspend_resume_schema = dict(resume_schema) if resume_schema is not None else None
        self.suspend_run_id = run_id
        raise ToolSuspended(payload)


@dataclass(slots=True)
class BackgroundToolConfig:
    """A tool's opt-in to run as a background task (Mastra's ``ToolBackgroundConfig``).

    As in Mastra, ``enabled`` defaults to false: ``background={"timeoutMs": 500}`` configures the
    tool for when an agent makes it eligible, but does not make it eligible itself.
    ``on_complete``/``on_failed`` are called with the settled task record (sync or async).
    ``wait_timeout_ms`` is accepted for Mastra's sake and has no effect (Mastra 1.71 reads the
    agent's and the manager's, never the tool's): a warning says so.
    """

    __pydantic_config__ = CONFIG

    enabled: Flag = False
    timeout_ms: Count | None = None
    max_retries: Count | None = None
    default_disposition: Literal["foreground", "deferred"] = "deferred"
    wait_timeout_ms: Count | None = None
    on_complete: Callable[[TaskRecord], Awaitable[None] | None] | None = None
    on_failed: Callable[[TaskRecord], Awaitable[None] | None] | None = None

    def __post_init__(self) -> None:
        if self.wait_timeout_ms is not None:
            warnings.warn(
                "a tool's background wait_timeout_ms has no effect (Mastra 1.71 ignores it too); "
                "set wait_timeout_ms on the agent's background_tasks or the task manager",
                UserWarning,
                stacklevel=3,
            )

    @classmethod
    def coerce(
        cls, value: BackgroundToolConfig | bool | Mapping[str, object] | None
    ) -> BackgroundToolConfig | None:
        """Accept ``True``, a config, or Mastra's camelCase mapping."""
        if value is None or value is False:
            return None
        if value is True:
            return cls(enabled=True)
        if isinstance(value, BackgroundToolConfig):
            return value
        return read_dataclass(cls, value, where="background")


Execute = Callable[[ToolArgs, ToolContext], Awaitable[Any] | Any]
"""A tool's function of its (validated) arguments and context; its result is the tool's own value."""

APPROVAL_RESUME_SCHEMA: JsonObject = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "properties": {
        "approved": {
            "type": "boolean",
            "description": "Controls if the tool call is approved or not, should be true when approved and false when declined",
        },
        "reason": {
            "description": "Optional explanation for the decision, surfaced to the model when the tool call is declined",
            "type": "string",
        },
    },
    "required": ["approved"],
    "additionalProperties": False,
}


class OffersTool(Protocol):
    """Something an agent offers as one tool: a workflow (``Agent(workflows=...)``, tool
    ``workflow-<name>``) or another agent. Typed by what it does, so the agent does not import
    the workflow package that runs agents as steps."""

    @property
    def id(self) -> str: ...

    def as_tool(self, name: str | None = None) -> Tool: ...


class Tool:
    """A callable the model can use. Build one with :func:`tool` or directly with a JSON schema."""

    def __init__(
        self,
        name: str,
        execute: Execute,
        *,
        description: str = "",
        input_schema: Mapping[str, JsonValue] | None = None,
        output_schema: Mapping[str, JsonValue] | None = None,
        suspend_schema: Mapping[str, JsonValue] | None = None,
        resume_schema: Mapping[str, JsonValue] | None = None,
        require_approval: bool = False,
        background: BackgroundToolConfig | bool | Mapping[str, object] | None = None,
        args_model: type[BaseModel] | None = None,
        to_model_output: ModelOutput | None = None,
    ) -> None:
        if not name:
            raise ConfigurationError("a tool needs a name")
        if to_model_output is not None and not callable(to_model_output):
            raise ConfigurationTypeError("to_model_output must be a function of the tool's result")
        self.to_model_output = to_model_output
        """Mastra's ``toModelOutput``: what the model sees of a result (e.g. ``{"type": "text",
        "value": ...}``) instead of the whole result; the stream and memory keep the result."""
        self.name = name
        self.description = description
        self.input_schema: JsonObject = dict(input_schema or {"type": "object", "properties": {}})
        self.output_schema = dict(output_schema) if output_schema else None
        self.suspend_schema = dict(suspend_schema) if suspend_schema else None
        self.resume_schema = dict(resume_schema) if resume_schema else None
        self.require_approval = require_approval
        self.background = BackgroundToolConfig.coerce(background)
        self._execute = execute
        self._args_model = args_model
        if args_model is None:
            _check_schema(self.input_schema)
        self._schema = Schema(self.input_schema)
        if self.output_schema is not None:
            _check_schema(self.output_schema)
        self._output_schema = Schema(self.output_schema) if self.output_schema is not None else None

    def spec(self, input_schema: JsonObject | None = None) -> FunctionToolSpec:
        """The tool as offered to the model."""
        return {
            "type": "function",
            "name": self.name,
            "description": self.description,
            "inputSchema": input_schema or self.input_schema,
        }

    def validate_args(self, args: object) -> ToolArgs:
        """Return the validated arguments or raise :class:`ToolArgumentsError`.

        JSON-schema tools report problems in zod's words, as Mastra does; typed-function tools
        report pydantic's.
        """
        if self._args_model is not None:
            try:  # (the model's validator itself: model_validate's keyword handling costs as much)
                model = self._args_model.__pydantic_validator__.validate_python(args)
            except ValidationError as exc:
                self._reject(
                    args, [(".".join(str(p) for p in err["loc"]), err["msg"]) for err in exc.errors()]
                )
            return dict(model.__dict__)  # its fields' values, by name
        issues = self._schema.issues(args)
        if issues:
            self._reject(args, issues)
        return dict(cast("Mapping[str, object]", args))  # what the schema accepted

    def _reject(self, args: object, issues: list[tuple[str, str]]) -> NoReturn:
        problems = "\n".join(f"- {path or 'root'}: {message}" for path, message in issues)
        provided = json.dumps(args, indent=2, ensure_ascii=False, default=str)
        raise ToolArgumentsError(
            f"Tool input validation failed for {self.name}. Please fix the following errors and try again:\n"
            f"{problems}\n\nProvided arguments: {provided}",
            _error_tree(issues),
        )

    async def execute(self, args: ToolArgs, ctx: ToolContext) -> Any:
        result = self._execute(args, ctx)
        if inspect.isawaitable(result):
            result = await result
        return self._checked_output(result)

    def _checked_output(self, result: object) -> object:
        """A result the output schema rejects becomes, as in Mastra, an error result that tells
        the model what was wrong (the tool did run; its output is not passed on as valid)."""
        if self._output_schema is None:
            return result
        issues = self._output_schema.issues(result)
        if not issues:
            return result
        problems = "\n".join(f"- {path or 'root'}: {message}" for path, message in issues)
        returned = json.dumps(result, indent=2, ensure_ascii=False, default=str)
        return {
            "error": True,
            "message": f"Tool output validation failed for {self.name}. The tool returned invalid output:\n"
            f"{problems}\n\nReturned output: {returned}",
            "validationErrors": _error_tree(issues),
        }

    def __repr__(self) -> str:
        return f"Tool({self.name!r})"


def _check_schema(schema: Mapping[str, JsonValue]) -> None:
    try:
        jsonschema.validators.validator_for(schema).check_schema(dict(schema))
    except jsonschema.SchemaError as exc:
        raise InvalidInputError(f"invalid JSON schema: {exc.message}") from exc


def _strip_titles(schema: JsonValue) -> JsonValue:
    """Drop pydantic's generated ``title`` annotations (noise for a model), not properties named so."""
    if isinstance(schema, list):
        return [_strip_titles(v) for v in schema]
    if not isinstance(schema, dict):
        return schema
    out: JsonObject = {}
    for key, value in schema.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in ("properties", "$defs", "definitions") and isinstance(value, dict):
            out[key] = {name: _strip_titles(sub) for name, sub in value.items()}
        else:
            out[key] = _strip_titles(value)
    return out


def _from_function(
    fn: Callable[..., Any],
    *,
    name: str | None,
    description: str | None,
    require_approval: bool,
    background: BackgroundToolConfig | bool | Mapping[str, object] | None,
    output_schema: Mapping[str, JsonValue] | None,
    resume_schema: Mapping[str, JsonValue] | None,
    suspend_schema: Mapping[str, JsonValue] | None,
) -> Tool:
    # ToolContext resolves even where the tool's module imported it locally (string annotations).
    hints = get_type_hints(fn, localns={"ToolContext": ToolContext})
    doc = docstring_parser.parse(inspect.getdoc(fn) or "")
    param_docs = {p.arg_name: p.description for p in doc.params}
    fields: dict[str, Any] = {}  # create_model's field definitions
    ctx_param: str | None = None
    for param in inspect.signature(fn).parameters.values():
        if param.name not in hints:  # the model would get an empty schema and guess
            raise ConfigurationTypeError(
                f"tool {fn.__name__}: parameter {param.name!r} has no type hint; annotate it "
                f"(e.g. '{param.name}: str', or '{param.name}: ToolContext' for the context) so the "
                "model is told what to send"
            )
        annotation = hints[param.name]
        if annotation is ToolContext:
            ctx_param = param.name
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ConfigurationTypeError(f"tool {fn.__name__}: *args/**kwargs parameters are not supported")
        default = ... if param.default is param.empty else param.default
        from pydantic import Field

        fields[param.name] = (annotation, Field(default, description=param_docs.get(param.name)))
    args_model = create_model(f"{fn.__name__}_args", __config__=ConfigDict(extra="forbid"), **fields)
    stripped = _strip_titles(args_model.model_json_schema())
    schema: JsonObject = stripped if isinstance(stripped, dict) else {}
    schema.setdefault("properties", {})
    summary = " ".join(p for p in (doc.short_description, doc.long_description) if p)

    def execute(args: ToolArgs, ctx: ToolContext) -> Any:
        """The function's result, or its coroutine (awaited by :meth:`Tool.execute`: an async
        function's call is one coroutine, not one inside another)."""
        if ctx_param is None:
            return fn(**args)
        call_args: dict[str, object] = dict(args)
        call_args[ctx_param] = ctx
        return fn(**call_args)

    return Tool(
        name or fn.__name__,
        execute,
        description=description if description is not None else summary,
        input_schema=schema,
        output_schema=output_schema,
        resume_schema=resume_schema,
        suspend_schema=suspend_schema,
        require_approval=require_approval,
        background=background,
        args_model=args_model,
    )


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...
@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    require_approval: bool = False,
    background: BackgroundToolConfig | bool | Mapping[str, object] | None = None,
    output_schema: Mapping[str, JsonValue] | None = None,
    resume_schema: Mapping[str, JsonValue] | None = None,
    suspend_schema: Mapping[str, JsonValue] | None = None,
    to_model_output: ModelOutput | None = None,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    require_approval: bool = False,
    background: BackgroundToolConfig | bool | Mapping[str, object] | None = None,
    output_schema: Mapping[str, JsonValue] | None = None,
    resume_schema: Mapping[str, JsonValue] | None = None,
    suspend_schema: Mapping[str, JsonValue] | None = None,
    to_model_output: ModelOutput | None = None,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a :class:`Tool` from a typed function (sync or async).

    The input schema comes from the type hints, the description from the docstring (its
    ``Args:`` section describes the parameters). A parameter annotated :class:`ToolContext`
    receives the context instead of a model argument::

        @tool
        async def get_weather(city: str, ctx: ToolContext) -> dict:
            \"\"\"Get the weather for a city.\"\"\"
    """

    def build(f: Callable[..., Any]) -> Tool:
        built = _from_function(
            f,
            name=name,
            description=description,
            require_approval=require_approval,
            background=background,
            output_schema=output_schema,
            resume_schema=resume_schema,
            suspend_schema=suspend_schema,
        )
        if to_model_output is not None:
            if not callable(to_model_output):
                raise ConfigurationTypeError("to_model_output must be a function of the tool's result")
            built.to_model_output = to_model_output
        return built

    return build(fn) if fn is not None else build


def resume_schema_json(schema: Mapping[str, JsonValue] | None) -> str:
    """A resume schema as the JSON string Mastra puts in approval/suspension chunks."""
    return json.dumps(schema or {}, separators=(",", ":"))


def resume_schema_of(tool: Tool | None) -> str | None:
    """A tool's resume schema as the JSON string its suspension records keep (``None``: none)."""
    schema = tool.resume_schema if tool is not None else None
    return draft07_schema_json(schema) if schema else None


def draft07_schema_json(schema: Mapping[str, JsonValue]) -> str:
    """A resume schema as Mastra sends it: a JSON Schema draft-07 string naming its ``$schema``."""
    return resume_schema_json({"$schema": "http://json-schema.org/draft-07/schema#", **schema})
