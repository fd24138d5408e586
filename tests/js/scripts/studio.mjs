// Mastra Studio (npm `mastra`, served by `mastra studio` on its own origin) driving a runstream
// server in headless Chromium with normal web security, as a user would: the agent list, a chat
// with a tool call, a background task and its follow-up turn, an approval, a thread reopened
// from memory, and an agent without memory; then those runs on the Traces page (a trace's spans,
// a span, a score added in Studio, feedback left in Studio), an agent's Traces tab, Metrics and Logs. Every
// request to the server is recorded; the script waits on pages and answers, never on the clock.
// Env: BASE (the server). Arguments: Studio's URL, then (optional) a folder for screenshots.
import { BASE, emit, launchChromium } from "./lib.mjs";

const [STUDIO, SHOTS] = process.argv.slice(2);
if (!STUDIO) throw new Error("usage: node scripts/studio.mjs <studio url> [screenshot folder]");
const TIMEOUT = 30000;
const STREAMS = [/\/threads\/subscribe$/, /\/background-tasks\/stream/];

/** Calls the server's API directly (as a Mastra client would; not recorded as Studio's). */
async function api(path, body) {
  const init = body === undefined ? {} : { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) };
  const response = await fetch(`${BASE}/api${path}`, init);
  return response.headers.get("content-type")?.includes("json") ? response.json() : response.text();
}

/** The first truthy value of `check(seen)`, asked again after each 100 ms until TIMEOUT; what
 * the check last put in `seen` goes into the timeout's error. */
