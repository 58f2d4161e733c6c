// The load generator: its own process, so that it never competes with the coordinator's event
// loop. Reads one LoadPlan per stdin line, runs it with undici connection pools (kept warm
// across rounds) and prints one LoadResult per stdout line. Exits when stdin closes.
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { createInterface } from "node:readline";
import { SealedChannel } from "@zml/seal";
import type { SealedStreamReader } from "@zml/seal";
import { Pool } from "undici";
import type { LoadPlan, LoadResult, SealedSession } from "./plan.ts";
import { Samples } from "./stats.ts";

const pools = new Map<string, Pool>();

/**
 * With `ZML_BENCH_TAIL_DIR` set (tail-probe.ts, tail-report.ts): every whole answer's plan id,
 * origin and path, wall-clock start (ms since the epoch) and latency, written to
 * `<dir>/load-requests-<pid>.json` every 2 s.
 */
const tailDir = process.env.ZML_BENCH_TAIL_DIR;
const tailRows: [number, string, number, number][] = [];
if (tailDir) {
  const file = join(tailDir, `load-requests-${process.pid}.json`);
  const write = () => writeFileSync(file, JSON.stringify(tailRows));
  setInterval(write, 2_000).unref();
  process.on("exit", write);
}
/**
 * This process's channel to each session sealed to: one HPKE setup, made as a plan starts so
 * no measured request pays for it (the SDK makes it when the session opens). The SDK's own
 * channel (the coordinator's check) is another one: the TD keeps each its own numbers.
 */
const channels = new Map<string, SealedChannel>();

function channelOf(session: SealedSession): SealedChannel {
  let channel = channels.get(session.sessionId);
  if (channel === undefined) {
    channel = new SealedChannel({
      sessionId: session.sessionId,
      sessionPublicKey: session.sessionPublicKey,
    });
    channels.set(session.sessionId, channel);
  }
  return channel;
}

/** Seals one request as the SDK does: the channel's next number. */
function seal(session: SealedSession, path: string, body: Buffer, stream: boolean) {
  return channelOf(session).seal({ path, body, model: session.model, stream });
}

/**
 * Opens one read of a sealed stream into the server's own events. Refuses what the SDK
 * refuses: a head that is not a 200, the gateway's error event, a chunk that does not open.
 */
function openRead(reader: SealedStreamReader, bytes: Buffer): string[] {
  const events: string[] = [];
  for (const part of reader.push(bytes)) {
    if (part.kind === "gateway_error") throw new Error(`gateway error event: ${part.data}`);
    if (part.kind === "head" && part.head.status !== 200) {
      throw new Error(`sealed head says ${part.head.status}`);
    }
    if (part.kind === "event") events.push(part.event.toString("utf8"));
  }
  return events;
}

function poolFor(plan: LoadPlan): Pool {
  const key = `${plan.protocol ?? "http1"} ${plan.origin}`;
  let pool = pools.get(key);
  if (pool === undefined) {
    pool =
      plan.protocol === undefined
        ? // More connections than any plan's concurrency (the fleet rows run 1,024 streams):
          // every worker keeps its own socket.
          new Pool(plan.origin, { connections: 2048, pipelining: 1, keepAliveTimeout: 60_000 })
        : // HTTP/2 as a client normally speaks it: every worker's request a stream of one
          // session (the node allows unlimited streams).
          new Pool(plan.origin, {
            connections: 1,
            allowH2: true,
            maxConcurrentStreams: 1024,
            keepAliveTimeout: 60_000,
            connect: connectOptions(plan),
          });
    pools.set(key, pool);
  }
  return pool;
}

/** `useH2c` (prior knowledge) is an undici connector option missing from its type definitions. */
function connectOptions(plan: LoadPlan): Record<string, unknown> {
  return plan.protocol === "h2c" ? { useH2c: true } : plan.caPem ? { ca: plan.caPem } : {};
}

/** Cuts server-sent events out of the bytes as they arrive (each kept with its blank line). */
class SseSplitter {
  private text = "";
  private readonly decoder = new TextDecoder();

  /** The events this read completed. */
  push(bytes: Buffer): string[] {
    this.text += this.decoder.decode(bytes, { stream: true });
    const events: string[] = [];
    for (;;) {
      const end = this.text.indexOf("\n\n");
      if (end === -1) break;
      events.push(this.text.slice(0, end + 2));
      this.text = this.text.slice(end + 2);
    }
    return events;
  }
}

/** Checks one SSE body: every event is JSON, the tokens are all there, `[DONE]` ends it. */
function checkStream(
  text: string,
  expectTokens: number | undefined,
): { ok: true; content: string } | { ok: false; error: string } {
  if (text.includes("event: error"))
    return { ok: false, error: "stream ended with an error event" };
  const events = text.split("\n\n");
  if (events.pop() !== "") return { ok: false, error: "stream truncated mid-event" };
  if (events.pop() !== "data: [DONE]") return { ok: false, error: "stream without [DONE]" };
  let tokens = 0;
  let content = "";
  for (const event of events) {
    if (!event.startsWith("data: ")) return { ok: false, error: "garbled event" };
    let chunk: { choices?: Array<{ delta?: { content?: unknown } }> };
    try {
      chunk = JSON.parse(event.slice(6)) as typeof chunk;
    } catch {
      return { ok: false, error: "event is not JSON" };
    }
    const piece = chunk.choices?.[0]?.delta?.content;
    if (typeof piece === "string" && piece.length > 0) {
      tokens += 1;
      content += piece;
    }
  }
  if (expectTokens !== undefined && tokens !== expectTokens) {
    return { ok: false, error: `expected ${expectTokens} tokens, got ${tokens}` };
  }
  return { ok: true, content };
}

