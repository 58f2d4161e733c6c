// What is measured and how: each scenario runs paired rounds, direct to the simulated node and
// through the gateway, alternating which goes first, so that slow drift of the machine (other
// processes, thermal state, JIT) falls on both sides alike.
import { BENCH_API_KEY } from "./bench-stack.ts";
import type { BenchNodeSpec, BenchStack } from "./bench-stack.ts";
import type { LoadGenerator } from "./load-client.ts";
import type { LoadResult } from "./plan.ts";
import { cpuMsOf } from "./proc.ts";

export const NODES = {
  instant: { model: "bench-instant" },
  slow: { model: "bench-20ms", ttftMs: 20 },
  stream: { model: "bench-stream", tokensPerSecond: 50, completionTokens: 20 },
} as const satisfies Record<string, BenchNodeSpec>;

export interface Scenario {
  key: string;
  title: string;
  node: BenchNodeSpec;
  concurrency: number;
  stream: boolean;
  /** Size of the prompt text; default a short one. */
  promptBytes?: number;
  /** See `LoadPlan.spreadStartsMs`. */
  spreadStartsMs?: number;
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
];

/** The processes whose CPU time is accounted per round. */
export type CpuPids = Record<string, number | undefined>;

export interface Round {
  result: LoadResult;
  /** CPU ms each watched process used during the round. */
  cpuMs: Record<string, number>;
}

export interface ScenarioRun {
  scenario: Scenario;
  direct: Round[];
  gateway: Round[];
  /** Requests that failed in the warm-up rounds (their timings are discarded). */
  warmupFailed: number;
  warmupFailures: string[];
}

export interface RunSettings {
  rounds: number;
  durationMs: number;
  warmupMs: number;
}

const SENTENCE =
  "The quick brown fox jumps over the lazy dog while the gateway routes the request. ";

function chatBody(model: string, stream: boolean, promptBytes: number | undefined): string {
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
): Promise<ScenarioRun> {
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
  const direct = { ...common, origin: node.url, headers: { "content-type": "application/json" } };
  const gateway = {
    ...common,
    origin: stack.intakeUrl,
    headers: { "content-type": "application/json", authorization: `Bearer ${BENCH_API_KEY}` },
  };

  const run: ScenarioRun = {
    scenario,
    direct: [],
    gateway: [],
    warmupFailed: 0,
    warmupFailures: [],
  };
  for (const plan of [direct, gateway]) {
    const warm = await load.run({ ...plan, durationMs: settings.warmupMs });
    run.warmupFailed += warm.failed;
    run.warmupFailures.push(...warm.failures);
  }
  const measured = async (plan: typeof direct): Promise<Round> => {
    const before = cpuSnapshot(pids);
    const result = await load.run({ ...plan, durationMs: settings.durationMs });
    const after = cpuSnapshot(pids);
    const cpuMs: Record<string, number> = {};
    for (const name of Object.keys(after)) cpuMs[name] = after[name]! - before[name]!;
    return { result, cpuMs };
  };
  for (let i = 0; i < settings.rounds; i++) {
    if (i % 2 === 0) {
      run.direct.push(await measured(direct));
      run.gateway.push(await measured(gateway));
    } else {
      run.gateway.push(await measured(gateway));
      run.direct.push(await measured(direct));
    }
  }
  return run;
}

function cpuSnapshot(pids: CpuPids): Record<string, number> {
  const snapshot: Record<string, number> = {};
  for (const [name, pid] of Object.entries(pids)) {
    if (pid !== undefined) snapshot[name] = cpuMsOf(pid);
  }
  return snapshot;
}
