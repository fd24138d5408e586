// requireApproval: tool-call-approval (listed by listSuspendedRuns), then approveToolCall /
// declineToolCall continue the run.
import { agent, collect, emit, text, types, unique } from "./lib.mjs";

async function stop() {
  const thread = unique("t");
  const chunks = await collect(await agent.stream("delete the report", { memory: { thread, resource: "js-user" } }));
  const approval = chunks.find((c) => c.type === "tool-call-approval");
  return { chunks, thread, runId: approval.runId, toolCallId: approval.payload.toolCallId };
}

const first = await stop();
const waiting = await agent.listSuspendedRuns({ threadId: first.thread });
const approved = await collect(await agent.approveToolCall({ runId: first.runId, toolCallId: first.toolCallId }));
const second = await stop();
const declined = await collect(
  await agent.declineToolCall({ runId: second.runId, toolCallId: second.toolCallId, reason: "not today" }),
);
emit({
  stopped: types(first.chunks),
  waiting: { total: waiting.total, runIds: waiting.runs.map((r) => r.runId), toolCalls: waiting.runs[0]?.toolCalls, sameRun: waiting.runs[0]?.runId === first.runId },
  approved: { types: types(approved), text: text(approved), sameRun: approved.every((c) => c.runId === first.runId) },
  declined: {
    types: types(declined),
    denied: declined.find((c) => c.type === "tool-output-denied")?.payload,
    text: text(declined),
  },
});
