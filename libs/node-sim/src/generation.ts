import type { ServerResponse } from "node:http";
import { performance } from "node:perf_hooks";
import type { ConcurrencyGate, Lease } from "./concurrency-gate.ts";
import type { SimMetrics } from "./metrics.ts";
import type { InferenceRequest } from "./openai-request.ts";
import { createResponseRender, SSE_MALFORMED } from "./openai-response.ts";
import type { Vocabulary } from "./openai-response.ts";
import type { ResponseRender, SimFault, SimFlavour, SimRuntimeConfig } from "./types.ts";

/** What a generation needs from the node that runs it. */
export interface GenerationContext {
  readonly flavour: SimFlavour;
  readonly config: Readonly<SimRuntimeConfig>;
  readonly gate: ConcurrencyGate;
  readonly metrics: SimMetrics;
  /** The words answers are made of. */
  readonly vocabulary: Vocabulary;
  /** Tokens budgeted by running requests, for TGI's batch gauge. */
  batchTokens: number;
  /** Set while the node shuts down: a slot granted now is left to the closing socket. */
  closing: boolean;
  /** Called once when the response has been written in full with a 200. */
  onCompleted(): void;
}

/** The faults that act while a valid request is being generated. */
export type GenerationFault = Extract<
  SimFault,
  { kind: "slow_first_token" | "cut_stream" | "stall_stream" | "malformed_chunk" }
>;

/** Narrows a fault taken at the generation stage. */
export function asGenerationFault(fault: SimFault | null): GenerationFault | null {
  if (fault === null) return null;
  switch (fault.kind) {
    case "slow_first_token":
    case "cut_stream":
    case "stall_stream":
    case "malformed_chunk":
      return fault;
    default:
      return null;
  }
}

const SSE_HEADERS = {
  "content-type": "text/event-stream; charset=utf-8",
  "cache-control": "no-cache",
} as const;

interface Timing {
  enqueuedAt: number;
  startedAt: number;
  firstTokenAt: number;
  /** Milliseconds between tokens; 0 sends them together. */
  interval: number;
  tokens: number;
  finishReason: "stop" | "length";
}

/** Writes `data`, then destroys the socket once the bytes have left the process. */
function writeThenDestroy(res: ServerResponse, data: string): void {
  const destroy = (): void => {
    res.socket?.destroy();
  };
  if (data.length === 0) destroy();
  else res.write(data, destroy);
}

/**
 * Generates the answer to a valid request: waits for a slot, waits time-to-first-token, then
 * writes the JSON body or the SSE stream paced at tokens-per-second, applying `fault`.
 * The slot is freed when the response has ended or the client has gone away.
 */
