// The official AG-UI client (@ag-ui/client's HttpAgent) against /ag-ui/calc: a text run, a tool
// run, a background task with its follow-up turn, and a client-side tool round trip. BASE is the
// server, TOKEN its bearer token. Prints one JSON result.
import { HttpAgent } from "@ag-ui/client";

const headers = { Authorization: `Bearer ${process.env.TOKEN}` };
const url = `${process.env.BASE}/ag-ui/calc`;
let ids = 0;

function user(content) {
  ids += 1;
  return { id: `user-${ids}`, role: "user", content };
}

// Runs one turn and records the event types and what the agent's message list became.
async function run(agent, params = {}) {
  const events = [];
  const custom = [];
  const { result } = await agent.runAgent(params, {
    onEvent: ({ event }) => {
      events.push(event.type);
      if (event.type === "CUSTOM") custom.push(event.name);
    },
  });
  return { events, custom, result, messages: agent.messages.map(summary) };
}

function summary(message) {
  const out = { role: message.role };
  if (message.content) out.content = message.content;
  if (message.toolCalls) out.toolCalls = message.toolCalls.map((c) => [c.function.name, JSON.parse(c.function.arguments)]);
  if (message.toolCallId) out.toolCallId = message.toolCallId;
  return out;
}

const text = new HttpAgent({ url, headers, threadId: "js-text" });
text.addMessage(user("hello there"));
const textRun = await run(text);

const tool = new HttpAgent({ url, headers, threadId: "js-tool" });
tool.addMessage(user("divide 6 3"));
const toolRun = await run(tool);

const background = new HttpAgent({ url, headers, threadId: "js-background" });
background.addMessage(user("research sol"));
const backgroundRun = await run(background);

// State: a tool's progress arrives as a snapshot, then JSON Patch deltas the client applies.
const planner = new HttpAgent({ url, headers, threadId: "js-state", initialState: { page: "plan" } });
planner.addMessage(user("plan 3"));
const stateEvents = [];
const planRun = await planner.runAgent({}, {
  onStateSnapshotEvent: ({ event }) => { stateEvents.push({ type: event.type, snapshot: event.snapshot }); },
  onStateDeltaEvent: ({ event }) => { stateEvents.push({ type: event.type, delta: event.delta }); },
});
const stateRun = { stateEvents, finalState: planner.state, newMessages: planRun.newMessages.map(summary) };

// Client-side tool: the run stops at the call; the client answers it in the next run.
const confirm = {
  name: "confirm",
  description: "Ask the user to confirm",
  parameters: { type: "object", properties: { question: { type: "string" } }, required: ["question"] },
};
const client = new HttpAgent({ url, headers, threadId: "js-client-tool" });
client.addMessage(user("ask the user"));
let pending;
const first = await client.runAgent(
  { tools: [confirm] },
  { onRunFinishedEvent: ({ event }) => (pending = event.outcome?.pendingToolCallIds ?? []) },
);
const call = client.messages.at(-1).toolCalls[0];
client.addMessage({ id: "tool-1", role: "tool", toolCallId: call.id, content: JSON.stringify("yes") });
const second = await run(client, { tools: [confirm] });

console.log(
  JSON.stringify({
    text: textRun,
    tool: toolRun,
    background: backgroundRun,
    state: stateRun,
    clientTool: {
      firstNewMessages: first.newMessages.map(summary),
      pending,
      callId: call.id,
      second,
    },
  }),
);
