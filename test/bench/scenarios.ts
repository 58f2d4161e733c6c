// What is measured and how: each scenario runs paired rounds, direct to the simulated node and
// through the gateway, alternating which goes first, so that slow drift of the machine (other
// processes, thermal state, JIT) falls on both sides alike.
import { Agent, request } from "undici";
import { BENCH_API_KEY } from "./bench-stack.ts";
import type { BenchNode, BenchNodeSpec, BenchStack } from "./bench-stack.ts";
import type { LoadGenerator } from "./load-client.ts";
import type { LoadPlan, LoadResult } from "./plan.ts";
import type { AllocationMeter } from "./allocation.ts";
import { cpuMsOf } from "./proc.ts";
import { sealingPlans } from "./tier4.ts";

export const NODES = {
  instant: { model: "bench-instant" },
  slow: { model: "bench-20ms", ttftMs: 20 },
  stream: { model: "bench-stream", tokensPerSecond: 50, completionTokens: 20 },
  // The same nodes spoken to over HTTP/2, by the gateway and by the direct baseline alike.
  slowH2c: { model: "bench-20ms-h2c", ttftMs: 20, protocol: "h2c" },
  streamH2c: {
    model: "bench-stream-h2c",
    tokensPerSecond: 50,
    completionTokens: 20,
    protocol: "h2c",
  },
  slowH2: { model: "bench-20ms-h2", ttftMs: 20, protocol: "h2" },
  // A node behind one TD proxy, declared twice: at tier 3 (plain requests pass through) and
  // at tier 4 (sessions, sealed), so both sides of the tier-4 rows reach the same TD proxy
  // process and the same node (bench-stack.ts). Its 16 tokens come one event at a time, 1 ms
  // apart, as a serving framework's do: a node that wrote the whole stream at once would
  // reach ZML as one chunk in clear but as one sealed chunk per event (the TD proxy seals
  // and writes each event), and the rows would compare framing rather than sealing.
  tee: { model: "bench-tee", tokensPerSecond: 1000, completionTokens: 16, tee: true },
  // An engine's continuous batching (`step-node.ts`): every 20 ms one token to each running
  // stream, 100 tokens a stream (2 s), as a GPU running many sequences at 50 tokens/s emits.
  fleet: { model: "bench-fleet", step: { stepMs: 20, tokens: 100 }, completionTokens: 100 },
} as const satisfies Record<string, BenchNodeSpec>;

/** Round pairs of the HTTP/2 rows: fewer than the default, to keep the whole run short. */
const HTTP2_ROUNDS = 3;
/** Round pairs of the tier-4 rows: a short addition to the default run. */
const TIER4_ROUNDS = 3;
/** Round pairs of the fleet rows, each round several streams long. */
const FLEET_ROUNDS = 3;
/** One fleet stream: 100 steps of 20 ms. */
const FLEET_STREAM_MS = 2_000;

export interface Scenario {
  key: string;
  title: string;
  node: BenchNodeSpec;
  concurrency: number;
  stream: boolean;
  /** Size of the prompt text; default a short one. */
  promptBytes?: number;
  /** At most this many round pairs (default: the run's `--rounds`). */
  maxRounds?: number;
  /** See `LoadPlan.spreadStartsMs`. */
  spreadStartsMs?: number;
  /** Not part of the default run; `--only` runs it. */
  onRequest?: boolean;
  /**
   * A tier-4 row: both sides go through the gateway to the same TD proxy and node; the
   * "direct" side is the plain stream at tier 3, the "gateway" side the same stream sealed
   * in a tier-4 session (`tier4.ts`).
   */
  sealing?: boolean;
  /**
   * A fleet row: streams from the engine-shaped node, reported per token (tokens/s, CPU µs
   * per token, gaps) in their own table.
   */
  fleet?: boolean;
  /** A round and a warm-up last at least this long (a stream of the row lasts seconds). */
  minRoundMs?: number;
}

