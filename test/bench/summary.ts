import type { BatchFigures } from "./batch-bench.ts";
// Turns the rounds into the reported figures. Per side: the median over rounds of each round's
// percentile. Ratios and added milliseconds: the median over pairs of (gateway vs direct in the
// same pair), which cancels drift better than comparing the two medians.
import type { StreamFigures } from "./plan.ts";
import type { ServiceMemory } from "./memory.ts";
import type { RoutingFigures } from "./routing-bench.ts";
import type { Round, ScenarioRun } from "./scenarios.ts";
import { median } from "./stats.ts";

/** One observability variant's figures (`features.ts`). */
export interface FeatureRow {
  key: string;
  title: string;
  summary: ScenarioSummary;
  /** OTLP export requests the sink received from the services during the variant. */
  exports: number;
  scrapes: number;
}

export interface Side {
  p50Ms: number;
  p99Ms: number;
  rps: number;
  ttftP50Ms?: number;
  ttftP99Ms?: number;
  gapP99Ms?: number;
  /** Tier-4 rows: body reads per stream on the client (how the stream was framed). */
  readsPerStream?: number;
  /** Streams: the longest gap between two reads of one stream, median over rounds. */
  gapMaxMs?: number;
}

/** A fleet row's figures per token (`Scenario.fleet`). */
export interface FleetFigures {
  tokensPerStream: number;
  /** Tokens delivered per second, median over rounds. */
  tokensPerS: { direct: number; gateway: number; floor?: number };
  /** ZML's (and the floor's) added TTFT and gap against direct, paired by round, in ms. */
  added: {
    gateway: { ttftP50: number; ttftP99: number; gapP99: number; gapMax: number };
    floor?: { ttftP50: number; ttftP99: number; gapP99: number; gapMax: number };
  };
  /** CPU µs per token delivered, per process (median over rounds). */
  cpuUsPerToken: { gateway: Record<string, number>; floor?: Record<string, number> };
}

export interface ScenarioSummary {
  key: string;
  title: string;
  concurrency: number;
  stream: boolean;
  /** A tier-4 row: `direct` is the plain stream at tier 3, `gateway` the same one sealed. */
  sealing?: boolean;
  rounds: number;
  direct: Side;
  gateway: Side;
  /** gateway ÷ direct. */
  ratio: { p50: number; p99: number; rps: number; ttftP50?: number; gapP99?: number };
  /** gateway − direct, in ms. */
  addedMs: { p50: number; p99: number; ttftP50?: number; ttftP99?: number; gapP99?: number };
  /** The floor's figures (`floor/`), for the rows it runs in. */
  floor?: Side;
  /**
   * ZML against the floor, paired by round: throughput ZML ÷ floor, the floor's own
   * throughput ÷ direct, and the milliseconds ZML adds over the floor.
   */
  vsFloor?: {
    rps: number;
    floorRps: number;
    addedP50: number;
    addedP99: number;
    addedTtftP50?: number;
    addedTtftP99?: number;
  };
  /** Measured requests that succeeded, every side. */
  completed: number;
  /** Requests that failed, warm-up included. */
  failed: number;
  failures: string[];
  /** Streams with lost, garbled or truncated events (counted in `failed` too). */
  brokenStreams?: number;
  /** Fleet rows: the figures per token. */
  fleet?: FleetFigures;
  /** CPU time per completed request, µs, per process (median over rounds). */
  cpuUsPerRequest: {
    direct: Record<string, number>;
    gateway: Record<string, number>;
    floor?: Record<string, number>;
  };
  /**
   * KiB each probed service allocated per request through the gateway (all gateway rounds'
   * bytes over their completed requests); absent without `--alloc`.
   */
  allocKiBPerRequest?: Record<string, number>;
}

export interface Target {
  name: string;
  value: number;
  limit: number;
  comparison: "<=" | ">=";
  pass: boolean;
}

