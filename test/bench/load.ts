// The load generator: its own process, so that it never competes with the coordinator's event
// loop. Reads one LoadPlan per stdin line, runs it with undici connection pools (kept warm
// across rounds) and prints one LoadResult per stdout line. Exits when stdin closes.
import { performance } from "node:perf_hooks";
import { createInterface } from "node:readline";
import { Pool } from "undici";
import type { LoadPlan, LoadResult } from "./plan.ts";
import { Samples } from "./stats.ts";

const pools = new Map<string, Pool>();

function poolFor(origin: string): Pool {
  let pool = pools.get(origin);
  if (pool === undefined) {
    // More connections than any plan's concurrency: every worker keeps its own socket.
    pool = new Pool(origin, { connections: 512, pipelining: 1, keepAliveTimeout: 60_000 });
    pools.set(origin, pool);
  }
  return pool;
}

/** Checks one SSE body: every event is JSON, the tokens are all there, `[DONE]` ends it. */
function checkStream(
  text: string,
  expectTokens: number | undefined,
): { ok: true; content: string } | { ok: false; error: string } {
  if (text.includes("event: error"))
    return { ok: false, error: "stream ended with an error event" };
  const events = text.split("\n\n");
  if (events.pop() !== "") return { ok: false, error: "stream truncated mid-event" };
  if (events.pop() !== "data: [DONE]") return { ok: false, error: "stream without [DONE]" };
  let tokens = 0;
  let content = "";
  for (const event of events) {
    if (!event.startsWith("data: ")) return { ok: false, error: "garbled event" };
    let chunk: { choices?: Array<{ delta?: { content?: unknown } }> };
    try {
      chunk = JSON.parse(event.slice(6)) as typeof chunk;
    } catch {
      return { ok: false, error: "event is not JSON" };
    }
    const piece = chunk.choices?.[0]?.delta?.content;
    if (typeof piece === "string" && piece.length > 0) {
      tokens += 1;
      content += piece;
    }
  }
  if (expectTokens !== undefined && tokens !== expectTokens) {
    return { ok: false, error: `expected ${expectTokens} tokens, got ${tokens}` };
  }
  return { ok: true, content };
}

async function run(plan: LoadPlan): Promise<LoadResult> {
  const pool = poolFor(plan.origin);
  const body = Buffer.from(plan.body);
  const latency = new Samples();
  const ttft = new Samples();
  const gap = new Samples();
  const streams: string[] = [];
  const failures: string[] = [];
  let completed = 0;
  let failed = 0;
  let referenceLength = -1;
  const fail = (what: string) => {
    failed += 1;
    if (failures.length < 5) failures.push(what);
  };

  const once = async (): Promise<void> => {
    const startedAt = performance.now();
    const res = await pool.request({
      path: plan.path,
      method: "POST",
      headers: plan.headers,
      body,
    });
    if (res.statusCode !== 200) {
      const text = await res.body.text();
      fail(`HTTP ${res.statusCode}: ${text.slice(0, 200)}`);
      return;
    }
    if (!plan.stream) {
      const bytes = (await res.body.arrayBuffer()).byteLength;
      latency.push(performance.now() - startedAt);
      // The simulated node's answers to one plan all have the same length.
      if (referenceLength === -1) referenceLength = bytes;
      if (bytes !== referenceLength) {
        fail(`body of ${bytes} bytes, expected ${referenceLength}`);
        return;
      }
      completed += 1;
      return;
    }
    const parts: Buffer[] = [];
    let last = 0;
    for await (const chunk of res.body as AsyncIterable<Buffer>) {
      const now = performance.now();
      if (parts.length === 0) ttft.push(now - startedAt);
      else gap.push(now - last);
      last = now;
      parts.push(chunk);
    }
    latency.push(performance.now() - startedAt);
    // Checked after the round, so that parsing never delays another stream's reads.
    streams.push(Buffer.concat(parts).toString("utf8"));
  };

  const startedAt = performance.now();
  const deadline = startedAt + plan.durationMs;
  let endedAt = startedAt;
  const worker = async (_: unknown, i: number) => {
    const delayMs = ((plan.spreadStartsMs ?? 0) * i) / plan.concurrency;
    if (delayMs > 0) await new Promise((resolve) => setTimeout(resolve, delayMs));
    while (performance.now() < deadline) {
      try {
        await once();
      } catch (error) {
        const e = error as { code?: string; message?: string };
        fail(`${e.code ?? "error"}: ${e.message ?? String(error)}`);
      }
      endedAt = performance.now();
    }
  };
  await Promise.all(Array.from({ length: plan.concurrency }, worker));
  const elapsedMs = endedAt - startedAt;

  let broken = 0;
  let reference: string | undefined;
  for (const text of streams) {
    const checked = checkStream(text, plan.expectTokens);
    reference ??= checked.ok ? checked.content : undefined;
    if (!checked.ok) fail(checked.error);
    else if (checked.content !== reference) fail("stream content differs from the others");
    else {
      completed += 1;
      continue;
    }
    broken += 1;
  }

  return {
    id: plan.id,
    completed,
    failed,
    failures,
    elapsedMs,
    rps: elapsedMs > 0 ? (completed * 1000) / elapsedMs : 0,
    latency: latency.percentiles(),
    ...(plan.stream
      ? { stream: { ttft: ttft.percentiles(), gap: gap.percentiles(), broken } }
      : {}),
  };
}

async function main(): Promise<void> {
  const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
  for await (const line of lines) {
    if (line.trim() === "") continue;
    const result = await run(JSON.parse(line) as LoadPlan);
    process.stdout.write(`${JSON.stringify(result)}\n`);
  }
  await Promise.all([...pools.values()].map((p) => p.close()));
}

await main();
