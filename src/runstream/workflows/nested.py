"""A nested workflow step: the inner workflow as its own execution inside the outer one.

It shares the outer run's id (as in Mastra), so its step events reach the outer stream with
ids ``<nested id>.<step id>``; its writer output passes through unchanged. A suspension inside
it suspends the outer step with the inner payload plus ``__workflow_meta`` (``runId`` and the
inner ``path``), which is how a later resume finds its way back in. Its snapshot is stored
under ``<outer key>/<step id>``.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING

from runstream.abort import AbortController, AbortSignal
from runstream.processors import TripWire
from runstream.workflows._results import UNDEFINED
from runstream.workflows.errors import error_from_wire
from runstream.workflows.events import DetachedSink, PrefixSink
from runstream.workflows.snapshots import prepare_resume
from runstream.workflows.step import StepContext, StepSuspended

if TYPE_CHECKING:
    from runstream.workflows._execution import Runner, StepCall


async def run_nested(ex: Runner, call: StepCall, ctx: StepContext) -> object:
    """Run (or resume) the nested workflow of ``call``; its result is the step's output."""
    workflow = call.entry.workflow
    assert workflow is not None
    item = call.foreach_index
    child = ex.nested(
        workflow,
        # A foreach item's nested run gets a run id of its own (Mastra), whose events the
        # outer stream then drops.
        run_id=ex.run_id if item is None else str(uuid.uuid4()),
        sink=PrefixSink(ex.sink, workflow.id) if item is None else DetachedSink(ex.sink, workflow.id),
        abort=_nested_signal(ex.abort),
        store=ex.store.child(call.entry.id if item is None else f"{call.entry.id}[{item}]"),
    )
    if call.resume_data is not None and call.resume is not None and call.was_suspended:
        snapshot = await child.store.load()
        child.resume = prepare_resume(
            snapshot, workflow, call.resume.steps[1:] or None, call.resume_data, ex.run_id
        )
        assert snapshot is not None
        child.results = dict(snapshot["context"])
        child.state = dict(snapshot.get("state") or ex.state)
        outcome = await child.run_from(child.resume.path.pop(0))
    else:
        outcome = await child.start(workflow.validate_input(call.input_data), dict(ex.state))
    await ctx.set_state(outcome.state)
    suspended = [
        (k, r) for k, r in outcome.steps.items() if isinstance(r, Mapping) and r.get("status") == "suspended"
    ]
    if suspended:
        step_id, result = suspended[-1]
        payload = dict(result.get("suspendPayload") or {})
        meta = dict(payload.get("__workflow_meta") or {})
        meta.update(runId=child.run_id, path=[step_id, *meta.get("path", [])])
        raise StepSuspended({**payload, "__workflow_meta": meta})
    if outcome.status == "failed":
        raise outcome.error if isinstance(outcome.error, BaseException) else error_from_wire(outcome.error)
    if outcome.status == "tripwire" and outcome.tripwire is not None:
        trip = outcome.tripwire
        raise TripWire(
            str(trip.get("reason", "Processor tripwire triggered")),
            retry=bool(trip.get("retry")),
            metadata=trip.get("metadata"),
            processor_id=trip.get("processorId"),
        )
    return outcome.result if outcome.status == "success" else UNDEFINED


def _nested_signal(parent: AbortSignal) -> AbortSignal:
    """The abort signal of a nested execution: fired just after ``parent``.

    In Mastra the parent's abort cancels the nested run from an abort listener, so steps of the
    parent that were already waiting on the signal react first; the stream shows that order.
    """
    controller = AbortController()
    loop = asyncio.get_running_loop()
    parent.add_listener(lambda reason: loop.call_soon(controller.abort, reason))
    return controller.signal
