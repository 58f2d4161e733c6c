// Where ZML's CPU goes per request, against the floor at the same load: `perf` samples (on-CPU
// time only, unlike V8's profiler, which also counts the time a process waits for a core)
// of intake, the dispatcher and nats-server during a ZML round, and of the floor's two
// processes and nats-server during a floor round, summed per cost centre (cost-centres.ts).
//
// node test/bench/on-cpu.ts [--concurrency 1] [--prompt-bytes 0] [--seconds 4] [--stream]
//   [--fleet] [--warmup-s 1] [--keep <dir>]
//
// `--fleet`: streams from the engine-shaped node (`step-node.ts`) as the fleet rows run them,
// `--concurrency` at once with starts spread over one stream; figures are then per token.
//
// Needs `perf` (Debian: linux-perf) and the right to attach to the processes (root, or
// kernel.perf_event_paranoid ≤ 1). Prints µs of CPU per request per process and cost centre.
// JavaScript frames are named from the perf map each process writes as V8 compiles; code V8
// moves afterwards can be named wrongly, so a centre's figure is approximate, while each
// process's total (all its samples) is exact to the sampling.
import { execFile, spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs, promisify } from "node:util";
import { BENCH_API_KEY, startBenchStack } from "./bench-stack.ts";
import { costCentreOf } from "./cost-centres.ts";
import { startLoadGenerator } from "./load-client.ts";
import type { LoadPlan } from "./plan.ts";
import { chatBody, NODES } from "./scenarios.ts";

const SAMPLE_HZ = 1999;

/** A perf symbol `JS:<tier marks>name path:line:col` as profile keys name frames: `path:name`. */
function frameKey(symbol: string): string {
  const js = /^JS:[*~^+']*(\S*) (.+?):\d+:\d+$/.exec(symbol);
  return js ? `${js[2]}:${js[1]}` : symbol;
}

const GC =
  /v8::internal::(Heap::|Scavenger|ScavengeJob|MarkCompact|ConcurrentMarking|Sweeper|MinorMarkSweep|IncrementalMarking|MarkingVisitor|MarkingBarrier|ArrayBufferSweeper|LargeObjectSpace|PagedSpace|Evacuat|MemoryAllocator)/;
const TLS = /^(ossl_|aes|tls_|ssl3_|SSL_|EVP_|gcm_|node::crypto::)/;

/** The cost centre of one sample: its thread, and its frames leaf first. */
function centreOf(thread: string, frames: string[]): string {
  if (frames.some((f) => GC.test(f))) return "GC";
  if (thread !== "MainThread") return `thread ${thread.replace(/\d+$/, "N")}`;
  if (TLS.test(frames[0] ?? "")) return "TLS (OpenSSL)";
  const centre = costCentreOf(frames.map(frameKey));
  if (centre !== undefined) return centre;
  return (frames[0] ?? "").startsWith("[k]") ? "kernel (no JS caller)" : "runtime, event loop";
}

/** Samples per cost centre from `perf script`'s output (thread line, then frames). */
function centres(script: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const block of script.split("\n\n")) {
    const lines = block.split("\n").filter((l) => l.trim() !== "");
    if (lines.length === 0) continue;
    const thread = lines[0]!.trim().split(/\s+/)[0]!;
    const frames = lines.slice(1).map((l) => {
      const [addr, ...sym] = l.trim().split(/\s+/);
      const name = sym.join(" ");
      return addr!.startsWith("ffffffff") ? `[k]${name}` : name;
    });
    const centre = centreOf(thread, frames);
    out.set(centre, (out.get(centre) ?? 0) + 1);
  }
  return out;
}

async function record(
  load: Awaited<ReturnType<typeof startLoadGenerator>>,
  plan: Omit<LoadPlan, "id" | "durationMs">,
  pids: Record<string, number | undefined>,
  seconds: number,
  side: "zml" | "floor",
): Promise<{ requests: number; p50: number; perProcess: Map<string, Map<string, number>> }> {
  await load.run({ ...plan, durationMs: warmupS * 1000 }); // JIT and pools warm
  const recorders = Object.entries(pids).map(([name, pid]) => {
    const file = join(dir, `${side}-${name}.data`);
    const child = spawn(
      "perf",
      [
        "record",
        "-q",
        "-e",
        "cpu-clock",
        "-F",
        String(SAMPLE_HZ),
        "-g",
        "-p",
        String(pid),
        "-o",
        file,
      ],
      { stdio: "ignore" },
    );
    return { name, file, exited: new Promise((resolve) => child.once("exit", resolve)), child };
  });
  await new Promise((resolve) => setTimeout(resolve, 300));
  const result = await load.run({ ...plan, durationMs: seconds * 1000 });
  for (const r of recorders) r.child.kill("SIGINT");
  await Promise.all(recorders.map((r) => r.exited));
  const perProcess = new Map<string, Map<string, number>>();
  for (const r of recorders) {
    const { stdout } = await promisify(execFile)(
      "perf",
      ["script", "-i", r.file, "-F", "comm,ip,sym"],
      { maxBuffer: 1 << 30 },
    );
    perProcess.set(r.name, centres(stdout));
  }
  return { requests: result.completed, p50: result.latency.p50, perProcess };
}

