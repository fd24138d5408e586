// A model failure mid-stream arrives in-band; a bad body is a 400 that client-js does not retry.
import { agent, client, collect, emit, failure, types } from "./lib.mjs";

const chunks = await collect(await agent.stream("fail now"));
emit({
  types: types(chunks),
  error: chunks.find((c) => c.type === "error")?.payload.error,
  badBody: await failure(agent.stream("hi", { maxSteps: "three" })),
  noMemoryResource: await failure(agent.stream("hi", { memory: { thread: "x" } })),
  unknownAgent: await failure(client.getAgent("ghost").stream("hi")),
});
