// useChat's resume: a page sends a message to a resumable chat route and reloads mid-stream; the
// reloaded page (useChat({resume: true}) calls chat.resumeStream() on mount) re-attaches with
// DefaultChatTransport.reconnectToStream (GET /chat/:agentId/:chatId/stream). Run with "v5" or "latest".
import { BASE, emit, unique } from "./lib.mjs";

const ai = process.argv[2] === "v5" ? await import("ai-v5") : await import("ai");
const { AbstractChat, DefaultChatTransport } = ai;

class MemoryState {
  constructor(messages) {
    this.status = "ready";
    this.error = undefined;
    this.messages = messages ?? [];
  }
  pushMessage = (message) => { this.messages = [...this.messages, message]; };
  popMessage = () => { this.messages = this.messages.slice(0, -1); };
  replaceMessage = (index, message) => { this.messages = this.messages.map((m, i) => (i === index ? message : m)); };
  snapshot = (thing) => structuredClone(thing);
}

class HeadlessChat extends AbstractChat {
  constructor(init) {
    super({ ...init, state: new MemoryState(init.messages) });
  }
}

const api = `${BASE}/chat/assistant?resumable=true`;
const chatId = unique("chat");
const user = { id: unique("u"), role: "user", parts: [{ type: "text", text: "slow" }] };

// The first page: the request goes out, a few chunks arrive, then the page reloads.
const controller = new AbortController();
const response = await fetch(api, {
  method: "POST",
  headers: { "content-type": "application/json" },
  body: JSON.stringify({ id: chatId, messages: [user], trigger: "submit-message" }),
  signal: controller.signal,
});
const reader = response.body.getReader();
await reader.read();
controller.abort();

// The reloaded page: the stored conversation ends with the user message; resume the reply.
const chat = new HeadlessChat({ id: chatId, messages: [user], transport: new DefaultChatTransport({ api }) });
await chat.resumeStream();

// A chat with nothing in flight: the server answers 204 and nothing changes.
const idle = new HeadlessChat({ id: unique("chat"), messages: [user], transport: new DefaultChatTransport({ api }) });
await idle.resumeStream();

emit({
  resumed: {
    status: chat.status,
    error: chat.error ? String(chat.error.message ?? chat.error) : null,
    roles: chat.messages.map((m) => m.role),
    text: chat.lastMessage.parts.filter((p) => p.type === "text").map((p) => p.text).join(""),
  },
  idle: { status: idle.status, error: idle.error ?? null, roles: idle.messages.map((m) => m.role) },
});
