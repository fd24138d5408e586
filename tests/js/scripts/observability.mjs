// client-js 1.47's observability calls against a server keeping spans: a run with a tool call,
// then traces, a trace and a span, scores and feedback, discovery, metrics and logs.
import { agent, client, collect, emit, failure, unique } from "./lib.mjs";

const threadId = unique("thread");
await collect(await agent.stream("weather", { memory: { thread: threadId, resource: "res-obs" } }));
await collect(await agent.stream("fail", { memory: { thread: unique("thread"), resource: "res-obs" } }));

// The store writes in batches (every second): wait for both runs' traces to be listed (the two
// may be written in different batches).
let listed;
for (let attempt = 0; attempt < 300; attempt++) { // (up to 30 s: a loaded CI machine)
  const all = await client.listTraces({ pagination: { page: 0, perPage: 10 } });
  listed = await client.listTraces({ filters: { threadId }, pagination: { page: 0, perPage: 10 } });
  if (listed.spans.length && all.spans.length >= 2) break;
  await new Promise((resolve) => setTimeout(resolve, 100));
}
const root = listed.spans[0];
const trace = await client.getTrace(root.traceId);
const tool = trace.spans.find((span) => span.spanType === "tool_call");
const span = await client.getSpan(root.traceId, tool.spanId);
const light = await client.getTraceLight(root.traceId);
await client.createScore({ score: { scorerId: "relevance", score: 0.9, traceId: root.traceId, reason: "on topic" } });
const scores = await client.listScores({ filters: { traceId: root.traceId } });
await client.createFeedback({ feedback: { feedbackType: "thumbs", value: 1, traceId: root.traceId } });
const feedback = await client.listFeedback({ filters: { traceId: root.traceId } });
const runs = await client.getMetricAggregate({ name: ["mastra_agent_duration_ms"], aggregation: "count" });
const tools = await client.getMetricBreakdown({
  name: ["mastra_tool_duration_ms"],
  groupBy: ["entityName"],
  aggregation: "count",
});
const series = await client.getMetricTimeSeries({
  name: ["mastra_model_total_input_tokens"],
  interval: "1h",
  aggregation: "sum",
});
const percentiles = await client.getMetricPercentiles({
  name: "mastra_agent_duration_ms",
  percentiles: [0.5, 0.99],
  interval: "1d",
});
let logs;
for (let attempt = 0; attempt < 300; attempt++) { // (up to 30 s: a loaded CI machine)
  logs = await client.listLogsVNext({ filters: { level: "error" } });
  if (logs.logs.length) break;
  await new Promise((resolve) => setTimeout(resolve, 100));
}
emit({
  root: { spanType: root.spanType, entityId: root.entityId, threadId: root.threadId, total: listed.pagination.total },
  kinds: trace.spans.map((s) => s.spanType).sort(),
  span: { name: span.span.name, entityName: span.span.entityName, parent: span.span.parentSpanId === root.spanId },
  lightHasInput: light.spans.some((s) => "input" in s),
  scores: scores.scores.map((s) => [s.scorerId, s.score, s.reason]),
  feedback: feedback.feedback.map((f) => [f.feedbackType, f.value]),
  entityTypes: (await client.getEntityTypes()).entityTypes,
  entityNames: (await client.getEntityNames({ entityType: "tool" })).names,
  metricNames: (await client.getMetricNames({ prefix: "mastra_agent" })).names,
  runs: runs.value,
  tools: tools.groups.map((g) => [g.dimensions.entityName, g.value]),
  seriesPoints: series.series.map((s) => s.points.length),
  percentiles: percentiles.series.map((s) => s.percentile),
  logs: logs.logs.map((l) => [l.level, l.message.includes("the model call failed")]),
  invalid: await failure(client.getMetricAggregate({ name: [], aggregation: "median" })),
  missing: await failure(client.getTrace("nope")),
});