export interface BenchSummary {
  date: string;
  /** The code measured: the commit, plus a hash of uncommitted changes (`build.ts`). */
  build: string;
  machine: {
    cpus: number;
    cpuModel: string;
    node: string;
    platform: string;
    /** 1, 5 and 15 minute load averages when the run started and when it ended. */
    loadAverage: { start: number[]; end: number[] };
  };
  settings: { rounds: number; durationMs: number; warmupMs: number; stackWarmupMs: number };
  scenarios: ScenarioSummary[];
  routing: RoutingFigures;
  memory: Record<string, ServiceMemory>;
  /** The same, `settleMs` after the load ended (the services idle); null when not taken. */
  settledMemory: Record<string, ServiceMemory> | null;
  settleMs: number;
  /** One row per optional-feature variant (`--features`), each from its own stack. */
  features: FeatureRow[];
  /** Batch jobs per second through an instant node; null when skipped. */
  batch: BatchFigures | null;
  targets: Target[];
  /** The goals against the floor (`judgeFloorGoals`), judged on the rows that ran. */
  floorGoals: Target[];
  /** The fleet rows' goals (`judgeFleetGoals`), judged when they ran (never fail the run). */
  fleetGoals: Target[];
  /** The goals for sealing (at most +0.5 ms to the first token, ≥ 0.9× throughput, TD proxy CPU per stream ≤ 1.3×), judged when its rows ran (never fail the run). */
  sealingGoals: Target[];
  requests: { completed: number; failed: number };
  elapsedS: number;
}

function side(rounds: Round[], sealing = false): Side {
  const pick = (f: (r: Round) => number | undefined) =>
    median(rounds.map((r) => f(r) ?? Number.NaN));
  const s: Side = {
    p50Ms: pick((r) => r.result.latency.p50),
    p99Ms: pick((r) => r.result.latency.p99),
    rps: pick((r) => r.result.rps),
  };
  if (rounds[0]?.result.stream) {
    s.ttftP50Ms = pick((r) => r.result.stream?.ttft.p50);
    s.ttftP99Ms = pick((r) => r.result.stream?.ttft.p99);
    s.gapP99Ms = pick((r) => r.result.stream?.gap.p99);
    s.gapMaxMs = pick((r) => r.result.stream?.gap.max);
  }
  if (sealing) {
    // Each stream's reads after its first are its gap samples.
    s.readsPerStream = pick((r) =>
      r.result.stream && r.result.latency.count > 0
        ? r.result.stream.gap.count / r.result.latency.count + 1
        : undefined,
    );
  }
  return s;
}

function paired(run: ScenarioRun, f: (d: Round, g: Round) => number): number {
  return median(run.direct.map((d, i) => f(d, run.gateway[i]!)));
}

/** ZML against the floor, round by round (`f(floor, gateway)`), as `paired` does for direct. */
function againstFloor(run: ScenarioRun, f: (floor: Round, g: Round) => number): number {
  return median(run.floor.map((fl, i) => f(fl, run.gateway[i]!)));
}

function vsFloorOf(run: ScenarioRun): ScenarioSummary["vsFloor"] {
  const lat = (r: Round) => r.result.latency;
  const ttft = (r: Round) => r.result.stream?.ttft;
  const figures: NonNullable<ScenarioSummary["vsFloor"]> = {
    rps: againstFloor(run, (f, g) => g.result.rps / f.result.rps),
    floorRps: median(run.floor.map((f, i) => f.result.rps / run.direct[i]!.result.rps)),
    addedP50: againstFloor(run, (f, g) => lat(g).p50 - lat(f).p50),
    addedP99: againstFloor(run, (f, g) => lat(g).p99 - lat(f).p99),
  };
  if (run.scenario.stream) {
    const added = (pick: "p50" | "p99") =>
      againstFloor(
        run,
        (f, g) => (ttft(g)?.[pick] ?? Number.NaN) - (ttft(f)?.[pick] ?? Number.NaN),
      );
    figures.addedTtftP50 = added("p50");
    figures.addedTtftP99 = added("p99");
  }
  return figures;
}