async function until(what, check) {
  const deadline = Date.now() + TIMEOUT;
  const seen = {};
  for (;;) {
    const value = await check(seen);
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}: ${JSON.stringify(seen)}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

const browser = await launchChromium();
const requests = [];
const pageErrors = [];
const corsErrors = [];
const steps = {};
try {
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  // Studio's own telemetry and model-logo fetches go to the internet: answer them locally.
  await context.route(/^https:\/\/(.*\.)?(posthog\.com|models\.dev)\//, (route) => route.fulfill({ status: 204 }));
  const page = await context.newPage();
  page.on("pageerror", (error) => pageErrors.push(String(error)));
  page.on("console", (message) => {
    if (message.type() === "error" && /CORS|Access-Control/i.test(message.text())) corsErrors.push(message.text());
  });
  // Every request to the server, with its status once the response arrives (0: none, e.g. a
  // subscription still open when the test ends).
  const entries = new Map();
  // Requests still waiting for their answer (subscriptions, which stay open, aside).
  const pending = new Set();
  let onSettled = () => {};
  const settle = (request) => {
    pending.delete(request);
    if (pending.size === 0) onSettled();
  };
  page.on("request", (request) => {
    if (!request.url().startsWith(BASE)) return;
    const entry = { method: request.method(), url: request.url().slice(BASE.length), status: 0, at: Date.now() };
    entries.set(request, entry);
    requests.push(entry);
    if (!STREAMS.some((stream) => stream.test(entry.url.split("?")[0]))) pending.add(request);
  });
  page.on("response", (response) => {
    const entry = entries.get(response.request());
    if (entry) entry.status = response.status();
  });
  page.on("requestfinished", settle);
  page.on("requestfailed", (request) => {
    const entry = entries.get(request);
    if (entry) entry.failure = request.failure()?.errorText ?? "failed";
    settle(request);
  });
  /** Resolves once no request to the server waits for its answer (none left behind at the end). */
  const allAnswered = () =>
    pending.size === 0 ? Promise.resolve() : new Promise((resolve) => { onSettled = resolve; });
  /** Two animation frames: React has committed what the last answer changed. */
  const painted = () => page.evaluate(() => new Promise((resolve) => requestAnimationFrame(() => requestAnimationFrame(resolve))));
  // (after Studio's fade-in animations)
  const shot = async (name) => { if (SHOTS) { await page.waitForTimeout(800); await page.screenshot({ path: `${SHOTS}/${name}.png` }); } };
  const thread = page.locator('[data-testid="thread-wrapper"]');
  const send = async (text) => {
    const box = page.locator('textarea[data-slot="composer-input"]');
    await box.waitFor({ timeout: TIMEOUT });
    await box.fill(text);
    await box.press("Enter");
  };
  const newChat = async (agentId) => {
    await page.goto(`${STUDIO}/agents/${agentId}/chat/new`);
    await page.locator('textarea[data-slot="composer-input"]').waitFor({ timeout: TIMEOUT });
  };

  // 1. Every agent is listed.
  await page.goto(`${STUDIO}/agents`);
  await page.getByText("Assistant", { exact: true }).first().waitFor({ timeout: TIMEOUT });
  await page.getByText("plain", { exact: true }).first().waitFor({ timeout: TIMEOUT });
  steps.agents = await page.evaluate(() => document.body.innerText);
  await shot("studio-agents");

  // 2. A chat whose reply calls a tool: the streamed reply and the tool badge, the badge before
  // the reply's text in every state the page shows, also once Studio has merged the stored turn
  // (a refetch of the thread's messages that holds the reply).
  await newChat("assistant");
  await page.evaluate(() => {
    window.__orders = [];
    new MutationObserver(() => {
      const text = document.querySelector('[data-testid="thread-wrapper"]')?.innerText ?? "";
      const badge = text.indexOf("Get weather"), reply = text.indexOf("Tool said");
      const order = badge < 0 || reply < 0 ? null : badge < reply ? "badge-first" : "text-first";
      if (order && window.__orders.at(-1) !== order) window.__orders.push(order);
    }).observe(document.body, { subtree: true, childList: true, characterData: true });
  });
  const storedTurn = page.waitForResponse(
    async (response) => /\/memory\/threads\/[^/]+\/messages/.test(response.url()) && (await response.text()).includes("Tool said"),
    { timeout: 10000 },
  ).then(() => true, () => false);
  await send("weather in Paris");
  await thread.getByText("Tool said:").waitFor({ timeout: TIMEOUT });
  const badge = thread.locator('[data-testid="tool-badge"]', { hasText: "Get weather" }).first();
  await badge.waitFor({ timeout: TIMEOUT });
  const refetched = await storedTurn;
  await painted(); // the merge renders after the response
  steps.toolChat = {
    badge: (await badge.textContent()).trim(),
    text: await thread.innerText(),
    orders: await page.evaluate(() => window.__orders),
    refetched,
  };
  steps.weatherUrl = page.url();

  // 3. A background task: the tool badge with its task widget, then the follow-up turn.
  await newChat("assistant");
  await send("research octopus");
  await thread.getByText("All background work is done.").waitFor({ timeout: TIMEOUT });
  await thread.getByText("Working on it.").waitFor({ timeout: TIMEOUT });
  await thread.locator('[data-testid="tool-badge"]', { hasText: "Research" }).waitFor({ timeout: TIMEOUT });
  await page.getByRole("button", { name: "Show background task information" }).waitFor({ timeout: TIMEOUT });
  steps.backgroundThread = page.url().split("/threads/")[1];
  steps.background = {
    text: await thread.innerText(),
    badges: (await thread.locator('[data-testid="tool-badge"]').allTextContents()).map((t) => t.trim()),
    taskWidget: await page.getByRole("button", { name: "Show background task information" }).count(),
  };
  await shot("studio-background-task");

  // 4. A tool that needs approval: approve it, then its result and the reply.
  await newChat("assistant");
  await send("delete the report");
  const approve = page.getByRole("button", { name: /^Approve/ }).first();
  await approve.waitFor({ timeout: TIMEOUT });
  await shot("studio-approval");
  await approve.click();
  await thread.getByText('Tool said: {"deleted": "/tmp/report.txt"}').waitFor({ timeout: TIMEOUT });
  steps.approval = { text: await thread.innerText() };

  // 5. Reopen the first thread from memory: the conversation as it happened.
  await page.goto(steps.weatherUrl);
  await thread.getByText("Tool said:").waitFor({ timeout: TIMEOUT });
  await thread.locator('[data-testid="tool-badge"]', { hasText: "Get weather" }).waitFor({ timeout: TIMEOUT });
  steps.reopened = {
    text: await thread.innerText(),
    badges: (await thread.locator('[data-testid="tool-badge"]').allTextContents()).map((t) => t.trim()),
  };
  await shot("studio-thread-from-memory");

  // 6. An agent without memory streams over the plain route.
  await newChat("plain");
  await send("hi there");
  await thread.getByText("Hello from runstream!").waitFor({ timeout: TIMEOUT });
  steps.plain = { text: await thread.innerText() };

  // The other pages Studio has for what runstream serves: each loads without a page error.
  for (const path of ["/tools", "/tools/get_weather", "/workflows", "/workflows/approval/graph", "/observability", "/logs", "/metrics", "/scorers", "/datasets", "/settings"]) {
    await page.goto(`${STUDIO}${path}`);
    await page.waitForLoadState("networkidle");
  }
  steps.workflow = await page.goto(`${STUDIO}/workflows/approval/graph`).then(async () => {
    await page.getByText("review", { exact: true }).first().waitFor({ timeout: TIMEOUT });
    return await page.evaluate(() => document.body.innerText);
  });

  // 7. Observability. A run that fails (over the API) leaves an error log; the background run is
  // one stored trace: the agent run, its tool call and the continuation turn.
  await api("/agents/plain/stream", { messages: "fail now" });
  const tree = await until("the background run's trace in the span store", async () => {
    const { spans } = await api(`/observability/traces?threadId=${steps.backgroundThread}`);
    if (spans.length !== 1) return null;
    const trace = await api(`/observability/traces/${spans[0].traceId}`);
    const runs = trace.spans.filter((span) => span.spanType === "agent_run").length;
    return runs === 2 && trace.spans.some((span) => span.name === "execute_tool research") ? trace : null;
  });
  const traceId = tree.traceId;
  const root = tree.spans.find((span) => span.parentSpanId === null);
  // Every run's trace: the weather chat, the background run (its continuation turn inside it),
  // the approval's suspended run and its resumption, "hi there" and the failed run. A run's spans
  // reach the store within the processor's flush delay, whichever ended last; a trace that never
  // comes fails here with the ones that did.
  const RUN_TRACES = 6;
  await until("every run's trace and the failed run's log", async (seen) => {
    const listed = await api(`/observability/traces?perPage=${RUN_TRACES + 4}`);
    const logs = await api("/observability/logs?perPage=1&level=error");
    seen.traces = listed.spans.map((span) => [span.name, span.threadId ?? null, span.error ? "error" : "ok"]);
    seen.errorLogs = logs.logs.length;
    return listed.pagination.total >= RUN_TRACES && logs.logs.length === 1;
  });
  const stored = (await api("/observability/traces?perPage=1")).pagination.total;

  // The Traces page lists every stored trace.
  // (a row is a button whose text starts with the trace's start, "Dec 6 10:31:09")
  const rows = page.getByRole("button").filter({ hasText: /^[A-Z][a-z]{2} \d+ \d\d:\d\d:\d\d/ });
  await page.goto(`${STUDIO}/traces`);
  await until("the Traces page's rows", async (seen) => {
    seen.stored = stored;
    seen.rows = await rows.allInnerTexts();
    return (await rows.count()) === stored;
  });
  steps.traces = { rows: (await rows.allInnerTexts()).map((text) => text.split("\n").map((t) => t.trim()).filter(Boolean)), stored };

  // The background run's trace opens with its span tree; a span opens with its attributes.
  await page.goto(`${STUDIO}/traces?traceId=${traceId}`);
  const spanButtons = page.getByRole("button", { name: /^(invoke_agent|chat|execute_tool) / });
  await spanButtons.getByText("execute_tool research").waitFor({ timeout: TIMEOUT });
  await until("the whole span tree", async () => (await spanButtons.count()) === tree.spans.length);
  const spanTree = (await spanButtons.allInnerTexts()).map((text) => text.split("\n")[0].trim());
  // Scored in Studio with the app's registered scorer; the score is stored on the root span.
  await page.getByRole("button", { name: "Score trace" }).click();
  await page.getByRole("combobox", { name: "Select scorer" }).click();
  await page.getByRole("option", { name: "Helpfulness" }).click();
  await page.getByRole("button", { name: "Start Scoring" }).click();
  await until("the score Studio asked for", async () =>
    (await api(`/observability/scores?traceId=${traceId}&spanId=${root.spanId}`)).scores.length === 1);
  // Studio then opens the trace's scores: the new one is listed with its reason.
  await page.getByText(/Answered \d+ message/).first().waitFor({ timeout: TIMEOUT });
  const scored = await page.evaluate(() => document.body.innerText);
  await spanButtons.filter({ hasText: "execute_tool research" }).click();
  await page.getByText(/"backgroundTaskId"/).waitFor({ timeout: TIMEOUT });
  const spanPanel = await page.evaluate(() => document.body.innerText);
  // Its scores (the tool call's own: none). The tab may still show the root span's count while
  // Studio loads the tool call's, so wait until it shows what the API lists for that span.
  const tool = tree.spans.find((span) => span.name === "execute_tool research");
  const toolScores = (await api(`/observability/scores?traceId=${traceId}&spanId=${tool.spanId}`)).scores.length;
  // (clicked again while waiting: a slow machine may show the tab before Studio has the span's)
  await until("the tool call's scores tab", async (seen) => {
    const tab = page.getByRole("tab", { name: /^Scores/ }).first();
    await tab.click();
    seen.tab = (await tab.innerText()).trim();
    return seen.tab === `Scores (${toolScores})`;
  });
  const scores = (await page.getByRole("tab", { name: /^Scores/ }).first().innerText()).trim();
  await page.getByRole("tab", { name: /^Feedback/ }).first().click();
  await page.getByPlaceholder("Leave feedback...").first().fill("Clear and quick.");
  await page.getByRole("button", { name: "Send feedback" }).first().click();
  await page.getByRole("tab", { name: "Feedback (1)" }).first().waitFor({ timeout: TIMEOUT });
  await page.getByText("Clear and quick.").first().waitFor({ timeout: TIMEOUT });
  const feedback = (await api(`/observability/feedback?traceId=${traceId}`)).feedback.map((f) => [f.feedbackType, f.value]);
  steps.trace = { traceId, spanTree, spanPanel, scored, scores, feedback };
  await shot("studio-trace");

  // An agent's Traces tab: that agent's runs only.
  const assistantRuns = (await api("/observability/traces?entityId=assistant&perPage=1")).pagination.total;
  await page.goto(`${STUDIO}/agents/assistant/traces`);
  await until("the agent's rows", async () => {
    const texts = await rows.allInnerTexts();
    return texts.length === assistantRuns && texts.every((text) => text.includes("invoke_agent Assistant"));
  });
  steps.agentTraces = { rows: await rows.count(), assistantRuns };

  // Metrics from the stored spans; the failed run's log.
  const agentRuns = (await api("/observability/metrics/aggregate", { name: ["mastra_agent_duration_ms"], aggregation: "count" })).value;
  await page.goto(`${STUDIO}/metrics`);
  await page.getByText("Total Agent Runs").waitFor({ timeout: TIMEOUT });
  await until("the agent-run count", async () => (await page.evaluate(() => document.body.innerText)).includes(`Total Agent Runs\n${agentRuns}\n`));
  steps.metrics = { text: await page.evaluate(() => document.body.innerText), agentRuns };
  await page.goto(`${STUDIO}/logs`);
  await page.getByText(/model exploded/).first().waitFor({ timeout: TIMEOUT });
  steps.logs = { text: await page.evaluate(() => document.body.innerText) };
  await shot("studio-logs");

  // Nothing left unanswered when the test ends (a request still in flight would be "left behind"),
  // and no poll starts after that: the page leaves Studio.
  await allAnswered();
  await page.goto("about:blank");
} catch (error) {
  steps.failure = String(error);
} finally {
  await browser.close();
}
emit({ steps, requests, pageErrors, corsErrors });
