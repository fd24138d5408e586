// Aborting agent.stream mid-way: the server sees the disconnect and aborts the run.
import { agent, emit } from "./lib.mjs";

const controller = new AbortController();
const seen = [];
let runId;
const response = await agent.stream("slow story", { abortSignal: controller.signal });
try {
  await response.processDataStream({
    onChunk: async (chunk) => {
      seen.push(chunk.type);
      runId ??= chunk.runId;
      if (chunk.type === "text-delta" && seen.filter((t) => t === "text-delta").length === 3) controller.abort();
    },
  });
} catch (error) {
  seen.push(`threw:${error.name}`);
}
emit({ seen, runId });