const { values } = parseArgs({
  options: {
    concurrency: { type: "string", default: "1" },
    "prompt-bytes": { type: "string", default: "0" },
    seconds: { type: "string", default: "4" },
    stream: { type: "boolean", default: false },
    fleet: { type: "boolean", default: false },
    keep: { type: "string" },
    "warmup-s": { type: "string", default: "1" },
  },
});
const concurrency = Number(values.concurrency);
const promptBytes = Number(values["prompt-bytes"]);
const seconds = Number(values.seconds);
const warmupS = Number(values["warmup-s"]);
const fleet = values.fleet;
const node = fleet ? NODES.fleet : values.stream ? NODES.stream : NODES.instant;
/** Per request, or per token for the fleet's streams (each of `completionTokens` tokens). */
const unitsPerRequest = fleet ? NODES.fleet.completionTokens : 1;

const stack = await startBenchStack({ nodes: [node], perfMaps: true });
const load = await startLoadGenerator();
// `--keep <dir>`: the perf recordings stay there, for `perf report -i <dir>/zml-intake.data`.
const dir = values.keep ?? mkdtempSync(join(tmpdir(), "zml-on-cpu-"));
mkdirSync(dir, { recursive: true });
try {
  const common = {
    body: chatBody(node.model, values.stream || fleet, promptBytes > 0 ? promptBytes : undefined),
    concurrency,
    stream: values.stream || fleet,
    ...(fleet ? { spreadStartsMs: NODES.fleet.step.stepMs * NODES.fleet.step.tokens } : {}),
  };
  const zml = await record(
    load,
    {
      ...common,
      origin: stack.intakeUrl,
      path: "/v1/chat/completions",
      headers: { "content-type": "application/json", authorization: `Bearer ${BENCH_API_KEY}` },
    },
    {
      intake: stack.services.get("intake")?.pid,
      dispatcher: stack.services.get("dispatcher")?.pid,
      "nats-server": stack.natsPid,
    },
    seconds,
    "zml",
  );
  const floor = await record(
    load,
    {
      ...common,
      origin: stack.floor.url,
      path: stack.floor.pathOf(node.model)!,
      headers: { "content-type": "application/json" },
    },
    {
      intake: stack.floor.intakePid,
      dispatcher: stack.floor.workerPid,
      "nats-server": stack.natsPid,
    },
    seconds,
    "floor",
  );
  const usPerRequest = (samples: number, requests: number) =>
    ((samples / SAMPLE_HZ) * 1e6) / Math.max(1, requests * unitsPerRequest);
  const names = [
    ...new Set(
      [...zml.perProcess.values(), ...floor.perProcess.values()].flatMap((m) => [...m.keys()]),
    ),
  ];
  const cell = (side: typeof zml, proc: string, centre: string) =>
    usPerRequest(side.perProcess.get(proc)?.get(centre) ?? 0, side.requests);
  const total = (side: typeof zml, proc: string) =>
    usPerRequest(
      [...(side.perProcess.get(proc)?.values() ?? [])].reduce((a, b) => a + b, 0),
      side.requests,
    );
  const procs = ["intake", "dispatcher", "nats-server"];
  const header = ["cost centre", ...procs.flatMap((p) => [`ZML ${p}`, `floor ${p}`])];
  const rows = names
    .map((n) => [n, ...procs.flatMap((p) => [cell(zml, p, n), cell(floor, p, n)])] as const)
    .sort((a, b) => (b[1] as number) + (b[3] as number) - ((a[1] as number) + (a[3] as number)));
  const fmt = (v: number) => v.toFixed(fleet ? 1 : 0);
  const lines = [
    `on-CPU µs per ${fleet ? "token" : "request"} (perf, ${SAMPLE_HZ} Hz), concurrency ${concurrency}, ` +
      `prompt ${promptBytes} B${values.stream ? ", streams" : ""}${fleet ? ", fleet streams" : ""}, ${seconds} s per side; ` +
      `ZML ${zml.requests} requests (p50 ${zml.p50.toFixed(2)} ms), floor ${floor.requests} (p50 ${floor.p50.toFixed(2)} ms). ` +
      "floor intake = its node:http process, floor dispatcher = its worker.",
    "",
    `| ${header.join(" | ")} |`,
    `|${header.map((_, i) => (i === 0 ? "---" : "---:")).join("|")}|`,
    ...rows.map(
      (r) =>
        `| ${r[0]} | ${r
          .slice(1)
          .map((v) => fmt(v as number))
          .join(" | ")} |`,
    ),
    `| **total** | ${procs.flatMap((p) => [fmt(total(zml, p)), fmt(total(floor, p))]).join(" | ")} |`,
  ];
  process.stdout.write(`${lines.join("\n")}\n`);
} finally {
  if (values.keep === undefined) rmSync(dir, { recursive: true, force: true });
  await load.close();
  await stack.stop();
}
