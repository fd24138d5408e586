// Until-idle streams (stream with untilIdle, streamUntilIdle) and the background-task API.
import { agent, client, collect, emit, text, types, unique } from "./lib.mjs";

async function run(start) {
  const chunks = await collect(await start());
  return { chunks, types: types(chunks), text: text(chunks) };
}

const resource = unique("res");
const viaStream = await run(() =>
  agent.stream("research tides", { memory: { thread: unique("t"), resource }, untilIdle: true }),
);
const viaRoute = await run(() =>
  agent.streamUntilIdle("research comets", { memory: { thread: unique("t"), resource }, maxIdleMs: 10000 }),
);
const started = viaStream.chunks.find((c) => c.type === "background-task-started");
const runId = viaStream.chunks[0].runId;
const listed = await client.listBackgroundTasks({ runId });
const task = await client.getBackgroundTask(started.payload.taskId);

// The task stream: subscribe, start another background task, read until it completes.
const stream = await client.streamBackgroundTasks({ resourceId: resource });
const reader = stream.getReader();
const taskEvents = [];
const third = collect(await agent.stream("research stars", { memory: { thread: unique("t"), resource } }));
for (;;) {
  const { value, done } = await reader.read();
  if (done) break;
  taskEvents.push(value);
  if (value.type === "background-task-completed") break;
}
await reader.cancel();
await third;
emit({
  viaStream: { types: viaStream.types, text: viaStream.text },
  viaRoute: { types: viaRoute.types, text: viaRoute.text },
  listed: { total: listed.total, ids: listed.tasks.map((t) => t.id), status: listed.tasks[0]?.status },
  task: { id: task.id, status: task.status, result: task.result, toolName: task.toolName, resourceId: task.resourceId },
  startedId: started.payload.taskId,
  taskEvents: taskEvents.map((e) => ({ type: e.type, keys: Object.keys(e).sort(), topic: e.payload?.result?.topic })),
});
