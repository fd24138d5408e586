"""One tree for every error runstream raises on purpose: catch :class:`RunstreamError` for all.

Each class also keeps the builtin base it had before the tree existed (``ValueError``,
``LookupError``, ...), so code that caught those still works. The server maps these classes to
HTTP statuses (:class:`InvalidInputError` 400, :class:`NotFoundError` 404,
:class:`StateConflictError` 409), never a bare builtin.
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
