// `npm run bench:routing-quality`: how well requests are placed on nodes that cache prompt
// prefixes. Starts 8 simulated caching nodes (node-sim's engine model), the ZML stack over
// them, and a client process; for each workload, runs each side from cold caches with the
// same open-loop arrivals, and reports TTFT, output tokens/s, and the prefix-cache hit rate
// and prefill tokens the nodes themselves counted. Writes routing-quality.md and .json to
// bench-results/ (or `--out`). Exits 1 when a request failed, 2 when the harness broke.
import { mkdirSync, writeFileSync } from "node:fs";
import { availableParallelism, loadavg } from "node:os";
import { join, resolve } from "node:path";
import { performance } from "node:perf_hooks";
import { parseArgs } from "node:util";
import { repoRoot } from "@zml/harness";
import { buildIdOf } from "./build.ts";
import { startQualityClient } from "./quality/client-process.ts";
import type { QualityClient } from "./quality/client-process.ts";
import { delta, resetPrefixCaches, waitUntilIdle } from "./quality/node-counters.ts";
import type { NodeCounters } from "./quality/node-counters.ts";
import type { QualityTarget } from "./quality/plan.ts";
import { renderQualityReport, SIDE_KEYS } from "./quality/report.ts";
import type { QualityRow, QualitySummary, SideKey } from "./quality/report.ts";
import {
  QUALITY_MODEL,
  QUALITY_NODES,
  routedPerReplica,
  startQualityNodes,
  startZml,
  stopNodes,
  ZML_KEYS,
} from "./quality/stack.ts";
import type { QualityNode, ZmlStack } from "./quality/stack.ts";
import { WORKLOAD_KEYS, workloads } from "./quality/workloads.ts";
import type { Workload, WorkloadKey } from "./quality/workloads.ts";

const USAGE = `usage: node test/bench/routing-quality.ts [--size full|short|smallest]
  [--workloads ${WORKLOAD_KEYS.join(",")}] [--sides ${SIDE_KEYS.join(",")}]
  [--warmup-s 5] [--duration-s 8] [--rate-scale 1] [--seed 40] [--json] [--out bench-results]
Each side: caches reset, --warmup-s of the workload unmeasured (from cold), then --duration-s
measured. Sizes: full (every workload and side, 5 + 8 s a side: about 5 minutes), short
(3 + 4 s a side: about 2.5 minutes), smallest (shared-uniform at half rate; random,
tenant-hash and ZML; 1 + 3 s a side: for tests, about 20 s).
`;

const SIZES = {
  full: { warmupS: 5, durationS: 8, rateScale: 1, workloads: WORKLOAD_KEYS, sides: SIDE_KEYS },
  short: { warmupS: 3, durationS: 4, rateScale: 1, workloads: WORKLOAD_KEYS, sides: SIDE_KEYS },
  smallest: {
    warmupS: 1,
    durationS: 3,
    rateScale: 0.5,
    workloads: ["shared-uniform"] as const,
    sides: ["random", "tenant-hash", "zml"] as const,
  },
} as const;
type Size = keyof typeof SIZES;

