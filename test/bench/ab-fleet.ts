// Two builds' CPU per streamed token, side by side: this checkout's stack and another
// checkout's (`--base`, e.g. a `git worktree` of the commit before a change), each with its
// own nats-server and engine-shaped node, run at once and loaded in turn, a short window
// each, the order swapped every round. A shared machine's speed drifts by a third between
// whole bench runs; windows seconds apart see the same machine, so the paired difference
// says what a change did where two separate runs cannot. The window after the other build's
// costs more than the one after its own (the node closes idle connections after 5 s, and
// caches are cold), so each build is compared over a pair of rounds, once in each place.
//
// node test/bench/ab-fleet.ts --base <checkout> [--concurrency 256] [--rounds 10]
//   [--window-ms 5000] [--warmup-ms 15000]
//
// Prints, per round and as medians, CPU µs per token for intake, the dispatcher and
// nats-server of each build (from /proc, as the fleet rows take it), and new − base.
import { parseArgs } from "node:util";
import { BENCH_API_KEY, startBenchStack } from "./bench-stack.ts";
import type { BenchStack } from "./bench-stack.ts";
import { startLoadGenerator } from "./load-client.ts";
import type { LoadGenerator } from "./load-client.ts";
import { cpuMsOf } from "./proc.ts";
import { chatBody, NODES } from "./scenarios.ts";
import { quantile } from "./stats.ts";

const { values } = parseArgs({
  options: {
    base: { type: "string" },
    concurrency: { type: "string", default: "256" },
    rounds: { type: "string", default: "10" },
    "window-ms": { type: "string", default: "5000" },
    "warmup-ms": { type: "string", default: "15000" },
  },
});
if (values.base === undefined) throw new Error("--base <checkout> is required");
const concurrency = Number(values.concurrency);
const rounds = Number(values.rounds);
const windowMs = Number(values["window-ms"]);
const warmupMs = Number(values["warmup-ms"]);
const node = NODES.fleet;
const tokens = node.completionTokens;
const SERVICES = ["intake", "dispatcher"] as const;

type Build = "new" | "base";

function pidsOf(stack: BenchStack): Record<string, number> {
  const pids: Record<string, number> = {};
  for (const name of SERVICES) pids[name] = stack.services.get(name)!.pid!;
  pids["nats-server"] = stack.natsPid!;
  return pids;
}

async function window(
  load: LoadGenerator,
  stack: BenchStack,
  ms: number,
): Promise<{ perToken: Record<string, number>; completed: number; failed: number }> {
  const pids = pidsOf(stack);
  const before = Object.fromEntries(Object.entries(pids).map(([k, pid]) => [k, cpuMsOf(pid)]));
  const result = await load.run({
    origin: stack.intakeUrl,
    path: "/v1/chat/completions",
    headers: { "content-type": "application/json", authorization: `Bearer ${BENCH_API_KEY}` },
    body: chatBody(node.model, true, undefined),
    concurrency,
    durationMs: ms,
    stream: true,
    expectTokens: tokens,
    spreadStartsMs: 2_000,
  });
  const delivered = Math.max(1, result.completed * tokens);
  const perToken: Record<string, number> = {};
  for (const [k, pid] of Object.entries(pids)) {
    perToken[k] = ((cpuMsOf(pid) - before[k]!) * 1000) / delivered;
  }
  return { perToken, completed: result.completed, failed: result.failed };
}

const sum = (r: Record<string, number>) => Object.values(r).reduce((a, b) => a + b, 0);
const fmt = (n: number) => n.toFixed(1).padStart(6);

const stacks: Partial<Record<Build, BenchStack>> = {};
const load = await startLoadGenerator();
try {
  stacks.new = await startBenchStack({ nodes: [node] });
  stacks.base = await startBenchStack({ nodes: [node], root: values.base });
  const builds: Build[] = ["new", "base"];
  for (const b of builds) await window(load, stacks[b]!, warmupMs);
  const seen: Record<Build, Array<Record<string, number>>> = { new: [], base: [] };
  let failed = 0;
  console.log(
    `round |   new: intake dispatcher nats  sum |  base: intake dispatcher nats  sum | new − base`,
  );
  for (let i = 0; i < rounds; i++) {
    const order = i % 2 === 0 ? builds : [...builds].reverse();
    const round: Partial<Record<Build, Record<string, number>>> = {};
    for (const b of order) {
      const w = await window(load, stacks[b]!, windowMs);
      failed += w.failed;
      round[b] = w.perToken;
      seen[b].push(w.perToken);
    }
    const row = (r: Record<string, number>) =>
      `${fmt(r.intake!)} ${fmt(r.dispatcher!)} ${fmt(r["nats-server"]!)} ${fmt(sum(r))}`;
    console.log(
      `${String(i + 1).padStart(5)} | ${row(round.new!)} | ${row(round.base!)} | ${fmt(sum(round.new!) - sum(round.base!))}`,
    );
  }
  const sorted = (xs: number[]) => xs.sort((a, b) => a - b);
  const median = (b: Build, k: string) =>
    quantile(sorted(seen[b].map((r) => (k === "sum" ? sum(r) : r[k]!))), 0.5);
  // Rounds 2k and 2k+1 put each build once first, once second.
  const diffs: number[] = [];
  for (let i = 0; i + 1 < rounds; i += 2) {
    const pair = (b: Build) => (sum(seen[b][i]!) + sum(seen[b][i + 1]!)) / 2;
    diffs.push(pair("new") - pair("base"));
  }
  sorted(diffs);
  console.log(
    `medians: new ${["intake", "dispatcher", "nats-server", "sum"].map((k) => `${k} ${median("new", k).toFixed(1)}`).join(", ")}; ` +
      `base ${["intake", "dispatcher", "nats-server", "sum"].map((k) => `${k} ${median("base", k).toFixed(1)}`).join(", ")}; ` +
      `new − base per pair of rounds: ${diffs.map((d) => d.toFixed(1)).join(", ")} (median ${quantile(diffs, 0.5).toFixed(1)}). Failed requests: ${failed}.`,
  );
} finally {
  await load.close();
  await Promise.allSettled(Object.values(stacks).map((s) => s.stop()));
}
