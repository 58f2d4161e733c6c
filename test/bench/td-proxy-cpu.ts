// The TD proxy alone: its CPU per stream, sealed against unsealed, with nothing of the gateway
// between (so its busy time is not mixed with intake's, the dispatcher's and NATS's on the
// same cores). One TD proxy process (`--tier 3`: plain requests pass through, sealed ones are
// opened and their answers sealed) in front of one simulated node; this process plays the
// dispatcher (16 streams at once over TLS, keep-alive) and the client (seals the requests,
// opens every event). CPU is the TD proxy's on-CPU time from /proc (ns), over interleaved
// rounds. `--cpu-prof <dir>` profiles the proxy over one long round of each side instead.
// `node test/bench/td-proxy-cpu.ts [--rounds 6] [--duration-ms 2000] [--concurrency 16]
//   [--cpu-prof <dir>]`
import { randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { parseArgs } from "node:util";
import { SEALED_REQUEST_MEDIA_TYPE } from "@zml/contracts";
import { repoRoot, startProcess } from "@zml/harness";
import type { ManagedProcess } from "@zml/harness";
import { loadTestTeeMaterial } from "@zml/node-sim";
import { SealedChannel } from "@zml/seal";
import { Pool } from "undici";
import { startTdProxyProcess } from "./bench-stack.ts";
import { cpuMsOf } from "./proc.ts";
import { quantile } from "./stats.ts";

const { values } = parseArgs({
  options: {
    rounds: { type: "string", default: "6" },
    "duration-ms": { type: "string", default: "2000" },
    concurrency: { type: "string", default: "16" },
    "cpu-prof": { type: "string" },
  },
});
const ROUNDS = Number(values.rounds);
const DURATION_MS = Number(values["duration-ms"]);
const CONCURRENCY = Number(values.concurrency);
const MODEL = "bench-tee";
const PATH = "/v1/chat/completions";
const TOKENS = 16;

const root = repoRoot();
const teeDir = mkdtempSync(join(tmpdir(), "zml-td-proxy-cpu-"));
const inner = JSON.stringify({
  model: MODEL,
  messages: [{ role: "user", content: "Say hello" }],
  stream: true,
});
const plainBody = JSON.stringify({ ...(JSON.parse(inner) as object), tier: 3 });

type Side = "unsealed" | "sealed";

async function main(): Promise<void> {
  await loadTestTeeMaterial(teeDir);
  const node = await startProcess({
    name: "node",
    command: process.execPath,
    args: [
      join(root, "libs/node-sim/src/cli.ts"),
      ...["--id", MODEL, "--model", MODEL, "--max-concurrency", "512"],
      ...["--ttft-ms", "0", "--tps", "1000", "--completion-tokens", String(TOKENS)],
    ],
    readyLine: /"event":"ready"/,
  });
  const nodeUrl = (await node.waitForOutput(/"url":"([^"]+)"/))[1]!;
  const procs: ManagedProcess[] = [node];
  try {
    if (values["cpu-prof"] === undefined) {
      const proxy = await startTdProxyProcess(root, nodeUrl, teeDir, {});
      procs.push(proxy.process);
      await measure(proxy);
    } else {
      // One profiled proxy per side: each profile holds only its side's work.
      for (const side of ["unsealed", "sealed"] as const) {
        const dir = join(values["cpu-prof"], side);
        const proxy = await startTdProxyProcess(root, nodeUrl, teeDir, {
          NODE_OPTIONS: `--cpu-prof --cpu-prof-dir=${dir}`,
        });
        const driver = await driverOf(proxy.url);
        await driver.run(side, 1_000);
        const n = await driver.run(side, DURATION_MS);
        await driver.close();
        await proxy.process.stop("SIGTERM", 10_000);
        process.stdout.write(`${side}: ${n} streams profiled into ${dir}\n`);
      }
    }
  } finally {
    for (const p of procs.reverse()) await p.stop("SIGTERM", 10_000).catch(() => undefined);
    rmSync(teeDir, { recursive: true, force: true });
  }
}

/** Drives one proxy: 16 workers, each a stream after the other, read to the end. */
async function driverOf(url: string) {
  const pool = new Pool(url, {
    connections: CONCURRENCY,
    connect: { rejectUnauthorized: false },
  });
  const quote = await pool.request({
    path: `/attestation/quote?nonce=${randomBytes(32).toString("hex")}&session_key=1`,
    method: "GET",
  });
  const { session_public_key: key } = (await quote.body.json()) as { session_public_key: string };
  const channel = new SealedChannel({
    sessionId: `ses-${randomBytes(16).toString("hex")}`,
    sessionPublicKey: key,
  });
  /** Reads of answer bytes per side: about the writes the proxy made. */
  const reads: Record<Side, number> = { unsealed: 0, sealed: 0 };
  /** Request sent (sealing included) to the first token readable in clear, ms, per side. */
  const ttft: Record<Side, number[]> = { unsealed: [], sealed: [] };
  const oneStream = async (side: Side): Promise<void> => {
    const t0 = performance.now();
    let first = true;
    if (side === "unsealed") {
      const res = await pool.request({
        path: PATH,
        method: "POST",
        headers: { "content-type": "application/json" },
        body: plainBody,
      });
      if (res.statusCode !== 200) throw new Error(`unsealed: ${res.statusCode}`);
      for await (const chunk of res.body) {
        if (first && (chunk as Buffer).includes("data: ")) {
          ttft[side].push(performance.now() - t0);
          first = false;
        }
        reads[side]++;
      }
      return;
    }
    const sealed = channel.seal({
      path: PATH,
      body: Buffer.from(inner),
      model: MODEL,
      stream: true,
    });
    const res = await pool.request({
      path: PATH,
      method: "POST",
      headers: { "content-type": SEALED_REQUEST_MEDIA_TYPE },
      body: Buffer.from(sealed.bytes),
    });
    if (res.statusCode !== 200) throw new Error(`sealed: ${res.statusCode}`);
    const reader = sealed.opener.streamReader();
    let events = 0;
    for await (const chunk of res.body) {
      reads[side]++;
      for (const part of reader.push(chunk as Buffer)) {
        if (part.kind !== "event") continue;
        if (first && part.event.includes("data: ")) {
          ttft[side].push(performance.now() - t0);
          first = false;
        }
        events++;
      }
    }
    reader.finish();
    if (events < TOKENS) throw new Error(`sealed: ${events} events`);
  };
  return {
    /** Streams completed in `ms`. */
    async run(side: Side, ms: number): Promise<number> {
      const until = performance.now() + ms;
      let done = 0;
      await Promise.all(
        Array.from({ length: CONCURRENCY }, async () => {
          while (performance.now() < until) {
            await oneStream(side);
            done++;
          }
        }),
      );
      return done;
    },
    reads,
    ttft,
    close: () => pool.close(),
  };
}

async function measure(proxy: { url: string; process: ManagedProcess }): Promise<void> {
  const pid = proxy.process.pid;
  const driver = await driverOf(proxy.url);
  for (const side of ["unsealed", "sealed"] as const) {
    await driver.run(side, 1_500);
    driver.ttft[side].length = 0;
  }
  const perStream: Record<Side, number[]> = { unsealed: [], sealed: [] };
  const ratios: number[] = [];
  const readsPerStream: Record<Side, number[]> = { unsealed: [], sealed: [] };
  /** User and system µs (from the 10 ms ticks, summed over every round) and streams. */
  const userSys: Record<Side, [number, number]> = { unsealed: [0, 0], sealed: [0, 0] };
  const streams: Record<Side, number> = { unsealed: 0, sealed: 0 };
  for (let i = 0; i < ROUNDS; i++) {
    const order: Side[] = i % 2 === 0 ? ["unsealed", "sealed"] : ["sealed", "unsealed"];
    const round: Partial<Record<Side, number>> = {};
    for (const side of order) {
      const before = cpuMsOf(pid);
      const ticksBefore = userSysTicks(pid);
      const readsBefore = driver.reads[side];
      const n = await driver.run(side, DURATION_MS);
      readsPerStream[side].push((driver.reads[side] - readsBefore) / n);
      const ticks = userSysTicks(pid);
      userSys[side][0] += (ticks[0] - ticksBefore[0]) * 10_000;
      userSys[side][1] += (ticks[1] - ticksBefore[1]) * 10_000;
      streams[side] += n;
      const us = ((cpuMsOf(pid) - before) * 1000) / n;
      perStream[side].push(us);
      round[side] = us;
    }
    ratios.push(round.sealed! / round.unsealed!);
    process.stdout.write(
      `round ${i + 1}: unsealed ${round.unsealed!.toFixed(0)} µs, sealed ` +
        `${round.sealed!.toFixed(0)} µs per stream, ${ratios.at(-1)!.toFixed(2)}×\n`,
    );
  }
  await driver.close();
  /** The middle figure (the lower one of an even count). */
  const p50 = (xs: number[]) =>
    quantile(
      [...xs].sort((a, b) => a - b),
      0.5,
    );
  process.stdout.write(
    `TD proxy CPU per stream at c${CONCURRENCY} (median of ${ROUNDS} rounds): unsealed ` +
      `${p50(perStream.unsealed).toFixed(0)} µs, sealed ${p50(perStream.sealed).toFixed(0)} µs, ` +
      `sealed ÷ unsealed ${p50(ratios).toFixed(2)}×; reads per stream on the client: unsealed ` +
      `${p50(readsPerStream.unsealed).toFixed(1)}, sealed ${p50(readsPerStream.sealed).toFixed(1)}\n`,
  );
  process.stdout.write(
    `TTFT p50 (all rounds): unsealed ${p50(driver.ttft.unsealed).toFixed(3)} ms, sealed ` +
      `${p50(driver.ttft.sealed).toFixed(3)} ms\n`,
  );
  for (const side of ["unsealed", "sealed"] as const) {
    const [user, sys] = userSys[side].map((us) => us / streams[side]) as [number, number];
    process.stdout.write(
      `${side}: user ${user.toFixed(0)} µs, system ${sys.toFixed(0)} µs per stream\n`,
    );
  }
}

/** utime and stime of a process, in clock ticks. */
function userSysTicks(pid: number): [number, number] {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return [Number(fields[11]), Number(fields[12])];
}

await main();
