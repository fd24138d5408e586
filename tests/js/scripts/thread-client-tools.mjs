// A client-side tool over Mastra's thread signals, as client-js runs it: subscribeToThread,
// sendMessage with the tool in ifIdle.streamOptions; when the run stops for the tool, client-js
// runs it and sends its result with send-tool-approval ({approved: true, messages}), and the
// reply to the result arrives on the same subscription.
import { createTool } from "@mastra/client-js";
import { z } from "zod";
import { agent, client, emit, unique } from "./lib.mjs";

const calls = [];
const clientEcho = createTool({
  id: "clientEcho",
  description: "Echoes text in the browser",
  inputSchema: z.object({ text: z.string() }),
  execute: async (input) => {
    calls.push(input);
    return { echoed: (input.context ?? input).text };
  },
});

const where = { resourceId: "js-thread-user", threadId: unique("tc") };
const subscription = await agent.subscribeToThread(where);
const chunks = [];
let done;
const replied = new Promise((resolve) => { done = resolve; });
const reading = subscription.processDataStream({
  onChunk: async (chunk) => {
    chunks.push(chunk);
    if (chunk.type === "text-delta" && chunks.filter((c) => c.type === "text-delta").map((c) => c.payload.text).join("").includes("echoed")) done();
  },
});
const sent = await agent.sendMessage({
  ...where,
  message: { contents: "client echo please" },
  ifIdle: { streamOptions: { clientTools: { clientEcho } } },
});
const timeout = setTimeout(() => done(), 20000);
await replied;
clearTimeout(timeout);
subscription.unsubscribe();
await reading.catch(() => {});
const stored = await client.listThreadMessages(where.threadId, { agentId: "assistant", resourceId: where.resourceId });
emit({
  sent,
  calls,
  types: chunks.map((c) => c.type),
  runIds: [...new Set(chunks.filter((c) => c.runId).map((c) => c.runId))],
  text: chunks.filter((c) => c.type === "text-delta").map((c) => c.payload.text).join(""),
  where,
  stored: stored.messages.map((m) => ({ role: m.role, parts: (m.content?.parts ?? []).map((p) => p.type === "tool-invocation" ? `tool:${p.toolInvocation.toolName}:${p.toolInvocation.state}` : p.type) })),
});
