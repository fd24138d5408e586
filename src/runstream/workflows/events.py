"""Where a running workflow's events go, and how they become stream chunks.

The engine reports three things: lifecycle events (``workflow-step-start`` … with the step
``id`` in the payload), a step writer's ``write(value)`` and its ``custom(chunk)``. A nested
workflow reports through a :class:`PrefixSink`, which renames step ids to
``<nested id>.<step id>`` but leaves writer output alone (so, as in Mastra, a nested step's
``workflow-step-output`` carries the bare step name). :class:`ChunkSink` turns everything into
the chunks of one stream.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from runstream.chunks import AnyChunk, DataChunk, UnknownChunk, WorkflowChunk


class Sink(Protocol):
    def event(self, type_: str, payload: Mapping[str, object]) -> None: ...

    def output(self, step_name: str, run_id: str, value: object) -> None: ...

    def custom(self, chunk: Mapping[str, Any]) -> None: ...


class PrefixSink:
    """A nested workflow's sink: step ids prefixed with the nested workflow's id."""

    def __init__(self, parent: Sink, prefix: str) -> None:
        self.parent = parent
        self.prefix = prefix

    def event(self, type_: str, payload: Mapping[str, object]) -> None:
        if "id" in payload:
            payload = {**payload, "id": f"{self.prefix}.{payload['id']}"}
        self.parent.event(type_, payload)

    def output(self, step_name: str, run_id: str, value: object) -> None:
        self.parent.output(step_name, run_id, value)

    def custom(self, chunk: Mapping[str, Any]) -> None:
        self.parent.custom(chunk)


class DetachedSink(PrefixSink):
    """A nested workflow run by a foreach item: Mastra gives it a run id of its own, so the
    parent stream drops its lifecycle events; its writer output still arrives."""

    def event(self, type_: str, payload: Mapping[str, object]) -> None:
        return


class ChunkSink:
    """The top-level sink of one stream (``run.stream()`` or ``run.resume_stream()``).

    ``resumed``: in a resume stream Mastra passes ``custom()`` chunks through as written,
    without ``runId`` / ``from``; in the first stream they get both.
    """

    def __init__(
        self,
        run_id: str,
        push: Callable[[AnyChunk], None],
        *,
        resumed: bool,
        on_change: Callable[[], None],
    ) -> None:
        self.run_id = run_id
        self._push = push
        self._resumed = resumed
        self._on_change = on_change

    def event(self, type_: str, payload: Mapping[str, object]) -> None:
        body = {"stepName": payload["id"], **payload} if "id" in payload else dict(payload)
        self._push(WorkflowChunk(type_, self.run_id, body))
        self._on_change()

    def output(self, step_name: str, run_id: str, value: object) -> None:
        payload = {"stepName": step_name, "output": value, "runId": run_id}
        self._push(WorkflowChunk("workflow-step-output", self.run_id, payload, "USER"))

    def custom(self, chunk: Mapping[str, Any]) -> None:
        type_ = str(chunk.get("type", ""))
        run_id = "" if self._resumed else self.run_id
        if type_.startswith("data-"):
            self._push(
                DataChunk(
                    type_,
                    chunk.get("data"),
                    run_id=run_id,
                    from_="WORKFLOW",
                    id=chunk.get("id"),
                    transient=chunk.get("transient"),
                )
            )
            return
        envelope = {} if self._resumed else {"runId": run_id, "from": "WORKFLOW"}
        self._push(
            UnknownChunk({"type": type_, **envelope, **{k: v for k, v in chunk.items() if k != "type"}})
        )
