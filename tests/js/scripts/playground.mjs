// The playground page in headless Chromium: pick an agent, chat until idle, and watch the live
// chunk stream and the background-task panel fill in.
import { chromium } from "playwright-core";
import { BASE, emit, unique } from "./lib.mjs";

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  args: [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
  ],
});
try {
  const page = await browser.newPage();
  const consoleErrors = [];
  page.on("console", (message) => { if (message.type() === "error") consoleErrors.push(message.text()); });
  page.on("pageerror", (error) => consoleErrors.push(String(error)));
  await page.goto(`${BASE}/playground`);
  await page.waitForFunction(() => document.querySelector("#status").textContent === "ready");
  const agents = await page.$$eval("#agent option", (options) => options.map((o) => o.value));
  await page.selectOption("#agent", "assistant");
  await page.fill("#resource", unique("pg-user"));
  await page.fill("#message", "research octopus");
  await page.click("#send");
  await page.waitForFunction(() => document.querySelector("#status").textContent === "done", null, { timeout: 20000 });
  const task = page.locator(".task").first();
  emit({
    agents,
    transcript: await page.$$eval("#transcript .msg", (els) => els.map((e) => [e.className, e.textContent])),
    chunkTypes: await page.$$eval("#chunks .chunk", (els) => els.map((e) => e.dataset.type)),
    task: {
      state: await task.getAttribute("data-state"),
      tool: await task.locator(".tool").textContent(),
      result: JSON.parse(await task.locator(".result").textContent()),
    },
    consoleErrors,
  });
} finally {
  await browser.close();
}
