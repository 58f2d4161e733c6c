// `npm run bench`: starts its own nats-server, the four services and simulated nodes, measures
// the gateway against direct calls to the same nodes, and prints the figures (markdown
// tables; `--json` for one JSON document). Writes latest.md and latest.json to bench-results/
// (or `--out`).
// Exits 1 when any request failed, 2 when the harness itself broke, 3 when a row fell more
// than 15 % against the floor since the last run of the same build (compare.ts).
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { arch, availableParallelism, cpus, loadavg, release, type } from "node:os";
import { join, resolve } from "node:path";
import { performance } from "node:perf_hooks";
import { parseArgs } from "node:util";
import { repoRoot } from "@zml/harness";
import { allocationMeter } from "./allocation.ts";
import type { AllocationMeter, ProbedService } from "./allocation.ts";
import { allocFileOf, startBenchStack } from "./bench-stack.ts";
import type { BenchNodeSpec, BenchStack } from "./bench-stack.ts";
import { startLoadGenerator } from "./load-client.ts";
import type { LoadGenerator } from "./load-client.ts";
import { measureBatch } from "./batch-bench.ts";
import { buildIdOf } from "./build.ts";
import { compareAgainstFloor, renderComparison } from "./compare.ts";
import type { BatchFigures } from "./batch-bench.ts";
import { FEATURE_VARIANTS, measureFeatures } from "./features.ts";
import { measureMemory } from "./memory.ts";
import type { ServiceMemory } from "./memory.ts";
import { renderReport } from "./report.ts";
import { runRoutingBench } from "./routing-bench.ts";
import type { RoutingFigures } from "./routing-bench.ts";
import { SCENARIOS, runScenario, warmStack } from "./scenarios.ts";
import type { RunSettings } from "./scenarios.ts";
import {
  judgeFleetGoals,
  judgeFloorGoals,
  judgeSealingGoals,
  judgeTargets,
  summariseScenario,
} from "./summary.ts";
import type { BenchSummary, FeatureRow, ScenarioSummary } from "./summary.ts";

const USAGE = `usage: node test/bench/run.ts [--json] [--quick] [--rounds 5] [--duration-ms 1000]
  [--warmup-ms 400] [--stack-warmup-ms 12000] [--only sequential,c16,...] [--skip-routing] [--skip-batch] [--profile intake,dispatcher,td-proxy,floor-intake,floor-worker,load]
  [--alloc intake,dispatcher]
  [--features | --features-only] [--variants default,tracing-off,...] [--settle-ms 10000]
  [--out bench-results]
scenarios: ${SCENARIOS.map((s) => (s.onRequest ? `${s.key} (with --only)` : s.key)).join(", ")}
`;

function options() {
  const { values } = parseArgs({
    options: {
      json: { type: "boolean", default: false },
      quick: { type: "boolean", default: false },
      rounds: { type: "string" },
      "duration-ms": { type: "string" },
      "warmup-ms": { type: "string" },
      "stack-warmup-ms": { type: "string" },
      only: { type: "string" },
      "skip-routing": { type: "boolean", default: false },
      "skip-batch": { type: "boolean", default: false },
      profile: { type: "string" },
      alloc: { type: "string" },
      features: { type: "boolean", default: false },
      "features-only": { type: "boolean", default: false },
      variants: { type: "string" },
      "settle-ms": { type: "string" },
      out: { type: "string" },
      help: { type: "boolean", short: "h", default: false },
    },
  });
  const int = (name: string, value: string | undefined, fallback: number, min = 1) => {
    if (value === undefined) return fallback;
    const n = Number(value);
    if (!Number.isInteger(n) || n < min) {
      throw new Error(`--${name}: expected an integer of at least ${min}`);
    }
    return n;
  };
  const settings: RunSettings = {
    rounds: int("rounds", values.rounds, values.quick ? 2 : 5),
    durationMs: int("duration-ms", values["duration-ms"], values.quick ? 500 : 1000),
    warmupMs: int("warmup-ms", values["warmup-ms"], values.quick ? 200 : 400),
    stackWarmupMs: int(
      "stack-warmup-ms",
      values["stack-warmup-ms"],
      values.quick ? 1000 : 12_000,
      0,
    ),
  };
  const only = values.only?.split(",").map((s) => s.trim());
  const unknown = only?.filter((k) => !SCENARIOS.some((s) => s.key === k)) ?? [];
  if (unknown.length > 0) throw new Error(`--only: unknown scenario ${unknown.join(", ")}`);
  return {
    help: values.help,
    json: values.json,
    skipRouting: values["skip-routing"],
    skipBatch: values["skip-batch"],
    profile: values.profile?.split(",").map((s) => s.trim()),
    alloc: values.alloc?.split(",").map((s) => s.trim()),
    features: values.features || values["features-only"],
    variants: values.variants
      ? FEATURE_VARIANTS.filter((v) => values.variants!.split(",").includes(v.key))
      : FEATURE_VARIANTS,
    scenarios: values["features-only"]
      ? []
      : only
        ? SCENARIOS.filter((s) => only.includes(s.key))
        : SCENARIOS.filter((s) => s.onRequest !== true),
    settleMs: values["settle-ms"] === undefined ? 10_000 : Number(values["settle-ms"]),
    out: values.out,
    settings,
  };
}