function options() {
  const { values } = parseArgs({
    options: {
      size: { type: "string", default: "full" },
      workloads: { type: "string" },
      sides: { type: "string" },
      "warmup-s": { type: "string" },
      "duration-s": { type: "string" },
      "rate-scale": { type: "string" },
      seed: { type: "string", default: "40" },
      json: { type: "boolean", default: false },
      out: { type: "string" },
      help: { type: "boolean", short: "h", default: false },
    },
  });
  if (!(values.size in SIZES))
    throw new Error(`--size: expected one of ${Object.keys(SIZES).join(", ")}`);
  const size = SIZES[values.size as Size];
  const list = <T extends string>(
    name: string,
    raw: string | undefined,
    known: readonly T[],
    fallback: readonly T[],
  ): T[] => {
    if (raw === undefined) return [...fallback];
    const items = raw.split(",").map((s) => s.trim());
    const unknown = items.filter((s) => !known.includes(s as T));
    if (unknown.length > 0) throw new Error(`--${name}: unknown ${unknown.join(", ")}`);
    return items as T[];
  };
  const number = (
    name: string,
    raw: string | undefined,
    fallback: number,
    integer: boolean,
    min = Number.MIN_VALUE,
  ) => {
    if (raw === undefined) return fallback;
    const n = Number(raw);
    if (!Number.isFinite(n) || n < min || (integer && !Number.isInteger(n))) {
      const what = min === 0 ? "at least 0" : `a positive ${integer ? "integer" : "number"}`;
      throw new Error(`--${name}: expected ${what}`);
    }
    return n;
  };
  return {
    help: values.help,
    json: values.json,
    out: values.out,
    size: values.size as Size,
    workloads: list("workloads", values.workloads, WORKLOAD_KEYS, size.workloads),
    sides: list("sides", values.sides, SIDE_KEYS, size.sides),
    warmupS: number("warmup-s", values["warmup-s"], size.warmupS, false, 0),
    durationS: number("duration-s", values["duration-s"], size.durationS, false),
    rateScale: number("rate-scale", values["rate-scale"], size.rateScale, false),
    seed: number("seed", values.seed, 40, true),
  };
}

const progress = (line: string) => process.stderr.write(`[routing-quality] ${line}\n`);

interface Run {
  nodes: QualityNode[];
  zml: ZmlStack | undefined;
  client: QualityClient;
  opts: ReturnType<typeof options>;
}

function targetOf(run: Run, side: SideKey): QualityTarget {
  const urls = run.nodes.map((n) => n.url);
  switch (side) {
    case "random":
      return { kind: "direct", urls, pick: "random" };
    case "tenant-hash":
      return { kind: "direct", urls, pick: "tenant-hash" };
    case "zml":
    case "zml-2-dispatchers":
      return { kind: "gateway", url: run.zml!.intakeUrl, apiKey: ZML_KEYS.cacheAware };
    case "zml-no-affinity":
      return { kind: "gateway", url: run.zml!.intakeUrl, apiKey: ZML_KEYS.loadOnly };
  }
}

const sum = (rows: NodeCounters[], key: keyof NodeCounters) => rows.reduce((n, r) => n + r[key], 0);

async function runSide(run: Run, workload: Workload, side: SideKey): Promise<QualityRow> {
  const urls = run.nodes.map((n) => n.url);
  // Cold caches: the last side's answers have ended, then every node forgets its prefixes.
  await waitUntilIdle(urls, 120_000);
  await resetPrefixCaches(urls);
  // A cold gateway too: what the last side taught it (latency averages, measured speeds, its
  // prefix index) must not steer this one.
  if (side.startsWith("zml")) {
    await run.zml?.stop();
    run.zml = undefined;
    progress(`starting a fresh ZML stack for ${side}`);
    run.zml = await startZml(run.nodes, QUALITY_NODES.maxRunning);
  }
  const extra = side === "zml-2-dispatchers" ? await run.zml!.addDispatcher() : undefined;
  try {
    const replicas = side.startsWith("zml") ? run.zml!.dispatcherOpsUrls() : [];
    const routedBefore = await routedPerReplica(replicas);
    const result = await run.client.run({
      workload: workload.key,
      seed: run.opts.seed,
      salt: side,
      warmupS: run.opts.warmupS,
      durationS: run.opts.durationS,
      ratePerS: workload.ratePerS * run.opts.rateScale,
      model: QUALITY_MODEL,
      target: targetOf(run, side),
      drainTimeoutMs: 120_000,
      nodeUrls: urls,
    });
    const grown = result.nodesAtEnd.map((end, i) => delta(result.nodesAtStart[i]!, end));
    const routedAfter = await routedPerReplica(replicas);
    const queries = sum(grown, "prefixCacheQueries");
    const hits = sum(grown, "prefixCacheHits");
    const answered = sum(grown, "requestsSucceeded");
    return {
      workload: workload.key,
      side,
      sent: result.sent,
      completed: result.completed,
      failed: result.failed,
      failures: result.failures,
      ttftMs: { p50: result.ttftMs.p50, p90: result.ttftMs.p90, p99: result.ttftMs.p99 },
      outputTokensPerS: sum(grown, "generationTokens") / (result.elapsedMs / 1000),
      hitRate: queries > 0 ? hits / queries : Number.NaN,
      prefillTokensPerRequest: answered > 0 ? (queries - hits) / answered : Number.NaN,
      busiestNodeShare:
        answered > 0 ? Math.max(...grown.map((g) => g.requestsSucceeded)) / answered : Number.NaN,
      expectedCachedTokens: result.expectedCachedTokens,
      routedPerReplica:
        replicas.length === 0 ? null : routedAfter.map((n, i) => n - routedBefore[i]!),
      elapsedS: result.elapsedMs / 1000,
    };
  } finally {
    await extra?.stop();
  }
}

