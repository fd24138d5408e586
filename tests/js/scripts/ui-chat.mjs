// useChat's logic without React: AbstractChat + DefaultChatTransport against POST /chat/:agentId.
// Run with "v5" (ai 5) or "latest" (ai 7); the transport validates every chunk with that
// version's uiMessageChunkSchema, so a chunk it rejects fails the chat.
import { BASE, emit, unique } from "./lib.mjs";

const ai = process.argv[2] === "v5" ? await import("ai-v5") : await import("ai");
const { AbstractChat, DefaultChatTransport, lastAssistantMessageIsCompleteWithToolCalls } = ai;

class MemoryState {
  constructor() {
    this.status = "ready";
    this.error = undefined;
    this.messages = [];
  }
  pushMessage = (message) => { this.messages = [...this.messages, message]; };
  popMessage = () => { this.messages = this.messages.slice(0, -1); };
  replaceMessage = (index, message) => { this.messages = this.messages.map((m, i) => (i === index ? message : m)); };
  snapshot = (thing) => structuredClone(thing);
}

class HeadlessChat extends AbstractChat {
  constructor(init) {
    super({ ...init, state: new MemoryState() });
  }
}

const transport = (body) => new DefaultChatTransport({ api: `${BASE}/chat/assistant`, body });
const summary = (chat) => ({
  status: chat.status,
  error: chat.error ? String(chat.error.message ?? chat.error) : null,
  roles: chat.messages.map((m) => m.role),
  parts: chat.lastMessage.parts.map((p) => p.type),
  text: chat.lastMessage.parts.filter((p) => p.type === "text").map((p) => p.text).join(""),
});

// 1. Until idle with memory: background-task data parts, then the continuation's text.
const tasks = new HeadlessChat({
  id: unique("chat"),
  transport: transport({ memory: { thread: unique("t"), resource: "ui-user" }, untilIdle: true }),
});
await tasks.sendMessage({ text: "research whales" });
const taskParts = tasks.lastMessage.parts.filter((p) => p.type.startsWith("data-background-task-"));

// 2. A client tool answered in the browser (onToolCall + addToolResult + sendAutomaticallyWhen).
const toolCalls = [];
const tools = new HeadlessChat({
  id: unique("chat"),
  transport: transport({
    clientTools: { clientEcho: { id: "clientEcho", description: "Echo", inputSchema: { type: "object", properties: { text: { type: "string" } }, required: ["text"] } } },
  }),
  sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithToolCalls,
  onToolCall: async ({ toolCall }) => {
    toolCalls.push(toolCall.toolName);
    const add = (tools.addToolOutput ?? tools.addToolResult).bind(tools);
    // Not awaited, as the AI SDK docs say: the chat runs it after the current stream job.
    add({ tool: "clientEcho", toolCallId: toolCall.toolCallId, output: { echoed: toolCall.input.text } });
  },
});
await tools.sendMessage({ text: "client echo" });

emit({
  tasks: { ...summary(tasks), taskParts: taskParts.map((p) => ({ type: p.type, id: p.id, state: p.data.state })) },
  tools: { ...summary(tools), toolCalls, toolState: tools.lastMessage.parts.find((p) => p.type === "tool-clientEcho")?.state },
});
