"""An agent as a workflow step: input ``{"prompt"}``, output ``{"text"}`` (or the structured
object), and the agent's whole chunk stream written to the step's writer, so each chunk arrives
wrapped in a ``workflow-step-output`` (Mastra's ``createStep(agent)``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from runstream.processors import TripWire
from runstream.workflows.errors import WorkflowError
from runstream.workflows.step import Step, StepContext

if TYPE_CHECKING:
    from runstream.agent import Agent

PROMPT_SCHEMA = {"type": "object", "properties": {"prompt": {"type": "string"}}, "required": ["prompt"]}
TEXT_SCHEMA = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}


def agent_step(agent: Agent, *, structured_output: Any = None, retries: int | None = None) -> Step:
    """Wrap ``agent``; ``structured_output`` (a pydantic model or ``{"schema": ...}``) makes the
    step's output the parsed object."""
    output_schema: Any = TEXT_SCHEMA
    if structured_output is not None:
        output_schema = (
            structured_output.get("schema", structured_output)
            if isinstance(structured_output, dict)
            else structured_output
        )

    async def execute(ctx: StepContext) -> Any:
        out = await agent.stream(
            ctx.input_data["prompt"], abort_signal=ctx.abort_signal, structured_output=structured_output
        )
        async for chunk in out.full_stream:
            await ctx.writer.write(chunk)
            if chunk.type == "tripwire":
                payload = chunk.payload
                raise TripWire(
                    str(payload.get("reason") or "Agent tripwire triggered"),
                    retry=bool(payload.get("retry")),
                    metadata=payload.get("metadata"),
                    processor_id=payload.get("processorId"),
                )
        if out.state.error is not None:
            raise out.state.error
        if structured_output is None:
            return {"text": out.state.text}
        if out.state.object is None:
            raise WorkflowError(
                f"Agent step '{agent.id}' declared structuredOutput.schema but the agent finished "
                "without producing an object."
            )
        return out.state.object

    return Step(
        agent.id,
        execute,
        description=agent.description,
        input_schema=PROMPT_SCHEMA,
        output_schema=output_schema,
        retries=retries,
    )