async function main(): Promise<number> {
  const opts = options();
  if (opts.help) {
    process.stdout.write(USAGE);
    return 0;
  }
  const startedAt = performance.now();
  const loadAtStart = loadavg();
  const root = repoRoot();
  const outDir = opts.out === undefined ? join(root, "bench-results") : resolve(opts.out);
  const all = workloads();
  const chosen = opts.workloads.map((k: WorkloadKey) => all[k]);
  progress(`${availableParallelism()} CPUs; starting ${QUALITY_NODES.count} caching nodes`);
  const nodes = await startQualityNodes(QUALITY_NODES);
  const rows: QualityRow[] = [];
  let run: Run | undefined;
  try {
    // Each gateway side starts its own ZML stack (runSide).
    run = { nodes, zml: undefined, client: await startQualityClient(), opts };
    for (const workload of chosen) {
      for (const side of opts.sides) {
        const t0 = performance.now();
        const row = await runSide(run, workload, side);
        rows.push(row);
        progress(
          `${workload.key} / ${side}: ${row.completed} answered, ${row.failed} failed, ` +
            `hit rate ${(row.hitRate * 100).toFixed(1)} %, TTFT p90 ${row.ttftMs.p90.toFixed(1)} ms ` +
            `(${((performance.now() - t0) / 1000).toFixed(1)} s)`,
        );
      }
    }
  } finally {
    await run?.client.close();
    await run?.zml?.stop();
    await stopNodes(nodes);
  }

  const summary: QualitySummary = {
    date: new Date().toISOString(),
    build: buildIdOf(root),
    machine: { cpus: availableParallelism(), loadAverage: { start: loadAtStart, end: loadavg() } },
    settings: {
      size: opts.size,
      warmupS: opts.warmupS,
      durationS: opts.durationS,
      seed: opts.seed,
      rateScale: opts.rateScale,
      nodes: QUALITY_NODES,
    },
    workloads: chosen,
    rows,
    elapsedS: (performance.now() - startedAt) / 1000,
  };
  const command = `node test/bench/routing-quality.ts ${process.argv.slice(2).join(" ")}`.trim();
  const report = renderQualityReport(summary, command);
  mkdirSync(outDir, { recursive: true });
  writeFileSync(join(outDir, "routing-quality.md"), report);
  writeFileSync(join(outDir, "routing-quality.json"), `${JSON.stringify(summary, null, 2)}\n`);
  process.stdout.write(opts.json ? `${JSON.stringify(summary)}\n` : report);
  const failed = rows.reduce((n, r) => n + r.failed, 0);
  if (failed > 0) progress(`${failed} request(s) failed`);
  return failed > 0 ? 1 : 0;
}

process.once("SIGINT", () => process.exit(130));
try {
  process.exitCode = await main();
} catch (error) {
  process.stderr.write(
    `routing-quality: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
  );
  process.stderr.write(USAGE);
  process.exitCode = 2;
}
