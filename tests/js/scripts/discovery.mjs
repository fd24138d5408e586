// listAgents, details, unknown agent (MastraClientError 404), tools.
import { agent, client, emit, failure } from "./lib.mjs";

const agents = await client.listAgents();
const details = await agent.details();
const tools = await client.listTools();
emit({
  agentIds: Object.keys(agents).sort(),
  details: {
    id: details.id,
    name: details.name,
    instructions: details.instructions,
    toolIds: Object.keys(details.tools).sort(),
    inputSchema: JSON.parse(details.tools.get_weather.inputSchema).json, // superjson, as Mastra
  },
  unknown: await failure(client.getAgent("nope").details()),
  toolIds: Object.keys(tools).sort(),
  executed: await client.getTool("get_weather").execute({ data: { city: "Oslo" } }),
});