export function runGeneration(
  ctx: GenerationContext,
  res: ServerResponse,
  request: InferenceRequest,
  fault: GenerationFault | null,
): void {
  const enqueuedAt = performance.now();
  let timer: NodeJS.Timeout | undefined;
  let budget = 0;
  let done = false;

  ctx.metrics.requestQueued();
  if (request.stream) {
    // vLLM and TGI send the status and headers as soon as the request is accepted; the
    // tokens follow once it is scheduled.
    res.writeHead(200, SSE_HEADERS);
    res.flushHeaders();
  }

  res.once("close", () => {
    done = true;
    if (timer !== undefined) clearTimeout(timer);
    ctx.batchTokens -= budget;
    budget = 0;
    lease.release();
  });
  // enter() may call start() at once; start() never touches the lease, and "close" is
  // emitted asynchronously, so the lease is assigned before anything reads it.
  const lease: Lease = ctx.gate.enter(start);

  function start(): void {
    if (done || ctx.closing) return;
    const { completionTokens, ttftMs, tokensPerSecond } = ctx.config;
    const startedAt = performance.now();
    const limited = request.maxTokens !== undefined && request.maxTokens < completionTokens;
    const tokens =
      limited && request.maxTokens !== undefined ? request.maxTokens : completionTokens;
    budget = request.promptTokens + tokens;
    ctx.batchTokens += budget;
    ctx.metrics.requestStarted(request.promptTokens, (startedAt - enqueuedAt) / 1000);

    const extraDelay = fault?.kind === "slow_first_token" ? fault.delayMs : 0;
    const timing: Timing = {
      enqueuedAt,
      startedAt,
      firstTokenAt: startedAt + ttftMs + extraDelay,
      interval: tokensPerSecond > 0 ? 1000 / tokensPerSecond : 0,
      tokens,
      finishReason: limited ? "length" : "stop",
    };
    const render = createResponseRender(
      ctx.flavour,
      request,
      tokens,
      timing.finishReason,
      Math.floor(Date.now() / 1000),
      ctx.vocabulary,
    );
    if (request.stream) streamEvents(render, timing);
    else answerWhole(render, timing);
  }

  function schedule(at: number, run: () => void): void {
    const delay = at - performance.now();
    if (delay <= 0) run();
    else timer = setTimeout(run, delay);
  }

  function succeeded(t: Timing): void {
    const endedAt = performance.now();
    ctx.metrics.requestSucceeded(
      t.finishReason,
      t.tokens,
      (endedAt - t.enqueuedAt) / 1000,
      (endedAt - t.firstTokenAt) / 1000,
    );
    ctx.onCompleted();
  }

  function answerWhole(render: ResponseRender, t: Timing): void {
    schedule(t.firstTokenAt + (t.tokens - 1) * t.interval, () => {
      if (done) return;
      ctx.metrics.firstToken((t.firstTokenAt - t.startedAt) / 1000);
      ctx.metrics.tokensGenerated(t.tokens);
      if (fault?.kind === "malformed_chunk") {
        res.writeHead(200, { "content-type": "application/json" });
        res.end("{not json");
        return;
      }
      const body = render.body();
      res.writeHead(200, {
        "content-type": "application/json",
        "content-length": Buffer.byteLength(body),
      });
      if (fault?.kind === "cut_stream" || fault?.kind === "stall_stream") {
        // The declared length promises the whole body; only half of it ever comes.
        const half = body.slice(0, body.length >> 1);
        if (fault.kind === "cut_stream") writeThenDestroy(res, half);
        else res.write(half);
        return;
      }
      res.end(body);
      succeeded(t);
    });
  }

  function streamEvents(render: ResponseRender, t: Timing): void {
    const total = render.eventCount;
    const breakAt =
      fault === null || fault.kind === "slow_first_token" ? -1 : Math.min(fault.afterChunks, total);
    let next = 0;
    let tokensSent = 0;
    let faultActed = false;

    const dueAt = (event: number): number =>
      t.firstTokenAt + render.tokenOfEvent(event) * t.interval;

    function countTokens(): void {
      const sent = Math.min(t.tokens, Math.max(0, next - render.firstTokenEvent));
      if (sent === tokensSent) return;
      if (tokensSent === 0) ctx.metrics.firstToken((t.firstTokenAt - t.startedAt) / 1000);
      ctx.metrics.tokensGenerated(sent - tokensSent);
      tokensSent = sent;
    }

    /** Applies the fault before event `next`; returns the text still to send, or null. */
    function actOnFault(pending: string): string | null {
      faultActed = true;
      if (fault?.kind === "malformed_chunk") return pending + SSE_MALFORMED;
      countTokens();
      if (fault?.kind === "cut_stream") writeThenDestroy(res, pending);
      else if (pending.length > 0) res.write(pending);
      return null;
    }

    function pump(): void {
      if (done) return;
      const now = performance.now();
      let out: string | null = "";
      while (next < total && dueAt(next) <= now) {
        if (next === breakAt && !faultActed) {
          out = actOnFault(out);
          if (out === null) return;
        }
        out += render.event(next);
        next += 1;
      }
      if (next === total) {
        if (breakAt === total && !faultActed) {
          out = actOnFault(out);
          if (out === null) return;
        }
        countTokens();
        res.end(out + render.terminator);
        succeeded(t);
        return;
      }
      countTokens();
      if (out.length > 0) res.write(out);
      schedule(dueAt(next), pump);
    }

    schedule(dueAt(0), pump);
  }
}