async function run(plan: LoadPlan): Promise<LoadResult> {
  const pool = poolFor(plan);
  if (plan.sealed) channelOf(plan.sealed);
  const body = Buffer.from(plan.body);
  const latency = new Samples();
  const ttft = new Samples();
  const gap = new Samples();
  const streams: string[] = [];
  const failures: string[] = [];
  let completed = 0;
  let failed = 0;
  let referenceLength = -1;
  const fail = (what: string) => {
    failed += 1;
    if (failures.length < 5) failures.push(what);
  };

  /**
   * Reads a stream whose events `cut` takes out of each read (opened, or split), with the
   * first token taken once its event is complete, not when its bytes arrive.
   */
  const readEvents = async (
    body: AsyncIterable<Buffer>,
    startedAt: number,
    cut: (chunk: Buffer) => string[],
  ): Promise<void> => {
    const events: string[] = [];
    let last = 0;
    let reads = 0;
    for await (const chunk of body) {
      const now = performance.now();
      if (reads++ > 0) gap.push(now - last);
      last = now;
      const before = events.length;
      events.push(...cut(chunk));
      if (before === 0 && events.length > 0) ttft.push(performance.now() - startedAt);
    }
    latency.push(performance.now() - startedAt);
    streams.push(events.join(""));
  };

  const once = async (): Promise<void> => {
    const startedAt = performance.now();
    // A sealed plan pays for sealing inside the timing, as a client does.
    const sealed = plan.sealed ? seal(plan.sealed, plan.path, body, plan.stream) : undefined;
    const res = await pool.request({
      path: plan.path,
      method: "POST",
      headers: plan.headers,
      body: sealed ? sealed.bytes : body,
    });
    if (res.statusCode !== 200) {
      const text = await res.body.text();
      fail(`HTTP ${res.statusCode}: ${text.slice(0, 200)}`);
      return;
    }
    if (sealed && plan.stream) {
      const reader = sealed.opener.streamReader();
      await readEvents(res.body, startedAt, (chunk) => openRead(reader, chunk));
      reader.finish();
      return;
    }
    if (!plan.stream) {
      const raw = await res.body.arrayBuffer();
      let bytes = raw.byteLength;
      if (sealed) {
        const opened = sealed.opener.openAnswer(new Uint8Array(raw));
        if (opened.status !== 200) {
          fail(`sealed answer's status ${opened.status}`);
          return;
        }
        bytes = opened.body.byteLength;
      }
      const tookMs = performance.now() - startedAt;
      latency.push(tookMs);
      if (tailDir) {
        tailRows.push([
          plan.id,
          plan.origin + plan.path,
          performance.timeOrigin + startedAt,
          tookMs,
        ]);
      }
      // The simulated node's answers to one plan all have the same length.
      if (referenceLength === -1) referenceLength = bytes;
      if (bytes !== referenceLength) {
        fail(`body of ${bytes} bytes, expected ${referenceLength}`);
        return;
      }
      completed += 1;
      return;
    }
    if (plan.ttftAtEvent) {
      // The unsealed twin of the sealed path above: the events cut out as they arrive, as
      // any SSE client does.
      const splitter = new SseSplitter();
      await readEvents(res.body, startedAt, (chunk) => splitter.push(chunk));
      return;
    }
    const parts: Buffer[] = [];
    let last = 0;
    for await (const chunk of res.body as AsyncIterable<Buffer>) {
      const now = performance.now();
      if (parts.length === 0) ttft.push(now - startedAt);
      else gap.push(now - last);
      last = now;
      parts.push(chunk);
    }
    latency.push(performance.now() - startedAt);
    // Checked after the round, so that parsing never delays another stream's reads.
    streams.push(Buffer.concat(parts).toString("utf8"));
  };

  const startedAt = performance.now();
  const deadline = startedAt + plan.durationMs;
  let endedAt = startedAt;
  const worker = async (_: unknown, i: number) => {
    const delayMs = ((plan.spreadStartsMs ?? 0) * i) / plan.concurrency;
    if (delayMs > 0) await new Promise((resolve) => setTimeout(resolve, delayMs));
    while (performance.now() < deadline) {
      try {
        await once();
      } catch (error) {
        const e = error as { code?: string; message?: string };
        fail(`${e.code ?? "error"}: ${e.message ?? String(error)}`);
      }
      endedAt = performance.now();
    }
  };
  await Promise.all(Array.from({ length: plan.concurrency }, worker));
  const elapsedMs = endedAt - startedAt;

  let broken = 0;
  let reference: string | undefined;
  for (const text of streams) {
    const checked = checkStream(text, plan.expectTokens);
    reference ??= checked.ok ? checked.content : undefined;
    if (!checked.ok) fail(checked.error);
    else if (checked.content !== reference) fail("stream content differs from the others");
    else {
      completed += 1;
      continue;
    }
    broken += 1;
  }

  return {
    id: plan.id,
    completed,
    failed,
    failures,
    elapsedMs,
    rps: elapsedMs > 0 ? (completed * 1000) / elapsedMs : 0,
    latency: latency.percentiles(),
    ...(plan.stream
      ? { stream: { ttft: ttft.percentiles(), gap: gap.percentiles(), broken } }
      : {}),
  };
}

async function main(): Promise<void> {
  const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
  for await (const line of lines) {
    if (line.trim() === "") continue;
    const result = await run(JSON.parse(line) as LoadPlan);
    process.stdout.write(`${JSON.stringify(result)}\n`);
  }
  await Promise.all([...pools.values()].map((p) => p.close()));
}

await main();
