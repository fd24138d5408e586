// Workflows through client-js: discovery, a run that suspends (stream → suspended → resumeStream →
// success), the JSON variants (startAsync / resumeAsync), run listings, cancel, and a 4xx.
import { client, emit, failure } from "./lib.mjs";

async function read(stream) {
  const chunks = [];
  const reader = stream.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return chunks;
    chunks.push(value);
  }
}

const summary = (chunks) =>
  chunks.map((c) => [c.type, c.payload?.stepName ?? c.payload?.workflowStatus ?? null]);

const workflow = client.getWorkflow("approval");
const listed = await client.listWorkflows();
const details = await workflow.details();
const schema = await workflow.getSchema();

const run = await workflow.createRun();
const first = await read(await run.stream({ inputData: { topic: "tides" } }));
const suspended = first.find((c) => c.type === "workflow-step-suspended");
const whileSuspended = await workflow.runById(run.runId);
const runs = await workflow.runs({ status: "suspended" });
const second = await read(await run.resumeStream({ step: "review", resumeData: { approved: true } }));
const finished = await workflow.runById(run.runId, { fields: ["result"] });

const other = await workflow.createRun();
const started = await other.startAsync({ inputData: { topic: "octopus" } });
const resumed = await other.resumeAsync({ resumeData: { approved: false, note: "not yet" } });

const canceled = await workflow.createRun();
await canceled.startAsync({ inputData: { topic: "moss" } });
const cancelAnswer = await canceled.cancel();
const afterCancel = await workflow.runById(canceled.runId);

const badRun = await workflow.createRun();
const badInput = await failure(badRun.stream({ inputData: { topic: 7 } }));
const badResume = await failure(run.resumeStream({ resumeData: { approved: true } }));

emit({
  workflowIds: Object.keys(listed).sort(),
  details: { name: details.name, steps: Object.keys(details.steps), graph: details.stepGraph.map((e) => e.step.id) },
  inputSchema: schema.inputSchema,
  first: summary(first),
  suspendPayload: suspended?.payload.suspendPayload,
  whileSuspended: { status: whileSuspended.status, steps: Object.keys(whileSuspended.steps) },
  listed: { total: runs.total, ids: runs.runs.map((r) => r.runId), sameRun: runs.runs.some((r) => r.runId === run.runId) },
  second: summary(second),
  sameRunId: [...first, ...second].every((c) => c.runId === run.runId),
  final: second.at(-1).payload.finalWorkflowResult,
  finished: { status: finished.status, result: finished.result, hasSteps: "steps" in finished },
  started: { status: started.status, suspended: started.suspended, payload: started.suspendPayload },
  resumed: { status: resumed.status, result: resumed.result },
  cancelAnswer,
  afterCancel: afterCancel.status,
  badInput,
  badResume,
});