function allocPerRequest(rounds: Round[]): Record<string, number> | undefined {
  const completed = rounds.reduce((n, r) => n + r.result.completed, 0);
  const names = Object.keys(rounds[0]?.allocBytes ?? {});
  if (names.length === 0 || completed === 0) return undefined;
  const out: Record<string, number> = {};
  for (const name of names) {
    const bytes = rounds.reduce((n, r) => n + (r.allocBytes?.[name] ?? 0), 0);
    out[name] = bytes / completed / 1024;
  }
  return out;
}

function cpuPerRequest(rounds: Round[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const name of Object.keys(rounds[0]?.cpuMs ?? {})) {
    out[name] = median(
      rounds.map((r) =>
        r.result.completed > 0
          ? ((r.cpuMs[name] ?? Number.NaN) * 1000) / r.result.completed
          : Number.NaN,
      ),
    );
  }
  return out;
}

export function summariseScenario(run: ScenarioRun): ScenarioSummary {
  const { scenario } = run;
  const lat = (r: Round) => r.result.latency;
  const all = [...run.direct, ...run.floor, ...run.gateway];
  const summary: ScenarioSummary = {
    key: scenario.key,
    title: scenario.title,
    concurrency: scenario.concurrency,
    stream: scenario.stream,
    ...(scenario.sealing ? { sealing: true } : {}),
    rounds: run.direct.length,
    direct: side(run.direct, scenario.sealing),
    gateway: side(run.gateway, scenario.sealing),
    ratio: {
      p50: paired(run, (d, g) => lat(g).p50 / lat(d).p50),
      p99: paired(run, (d, g) => lat(g).p99 / lat(d).p99),
      rps: paired(run, (d, g) => g.result.rps / d.result.rps),
    },
    addedMs: {
      p50: paired(run, (d, g) => lat(g).p50 - lat(d).p50),
      p99: paired(run, (d, g) => lat(g).p99 - lat(d).p99),
    },
    completed: all.reduce((n, r) => n + r.result.completed, 0),
    failed: run.warmupFailed + all.reduce((n, r) => n + r.result.failed, 0),
    failures: [...run.warmupFailures, ...all.flatMap((r) => r.result.failures)].slice(0, 5),
    cpuUsPerRequest: {
      direct: cpuPerRequest(run.direct),
      gateway: cpuPerRequest(run.gateway),
      ...(run.floor.length > 0 ? { floor: cpuPerRequest(run.floor) } : {}),
    },
  };
  if (run.floor.length > 0) {
    summary.floor = side(run.floor);
    summary.vsFloor = vsFloorOf(run);
  }
  const alloc = allocPerRequest(run.gateway);
  if (alloc) summary.allocKiBPerRequest = alloc;
  if (scenario.stream) {
    const pair = (pick: (f: StreamFigures) => number, combine: (g: number, d: number) => number) =>
      paired(run, (d, g) =>
        d.result.stream && g.result.stream
          ? combine(pick(g.result.stream), pick(d.result.stream))
          : Number.NaN,
      );
    const ratioOf = (g: number, d: number) => g / d;
    const added = (g: number, d: number) => g - d;
    summary.ratio.ttftP50 = pair((f) => f.ttft.p50, ratioOf);
    summary.ratio.gapP99 = pair((f) => f.gap.p99, ratioOf);
    summary.addedMs.ttftP50 = pair((f) => f.ttft.p50, added);
    summary.addedMs.ttftP99 = pair((f) => f.ttft.p99, added);
    summary.addedMs.gapP99 = pair((f) => f.gap.p99, added);
    summary.brokenStreams = all.reduce((n, r) => n + (r.result.stream?.broken ?? 0), 0);
  }
  if (scenario.fleet) summary.fleet = fleetOf(run, summary);
  return summary;
}

