// The playground page in headless Chromium at 1280x800: pick an agent, chat until idle, watch
// the live chunk stream and the background-task panel fill in, see tool calls in the chat,
// approve one, talk to an agent without memory, and check that after a long run every pane is
// still inside the viewport.
import { BASE, emit, launchChromium, unique } from "./lib.mjs";

const VIEWPORT = { width: 1280, height: 800 };
const browser = await launchChromium();
const transcript = (page) =>
  page.$$eval("#transcript .msg", (els) => els.map((e) => [e.className, e.textContent]));
try {
  const page = await browser.newPage({ viewport: VIEWPORT });
  const consoleErrors = [];
  page.on("console", (message) => { if (message.type() === "error") consoleErrors.push(message.text()); });
  page.on("pageerror", (error) => consoleErrors.push(String(error)));
  const status = (text) =>
    page.waitForFunction((t) => document.querySelector("#status").textContent === t, text, { timeout: 20000 });
  const say = async (text) => {
    await page.fill("#message", text);
    await page.click("#send");
    await status("done");
  };
  await page.goto(`${BASE}/playground`);
  await status("ready");
  const agents = await page.$$eval("#agent option", (options) => options.map((o) => o.value));
  await page.selectOption("#agent", "assistant");
  await page.fill("#resource", unique("pg-user"));
  await say("research octopus");
  const task = page.locator(".task").first();
  const research = {
    transcript: await transcript(page),
    chunkTypes: await page.$$eval("#chunks .chunk", (els) => els.map((e) => e.dataset.type)),
    task: {
      state: await task.getAttribute("data-state"),
      tool: await task.locator(".tool").textContent(),
      result: JSON.parse(await task.locator(".result").textContent()),
    },
  };

  // A tool that needs approval: approved from the chat.
  await page.fill("#message", "delete the report");
  await page.click("#send");
  await status("done");
  await page.click("#transcript .msg.tool button:text('Approve')");
  await status("done");
  const approval = (await transcript(page)).slice(research.transcript.length);

  // A long run: many chunk rows, then the layout.
  await say("slow");
  await say("weather in Paris");
  const layout = await page.evaluate(() => {
    const box = (el) => { const r = el.getBoundingClientRect(); return { left: r.left, top: r.top, right: r.right, bottom: r.bottom }; };
    return {
      panes: [...document.querySelectorAll("header, main > section")].map(box),
      scrollWidth: document.documentElement.scrollWidth,
      scrollHeight: document.documentElement.scrollHeight,
      chunkRows: document.querySelectorAll("#chunks .chunk").length,
    };
  });

  // An agent without memory: no thread is sent, and the run ends as "done".
  await page.selectOption("#agent", "plain");
  await say("hi there");
  const plain = (await transcript(page)).slice(-2);

  emit({ agents, research, approval, layout, viewport: VIEWPORT, plain, consoleErrors });
} finally {
  await browser.close();
}