export const SCENARIOS: Scenario[] = [
  {
    key: "sequential",
    title: "sequential, instant node",
    node: NODES.instant,
    concurrency: 1,
    stream: false,
  },
  {
    key: "c16",
    title: "concurrency 16, instant node",
    node: NODES.instant,
    concurrency: 16,
    stream: false,
  },
  {
    key: "c64",
    title: "concurrency 64, instant node",
    node: NODES.instant,
    concurrency: 64,
    stream: false,
  },
  {
    key: "prompt100k",
    title: "100 KB prompt, concurrency 16",
    node: NODES.instant,
    concurrency: 16,
    stream: false,
    promptBytes: 100 * 1024,
  },
  {
    key: "prompt1m",
    title: "1 MB prompt, concurrency 16",
    node: NODES.instant,
    concurrency: 16,
    stream: false,
    promptBytes: 1024 * 1024,
    // Each round moves ~1 GB through each process: fewer pairs keep the run short.
    maxRounds: 3,
  },
  {
    key: "slow64",
    title: "20 ms node, concurrency 64",
    node: NODES.slow,
    concurrency: 64,
    stream: false,
  },
  {
    key: "stream1",
    title: "streams one at a time, instant node",
    node: NODES.instant,
    concurrency: 1,
    stream: true,
  },
  {
    key: "stream128",
    title: "128 concurrent streams, 50 tok/s",
    node: NODES.stream,
    concurrency: 128,
    stream: true,
  },
  // The 128-stream row at fewer streams, on request (`--only stream16,stream32,stream64`):
  // how added time to first token grows with the number of streams that start together.
  ...[16, 32, 64].map((n) => ({
    key: `stream${n}`,
    title: `${n} concurrent streams, 50 tok/s`,
    node: NODES.stream,
    concurrency: n,
    stream: true,
    onRequest: true,
  })),
  {
    // The same load, but the streams do not all start at the same instant: with equal
    // streams, the row above re-sends 128 requests in one burst every 400 ms, so its TTFT is
    // mostly how long the 128th request of a burst queues for CPU. Here arrivals are spread
    // evenly over one stream's length, as independent clients' would be.
    key: "stream128spread",
    title: "128 concurrent streams, 50 tok/s, starts spread",
    node: NODES.stream,
    concurrency: 128,
    stream: true,
    spreadStartsMs: 400,
  },
  // Tier 4 end to end: what sealing costs a stream, sealed on the client and opened there,
  // against the same stream unsealed, in interleaved rounds (`tier4.ts`).
  {
    key: "tier4stream1",
    title: "tier 4, streams one at a time, 1000 tok/s",
    node: NODES.tee,
    concurrency: 1,
    stream: true,
    maxRounds: TIER4_ROUNDS,
    sealing: true,
    // About 50 streams a second: a round of half a second gave each side's p50 25 samples,
    // and the added TTFT (a fraction of a millisecond) swung by more than itself between
    // runs. Two seconds give it about 100 per round.
    minRoundMs: 2_000,
  },
  {
    key: "tier4c16",
    title: "tier 4, 16 concurrent streams, 1000 tok/s",
    node: NODES.tee,
    concurrency: 16,
    stream: true,
    maxRounds: TIER4_ROUNDS,
    sealing: true,
  },
  // The fleet: an engine's streams at 256 and 1,024 at once. Arrivals are spread over one
  // stream's length, as independent clients' are, so the steady state has every step serve
  // the whole batch while new streams keep joining it.
  ...[256, 1024].map((n) => ({
    key: `fleet${n}`,
    title: `${n} streams from an engine, 100 tokens each, one step every 20 ms`,
    node: NODES.fleet,
    concurrency: n,
    stream: true,
    spreadStartsMs: FLEET_STREAM_MS,
    maxRounds: FLEET_ROUNDS,
    minRoundMs: 3 * FLEET_STREAM_MS,
    fleet: true,
  })),
  {
    key: "slow64h2c",
    title: "20 ms node, concurrency 64, h2c",
    node: NODES.slowH2c,
    concurrency: 64,
    stream: false,
    maxRounds: HTTP2_ROUNDS,
  },
  {
    key: "stream128h2c",
    title: "128 concurrent streams, 50 tok/s, h2c",
    node: NODES.streamH2c,
    concurrency: 128,
    stream: true,
    maxRounds: HTTP2_ROUNDS,
  },
  {
    key: "slow64h2",
    title: "20 ms node, concurrency 64, h2 (TLS)",
    node: NODES.slowH2,
    concurrency: 64,
    stream: false,
    maxRounds: HTTP2_ROUNDS,
  },
];

