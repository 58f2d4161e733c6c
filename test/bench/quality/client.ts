// The routing-quality bench's client: its own process, so that it never competes with the
// coordinator's event loop. Reads one QualityPlan per stdin line, sends that workload's
// requests open-loop (each at its offset, whatever the answers do), streams every answer,
// and prints one QualityResult per stdout line. Exits when stdin closes.
import { performance } from "node:perf_hooks";
import { createInterface } from "node:readline";
import { setTimeout as sleep } from "node:timers/promises";
import { Agent } from "undici";
import { quantile } from "../stats.ts";
import { readNodeCounters } from "./node-counters.ts";
import type { NodeCounters } from "./node-counters.ts";
import type { QualityPlan, QualityResult, QualityTarget } from "./plan.ts";
import { generateRequests, hashedNode, seededRandom, workloads } from "./workloads.ts";
import type { QualityRequest } from "./workloads.ts";

// Open-loop arrivals can pile up behind a slow node: every stream keeps its own socket.
const agent = new Agent({ connections: 4096, pipelining: 1, keepAliveTimeout: 60_000 });

function chooser(target: QualityTarget, seed: number): (r: QualityRequest) => string {
  if (target.kind === "gateway") return () => `${target.url}/v1/chat/completions`;
  const { urls } = target;
  if (target.pick === "tenant-hash") {
    return (r) => `${urls[hashedNode(r.affinityKey, urls.length)]!}/v1/chat/completions`;
  }
  const random = seededRandom(seed ^ 0xd1ce);
  return () => `${urls[Math.floor(random() * urls.length)]!}/v1/chat/completions`;
}

const CACHED_TOKENS = /(?:^|[;,\s])cached-tokens=(\d+)/;

async function run(plan: QualityPlan): Promise<QualityResult> {
  const workload = workloads()[plan.workload];
  const requests = generateRequests(
    workload,
    plan.seed,
    plan.warmupS + plan.durationS,
    plan.ratePerS,
    plan.salt,
  );
  const measureFromMs = plan.warmupS * 1000;
  const measured = requests.filter((r) => r.atMs >= measureFromMs).length;
  const urlOf = chooser(plan.target, plan.seed);
  const headers: Record<string, string> = { "content-type": "application/json" };
  if (plan.target.kind === "gateway") headers.authorization = `Bearer ${plan.target.apiKey}`;
  const ttft: number[] = [];
  const failures: string[] = [];
  let completed = 0;
  let failed = 0;
  let cachedSum = 0;
  let cachedCount = 0;
  let lastEnd = 0;
  const fail = (what: string) => {
    failed += 1;
    if (failures.length < 5) failures.push(what);
  };

  const send = async (r: QualityRequest, signal: AbortSignal): Promise<void> => {
    const startedAt = performance.now();
    const counted = r.atMs >= measureFromMs;
    const body = JSON.stringify({
      model: plan.model,
      messages: r.messages,
      max_tokens: workload.outputTokens,
      stream: true,
    });
    const res = await agent.request({
      origin: new URL(urlOf(r)).origin,
      path: "/v1/chat/completions",
      method: "POST",
      headers,
      body,
      signal,
    });
    if (res.statusCode !== 200) {
      fail(`HTTP ${res.statusCode}: ${(await res.body.text()).slice(0, 200)}`);
      return;
    }
    const routing = res.headers["x-zml-routing"];
    const cached = typeof routing === "string" ? CACHED_TOKENS.exec(routing) : null;
    if (cached !== null && counted) {
      cachedSum += Number(cached[1]);
      cachedCount += 1;
    }
    let first = true;
    let tail = "";
    for await (const chunk of res.body as AsyncIterable<Buffer>) {
      if (first) {
        if (counted) ttft.push(performance.now() - startedAt);
        first = false;
      }
      tail = (tail + chunk.toString("utf8")).slice(-64);
    }
    if (!tail.includes("data: [DONE]")) {
      fail("stream ended without [DONE]");
      return;
    }
    if (!counted) return;
    completed += 1;
    lastEnd = performance.now();
  };

  const abort = new AbortController();
  const startedAt = performance.now();
  const measuringAt = startedAt + measureFromMs;
  // The nodes' counters as measuring starts, read while the requests keep going out.
  let atStart: Promise<NodeCounters[]> | undefined;
  const readAtStart = () => (atStart ??= Promise.all(plan.nodeUrls.map(readNodeCounters)));
  const startTimer = setTimeout(() => void readAtStart().catch(() => undefined), measureFromMs);
  const pending: Promise<void>[] = [];
  for (const r of requests) {
    const wait = startedAt + r.atMs - performance.now();
    if (wait > 1) await sleep(wait);
    // A late timer must not let a measured request out before the reading.
    if (r.atMs >= measureFromMs) await readAtStart();
    pending.push(
      send(r, abort.signal).catch((error: unknown) => {
        const e = error as { code?: string; message?: string };
        fail(`${e.code ?? "error"}: ${e.message ?? String(error)}`);
      }),
    );
  }
  const drained = Promise.all(pending);
  const timer = setTimeout(() => abort.abort(new Error("drain timeout")), plan.drainTimeoutMs);
  await drained;
  clearTimeout(timer);
  clearTimeout(startTimer);
  const nodesAtStart = await readAtStart();
  const nodesAtEnd = await Promise.all(plan.nodeUrls.map(readNodeCounters));

  const sorted = ttft.sort((a, b) => a - b);
  return {
    id: plan.id,
    sent: measured,
    completed,
    failed,
    failures,
    ttftMs: {
      p50: quantile(sorted, 0.5),
      p90: quantile(sorted, 0.9),
      p99: quantile(sorted, 0.99),
      count: sorted.length,
    },
    elapsedMs: Math.max(0, lastEnd - measuringAt),
    nodesAtStart,
    nodesAtEnd,
    expectedCachedTokens: cachedCount === 0 ? null : cachedSum / cachedCount,
  };
}

async function main(): Promise<void> {
  const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
  for await (const line of lines) {
    if (line.trim() === "") continue;
    const result = await run(JSON.parse(line) as QualityPlan);
    process.stdout.write(`${JSON.stringify(result)}\n`);
  }
  await agent.close();
}

await main();