/** Per-token figures of a fleet row: every completed stream carried the same tokens. */
function fleetOf(run: ScenarioRun, summary: ScenarioSummary): FleetFigures {
  const tokens = run.scenario.node.completionTokens ?? 16;
  const perToken = (cpu: Record<string, number>) =>
    Object.fromEntries(Object.entries(cpu).map(([k, v]) => [k, v / tokens]));
  const addedOf = (rounds: Round[]) => {
    const pair = (pick: (f: StreamFigures) => number) =>
      median(
        run.direct.map((d, i) => {
          const o = rounds[i]?.result.stream;
          return d.result.stream && o ? pick(o) - pick(d.result.stream) : Number.NaN;
        }),
      );
    return {
      ttftP50: pair((f) => f.ttft.p50),
      ttftP99: pair((f) => f.ttft.p99),
      gapP99: pair((f) => f.gap.p99),
      gapMax: pair((f) => f.gap.max),
    };
  };
  const figures: FleetFigures = {
    tokensPerStream: tokens,
    tokensPerS: { direct: summary.direct.rps * tokens, gateway: summary.gateway.rps * tokens },
    added: { gateway: addedOf(run.gateway) },
    cpuUsPerToken: { gateway: perToken(summary.cpuUsPerRequest.gateway) },
  };
  if (run.floor.length > 0 && summary.floor && summary.cpuUsPerRequest.floor) {
    figures.tokensPerS.floor = summary.floor.rps * tokens;
    figures.added.floor = addedOf(run.floor);
    figures.cpuUsPerToken.floor = perToken(summary.cpuUsPerRequest.floor);
  }
  return figures;
}

function target(
  name: string,
  value: number | undefined,
  comparison: "<=" | ">=",
  limit: number,
): Target {
  const v = value ?? Number.NaN;
  const pass = comparison === "<=" ? v <= limit : v >= limit;
  return { name, value: v, limit, comparison, pass };
}

/** The gateway's speed targets (docs/performance.md), judged on this run's figures. */
export function judgeTargets(scenarios: ScenarioSummary[], routing: RoutingFigures): Target[] {
  const by = (key: string) => scenarios.find((s) => s.key === key);
  const decision256 = routing.available
    ? Math.max(...routing.rows.filter((r) => r.nodes === 256).map((r) => r.p99Us))
    : undefined;
  return [
    target("sequential p50, gateway ÷ direct", by("sequential")?.ratio.p50, "<=", 5),
    target("throughput at concurrency 16, gateway ÷ direct", by("c16")?.ratio.rps, ">=", 0.35),
    target(
      "20 ms node p99 at concurrency 64, gateway ÷ direct",
      by("slow64")?.ratio.p99,
      "<=",
      1.1,
    ),
    target("decision p99 for 256 nodes, µs (worst variant)", decision256, "<=", 10),
  ];
}

/** The four services (nats-server is not ours to size). */
const SERVICES = ["intake", "dispatcher", "health-aggregator", "attestation"];

/**
 * The goals against the floor, the lean build of ZML's own shape (`floor/`): how near ZML is
 * to what its shape allows on this machine. Spread-start TTFT is judged against direct, the
 * figure a client sees; RSS is the largest service's right after the load.
 */
/** ZML's gateway CPU per token on the token's path: intake, the dispatcher and nats-server. */
export function gatewayCpuPerToken(fleet: FleetFigures): number {
  const cpu = fleet.cpuUsPerToken.gateway;
  return ["intake", "dispatcher", "nats-server"].reduce((n, k) => n + (cpu[k] ?? Number.NaN), 0);
}

/**
 * The fleet rows' goals (docs/performance.md, "Streams at fleet scale"), judged on the rows
 * that ran: at 256 streams the CPU, throughput, TTFT and gap limits; at 1,024 every stream
 * completes (and the same figures are reported).
 */
