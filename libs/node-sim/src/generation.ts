import type { ServerResponse } from "node:http";
import { performance } from "node:perf_hooks";
import type { ConcurrencyGate, Lease } from "./concurrency-gate.ts";
import { EngineCapacityError } from "./engine/engine.ts";
import type { Engine, EngineTicket } from "./engine/engine.ts";
import { promptBlocks } from "./engine/prompt-blocks.ts";
import { sendJson } from "./http-reply.ts";
import type { SimMetrics } from "./metrics.ts";
import type { InferenceRequest } from "./openai-request.ts";
import { errorBodyJson } from "./openai-request.ts";
import { createResponseRender, SSE_MALFORMED } from "./openai-response.ts";
import type { Vocabulary } from "./openai-response.ts";
import type { ResponseRender, SimFault, SimFlavour, SimRuntimeConfig } from "./types.ts";

/** What a generation needs from the node that runs it. */
export interface GenerationContext {
  readonly flavour: SimFlavour;
  readonly config: Readonly<SimRuntimeConfig>;
  readonly gate: ConcurrencyGate;
  /**
   * The engine model, when the node runs one: it then schedules, prefills and decodes every
   * generation instead of the gate and the fixed pacing (README, "Engine model").
   */
  readonly engine: Engine | undefined;
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
 * When the events of a response are due: `isDue(i, now)` says whether event `i` may go out,
 * `waitFor(i, fn)` calls `fn` once it may. `whenDone(fn)` calls `fn` once the last token is.
 */
interface Pacing {
  isDue(event: number, now: number): boolean;
  waitFor(event: number, fn: () => void): void;
  whenDone(fn: () => void): void;
}

/** What the writers share with the generation that runs them. */
interface Writer {
  readonly ctx: GenerationContext;
  readonly res: ServerResponse;
  readonly fault: GenerationFault | null;
  readonly timing: Timing;
  /** True once the client has gone away. */
  gone(): boolean;
}

function succeeded(w: Writer): void {
  const t = w.timing;
  const endedAt = performance.now();
  w.ctx.metrics.requestSucceeded(
    t.finishReason,
    t.tokens,
    (endedAt - t.enqueuedAt) / 1000,
    (endedAt - t.firstTokenAt) / 1000,
  );
  w.ctx.onCompleted();
}

function answerWhole(w: Writer, render: ResponseRender, pacing: Pacing): void {
  const { ctx, res, fault } = w;
  const t = w.timing;
  pacing.whenDone(() => {
    if (w.gone()) return;
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
    succeeded(w);
  });
}

function streamEvents(w: Writer, render: ResponseRender, pacing: Pacing): void {
  const { ctx, res, fault } = w;
  const t = w.timing;
  const total = render.eventCount;
  const breakAt =
    fault === null || fault.kind === "slow_first_token" ? -1 : Math.min(fault.afterChunks, total);
  let next = 0;
  let tokensSent = 0;
  let faultActed = false;

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
    if (w.gone()) return;
    const now = performance.now();
    let out: string | null = "";
    while (next < total && pacing.isDue(next, now)) {
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
      succeeded(w);
      return;
    }
    countTokens();
    if (out.length > 0) res.write(out);
    pacing.waitFor(next, pump);
  }

  pacing.waitFor(0, pump);
}

/** The tokens a request generates and why it stops. */
function tokenBudget(ctx: GenerationContext, request: InferenceRequest) {
  const { completionTokens } = ctx.config;
  const limited = request.maxTokens !== undefined && request.maxTokens < completionTokens;
  const tokens = limited && request.maxTokens !== undefined ? request.maxTokens : completionTokens;
  return { tokens, finishReason: limited ? ("length" as const) : ("stop" as const) };
}

/**
 * Generates the answer to a valid request: waits for a slot, waits time-to-first-token, then
 * writes the JSON body or the SSE stream paced at tokens-per-second, applying `fault`; or,
 * on a node with an engine model, as the engine schedules, prefills and decodes it.
 * The slot is freed when the response has ended or the client has gone away.
 */