const progress = (line: string) => process.stderr.write(`[bench] ${line}\n`);

/**
 * Runs `warmStack` before the first row: with c16's load when the run has its node, and with
 * fleet256's streams when it has the fleet node (a stream's path, the SSE cutter, the frame
 * batches and the framed socket writes, is code c16 never runs). Its failures.
 */
async function warmUp(
  stack: BenchStack,
  load: LoadGenerator,
  settings: RunSettings,
): Promise<number> {
  if (settings.stackWarmupMs === 0) return 0;
  let failed = 0;
  for (const key of WARM_UP_SCENARIOS) {
    const scenario = SCENARIOS.find((s) => s.key === key)!;
    if (!stack.nodes.has(scenario.node.model)) continue;
    progress(`warming every side with ${key} for ${settings.stackWarmupMs} ms each`);
    failed += await warmStack(load, stack, scenario, settings.stackWarmupMs);
  }
  return failed;
}

/** The loads `warmUp` runs, each on every side for `--stack-warmup-ms`. */
const WARM_UP_SCENARIOS = ["c16", "fleet256"] as const;

async function measure(
  stack: BenchStack,
  load: LoadGenerator,
  opts: ReturnType<typeof options>,
  allocation: AllocationMeter | undefined,
): Promise<ScenarioSummary[]> {
  const summaries: ScenarioSummary[] = [];
  for (const scenario of opts.scenarios) {
    const t0 = performance.now();
    const node = stack.nodes.get(scenario.node.model);
    const pids = {
      load: load.pid,
      intake: stack.services.get("intake")?.pid,
      dispatcher: stack.services.get("dispatcher")?.pid,
      "nats-server": stack.natsPid,
      "health-aggregator": stack.services.get("health-aggregator")?.pid,
      node: node?.process.pid,
      "floor-intake": stack.floor.intakePid,
      "floor-worker": stack.floor.workerPid,
      // A tier-4 row's node is behind the TD proxy: its CPU is accounted on its own.
      ...(scenario.node.tee ? { "td-proxy": stack.tee?.proxy.pid } : {}),
    };
    const run = await runScenario(load, stack, scenario, opts.settings, pids, allocation);
    const summary = summariseScenario(run);
    summaries.push(summary);
    progress(
      `${scenario.key}: ${summary.completed} requests, ${summary.failed} failed ` +
        `(${((performance.now() - t0) / 1000).toFixed(1)} s)`,
    );
  }
  return summaries;
}