export function judgeFleetGoals(scenarios: ScenarioSummary[]): Target[] {
  const goals: Target[] = [];
  const at256 = scenarios.find((s) => s.key === "fleet256");
  const f = at256?.fleet;
  if (at256 && f) {
    goals.push(
      target("256 streams: gateway CPU µs per token, summed", gatewayCpuPerToken(f), "<=", 25),
      target(
        "256 streams: tokens/s, ZML ÷ direct",
        f.tokensPerS.gateway / f.tokensPerS.direct,
        ">=",
        0.99,
      ),
      target("256 streams: TTFT p99, ms ZML adds", f.added.gateway.ttftP99, "<=", 25),
      target("256 streams: gap p99, ms ZML adds", f.added.gateway.gapP99, "<=", 5),
    );
  }
  const at1024 = scenarios.find((s) => s.key === "fleet1024");
  if (at1024) goals.push(target("1,024 streams: streams that failed", at1024.failed, "<=", 0));
  return goals;
}

export function judgeFloorGoals(
  scenarios: ScenarioSummary[],
  memory: Record<string, ServiceMemory>,
): Target[] {
  const goal = (
    key: string,
    name: string,
    value: (s: ScenarioSummary) => number | undefined,
    comparison: "<=" | ">=",
    limit: number,
  ) => {
    const row = scenarios.find((s) => s.key === key);
    return row === undefined ? [] : [target(name, value(row), comparison, limit)];
  };
  const rss = SERVICES.map((name) => memory[name]?.rssMiB ?? Number.NaN);
  return [
    ...goal("c16", "throughput at concurrency 16, ZML ÷ floor", (s) => s.vsFloor?.rps, ">=", 0.75),
    ...goal(
      "prompt100k",
      "throughput with a 100 KB prompt (c16), ZML ÷ floor",
      (s) => s.vsFloor?.rps,
      ">=",
      0.85,
    ),
    ...goal(
      "sequential",
      "sequential p50, ms ZML adds over the floor",
      (s) => s.vsFloor?.addedP50,
      "<=",
      0.25,
    ),
    ...goal(
      "slow64",
      "throughput, 20 ms node at c64, ZML ÷ floor",
      (s) => s.vsFloor?.rps,
      ">=",
      0.95,
    ),
    ...goal(
      "stream128spread",
      "added time to first token, ms (p50, 128 streams, starts spread)",
      (s) => s.addedMs.ttftP50,
      "<=",
      5,
    ),
    ...(scenarios.length > 0
      ? [target("largest service RSS after the load, MiB", Math.max(...rss), "<=", 150)]
      : []),
  ];
}

/**
 * The goals for tier-4 sealing: it adds at most 0.3 ms per request (judged on
 * the added time to first token, p50, one stream at a time) and costs at most 5 % of the
 * throughput at concurrency 16. Only the rows that ran are judged.
 */
export function judgeSealingGoals(scenarios: ScenarioSummary[]): Target[] {
  const by = (key: string) => scenarios.find((s) => s.key === key);
  const goals: Target[] = [];
  const one = by("tier4stream1");
  if (one) {
    goals.push(
      target(
        "sealing's added time to first token, ms (p50, one stream at a time)",
        one.addedMs.ttftP50,
        "<=",
        0.5,
      ),
    );
  }
  const c16 = by("tier4c16");
  if (c16) {
    goals.push(target("streams/s at concurrency 16, sealed ÷ unsealed", c16.ratio.rps, ">=", 0.9));
    const proxy = (side: Record<string, number>) => side["td-proxy"] ?? Number.NaN;
    goals.push(
      target(
        "TD proxy CPU per stream at concurrency 16, sealed ÷ unsealed",
        proxy(c16.cpuUsPerRequest.gateway) / proxy(c16.cpuUsPerRequest.direct),
        "<=",
        1.3,
      ),
    );
  }
  return goals;
}
