"""Workflow errors. Their ``name`` is ``"Error"`` where Mastra throws a plain ``Error``, so the
``{message, name}`` that reaches the stream is the same."""

from __future__ import annotations

from collections.abc import Mapping

from runstream.errors import NotFoundError, RunstreamError, StateConflictError


class WorkflowError(RunstreamError, RuntimeError):
    """A workflow could not run as asked (a broken flow, a run in the wrong state)."""

    name = "Error"


class RunNotSuspendedError(WorkflowError, StateConflictError):
    """``resume_stream()`` on a run that is not suspended (it finished, failed or was canceled)."""


class WorkflowRunNotFoundError(NotFoundError):
    """``workflow.get_run(run_id)`` found no stored run with that id."""


def error_from_wire(value: object) -> Exception:
    """An error read back from a snapshot (``{"message", "name"}``) as an exception."""
    if isinstance(value, Mapping):
        error = WorkflowError(str(value.get("message", "")))
        error.name = str(value.get("name", "Error"))
        return error
    return WorkflowError(str(value) if value is not None else "Unknown workflow error")
