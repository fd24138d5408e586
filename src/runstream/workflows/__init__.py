"""Workflows: steps composed into a flow that streams Mastra 1.71's workflow chunks.

Build a :class:`Workflow` from :class:`Step` objects (or nested workflows, or agents) with
``then`` / ``parallel`` / ``branch`` / ``dowhile`` / ``dountil`` / ``foreach`` / ``map`` /
``sleep``, ``commit()`` it, then ``run = await workflow.create_run()`` and
``out = await run.stream(input_data=...)``: ``out.full_stream`` yields ``workflow-start``,
``workflow-step-start`` / ``-output`` / ``-progress`` / ``-waiting`` / ``-result`` /
``-suspended``, ``workflow-canceled`` and finally ``workflow-finish`` (status, summed agent
usage and, on success, ``finalWorkflowResult``), exactly as Mastra streams them. A suspended run
is stored (``storage.save_snapshot("workflow-runs", run_id, ...)``) and can be resumed by
another process: ``run = await workflow.get_run(run_id)``, ``await run.resume_stream(...)``.
``workflow.as_tool()`` offers a workflow to an agent.

Two chunk types of Mastra's union that Mastra 1.71 never streams are available here as
opt-ins, so default streams stay identical to Mastra's:

* ``watch`` — ``run.watch()`` is an async iterator of
  ``{"type": "watch", "runId", "from": "WORKFLOW", "payload": {"workflowState": {"status",
  "steps": {...}, "payload"?, "result"? | "error"? | "suspendPayload"?}, "eventTimestamp"}}``
  chunks, one after every state change of the run (a step started, finished, suspended, waited,
  progressed; the run ended). In Mastra this is only the internal envelope of run events, which
  its streams unwrap.
* ``step-output`` — ``workflow.as_tool(step_output=True)``: when a workflow runs inside an
  agent, each finished step is followed by ``{"type": "step-output", "payload": {"output":
  <the step's result payload>, "usage": <tokens its agent used>}}`` (inside a ``tool-output``
  like the workflow's other chunks). Mastra only consumes ``step-output`` in agent networks.

Deliberate differences from Mastra 1.71: ``bail()`` inside a ``.branch()`` ends the run (Mastra
goes on with the next step), and step outputs are checked against their ``output_schema``
(``Step output validation failed: ...``) unless ``Workflow(validate_outputs=False)``.
"""

from runstream._schema import Schema, SchemaValidationError
from runstream.workflows.agent_step import agent_step
from runstream.workflows.errors import RunNotSuspendedError, WorkflowError, WorkflowRunNotFoundError
from runstream.workflows.flow import ConditionContext
from runstream.workflows.output import WorkflowResult, WorkflowRunOutput
from runstream.workflows.run import WorkflowRun
from runstream.workflows.step import Step, StepContext, StepWriter, step
from runstream.workflows.workflow import Workflow

__all__ = [
    "ConditionContext",
    "RunNotSuspendedError",
    "Schema",
    "SchemaValidationError",
    "Step",
    "StepContext",
    "StepWriter",
    "Workflow",
    "WorkflowError",
    "WorkflowResult",
    "WorkflowRun",
    "WorkflowRunNotFoundError",
    "WorkflowRunOutput",
    "agent_step",
    "step",
]