/** The probes `--alloc` loaded into the named services (see `allocation.ts`). */
function allocationMeterOf(stack: BenchStack, services: string[], dir: string): AllocationMeter {
  const probed = new Map<string, ProbedService>();
  for (const name of services) {
    const pid = stack.services.get(name)?.pid;
    if (pid === undefined) throw new Error(`--alloc: no service named ${name}`);
    probed.set(name, { pid, file: allocFileOf(dir, name) });
  }
  return allocationMeter(probed);
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
  const nodeSpecs = new Map<string, BenchNodeSpec>();
  for (const s of opts.scenarios) nodeSpecs.set(s.node.model, s.node);

  progress(`${availableParallelism()} CPUs, Node ${process.version}; starting the stack`);
  const allocDir = join(outDir, "alloc");
  const stack = await startBenchStack({
    nodes: [...nodeSpecs.values()],
    ...(opts.profile ? { profile: { services: opts.profile, dir: join(outDir, "profiles") } } : {}),
    ...(opts.alloc ? { alloc: { services: opts.alloc, dir: allocDir } } : {}),
  });
  let scenarios: ScenarioSummary[];
  let memory: Record<string, ServiceMemory>;
  let settled: Record<string, ServiceMemory> | null = null;
  let batch: BatchFigures | null = null;
  /** Requests that failed while the stack warmed (counted with the others). */
  let warmupFailed: number;
  let features: FeatureRow[] = [];
  // `--profile load`: the load generator (the client: the tier-4 rows' sealing) too.
  const loadProfileDir = join(outDir, "profiles", "load");
  if (opts.profile?.includes("load")) mkdirSync(loadProfileDir, { recursive: true });
  const load = await startLoadGenerator(
    opts.profile?.includes("load") ? { cpuProfileDir: loadProfileDir } : {},
  );
  try {
    try {
      const allocation = opts.alloc ? allocationMeterOf(stack, opts.alloc, allocDir) : undefined;
      warmupFailed = await warmUp(stack, load, opts.settings);
      scenarios = await measure(stack, load, opts, allocation);
      const instant = [...nodeSpecs.values()].find((n) => n.model === "bench-instant");
      if (instant && !opts.skipBatch) {
        progress("batch jobs");
        batch = await measureBatch(stack.natsDriver, "bench", instant.model, 2_000);
      }
      memory = await measureMemory(stack);
      if (opts.settleMs > 0 && opts.scenarios.length > 0) {
        // Steady state: what each service holds once the load is over and it has idled.
        progress(`memory again after ${opts.settleMs} ms idle`);
        await new Promise((resolve) => setTimeout(resolve, opts.settleMs));
        settled = await measureMemory(stack);
      }
    } finally {
      await stack.stop();
    }
    if (opts.features) {
      const c16 = SCENARIOS.find((s) => s.key === "c16")!;
      progress(`optional features: ${opts.variants.length} stacks, ${c16.key} each`);
      features = await measureFeatures(load, c16, opts.settings, opts.variants, progress);
    }
  } finally {
    await load.close();
  }

  let routing: RoutingFigures = { available: false, reason: "skipped (--skip-routing)" };
  if (!opts.skipRouting && opts.scenarios.length > 0) {
    progress("routing decision benchmark");
    routing = await runRoutingBench();
  }

  const completed = [...scenarios, ...features.map((f) => f.summary)].reduce(
    (n, s) => n + s.completed,
    0,
  );
  const failed =
    [...scenarios, ...features.map((f) => f.summary)].reduce((n, s) => n + s.failed, 0) +
    (batch?.failed ?? 0) +
    warmupFailed;
  const summary: BenchSummary = {
    date: new Date().toISOString(),
    build: buildIdOf(root),
    machine: {
      cpus: availableParallelism(),
      cpuModel: cpus()[0]?.model.trim() ?? "unknown",
      node: process.version,
      platform: `${type()} ${release()} ${arch()}`,
      loadAverage: { start: loadAtStart, end: loadavg() },
    },
    settings: opts.settings,
    scenarios,
    routing,
    memory,
    settledMemory: settled,
    settleMs: opts.settleMs,
    features,
    batch,
    targets: judgeTargets(scenarios, routing),
    floorGoals: judgeFloorGoals(scenarios, memory),
    sealingGoals: judgeSealingGoals(scenarios),
    fleetGoals: judgeFleetGoals(scenarios),
    requests: { completed, failed },
    elapsedS: (performance.now() - startedAt) / 1000,
  };
  const command = `node test/bench/run.ts ${process.argv.slice(2).join(" ")}`.trim();
  const report = renderReport(summary, command);
  const latest = join(outDir, "latest.json");
  const previous = existsSync(latest)
    ? (JSON.parse(readFileSync(latest, "utf8")) as Partial<BenchSummary>)
    : undefined;
  mkdirSync(outDir, { recursive: true });
  writeFileSync(join(outDir, "latest.md"), report);
  writeFileSync(latest, `${JSON.stringify(summary, null, 2)}\n`);
  process.stdout.write(opts.json ? `${JSON.stringify(summary)}\n` : report);
  if (failed > 0) progress(`${failed} request(s) failed`);
  const regressed = checkAgainstPrevious(previous, summary, outDir);
  return failed > 0 ? 1 : regressed ? 3 : 0;
}

/**
 * Compares this run with the last one in bench-results/ when both measured the same build
 * (compare.ts), prints the outcome and keeps the earlier run as previous.json. True when a
 * row fell more than the tolerance against the floor.
 */
function checkAgainstPrevious(
  previous: Partial<BenchSummary> | undefined,
  summary: BenchSummary,
  outDir: string,
): boolean {
  if (previous === undefined) return false;
  if (previous.build !== summary.build || previous.scenarios === undefined) {
    progress("the last run in bench-results/ measured another build: not compared with it");
    return false;
  }
  writeFileSync(join(outDir, "previous.json"), `${JSON.stringify(previous, null, 2)}\n`);
  const changes = compareAgainstFloor({ scenarios: previous.scenarios }, summary);
  process.stderr.write(
    `${renderComparison(changes, `since the last run of this build (${previous.date})`)}\n`,
  );
  return changes.some((c) => c.regressed);
}

process.once("SIGINT", () => process.exit(130));
try {
  process.exitCode = await main();
} catch (error) {
  process.stderr.write(
    `bench: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
  );
  process.stderr.write(USAGE);
  process.exitCode = 2;
}
