// Mastra Studio (npm `mastra`, served by `mastra studio` on its own origin) driving a runstream
// server in headless Chromium with normal web security, as a user would: the agent list, a chat
// with a tool call, a background task and its follow-up turn, an approval, a thread reopened
// from memory, and an agent without memory. Every request to the server is recorded.
// Env: BASE (the server). Arguments: Studio's URL, then (optional) a folder for screenshots.
import { BASE, emit, launchChromium } from "./lib.mjs";

const [STUDIO, SHOTS] = process.argv.slice(2);
if (!STUDIO) throw new Error("usage: node scripts/studio.mjs <studio url> [screenshot folder]");
const TIMEOUT = 30000;

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
  page.on("request", (request) => {
    if (!request.url().startsWith(BASE)) return;
    const entry = { method: request.method(), url: request.url().slice(BASE.length), status: 0, at: Date.now() };
    entries.set(request, entry);
    requests.push(entry);
  });
  page.on("response", (response) => {
    const entry = entries.get(response.request());
    if (entry) entry.status = response.status();
  });
  page.on("requestfailed", (request) => {
    const entry = entries.get(request);
    if (entry) entry.failure = request.failure()?.errorText ?? "failed";
  });
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
  await page.waitForTimeout(300); // the merge renders after the response
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

  // Let the page settle so retry loops would show up in the counts.
  await page.waitForTimeout(1500);
  // Requests still unanswered (Studio polls) get their answer before the browser closes, so a
  // status 0 means the server never answered (streams answer with their headers at once).
  const unanswered = [...entries].filter(([, entry]) => entry.status === 0 && !entry.failure);
  await Promise.race([
    Promise.all(unanswered.map(([request]) => request.response().catch(() => null))),
    page.waitForTimeout(TIMEOUT),
  ]);
} catch (error) {
  steps.failure = String(error);
} finally {
  await browser.close();
}
emit({ steps, requests, pageErrors, corsErrors });
