"""One tree for every error runstream raises on purpose: catch :class:`RunstreamError` for all.

Each class also keeps the builtin base it had before the tree existed (``ValueError``,
``TypeError``, ``LookupError``, ...), so code that caught those still works. The server maps
these classes to HTTP statuses (:class:`InvalidInputError` and so :class:`ConfigurationError`
400, :class:`NotFoundError` 404, :class:`StateConflictError` 409), never a bare builtin.
"""

from __future__ import annotations


class RunstreamError(Exception):
    """The base of every error runstream raises on purpose."""


class StateConflictError(RunstreamError, ValueError):
    """The object is not in a state that allows the operation (approving a tool call that is
    not waiting for approval, resuming a task that is not suspended, ...)."""


class NotFoundError(RunstreamError, LookupError):
    """No such object (run, task, thread, workflow run, ...) for this caller."""


class InvalidInputError(RunstreamError, ValueError):
    """A value the caller gave cannot be used: an unknown option, a malformed argument, a
    setting out of range (a 400 on the server)."""


class InvalidTypeError(InvalidInputError, TypeError):
    """A value the caller gave is of the wrong type. Also a ``TypeError``: what these checks
    raised before the tree, and code may catch that."""


class ConfigurationError(InvalidInputError):
    """An agent, tool, memory, model, workflow, runtime or server is set up wrongly: found when
    it is built, or when a run first uses that setup (an agent without memory asked to remember,
    a model function that returns no model, a model string whose provider key is not set)."""


class ConfigurationTypeError(ConfigurationError, InvalidTypeError):
    """A :class:`ConfigurationError` about a value of the wrong type (also a ``TypeError``)."""


class RunFailedError(RunstreamError):
    """A run ended with an error (the model call failed, a tool step broke the loop, structured
    output could not be parsed under ``errorStrategy: "strict"``). Raised where a Python caller
    waits for the run's result: ``await out.text`` and the other awaitable aggregates,
    ``agent.generate()``, and the end of ``out.text_stream``. ``full_stream`` is not affected: it
    carries Mastra's ``error`` chunk and ends with ``finish`` as always.

    ``cause`` (also ``__cause__``) is the run's own error, e.g. a
    :class:`runstream.models.ModelCallError` with the provider's status code."""

    def __init__(self, run_id: str, cause: BaseException) -> None:
        super().__init__(f"run {run_id} failed: {type(cause).__name__}: {cause}")
        self.run_id = run_id
        self.cause = cause
        self.__cause__ = cause


class ToolError(RunstreamError):
    """An error a tool raises whose message is meant for the caller. Over HTTP (the
    ``tool-error`` chunk, ``POST /api/tools/:id/execute``) any other exception a tool raises is
    sent as "Tool <name> failed" only, since its text may carry secrets or paths; the server's
    log keeps it whole, and memory keeps the same "Tool <name> failed". The model (in the run)
    and in-process chunks always get the exception itself."""
