// A client-side tool (createTool + zod) with and without a memory thread.
import { createTool } from "@mastra/client-js";
import { z } from "zod";
import { agent, collect, emit, text, types, unique } from "./lib.mjs";

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

async function run(messages, options) {
  const chunks = await collect(await agent.stream(messages, { clientTools: { clientEcho }, ...options }));
  return {
    types: types(chunks),
    text: text(chunks),
    toolResult: chunks.find((c) => c.type === "tool-result")?.payload,
    finishReasons: chunks.filter((c) => c.type === "finish").map((c) => c.payload.stepResult.reason),
  };
}

const withThread = await run("client echo please", { memory: { thread: unique("t"), resource: "js-user" } });
// Without a thread client-js re-sends the history, but only when it was an array (a string is dropped).
const withoutThread = await run([{ role: "user", content: "client echo please" }], {});
emit({ calls, withThread, withoutThread });