/** The processes whose CPU time is accounted per round. */
export type CpuPids = Record<string, number | undefined>;

export interface Round {
  result: LoadResult;
  /** CPU ms each watched process used during the round. */
  cpuMs: Record<string, number>;
  /** Bytes each probed service allocated during a gateway round (`run.ts --alloc`). */
  allocBytes?: Record<string, number>;
}

export interface ScenarioRun {
  scenario: Scenario;
  direct: Round[];
  gateway: Round[];
  /** The floor's rounds (`floor/`), interleaved with the other two; empty for rows without. */
  floor: Round[];
  /** Requests that failed in the warm-up rounds (their timings are discarded). */
  warmupFailed: number;
  warmupFailures: string[];
}

export interface RunSettings {
  rounds: number;
  durationMs: number;
  warmupMs: number;
  /** Before the first row, each side of the c16 row runs this long (`warmStack`). */
  stackWarmupMs: number;
}

const SENTENCE =
  "The quick brown fox jumps over the lazy dog while the gateway routes the request. ";

export function chatBody(model: string, stream: boolean, promptBytes: number | undefined): string {
  const content =
    promptBytes === undefined
      ? "Say hello"
      : SENTENCE.repeat(Math.ceil(promptBytes / SENTENCE.length)).slice(0, promptBytes);
  return JSON.stringify({ model, messages: [{ role: "user", content }], stream });
}

/** Runs the scenario's warm-up, then `rounds` interleaved direct/gateway pairs. */
export async function runScenario(
  load: LoadGenerator,
  stack: BenchStack,
  scenario: Scenario,
  settings: RunSettings,
  pids: CpuPids,
  allocation?: AllocationMeter,
): Promise<ScenarioRun> {
  if (scenario.sealing) {
    const tier4 = await sealingPlans(stack, scenario, chatBody);
    try {
      const sides = { direct: tier4.plain, gateway: tier4.sealed };
      return await runRounds(load, scenario, settings, pids, sides, undefined);
    } finally {
      await tier4.close();
    }
  }
  const sides = plansOf(stack, scenario);
  const run = await runRounds(load, scenario, settings, pids, sides, allocation);
  const node = stack.nodes.get(scenario.node.model)!;
  if (node.protocol !== undefined) await checkServedOver(node, stack.caPem);
  return run;
}

/** A plain (not tier-4) scenario's load plans: direct to its node, through ZML, the floor's. */
function plansOf(
  stack: BenchStack,
  scenario: Scenario,
): { direct: SidePlan; gateway: SidePlan; floor?: SidePlan } {
  const node = stack.nodes.get(scenario.node.model);
  if (node === undefined) throw new Error(`no node for model ${scenario.node.model}`);
  const body = chatBody(scenario.node.model, scenario.stream, scenario.promptBytes);
  const common = {
    path: "/v1/chat/completions",
    body,
    concurrency: scenario.concurrency,
    stream: scenario.stream,
    ...(scenario.stream ? { expectTokens: scenario.node.completionTokens ?? 16 } : {}),
    ...(scenario.spreadStartsMs ? { spreadStartsMs: scenario.spreadStartsMs } : {}),
  };
  // The direct baseline speaks the node's own protocol; intake is always called over HTTP/1.1.
  const direct = {
    ...common,
    origin: node.url,
    headers: { "content-type": "application/json" },
    ...(node.protocol === undefined ? {} : { protocol: node.protocol }),
    ...(node.protocol === "h2" && stack.caPem !== undefined ? { caPem: stack.caPem } : {}),
  };
  const gateway = {
    ...common,
    origin: stack.intakeUrl,
    headers: { "content-type": "application/json", authorization: `Bearer ${BENCH_API_KEY}` },
  };
  const floorPath = stack.floor.pathOf(scenario.node.model);
  const floor =
    floorPath === undefined
      ? undefined
      : {
          ...common,
          origin: stack.floor.url,
          path: floorPath,
          headers: { "content-type": "application/json" },
        };
  return { direct, gateway, ...(floor ? { floor } : {}) };
}

