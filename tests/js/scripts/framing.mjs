// Raw fetch of /stream: headers and byte-level SSE framing as client-js splits it.
import { BASE, emit } from "./lib.mjs";

const response = await fetch(`${BASE}/api/agents/assistant/stream`, {
  method: "POST",
  headers: { "content-type": "application/json" },
  body: JSON.stringify({ messages: "weather in Paris?" }),
});
const raw = await response.text();
const blocks = raw.split("\n\n");
const tail = blocks.pop();
const events = blocks.filter((b) => !b.startsWith(":"));
let parsed = 0;
for (const block of events.slice(0, -1)) {
  JSON.parse(block.slice("data: ".length));
  parsed += 1;
}
emit({
  status: response.status,
  contentType: response.headers.get("content-type"),
  cacheControl: response.headers.get("cache-control"),
  accelBuffering: response.headers.get("x-accel-buffering"),
  hasCR: raw.includes("\r"),
  tail,
  allData: events.every((b) => /^data: [^\n]+$/.test(b)),
  last: events.at(-1),
  parsed,
  events: events.length,
});
