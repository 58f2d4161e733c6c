// The SSE cutter on the dispatcher's streaming path, against the dispatcher's own cutter as it
// was at a base revision (read from git into a scratch file, in the same run, rounds taken in
// turn): nanoseconds per read of streamed-token events, as vLLM sends them. Run with
// `node bench/sse-cutter.bench.ts [base-rev]` in services/dispatcher (default base: e824a1c,
// the last revision with the dispatcher's own copy).
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { SseEventCutter } from "../src/node/sse-events.ts";

interface Cutter {
  push(chunk: Buffer): Buffer | null;
  complete(): boolean;
}

const base = process.argv[2] ?? "e824a1c";
const source = execFileSync("git", ["show", `${base}:services/dispatcher/src/node/sse-events.ts`], {
  encoding: "utf8",
});
// Inside the package, so the old file's `@zml/contracts` import resolves.
const scratch = mkdtempSync(join(import.meta.dirname, ".base-"));
const basePath = join(scratch, "sse-events.ts");
writeFileSync(basePath, source);
const old = (await import(basePath)) as { SseEventCutter: new () => Cutter };
rmSync(scratch, { recursive: true, force: true });

/** One streamed token as vLLM sends it: a chat.completion.chunk of about 250 bytes. */
function tokenEvent(i: number): Buffer {
  const chunk = {
    id: "chatcmpl-0123456789abcdef0123456789abcdef",
    object: "chat.completion.chunk",
    created: 1_733_000_000,
    model: "llama-3.1-8b-instruct",
    choices: [{ index: 0, delta: { content: ` word${i}` }, logprobs: null, finish_reason: null }],
  };
  return Buffer.from(`data: ${JSON.stringify(chunk)}\n\n`);
}

const TOKENS = 512;
const events = Array.from({ length: TOKENS }, (_, i) => tokenEvent(i));
const finish = Buffer.from(
  'data: {"id":"chatcmpl-0","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n',
);
/** The reads of a stream: one event a read (the common case, a token per read). */
const oneEach = [...events, finish, Buffer.from("data: [DONE]\n\n")];
/** Reads of two to four events together (a node flushing behind a slow reader). */
const grouped: Buffer[] = [];
for (let i = 0; i < oneEach.length; i += 3) grouped.push(Buffer.concat(oneEach.slice(i, i + 3)));
/** Reads cut at arbitrary byte offsets (TCP segments that split events). */
const whole = Buffer.concat(oneEach);
const split: Buffer[] = [];
for (let at = 0, n = 0; at < whole.length; n++) {
  const size = 97 + ((n * 131) % 400);
  split.push(whole.subarray(at, at + size));
  at += size;
}

/** Nanoseconds per read over `streams` streams, ending each with `complete()`. */
function nsPerRead(make: () => Cutter, reads: Buffer[], streams: number): number {
  const started = process.hrtime.bigint();
  let sent = 0;
  for (let s = 0; s < streams; s++) {
    const cutter = make();
    for (const read of reads) sent += cutter.push(read)?.length ?? 0;
    if (!cutter.complete()) throw new Error("a complete stream was judged incomplete");
  }
  const ns = Number(process.hrtime.bigint() - started) / (streams * reads.length);
  if (sent !== whole.length * streams) throw new Error(`sent ${sent} bytes`);
  return ns;
}

const median = (xs: number[]) => xs.sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
/** The fastest round: what the code costs when no other process takes the core. */
const best = (xs: number[]) => Math.min(...xs);

console.log(`base ${base}: the dispatcher's own cutter; new: @zml/contracts/sse`);
console.log("ns per read, the fastest round (the median round) of each; new / base of the fastest");
console.log("reads                  | base ns/read  | new ns/read   | new / base");
for (const [name, reads] of [
  ["one token event each", oneEach],
  ["three events each", grouped],
  ["split anywhere", split],
] as const) {
  const streams = Math.max(50, Math.floor(400_000 / reads.length));
  const rounds = { base: [] as number[], new: [] as number[] };
  for (let round = 0; round < 22; round++) {
    // Taken in turn, each first every other round, so drift on a shared machine falls on
    // both; the first two rounds warm up.
    const runBase = () => nsPerRead(() => new old.SseEventCutter(), reads, streams);
    const runNew = () => nsPerRead(() => new SseEventCutter(), reads, streams);
    let b: number;
    let n: number;
    if (round % 2 === 0) {
      b = runBase();
      n = runNew();
    } else {
      n = runNew();
      b = runBase();
    }
    if (round >= 2) {
      rounds.base.push(b);
      rounds.new.push(n);
    }
  }
  const [b, n] = [best(rounds.base), best(rounds.new)];
  const cell = (fastest: number, all: number[]) =>
    `${fastest.toFixed(0)} (${median(all).toFixed(0)})`.padStart(13);
  console.log(
    `${name.padEnd(22)} | ${cell(b, rounds.base)} | ${cell(n, rounds.new)} | ${(n / b).toFixed(3)}`,
  );
}
