// agent.stream with memory: chunk order, text, envelope of every chunk.
import { agent, collect, emit, text, types, unique } from "./lib.mjs";

const response = await agent.stream("hi", { memory: { thread: unique("t"), resource: "js-user" }, maxSteps: 3 });
const chunks = await collect(response);
emit({
  status: response.status,
  types: types(chunks),
  text: text(chunks),
  envelopes: chunks.every((c) => typeof c.runId === "string" && c.from === "AGENT"),
  runIds: [...new Set(chunks.map((c) => c.runId))].length,
  finishReason: chunks.at(-1).payload.stepResult.reason,
  request: chunks.find((c) => c.type === "step-start").payload.request,
});
