// The kit's reference side (a copy of tools/vendor-streams/mastra_run.mjs; record.sh runs it): real @mastra/core 1.71.0 (bundled @ai-sdk/openai 3.0.88 / @ai-sdk/anthropic 3.0.103 /
// @ai-sdk/google 3.0.101) against the loopback replay server.  usage: node mastra_run.mjs PORT CASES.json OUT_DIR [name,...]
// Every chunk of agent.stream().fullStream -> OUT_DIR/<case>.jsonl (wire serialisation of the
// conformance kit: Date -> ISO, Error -> {message,name}); requests -> OUT_DIR/<case>.requests.json.
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';

const [port, casesFile, outDir, only] = process.argv.slice(2);
const base = `http://127.0.0.1:${port}`;
process.env.OPENAI_BASE_URL = `${base}/v1`;
process.env.OPENAI_API_KEY = 'sk-dummy-loopback';
process.env.ANTHROPIC_BASE_URL = `${base}/v1`;
process.env.ANTHROPIC_API_KEY = 'sk-ant-dummy-loopback';
process.env.GOOGLE_GENERATIVE_AI_API_KEY = 'google-dummy-loopback';
process.env.MASTRA_TELEMETRY_DISABLED = '1';
process.env.MASTRA_OFFLINE = '1';

// Loopback only: refuse any other destination (telemetry, models.dev, real APIs).
// Google: Mastra 1.71 gives the model string 'google/…' no base-URL setting (its models.dev entry has no url,
// so GOOGLE_BASE_URL is never read, and @ai-sdk/google reads no env var; a {id, url} config becomes
// openai-compatible), so the Generative Language API's host is redirected here, path and query kept.
const GOOGLE_API = 'https://generativelanguage.googleapis.com';
const realFetch = globalThis.fetch;
globalThis.fetch = async (input, init) => {
  const raw = typeof input === 'string' || input instanceof URL ? String(input) : input.url;
  if (raw.startsWith(`${GOOGLE_API}/`)) {
    const target = base + raw.slice(GOOGLE_API.length);
    input = typeof input === 'string' || input instanceof URL ? target : new Request(target, input);
  }
  const url = new URL(typeof input === 'string' || input instanceof URL ? input : input.url);
  if (url.hostname !== '127.0.0.1' && url.hostname !== 'localhost') {
    console.error(`[guard] blocked fetch to ${url.origin}`);
    throw new Error(`blocked non-loopback fetch ${url.origin}`);
  }
  return realFetch(input, init);
};

// The conformance runner's npm ci'd node_modules (CI never records, so nothing here runs in `make test`).
const runnerDir = process.env.MASTRA_RUNNER_DIR || '/work/tools/mastra-runner';
const req = createRequire(path.join(runnerDir, 'package.json'));
const { Agent } = await import(req.resolve('@mastra/core/agent'));
const { createTool } = await import(req.resolve('@mastra/core/tools'));
const { z } = await import(req.resolve('zod'));
const { wire } = await import(path.join(runnerDir, 'lib', 'wire.mjs'));

const TOOL_NAMES = ['calculator', 'weather', 'get_weather', 'lookupVerificationCode', 'updateIssueList', 'parallel'];
function tools() {
  const out = {};
  for (const name of TOOL_NAMES) {
    out[name] = createTool({
      id: name,
      description: `${name} tool`,
      inputSchema: z.object({}).passthrough(),
      execute: async () => ({ ok: true, tool: name }),
    });
  }
  return out;
}

function modelFor(provider) {
  if (provider === 'responses') return 'openai/gpt-5';
  if (provider === 'anthropic') return 'anthropic/claude-sonnet-4-5';
  if (provider === 'google') return 'google/gemini-2.5-flash';
  if (provider === 'chat') return { id: 'openai-compatible/gpt-4o', url: `${base}/v1`, apiKey: 'sk-dummy-loopback' };
  throw new Error(provider);
}

const cases = JSON.parse(fs.readFileSync(casesFile, 'utf8')).filter(c => !only || only.split(',').includes(c.name));
fs.mkdirSync(outDir, { recursive: true });
for (const c of cases) {
  await realFetch(`${base}/_ctl/queue`, { method: 'POST', body: JSON.stringify({ queue: c.queue }) });
  const agent = new Agent({ id: 'agent', name: 'Agent', instructions: 'You are a helpful assistant.', model: modelFor(c.provider), tools: tools() });
  const lines = [];
  let note = '';
  try {
    const out = await agent.stream('Hello', { maxSteps: 5, ...(c.providerOptions ? { providerOptions: c.providerOptions } : {}), ...(c.modelSettings ? { modelSettings: c.modelSettings } : {}) });
    for await (const chunk of out.fullStream) lines.push(JSON.stringify(wire(chunk)));
  } catch (e) {
    note = `stream threw: ${e?.message}`;
    lines.push(JSON.stringify({ type: '$threw', error: wire(e) }));
  }
  fs.writeFileSync(path.join(outDir, `${c.name}.jsonl`), lines.map(l => l + '\n').join(''));
  const log = await (await realFetch(`${base}/_ctl/log`)).json();
  fs.writeFileSync(path.join(outDir, `${c.name}.requests.json`), JSON.stringify(log, null, 1));
  console.error(`[mastra] ${c.name}: ${lines.length} chunks, ${log.length} request(s) ${note}`);
}
process.exit(0);