/**
 * Warms every side of the stack before the first measured round: `scenario`'s plans, each
 * for `ms`. A gateway in service has long since compiled its hot path; without this, the
 * first rows would measure V8 still optimising ZML's code (the floor has little to compile),
 * which a few hundred ms of per-row warm-up does not cover. `on-cpu.ts` at c16: V8's
 * compiler threads took 29–35 µs per ZML request per service after 7 s, 4–6 µs after 26 s.
 */
export async function warmStack(
  load: LoadGenerator,
  stack: BenchStack,
  scenario: Scenario,
  ms: number,
): Promise<number> {
  let failed = 0;
  for (const plan of Object.values(plansOf(stack, scenario))) {
    failed += (await load.run({ ...plan, durationMs: ms })).failed;
  }
  return failed;
}

type SidePlan = Omit<LoadPlan, "id" | "durationMs">;
type SideName = "direct" | "floor" | "gateway";

/**
 * The warm-up of every side (discarded), then `rounds` measured rounds of each side in turn,
 * the order rotated each round so that no side always goes first. `allocation` is read
 * around the gateway's rounds only: the other sides never reach a service.
 */
async function runRounds(
  load: LoadGenerator,
  scenario: Scenario,
  settings: RunSettings,
  pids: CpuPids,
  plans: { direct: SidePlan; gateway: SidePlan; floor?: SidePlan },
  allocation: AllocationMeter | undefined,
): Promise<ScenarioRun> {
  const run: ScenarioRun = {
    scenario,
    direct: [],
    gateway: [],
    floor: [],
    warmupFailed: 0,
    warmupFailures: [],
  };
  const sides = (["direct", "floor", "gateway"] as const).filter((s) => plans[s] !== undefined);
  // A warm-up of half a long round: every worker has started a stream or two.
  const warmupMs = Math.max(settings.warmupMs, (scenario.minRoundMs ?? 0) / 2);
  const durationMs = Math.max(settings.durationMs, scenario.minRoundMs ?? 0);
  for (const side of sides) {
    const warm = await load.run({ ...plans[side]!, durationMs: warmupMs });
    run.warmupFailed += warm.failed;
    run.warmupFailures.push(...warm.failures);
  }
  const measured = async (side: SideName): Promise<Round> => {
    const meter = side === "gateway" ? allocation : undefined;
    await meter?.start();
    const before = cpuSnapshot(pids);
    const result = await load.run({ ...plans[side]!, durationMs });
    const after = cpuSnapshot(pids);
    const allocBytes = await meter?.stop();
    const cpuMs: Record<string, number> = {};
    for (const name of Object.keys(after)) cpuMs[name] = after[name]! - before[name]!;
    return allocBytes ? { result, cpuMs, allocBytes } : { result, cpuMs };
  };
  const rounds = Math.min(settings.rounds, scenario.maxRounds ?? settings.rounds);
  for (let i = 0; i < rounds; i++) {
    for (let k = 0; k < sides.length; k++) {
      const side = sides[(i + k) % sides.length]!;
      run[side].push(await measured(side));
    }
  }
  return run;
}

/**
 * An HTTP/2 node also answers HTTP/1.1 (for health probes): a row that claims HTTP/2 fails
 * the run if any inference request, direct or through the gateway, reached it over HTTP/1.1.
 */
async function checkServedOver(node: BenchNode, caPem: string | undefined): Promise<void> {
  const agent = new Agent(caPem === undefined ? {} : { connect: { ca: caPem } });
  try {
    const res = await request(`${node.url}/_sim/stats`, { dispatcher: agent });
    const stats = (await res.body.json()) as { payloads_by_http_version?: Record<string, number> };
    const versions = stats.payloads_by_http_version ?? {};
    const other = Object.keys(versions).filter((v) => v !== "2.0");
    if (other.length > 0 || (versions["2.0"] ?? 0) === 0) {
      throw new Error(
        `node ${node.model} was to be spoken to over ${node.protocol} only, ` +
          `but received ${JSON.stringify(versions)} (payloads per HTTP version)`,
      );
    }
  } finally {
    await agent.close();
  }
}

function cpuSnapshot(pids: CpuPids): Record<string, number> {
  const snapshot: Record<string, number> = {};
  for (const [name, pid] of Object.entries(pids)) {
    if (pid !== undefined) snapshot[name] = cpuMsOf(pid);
  }
  return snapshot;
}
