// Threads CRUD and messages through client-js.
import { agent, client, collect, emit, failure, unique } from "./lib.mjs";

const resourceId = unique("res");
const threadId = unique("thread");
const created = await client.createMemoryThread({ agentId: "assistant", resourceId, threadId, title: "first" });
for (const message of ["hi", "hello again"]) {
  await collect(await agent.stream(message, { memory: { thread: threadId, resource: resourceId } }));
}
const listed = await client.listMemoryThreads({ resourceId, agentId: "assistant" });
const thread = client.getMemoryThread({ threadId, agentId: "assistant" });
const messages = await client.listThreadMessages(threadId, { agentId: "assistant" });
const updated = await thread.update({ title: "renamed", metadata: { topic: "greetings" } });
const fetched = await thread.get();
const deleted = await thread.delete();
emit({
  created: { id: created.id, resourceId: created.resourceId, title: created.title },
  listed: listed.threads.map((t) => t.id),
  total: listed.total,
  roles: messages.messages.map((m) => m.role),
  userTexts: messages.messages.filter((m) => m.role === "user").map((m) => m.content.parts[0].text),
  parts: messages.messages.map((m) => m.content.parts.map((p) => p.type)),
  page: { perPage: messages.perPage, uiMessages: messages.uiMessages },
  updated: { title: updated.title, metadata: updated.metadata },
  fetchedTitle: fetched.title,
  deleted,
  afterDelete: await failure(thread.get()),
});