export function runGeneration(
  ctx: GenerationContext,
  res: ServerResponse,
  request: InferenceRequest,
  fault: GenerationFault | null,
): void {
  if (ctx.engine !== undefined) {
    runEngineGeneration(ctx, ctx.engine, res, request, fault);
    return;
  }
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
    const { ttftMs, tokensPerSecond } = ctx.config;
    const startedAt = performance.now();
    const { tokens, finishReason } = tokenBudget(ctx, request);
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
      finishReason,
    };
    const render = createResponseRender(
      ctx.flavour,
      request,
      tokens,
      timing.finishReason,
      Math.floor(Date.now() / 1000),
      ctx.vocabulary,
    );
    const dueAt = (event: number): number =>
      timing.firstTokenAt + render.tokenOfEvent(event) * timing.interval;
    const pacing: Pacing = {
      isDue: (event, now) => dueAt(event) <= now,
      waitFor: (event, fn) => schedule(dueAt(event), fn),
      whenDone: (fn) => schedule(timing.firstTokenAt + (timing.tokens - 1) * timing.interval, fn),
    };
    const writer: Writer = { ctx, res, fault, timing, gone: () => done };
    if (request.stream) streamEvents(writer, render, pacing);
    else answerWhole(writer, render, pacing);
  }

  function schedule(at: number, run: () => void): void {
    const delay = at - performance.now();
    if (delay <= 0) run();
    else timer = setTimeout(run, delay);
  }
}

/**
 * The engine model's generation: the engine decides when each token exists; the writers send
 * the events those tokens release. A `slow_first_token` fault holds the request back from
 * the engine for its delay. A request the KV cache could never hold gets vLLM's 400.
 */
function runEngineGeneration(
  ctx: GenerationContext,
  engine: Engine,
  res: ServerResponse,
  request: InferenceRequest,
  fault: GenerationFault | null,
): void {
  const enqueuedAt = performance.now();
  const prompt = promptBlocks(request.promptText ?? "");
  const { tokens, finishReason } = tokenBudget(ctx, request);
  let ticket: EngineTicket | undefined;
  const submit = (onTokens: (generated: number) => void): EngineTicket | undefined => {
    try {
      return engine.submit({ prompt, outputTokens: tokens, onTokens });
    } catch (error) {
      if (!(error instanceof EngineCapacityError)) throw error;
      if (res.headersSent) res.destroy();
      else sendJson(res, 400, errorBodyJson({ status: 400, message: error.message, param: null }));
      return undefined;
    }
  };

  let done = false;
  let generated = 0;
  let waiter: (() => void) | undefined;
  const timing: Timing = {
    enqueuedAt,
    startedAt: enqueuedAt,
    firstTokenAt: enqueuedAt,
    interval: 0,
    tokens,
    finishReason,
  };
  const onTokens = (count: number): void => {
    if (generated === 0) timing.firstTokenAt = performance.now();
    generated = count;
    const wake = waiter;
    waiter = undefined;
    wake?.();
  };
  const render = createResponseRender(
    ctx.flavour,
    request,
    tokens,
    finishReason,
    Math.floor(Date.now() / 1000),
    ctx.vocabulary,
  );
  const pacing: Pacing = {
    isDue: (event) => render.tokenOfEvent(event) < generated,
    waitFor: (event, fn) => {
      if (render.tokenOfEvent(event) < generated) fn();
      else waiter = fn;
    },
    whenDone: (fn) => {
      if (generated >= tokens) fn();
      else waiter = () => pacing.whenDone(fn);
    },
  };

  let holdTimer: NodeJS.Timeout | undefined;
  res.once("close", () => {
    done = true;
    waiter = undefined;
    clearTimeout(holdTimer);
    ticket?.cancel();
  });
  const begin = (): void => {
    if (done || ctx.closing) return;
    const submitted = submit(onTokens);
    if (submitted === undefined) return;
    ticket = submitted;
    if (request.stream && !res.headersSent) {
      res.writeHead(200, SSE_HEADERS);
      res.flushHeaders();
    }
    const writer: Writer = { ctx, res, fault, timing, gone: () => done };
    if (request.stream) streamEvents(writer, render, pacing);
    else answerWhole(writer, render, pacing);
  };
  if (fault?.kind === "slow_first_token") {
    if (request.stream) {
      res.writeHead(200, SSE_HEADERS);
      res.flushHeaders();
    }
    holdTimer = setTimeout(begin, fault.delayMs);
  } else {
    begin();
  }
}
