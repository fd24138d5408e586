// The official MCP TypeScript SDK against `runstream mcp`: over stdio (it starts the server)
// or streamable HTTP (MCP_URL, bearer MCP_TOKEN). Prints one JSON result.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const transport = process.env.MCP_URL
  ? new StreamableHTTPClientTransport(new URL(process.env.MCP_URL), {
      requestInit: { headers: { Authorization: `Bearer ${process.env.MCP_TOKEN}` } },
    })
  : new StdioClientTransport({
      command: process.env.PYTHON,
      args: JSON.parse(process.env.MCP_ARGS),
      cwd: process.env.MCP_CWD,
      stderr: "ignore",
    });

// The SDK hands a notification to its handler a microtask later but settles a response at once,
// so progress that reaches it in the same read as the call's response is dropped (more often the
// busier the machine). What the server sent is recorded here, in wire order, before the SDK sees it.
const sent = [];
transport.onmessage = (message) => {
  if (message.method === "notifications/progress") sent.push([message.params.progress, message.params.message]);
};
const client = new Client({ name: "runstream-js-test", version: "1.0.0" });
await client.connect(transport);
const { tools } = await client.listTools();
const progress = [];
const asked = await client.callTool(
  { name: "ask_calc", arguments: { message: "divide 8 2" } },
  undefined,
  { onprogress: (p) => progress.push([p.progress, p.message]) },
);
const divided = await client.callTool({ name: "divide", arguments: { a: 1, b: 0 } });
console.log(
  JSON.stringify({
    protocol: client.getServerVersion(),
    tools: tools.map((t) => ({ name: t.name, required: t.inputSchema.required ?? [] })),
    asked: { text: asked.content.map((c) => c.text).join(""), isError: asked.isError ?? false },
    progress,
    sent,
    divided: { text: divided.content.map((c) => c.text).join(""), isError: divided.isError ?? false },
  }),
);
await client.close();
