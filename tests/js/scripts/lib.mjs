// Shared helpers for the interop scripts: each script prints one JSON result line on stdout.
import { MastraClient } from "@mastra/client-js";

export const BASE = process.env.BASE;
if (!BASE) throw new Error("set BASE to the server URL");

export const client = new MastraClient({ baseUrl: BASE });
export const agent = client.getAgent("assistant");

export function emit(result) {
  process.stdout.write(JSON.stringify(result) + "\n");
}

export function unique(prefix) {
  return `${prefix}-${Math.random().toString(36).slice(2, 10)}`;
}

// Every chunk client-js delivers to onChunk, in order.
export async function collect(response) {
  const chunks = [];
  await response.processDataStream({ onChunk: async (chunk) => { chunks.push(chunk); } });
  return chunks;
}

export const types = (chunks) => chunks.map((c) => c.type);
export const text = (chunks) => chunks.filter((c) => c.type === "text-delta").map((c) => c.payload.text).join("");

export async function failure(promise) {
  try {
    await promise;
    return null;
  } catch (error) {
    return { name: error.name, status: error.status, body: error.body, message: String(error.message) };
  }
}

// Debian's headless Chromium, quiet: no GPU, QUIC, first-run or background network chatter.
export async function launchChromium() {
  const { chromium } = await import("playwright-core");
  return chromium.launch({
    executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
}
