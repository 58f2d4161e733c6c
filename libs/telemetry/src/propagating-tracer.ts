import { randomFillSync } from "node:crypto";
import { TraceFlags, context, trace } from "@opentelemetry/api";
import type {
  Context,
  Span,
  SpanContext,
  SpanOptions,
  Tracer,
  TracerProvider,
} from "@opentelemetry/api";

/**
 * The tracer provider of a process that exports no spans: every span is non-recording, but
 * gets real ids and continues its parent's trace, so trace context still flows over NATS and
 * HTTP and log lines still carry `trace_id`/`span_id`. A root span is marked sampled, as the
 * SDK's default sampler would, so a downstream service that does export (a node, a collector
 * behind it) keeps the trace. What it saves against the SDK with a no-op processor: building,
 * sanitising and keeping a `SpanImpl` with its attributes and events for every span that
 * nothing would ever read.
 */
export class PropagatingTracerProvider implements TracerProvider {
  private readonly tracer = new PropagatingTracer();
  getTracer(): Tracer {
    return this.tracer;
  }
}

class PropagatingTracer implements Tracer {
  startSpan(_name: string, options?: SpanOptions, ctx: Context = context.active()): Span {
    const parent = options?.root ? undefined : trace.getSpanContext(ctx);
    const valid = parent !== undefined && trace.isSpanContextValid(parent);
    const spanContext: SpanContext = {
      traceId: valid ? parent.traceId : randomHex(16),
      spanId: randomHex(8),
      traceFlags: valid ? parent.traceFlags : TraceFlags.SAMPLED,
      isRemote: false,
      ...(valid && parent.traceState ? { traceState: parent.traceState } : {}),
    };
    return trace.wrapSpanContext(spanContext);
  }

  startActiveSpan<F extends (span: Span) => unknown>(name: string, fn: F): ReturnType<F>;
  startActiveSpan<F extends (span: Span) => unknown>(
    name: string,
    options: SpanOptions,
    fn: F,
  ): ReturnType<F>;
  startActiveSpan<F extends (span: Span) => unknown>(
    name: string,
    options: SpanOptions,
    ctx: Context,
    fn: F,
  ): ReturnType<F>;
  startActiveSpan<F extends (span: Span) => unknown>(
    name: string,
    ...rest: [F] | [SpanOptions, F] | [SpanOptions, Context, F]
  ): ReturnType<F> {
    const fn = rest.at(-1) as F;
    const options = rest.length > 1 ? (rest[0] as SpanOptions) : undefined;
    const ctx = rest.length > 2 ? (rest[1] as Context) : context.active();
    const span = this.startSpan(name, options, ctx);
    return context.with(
      trace.setSpan(ctx, span),
      fn as (s: Span) => ReturnType<F>,
      undefined,
      span,
    );
  }
}

/*
 * Ids come from a pool of random bytes refilled 4 KiB at a time: one system call per ~170
 * spans instead of one per id. Ids must be unique, not secret; a zero id is invalid in W3C
 * trace context and is drawn again.
 */
const pool = Buffer.alloc(4096);
let at = pool.length;

function randomHex(bytes: number): string {
  for (;;) {
    if (at + bytes > pool.length) {
      randomFillSync(pool);
      at = 0;
    }
    const hex = pool.toString("hex", at, at + bytes);
    at += bytes;
    if (!/^0+$/.test(hex)) return hex;
  }
}
